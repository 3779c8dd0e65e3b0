"""Ingestion pipeline throughput against the embedder alone, on the same chunks, in one run.

    python -m bench.ingest [--chunks 2000] [--embedder local:all-minilm-l6-v2] [--repeat 1]

The corpus is the sample corpus (``examples/corpus``), a generated multi-page PDF and synthetic
Markdown and text files, about ``--chunks`` chunks in all. The chunk texts are produced by the
same preparation step ingestion uses, then:

- the embedder alone embeds exactly those texts in one call (its own batching, model loaded
  beforehand): the ceiling, measured before and after each ingest (A B A) to cancel drift;
- ``KnowledgeBase.ingest_paths`` ingests the corpus into a new knowledge base (parsing, chunking,
  embedding, writing, index creation);
- the same ingestion with vectors precomputed shows what parsing and writing cost alone, and what
  running the stages one after the other would give (1 / (1/embedder + 1/rest)).

The ratio ingest / embedder alone is the figure (target at least 0.85).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from pathlib import Path

from fpdf import FPDF
from pydantic_ai.embeddings import EmbeddingModel
from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.embeddings import DEFAULT_EMBEDDER, VectorEmbeddingModel, resolve_embedding_model
from rag_tools.kb import KnowledgeBase
from rag_tools.kb.ingestion import PreparedDocument, prepare
from rag_tools.kb.sources import Source, expand_sources

from ._util import median, table

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "corpus"
_WORDS = (
    "backup restore replica cluster node shard index query latency throughput deploy rollback "
    "incident alert pager runbook schedule window retention policy archive bucket region zone "
    "certificate token secret rotation audit access role permission tenant quota limit budget "
    "pipeline stage worker queue batch stream event buffer cache eviction timeout retry backoff "
    "the a of to and in is for on with that this be are as by it at from or an will must should"
).split()


def _paragraph(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(_WORDS))
    return " ".join(words).capitalize() + "."


def _build_corpus(folder: Path, chunks: int, seed: int) -> None:
    """The sample corpus, one PDF (a quarter of the chunks, one per page) and Markdown/text files."""
    rng = random.Random(seed)
    shutil.copytree(CORPUS, folder / "sample")
    pdf = FPDF()
    pdf.set_title("Synthetic operations manual")
    pdf.set_font("Helvetica", size=9)
    for page in range(chunks // 4):
        pdf.add_page()
        pdf.multi_cell(0, 5, f"Section {page}. " + _paragraph(rng, 900))
    pdf.output(str(folder / "manual.pdf"))
    synthetic = folder / "notes"
    synthetic.mkdir()
    remaining = chunks - chunks // 4 - 170  # the sample corpus holds about 170 chunks
    index = 0
    while remaining > 0:
        sections = min(remaining, rng.randint(1, 12))
        if index % 3:
            body = "\n\n".join(
                f"## Topic {s}\n\n{_paragraph(rng, rng.randint(600, 1100))}" for s in range(sections)
            )
            (synthetic / f"note-{index:04d}.md").write_text(f"# Note {index}\n\n{body}\n")
        else:
            body = "\n\n".join(_paragraph(rng, 1100) for _ in range(sections))
            (synthetic / f"log-{index:04d}.txt").write_text(body + "\n")
        remaining -= sections
        index += 1


def _prepared(folder: Path, max_chars: int) -> list[PreparedDocument]:
    """Every document of ``folder`` as ingestion prepares it, with all its chunks (PDFs parsed through)."""
    docs = []
    for source in expand_sources([folder]):
        doc = prepare(source, None, max_chars=max_chars) if isinstance(source, Source) else source
        if isinstance(doc, PreparedDocument):
            while (rows := doc.next_rows()) is not None:
                doc.chunk_rows.extend(rows)
            docs.append(doc)
    return docs


class _Precomputed(VectorEmbeddingModel):
    """Vectors computed beforehand, under the real embedder's name: ingestion without embedding."""

    def __init__(self, like: EmbeddingModel, vectors: dict[str, list[float]]) -> None:
        super().__init__()
        self._like, self._vectors = like, vectors

    @property
    def model_name(self) -> str:
        return self._like.model_name

    @property
    def system(self) -> str:
        return self._like.system

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        return [self._vectors[t] for t in texts]


async def _ingest(path: Path, corpus: Path, model: EmbeddingModel) -> float:
    async with KnowledgeBase(path, embedder=model) as kb:
        start = time.perf_counter()
        report = await kb.ingest_paths([corpus])
        elapsed = time.perf_counter() - start
    assert not report.errors, report.errors[:3]
    shutil.rmtree(path)
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--repeat", type=int, default=1, help="ingest this many times (medians)")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-ingest-"))
    try:
        corpus = work / "corpus"
        _build_corpus(corpus, args.chunks, args.seed)
        docs = _prepared(corpus, max_chars=1200)
        texts = [t for d in docs for t in d.texts]
        pages = sum(1 for d in docs if d.doc_row["format"] == "pdf" for _ in d.chunk_rows)
        print(
            f"{len(texts)} chunks in {len(docs)} documents ({pages} from one PDF); embedder {args.embedder}"
        )
        model = resolve_embedding_model(args.embedder)
        await model.embed(texts[:8], input_type="document")  # load the model outside the timings

        async def embed_alone() -> tuple[float, dict[str, list[float]]]:
            start = time.perf_counter()
            result = await model.embed(texts, input_type="document")
            rate = len(texts) / (time.perf_counter() - start)
            return rate, {t: list(v) for t, v in zip(texts, result.embeddings, strict=True)}

        # A B A ... A: the embedder alone before and after every ingest, so that a machine getting
        # busier or quieter during the run does not favour either side.
        rate, vectors = await embed_alone()
        alone, ingest = [rate], []
        for _ in range(args.repeat):
            ingest.append(len(texts) / await _ingest(work / "kb", corpus, model))
            alone.append((await embed_alone())[0])
        rest = [len(texts) / await _ingest(work / "kb", corpus, _Precomputed(model, vectors))]

        embed_rate, ingest_rate, rest_rate = median(alone), median(ingest), median(rest)
        sequential = 1 / (1 / embed_rate + 1 / rest_rate)
        print()
        print(
            table(
                ["measurement", "chunks/s", "/ embedder alone"],
                [
                    ("embedder alone, same chunk texts", embed_rate, 1.0),
                    ("ingest_paths (pipeline)", ingest_rate, ingest_rate / embed_rate),
                    ("ingest_paths, vectors precomputed", rest_rate, rest_rate / embed_rate),
                    ("stages one after the other (computed)", sequential, sequential / embed_rate),
                ],
            )
        )
        print(
            "\nruns (chunks/s): embedder alone "
            + ", ".join(f"{r:.1f}" for r in alone)
            + "; ingest "
            + ", ".join(f"{r:.1f}" for r in ingest)
        )
        print(f"ingest / embedder alone: {ingest_rate / embed_rate:.2f} (target >= 0.85)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
