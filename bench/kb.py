"""Knowledge base scale curve: ingestion, index build, search latency and recall, memory and disk.

    python -m bench.kb [--sizes 10000,100000,500000] [--queries 200] [--sweep]
    python -m bench.kb --restricted [--sizes 100000] [--groups 20]

For each size, synthetic documents (one paragraph of 80 words per chunk, words drawn from a
Zipf-like vocabulary of 5,000 pseudo-words, 100 chunks per text file) are ingested through
``KnowledgeBase.ingest_paths``, the path users take, with vectors precomputed: deterministic
clustered unit vectors of 384 dimensions (the default embedder's), built as topic centre +
sub-topic offset + noise, so that neighbours are graded the way real embeddings are rather than
uniformly random. Each query is 6 words of a random chunk, with that chunk's vector plus noise as
its query vector; the embedder is a lookup table, so no timing includes embedding.
``--vectors local:wordllama`` embeds the same paragraphs and queries with a real (fast) embedder
instead, to check recall on vectors that were not made to be clustered.

Figures per size: ingest chunks/s (parse, chunk, write, full-text and id indexes), the vector
index the knowledge base chose for that size and its build time, vector / text / hybrid p50 and
p95 (top 10, no context expansion), vector recall@10 against an exact numpy scan, hybrid recall@10
against the same hybrid query with the vector index bypassed (exact; first 50 queries), the resident memory of a
fresh process that opened the knowledge base and served the queries (the server's share), and the
knowledge base's size on disk. Searches run in that fresh process. ``--sweep`` adds recall and
latency for other query settings. Everything lives in a temporary directory, removed at the end.

``--restricted`` measures per-document access instead: the documents are spread over ``--groups``
groups (document i in group i mod groups, ingested with ``groups=[...]``), and the same queries run
unrestricted and as readers of one and of two groups (``KnowledgeBase.restricted``). Figures: p50
and p95 per mode and reader, the restricted/unrestricted p50 ratio, vector recall@10 against an
exact numpy scan of the reader's own chunks, hybrid recall@10 against the reader's hybrid query
with the vector index bypassed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.embeddings import VectorEmbeddingModel, resolve_embedding_model
from rag_tools.kb import KnowledgeBase
from rag_tools.kb.access import ALL, Reader
from rag_tools.kb.indexing import vector_index_plan
from rag_tools.kb.sizing import VectorSearchOverrides

from ._util import median, percentile, table

DIMENSIONS = 384
PER_DOC = 100
# Exact scans take ~1 s a query at 500,000 chunks: hybrid recall is measured on this many queries.
EXACT_QUERIES = 50
QUERY_WORDS = 6


class _Precomputed(VectorEmbeddingModel):
    """Returns vectors computed beforehand (a row of a matrix per known text): no embedding cost."""

    def __init__(self, rows: dict[str, int], matrix: np.ndarray) -> None:
        super().__init__()
        self._rows, self._matrix = rows, matrix

    @property
    def model_name(self) -> str:
        return "precomputed"

    @property
    def system(self) -> str:
        return "bench"

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        # Documents are embedded as "title\ntext"; the paragraph alone is the key.
        return [self._matrix[self._rows[t.rsplit("\n", 1)[-1]]].tolist() for t in texts]


def _vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ra", "tu", "vi", "zo", "pe", "sha", "qui", "dor", "ben", "tal"]
    words = {"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(size * 2)}
    return sorted(words)[:size]


def _paragraphs(chunks: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    return [" ".join(rng.choices(vocab, weights, k=80)) + "." for _ in range(chunks)]


def clustered_vectors(n: int, seed: int, dimensions: int = DIMENSIONS) -> np.ndarray:
    """``n`` unit vectors: topic centre + 0.6 x sub-topic offset + 0.8 x noise, normalised.

    About 2,000 vectors per topic and 100 per sub-topic; neighbours inside a sub-topic sit at cosine
    ~0.7, across sub-topics of one topic ~0.5, across topics ~0.
    """
    rng = np.random.default_rng(seed)
    topics = max(1, n // 2000)
    subtopics = max(1, n // 100)

    def unit(rows: int) -> np.ndarray:
        m = rng.standard_normal((rows, dimensions), dtype=np.float32)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    centres = unit(topics)
    sub = centres[rng.integers(0, topics, subtopics)] + 0.6 * unit(subtopics)
    out = np.empty((n, dimensions), dtype=np.float32)
    step = 50_000
    for start in range(0, n, step):
        rows = min(step, n - start)
        block = sub[rng.integers(0, subtopics, rows)] + 0.8 * unit(rows)
        out[start : start + rows] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def _exact_top10(matrix: np.ndarray, queries: np.ndarray) -> list[list[int]]:
    tops = []
    for q in queries:
        scores = matrix @ q
        top = np.argpartition(-scores, 10)[:10]
        tops.append(top[np.argsort(-scores[top])].tolist())
    return tops


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _rss_mb() -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


# -- the search process -----------------------------------------------------------------------


async def _timed_searches(
    kb: KnowledgeBase, queries: list[str], mode: str
) -> tuple[list[float], list[list[str]]]:
    """Each query's top 10 in ``mode`` and its time in ms, after five warm-up queries."""
    for q in queries[:5]:
        await kb.search(q, limit=10, mode=mode)  # type: ignore[arg-type]
    times, hits = [], []
    for q in queries:
        start = time.perf_counter()
        found = await kb.search(q, limit=10, mode=mode)  # type: ignore[arg-type]
        times.append((time.perf_counter() - start) * 1000)
        hits.append([f"{h.title}:{h.position}" for h in found])
    return times, hits


async def _search_process(work: Path, settings: list[dict[str, Any]], threshold: int) -> dict[str, Any]:
    """Open the knowledge base fresh, run the queries in every mode; timings, hits and memory."""
    queries: list[str] = json.loads((work / "queries.json").read_text())
    qvectors = np.load(work / "queries.npy")
    model = _Precomputed({q: i for i, q in enumerate(queries)}, qvectors)
    kb = KnowledgeBase(work / "kb", embedder=model, ann_index_threshold=threshold)
    await kb.open()
    rss_open = _rss_mb()[0]
    out: dict[str, Any] = {"rss_open_mb": rss_open}

    async def run(mode: str, count: int = len(queries)) -> tuple[list[float], list[list[str]]]:
        return await _timed_searches(kb, queries[:count], mode)

    for mode in ("vector", "text", "hybrid"):
        out[mode] = await run(mode)
    out["rss_mb"], out["hwm_mb"] = _rss_mb()
    out["params"] = kb.vector_search_parameters().__dict__ if kb.vector_search_parameters() else None
    # Hybrid with an exact vector scan: the reference for hybrid recall.
    kb.vector_search.exact = True
    out["hybrid_exact"] = await run("hybrid", EXACT_QUERIES)
    out["vector_exact"] = await run("vector", EXACT_QUERIES)
    kb.vector_search.exact = False
    sweep = []
    for s in settings:
        kb.vector_search = VectorSearchOverrides(s.get("ef"), s.get("nprobes"), s.get("refine"))
        sweep.append({"setting": s, "vector": await run("vector"), "hybrid": await run("hybrid")})
    out["sweep"] = sweep
    kb.close()
    return out


# -- one size ----------------------------------------------------------------------------------


def _recall(found: list[list[str]], truth: list[list[str]]) -> float:
    """Recall@10 over the queries ``truth`` covers (the first ones)."""
    pairs = list(zip(found, truth, strict=False))
    return sum(len(set(f) & set(t)) for f, t in pairs) / (10 * len(pairs))


async def _one_size(n: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    work = root / f"n{n}"
    corpus = work / "corpus"
    corpus.mkdir(parents=True)
    paragraphs = _paragraphs(n, args.seed)
    for start in range(0, n, PER_DOC):
        (corpus / f"doc{start // PER_DOC:05d}.txt").write_text(
            "\n\n".join(paragraphs[start : start + PER_DOC])
        )
    rng = random.Random(args.seed + 1)
    picked = rng.sample(range(n), args.queries)
    queries = [" ".join(rng.sample(paragraphs[i].split(), QUERY_WORDS)) for i in picked]
    if args.vectors == "clustered":
        matrix = clustered_vectors(n, args.seed)
        noise = np.random.default_rng(args.seed + 2).standard_normal(
            (len(picked), DIMENSIONS), dtype=np.float32
        )
        qmatrix = matrix[picked] + 0.3 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    else:
        embedder = resolve_embedding_model(args.vectors)
        matrix = np.asarray((await embedder.embed(paragraphs, input_type="document")).embeddings, np.float32)
        qmatrix = np.asarray((await embedder.embed(queries, input_type="query")).embeddings, np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    qmatrix /= np.linalg.norm(qmatrix, axis=1, keepdims=True)
    (work / "queries.json").write_text(json.dumps(queries))
    np.save(work / "queries.npy", qmatrix)
    truth = [[f"doc{i // PER_DOC:05d}:{i % PER_DOC}" for i in top] for top in _exact_top10(matrix, qmatrix)]

    model = _Precomputed({p: i for i, p in enumerate(paragraphs)}, matrix)
    del paragraphs
    kb = KnowledgeBase(work / "kb", embedder=model, ann_index_threshold=0)
    await kb.open()
    start = time.perf_counter()
    report = await kb.ingest_paths([corpus])
    ingest_s = time.perf_counter() - start
    assert not report.errors, report.errors[:3]
    shutil.rmtree(corpus)
    kb.ann_index_threshold = args.ann_index_threshold
    plan = vector_index_plan(n, ann_index_threshold=args.ann_index_threshold)
    start = time.perf_counter()
    await kb.refresh_indexes()
    index_s = time.perf_counter() - start
    kb.close()
    del model, matrix
    disk = _du(work / "kb")
    chunks_disk = _du(work / "kb" / "chunks.lance")

    settings = [json.loads(s) for s in args.setting] if args.sweep else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.kb",
        "--search-process",
        str(work),
        "--settings",
        json.dumps(settings),
        "--ann-index-threshold",
        str(args.ann_index_threshold),
        stdout=asyncio.subprocess.PIPE,
    )
    stdout, _ = await proc.communicate()
    assert proc.returncode == 0, f"the search process failed ({proc.returncode})"
    res = json.loads(stdout.decode().strip().splitlines()[-1])
    shutil.rmtree(work)
    row: dict[str, Any] = {
        "n": n,
        "ingest": n / ingest_s,
        "index": plan.describe() if plan else "none (exact scan)",
        "index_s": index_s if plan else 0.0,
        "disk_mb": disk / 2**20,
        "chunks_mb": chunks_disk / 2**20,
        "rss_mb": res["rss_mb"],
        "hwm_mb": res["hwm_mb"],
        "rss_open_mb": res["rss_open_mb"],
        "params": res["params"],
        "vector_recall": _recall(res["vector"][1], truth),
        "vector_exact_recall": _recall(res["vector_exact"][1], truth),
        "hybrid_recall": _recall(res["hybrid"][1], res["hybrid_exact"][1]),
        "sweep": [
            (
                s["setting"],
                median(s["vector"][0]),
                _recall(s["vector"][1], truth),
                median(s["hybrid"][0]),
                _recall(s["hybrid"][1], res["hybrid_exact"][1]),
            )
            for s in res["sweep"]
        ],
    }
    for mode in ("vector", "text", "hybrid", "vector_exact", "hybrid_exact"):
        row[mode] = (median(res[mode][0]), percentile(res[mode][0], 95))
    return row


# -- restricted search (per-document access) --------------------------------------------------


def _group_of(doc: int, groups: int) -> str:
    return f"g{doc % groups:02d}"


async def _restricted(n: int, args: argparse.Namespace, root: Path) -> list[tuple[Any, ...]]:
    """Unrestricted vs restricted search over ``n`` chunks in ``args.groups`` groups; table rows."""
    work = root / f"r{n}"
    paragraphs = _paragraphs(n, args.seed)
    docs = n // PER_DOC
    for d in range(docs):
        folder = work / "corpus" / _group_of(d, args.groups)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{d:05d}.txt").write_text("\n\n".join(paragraphs[d * PER_DOC : (d + 1) * PER_DOC]))
    rng = random.Random(args.seed + 1)
    picked = rng.sample(range(n), args.queries)
    queries = [" ".join(rng.sample(paragraphs[i].split(), QUERY_WORDS)) for i in picked]
    matrix = clustered_vectors(n, args.seed)
    noise = np.random.default_rng(args.seed + 2).standard_normal((len(picked), DIMENSIONS), dtype=np.float32)
    qmatrix = matrix[picked] + 0.3 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    qmatrix /= np.linalg.norm(qmatrix, axis=1, keepdims=True)
    texts = {p: i for i, p in enumerate(paragraphs)}
    texts.update({q: n + i for i, q in enumerate(queries)})
    model = _Precomputed(texts, np.concatenate([matrix, qmatrix]))
    kb = KnowledgeBase(work / "kb", embedder=model, ann_index_threshold=0)
    start = time.perf_counter()
    async with kb:
        for g in range(args.groups):
            report = await kb.ingest_paths([work / "corpus" / f"g{g:02d}"], groups=[f"g{g:02d}"])
            assert not report.errors, report.errors[:3]
        ingest_s = time.perf_counter() - start
        kb.ann_index_threshold = args.ann_index_threshold
        start = time.perf_counter()
        await kb.refresh_indexes()
        index_s = time.perf_counter() - start
    shutil.rmtree(work / "corpus")
    print(
        f"-- ingested {n:,} chunks in {ingest_s:.0f} s, indexes {index_s:.0f} s", file=sys.stderr, flush=True
    )

    readers = {"all": ALL, "1 group": Reader.member_of(["g03"]), "2 groups": Reader.member_of(["g03", "g11"])}
    doc_of = np.arange(n) // PER_DOC

    def exact(reader: Reader) -> list[list[str]]:
        rows = (
            np.arange(n)
            if reader.groups is None
            else np.flatnonzero(np.isin(doc_of % args.groups, [int(g[1:]) for g in reader.groups]))
        )
        top = _exact_top10(matrix[rows], qmatrix)
        return [[f"doc{rows[i] // PER_DOC:05d}:{rows[i] % PER_DOC}" for i in t] for t in top]

    async with KnowledgeBase(work / "kb", embedder=model, ann_index_threshold=args.ann_index_threshold) as kb:

        async def run(view: KnowledgeBase, mode: str, count: int) -> tuple[list[float], list[list[str]]]:
            return await _timed_searches(view, queries[:count], mode)

        results: dict[tuple[str, str], tuple[list[float], list[list[str]]]] = {}
        for _ in range(2):  # interleaved twice: the machine's load moves, every reader sees it
            for mode in ("vector", "hybrid"):
                for label, reader in readers.items():
                    times, hits = await run(kb.restricted(reader), mode, len(queries))
                    results[mode, label] = (results.get((mode, label), ([], []))[0] + times, hits)
        kb.vector_search.exact = True
        for label, reader in readers.items():  # what bypassing the index would cost the reader
            if not reader.reads_all:
                results["vector, index bypassed", label] = await run(
                    kb.restricted(reader), "vector", len(queries)
                )
        exact_hybrid = {
            label: (await run(kb.restricted(r), "hybrid", EXACT_QUERIES))[1] for label, r in readers.items()
        }
    shutil.rmtree(work)
    rows: list[tuple[Any, ...]] = []
    for mode in ("vector", "hybrid", "vector, index bypassed"):
        base = median(results[mode.split(",")[0], "all"][0])
        for label, reader in readers.items():
            if (mode, label) not in results:
                continue
            times, hits = results[mode, label]
            truth = exact_hybrid[label] if mode == "hybrid" else exact(reader)
            p50 = median(times)
            rows.append((f"{n:,}", mode, label, p50, percentile(times, 95), p50 / base, _recall(hits, truth)))
    return rows


def _print(rows: list[dict[str, Any]]) -> None:
    print(
        table(
            [
                "chunks",
                "ingest chunks/s",
                "vector index",
                "build s",
                "disk MB",
                "chunks table MB",
                "server RSS MB",
            ],
            [
                (
                    f"{r['n']:,}",
                    r["ingest"],
                    r["index"],
                    r["index_s"],
                    r["disk_mb"],
                    r["chunks_mb"],
                    r["rss_mb"],
                )
                for r in rows
            ],
        )
    )
    print()
    print(
        table(
            [
                "chunks",
                "query settings",
                "vector p50",
                "vector p95",
                "text p50",
                "text p95",
                "hybrid p50",
                "hybrid p95",
                "vector recall@10",
                "hybrid recall@10",
                "exact vector p50",
                "exact hybrid p50",
            ],
            [
                (
                    f"{r['n']:,}",
                    ", ".join(f"{k}={v}" for k, v in (r["params"] or {}).items() if v) or "exact scan",
                    *r["vector"],
                    *r["text"],
                    *r["hybrid"],
                    r["vector_recall"],
                    r["hybrid_recall"],
                    r["vector_exact"][0],
                    r["hybrid_exact"][0],
                )
                for r in rows
            ],
        )
    )
    sweeps = [(f"{r['n']:,}", json.dumps(s), *rest) for r in rows for s, *rest in r["sweep"]]
    if sweeps:
        print()
        print(
            table(
                ["chunks", "setting", "vector p50", "vector recall@10", "hybrid p50", "hybrid recall@10"],
                sweeps,
            )
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000,500000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ann-index-threshold", type=int, default=KnowledgeBase.DEFAULT_ANN_INDEX_THRESHOLD)
    parser.add_argument(
        "--vectors",
        default="clustered",
        help="clustered (synthetic, the default) or an embedder name (e.g. local:wordllama) for real ones",
    )
    parser.add_argument("--sweep", action="store_true", help="also measure the --setting query settings")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help='a JSON query setting for --sweep, e.g. \'{"ef": 100, "refine": 2}\' (repeatable)',
    )
    parser.add_argument("--restricted", action="store_true", help="measure search restricted to groups")
    parser.add_argument("--groups", type=int, default=20, help="groups the documents are spread over")
    parser.add_argument("--search-process", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.search_process:
        result = await _search_process(
            Path(args.search_process), json.loads(args.settings), args.ann_index_threshold
        )
        print(json.dumps(result))
        return

    root = Path(tempfile.mkdtemp(prefix="ragstream-bench-kb-"))
    if args.restricted:
        try:
            restricted = [
                row
                for n in (int(s) for s in args.sizes.split(","))
                for row in await _restricted(n, args, root)
            ]
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(
            table(
                ["chunks", "mode", "reader", "p50 ms", "p95 ms", "p50 / unrestricted", "recall@10"],
                restricted,
            )
        )
        return
    rows = []
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(await _one_size(n, args, root))
            print(f"-- {n:,} chunks done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _print(rows)


if __name__ == "__main__":
    asyncio.run(main())
