"""The knowledge base on an S3 server against a local folder: ingest chunks/s and search latency, one run.

    python -m bench.kb_s3 [--chunks 2000] [--queries 200]

Starts moto's S3 server itself (``tests/s3_helpers.py``, the server the tests use) on a loopback
port, writes a synthetic corpus (one paragraph per chunk), and ingests it through
``KnowledgeBase.ingest_paths`` into a local folder and into ``s3://bucket/kb`` on that server, the
process reaching it through the standard AWS variables as a deployment would. Vectors are computed
beforehand with the default embedder and looked up during the ingest and the searches, so the
figures are the storage's cost (parse, chunk, write, indexes; query, fetch), not the embedder's.
Then the same queries run against both, interleaved (local, S3, local, ...) against drift, in
hybrid, vector and text mode, top 10. The ratio S3 / local is the figure. A third column opens the
S3 knowledge base with ``read_consistency_interval=10s`` instead of the default 0 (every call
checks the store for other processes' commits: a LIST per table touched), to show what that check
costs; ``published ms`` is the lookup of the hits' published versions each search makes.

moto is a Python server on the same two cores: it stands for an S3-compatible store on the network
with no network latency but a slow server. A real store adds round-trip time per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.embeddings import DEFAULT_EMBEDDER, VectorEmbeddingModel, resolve_embedding_model
from rag_tools.kb import KnowledgeBase
from rag_tools.kb.ingestion import search_text
from tests.s3_helpers import MotoServer, new_location

from ._util import percentile, table

_WORDS = (
    "backup restore replica cluster node shard index query latency throughput deploy rollback incident "
    "alert pager runbook schedule window retention policy archive bucket region zone certificate token "
    "secret rotation audit access role permission tenant quota limit budget pipeline stage worker queue "
    "batch stream event buffer cache eviction timeout retry backoff"
).split()


class _Lookup(VectorEmbeddingModel):
    """Vectors computed beforehand by the default embedder, under its name (the knowledge base checks it)."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__()
        self._vectors = vectors
        self._system, self._model = DEFAULT_EMBEDDER.split(":", 1)

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def system(self) -> str:
        return self._system

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        return [self._vectors[t] for t in texts]


def _corpus(folder: Path, chunks: int, per_doc: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    paragraphs = [" ".join(rng.choices(_WORDS, k=60)).capitalize() + "." for _ in range(chunks)]
    folder.mkdir(parents=True)
    for start in range(0, chunks, per_doc):
        (folder / f"doc{start // per_doc:04d}.txt").write_text(
            "\n\n".join(paragraphs[start : start + per_doc])
        )
    return paragraphs


async def _ingest(uri: str, corpus: Path, embedder: _Lookup) -> tuple[float, int, KnowledgeBase]:
    kb = KnowledgeBase(uri, embedder=embedder)
    await kb.open()
    start = time.perf_counter()
    report = await kb.ingest_paths([corpus])
    elapsed = time.perf_counter() - start
    assert not report.errors, report.errors[:3]
    return elapsed, sum(o.chunks or 0 for o in report.outcomes), kb


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--per-doc", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-kb-s3-"))
    server = MotoServer().start()
    try:
        location = new_location(server)
        os.environ.update(location.aws_env)  # the standard AWS variables, as a deployment sets them
        paragraphs = _corpus(work / "corpus", args.chunks, args.per_doc, args.seed)
        rng = random.Random(args.seed + 1)
        queries = [" ".join(rng.sample(p.split(), 5)) for p in rng.sample(paragraphs, args.queries)]

        # The texts ingestion embeds (title, then the paragraph) and the queries, embedded once.
        probe_dir = work / "probe"
        async with KnowledgeBase(probe_dir) as probe:
            await probe.ingest_paths([work / "corpus"])
            texts = [
                search_text(hit.title, hit.headings, hit.text)
                for doc in (await probe.list_documents(page_size=10**6)).documents
                for hit in await probe.get_chunks(doc.document_id)
            ]
        model = resolve_embedding_model(DEFAULT_EMBEDDER)
        vectors = (await model.embed(texts, input_type="document")).embeddings
        query_vectors = (await model.embed(queries, input_type="query")).embeddings
        lookup = {t: list(v) for t, v in zip(texts, vectors, strict=True)}
        lookup.update({"dimension probe": list(query_vectors[0])})
        lookup.update({q: list(v) for q, v in zip(queries, query_vectors, strict=True)})
        embedder = _Lookup(lookup)

        print(f"{len(texts)} chunks in {args.chunks // args.per_doc} documents; S3: moto at {server.url}")
        local_s, local_chunks, local_kb = await _ingest(str(work / "kb"), work / "corpus", embedder)
        s3_s, s3_chunks, s3_kb = await _ingest(location.uri, work / "corpus", embedder)
        assert local_chunks == s3_chunks == len(texts), (local_chunks, s3_chunks, len(texts))

        lazy_kb = KnowledgeBase(
            location.uri, embedder=embedder, read_consistency_interval=timedelta(seconds=10)
        )
        await lazy_kb.open()
        kbs = (("local", local_kb), ("s3", s3_kb), ("s3 lazy", lazy_kb))
        latencies: dict[tuple[str, str], list[float]] = {}
        for mode in ("hybrid", "vector", "text"):
            for query in queries[:5]:  # warm all (index files read once, connections opened)
                for _, kb in kbs:
                    await kb.search(query, limit=10, mode=mode)  # type: ignore[arg-type]
            for query in queries:
                for name, kb in kbs:
                    start = time.perf_counter()
                    hits = await kb.search(query, limit=10, mode=mode)  # type: ignore[arg-type]
                    latencies.setdefault((name, mode), []).append((time.perf_counter() - start) * 1000)
                    assert len(hits) == 10
        for name, kb in kbs:
            ids = {hit.document_id for hit in await kb.search(queries[0], limit=10)}
            for _ in range(50):
                start = time.perf_counter()
                await kb._tables.published(ids)
                latencies.setdefault((name, "published"), []).append((time.perf_counter() - start) * 1000)
            kb.close()

        ingest = [local_chunks / local_s, s3_chunks / s3_s]
        rows: list[list[object]] = [
            ["ingest chunks/s (vectors precomputed)", *ingest, "-", ingest[1] / ingest[0]],
        ]
        for mode in ("hybrid", "vector", "text", "published"):
            for q in (50, 95):
                local, s3, lazy = (percentile(latencies[(name, mode)], q) for name, _ in kbs)
                label = f"{mode} search p{q} ms (top 10)" if mode != "published" else f"published p{q} ms"
                rows.append([label, local, s3, lazy, s3 / local])
        print(table(["", "local folder", "S3 (moto)", "S3, consistency 10 s", "S3 / local"], rows))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
