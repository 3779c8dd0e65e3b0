"""Knowledge base at scale: ingestion throughput and search latency against a numpy brute-force scan.

    python -m bench.kb [--chunks 50000] [--queries 200] [--embedder local:wordllama]

Synthetic documents (paragraphs of words drawn from a Zipf-like vocabulary, one paragraph per
chunk) are ingested through ``KnowledgeBase.ingest_paths``, the path users take. Two throughputs:
with the embedder running, and with vectors precomputed (a lookup-table embedder), which isolates
parsing, chunking and LanceDB writes. Search latency is measured for vector, text and hybrid
queries before and after the ANN index (HNSW-SQ) exists, beside an exact cosine scan in numpy over
the same vectors; the ratio to numpy is the figure. Recall@10 of the vector search against the
exact scan is printed too.

The default bulk embedder is ``local:wordllama`` because embedding 50k chunks with MiniLM takes
minutes on two cores; MiniLM's own throughput is measured on a sample (``--sample``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from pydantic_ai.embeddings import EmbeddingModel
from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.embeddings import DEFAULT_EMBEDDER, VectorEmbeddingModel, resolve_embedding_model
from rag_tools.kb import KnowledgeBase

from ._util import median, percentile, table


class _Precomputed(VectorEmbeddingModel):
    """Returns vectors computed beforehand: ingestion cost without the embedder."""

    def __init__(self, name: str, vectors: dict[str, list[float]]) -> None:
        super().__init__()
        self._name, self._vectors = name, vectors

    @property
    def model_name(self) -> str:
        return self._name.split(":", 1)[1]

    @property
    def system(self) -> str:
        return self._name.split(":", 1)[0]

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        return [self._vectors[t] for t in texts]


def _vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ra", "tu", "vi", "zo", "pe", "sha", "qui", "dor", "ben", "tal"]
    words = {"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(size * 2)}
    return sorted(words)[:size]


def _corpus(folder: Path, chunks: int, per_doc: int, seed: int) -> list[str]:
    """Write ``chunks`` paragraphs into text files; returns the paragraphs in order."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    paragraphs = [" ".join(rng.choices(vocab, weights, k=80)) + "." for _ in range(chunks)]
    folder.mkdir(parents=True)
    for start in range(0, chunks, per_doc):
        (folder / f"doc{start // per_doc:05d}.txt").write_text(
            "\n\n".join(paragraphs[start : start + per_doc])
        )
    return paragraphs


async def _ingest(path: Path, corpus: Path, embedder: EmbeddingModel) -> tuple[float, KnowledgeBase]:
    kb = KnowledgeBase(path, embedder=embedder, ann_index_threshold=0)
    await kb.open()
    start = time.perf_counter()
    report = await kb.ingest_paths([corpus])
    elapsed = time.perf_counter() - start
    assert not report.errors, report.errors[:3]
    return elapsed, kb


async def _latencies(kb: KnowledgeBase, queries: list[str], mode: str) -> list[float]:
    times = []
    for q in queries:
        start = time.perf_counter()
        await kb.search(q, limit=10, mode=mode)  # type: ignore[arg-type]
        times.append((time.perf_counter() - start) * 1000)
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--per-doc", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--embedder", default="local:wordllama")
    parser.add_argument("--sample", type=int, default=1000, help="chunks for the MiniLM throughput sample")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-kb-"))
    try:
        paragraphs = _corpus(work / "corpus", args.chunks, args.per_doc, args.seed)
        model = resolve_embedding_model(args.embedder)
        rng = random.Random(args.seed + 1)
        queries = [" ".join(rng.sample(p.split(), 6)) for p in rng.sample(paragraphs, args.queries)]

        print(f"{args.chunks} chunks in {args.chunks // args.per_doc} documents; embedder {args.embedder}")
        with_embedding, kb = await _ingest(work / "kb_embed", work / "corpus", model)
        kb.close()

        search_texts = [f"doc{i // args.per_doc:05d}\n{p}" for i, p in enumerate(paragraphs)]
        vectors = (await model.embed(search_texts, input_type="document")).embeddings
        lookup = dict(zip(search_texts, (list(v) for v in vectors), strict=True))
        query_vectors = (await model.embed(queries, input_type="query")).embeddings
        lookup.update(zip(queries, (list(v) for v in query_vectors), strict=True))
        without_embedding, kb = await _ingest(work / "kb", work / "corpus", _Precomputed(kb.embedder, lookup))

        sample_rows = []
        for name in dict.fromkeys([DEFAULT_EMBEDDER, args.embedder]):
            sample = search_texts[: args.sample]
            sample_model = resolve_embedding_model(name)
            await sample_model.embed(sample[:8], input_type="document")  # load the model outside the timing
            start = time.perf_counter()
            await sample_model.embed(sample, input_type="document")
            sample_rows.append((name, len(sample) / (time.perf_counter() - start)))

        print()
        print(
            table(
                ["ingestion", "chunks/s"],
                [
                    (f"embedding included ({args.embedder})", args.chunks / with_embedding),
                    ("embedding excluded (vectors precomputed)", args.chunks / without_embedding),
                    *[(f"embedder alone, {n} ({args.sample}-chunk sample)", r) for n, r in sample_rows],
                ],
            )
        )

        matrix = np.asarray(vectors, dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        qmatrix = np.asarray(query_vectors, dtype=np.float32)
        numpy_times, exact = [], []
        for q in qmatrix:
            start = time.perf_counter()
            scores = matrix @ (q / np.linalg.norm(q))
            top = np.argpartition(-scores, 10)[:10]
            top = top[np.argsort(-scores[top])]
            numpy_times.append((time.perf_counter() - start) * 1000)
            exact.append(set(top.tolist()))

        row_of = {f"{i // args.per_doc:05d}:{i % args.per_doc}": i for i in range(args.chunks)}

        async def recall() -> float:
            found = 0
            for q, truth in zip(queries, exact, strict=True):
                hits = await kb.search(q, limit=10, mode="vector")
                ids = {row_of[f"{h.title[3:]}:{h.position}"] for h in hits}
                found += len(ids & truth)
            return found / (10 * len(queries))

        results, recalls = [], []
        for label in ("flat (no ANN index)", "HNSW-SQ index"):
            if label.startswith("HNSW"):
                start = time.perf_counter()
                kb.ann_index_threshold = 1
                await kb.refresh_indexes()
                print(f"\nHNSW-SQ index built in {time.perf_counter() - start:.1f}s")
            for mode in ("vector", "text", "hybrid"):
                await _latencies(kb, queries[:5], mode)  # warm caches
                times = await _latencies(kb, queries, mode)
                results.append((label, mode, median(times), percentile(times, 95)))
            if label.startswith("HNSW"):
                for ef, refine in ((20, None), (100, None), (200, None), (200, 4), (400, 8)):
                    kb.ann_ef, kb.ann_refine_factor = ef, refine
                    recalls.append((f"{label}, ef={ef}, refine={refine}", await recall()))
                kb.ann_ef, kb.ann_refine_factor = 200, 4
            else:
                recalls.append((label, await recall()))
        np_p50, np_p95 = median(numpy_times), percentile(numpy_times, 95)
        print()
        print(
            table(
                ["index", "mode", "p50 ms", "p95 ms", "p50 / numpy"],
                [(lbl, mode, p50, p95, p50 / np_p50) for lbl, mode, p50, p95 in results]
                + [("exact numpy cosine scan", "vector", np_p50, np_p95, 1.0)],
            )
        )
        print()
        print(table(["index", "vector recall@10 vs exact scan"], recalls))
        kb.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
