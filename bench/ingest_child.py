"""One ingest measurement in a process of its own, for ``bench/ingest_compare.py``: not run by hand.

    <checkout>/.venv/bin/python ingest_child.py CORPUS KB_DIR [--stages] [--pattern GLOB]

Runs against whatever ``rag_tools`` the interpreter imports (the parent copies this file out of the
repository and points ``PYTHONPATH`` at the checkout being measured), so it uses only what every
measured version has: ``KnowledgeBase(path, embedder=...).ingest_paths``, ``expand_sources``,
``prepare``, ``parse_document``, ``chunk_document``, ``search_text`` and ``VectorEmbeddingModel``.
Prints one JSON object on its last line.

- ``ingest``: ``ingest_paths`` into a new knowledge base, wall and CPU seconds (this process, every
  thread), chunks written, LanceDB versions of the chunks table (one per commit), peak RSS;
- with ``--stages``, where that time goes, each alone and one after the other: reading and parsing
  every page, chunking them, the embedder on exactly the chunk texts ingest embedded (one call; its
  own batching), and the ingest again with those vectors precomputed (everything but the embedder:
  parsing, chunking, writing, indexes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _versions(kb_dir: Path) -> int:
    import lancedb

    return int(lancedb.connect(str(kb_dir)).open_table("chunks").version)


async def _ingest(kb_dir: Path, target: str, model: Any) -> dict[str, Any]:
    from rag_tools.kb import KnowledgeBase

    async with KnowledgeBase(kb_dir, embedder=model) as kb:
        wall, cpu = time.perf_counter(), _cpu()
        report = await kb.ingest_paths([target])
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    errors = [f"{o.source}: {o.error}" for o in report.errors]
    chunks = sum(o.chunks for o in report.outcomes if o.status in ("added", "updated"))
    pages = sum(1 for o in report.outcomes if o.status in ("added", "updated"))
    result = {"wall": wall, "cpu": cpu, "chunks": chunks, "pages": pages, "errors": errors[:5]}
    result["chunk_commits"] = _versions(kb_dir)
    shutil.rmtree(kb_dir)
    return result


def _stages(corpus: Path, max_chars: int) -> tuple[dict[str, float], list[str]]:
    """Reading + parsing, then chunking, every source alone; the texts the embedder gets."""
    from rag_tools.kb.chunking import chunk_document
    from rag_tools.kb.ingestion import search_text
    from rag_tools.kb.readers import parse_document
    from rag_tools.kb.sources import Source, expand_sources

    sources = [s for s in expand_sources([corpus]) if isinstance(s, Source)]
    parse = chunk = 0.0
    texts: list[str] = []
    for source in sources:
        start = time.perf_counter()
        parsed = parse_document(source.read(), name=source.name)
        middle = time.perf_counter()
        drafts = chunk_document(parsed, max_chars=max_chars)
        chunk += time.perf_counter() - middle
        parse += middle - start
        texts += [search_text(parsed.title, d.headings, d.text) for d in drafts]
    return {"parse": parse, "chunk": chunk}, texts


def _precomputed(like: Any, vectors: dict[str, list[float]], missed: list[str]) -> Any:
    """An embedder giving ``vectors`` (a text the stages did not see gets a zero vector, noted in
    ``missed``: the stages then did not reproduce what ingest embeds)."""
    from rag_tools.embeddings import VectorEmbeddingModel

    zero = [0.0] * len(next(iter(vectors.values())))

    class Precomputed(VectorEmbeddingModel):
        """The vectors computed beforehand, under the real embedder's name."""

        @property
        def model_name(self) -> str:
            return str(like.model_name)

        @property
        def system(self) -> str:
            return str(like.system)

        async def vectors(self, texts: list[str], input_type: Any) -> list[list[float]]:
            missed.extend(t for t in texts if t not in vectors)
            return [vectors.get(t, zero) for t in texts]

    return Precomputed()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path)
    parser.add_argument("kb", type=Path)
    parser.add_argument("--pattern", default="", help="glob under the corpus (default: the folder)")
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--embedder", default="local:all-minilm-l6-v2-int8")
    args = parser.parse_args()
    from rag_tools.embeddings import resolve_embedding_model

    model = resolve_embedding_model(args.embedder)
    await model.embed(["warm up", "the model loads outside the timings"], input_type="document")
    target = f"{args.corpus}/{args.pattern}" if args.pattern else str(args.corpus)
    out: dict[str, Any] = {"load": list(os.getloadavg()), "ingest": await _ingest(args.kb, target, model)}
    if args.stages:
        times, texts = _stages(args.corpus, 1200)
        from tokenizers import BertWordPieceTokenizer

        import rag_tools

        vocab = Path(rag_tools.__file__).parent / "_data" / "minilm_vocab.txt"
        tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
        tokenizer.enable_truncation(256)
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
        wall, cpu = time.perf_counter(), _cpu()
        result = await model.embed(texts, input_type="document")
        times["embed"], times["embed_cpu"] = time.perf_counter() - wall, _cpu() - cpu
        vectors = {t: list(v) for t, v in zip(texts, result.embeddings, strict=True)}
        missed: list[str] = []
        rest = await _ingest(args.kb, target, _precomputed(model, vectors, missed))
        times["rest"], times["rest_cpu"] = rest["wall"], rest["cpu"]
        out["stages"] = {**times, "texts": len(texts), "tokens": tokens, "missed": len(missed)}
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["code"] = str(Path(sys.modules["rag_tools"].__file__ or "").parent.parent)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
