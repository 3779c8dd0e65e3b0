"""The reranking stage after search and fusion, behind one setting (``RAGSTREAM_RERANKER``).

A reranker reorders a search's best ``depth`` candidates by reading each passage with the query,
which the embedder (one vector per passage) and BM25 (one count per word) cannot. Every choice is a
``lancedb.rerankers.Reranker``, LanceDB's reranker interface, so any reranker LanceDB ships, or one
a user writes, fits:

- ``none`` (the default): the fused order as it is. No offline cross-encoder ships its weights on
  PyPI (measured: rag_tools/kb/NOTES.md, "Reranking"), and this machine reaches nothing else.
- ``cross-encoder:<model>``: a sentence-transformers cross-encoder (LanceDB's
  ``CrossEncoderReranker``; needs ``sentence-transformers`` and the model on disk or reachable).
- ``cohere:<model>``, ``jina:<model>``, ``voyage:<model>``: the providers' rerank APIs (LanceDB's
  rerankers; keys from ``COHERE_API_KEY``, ``JINA_API_KEY``, ``VOYAGE_API_KEY``).
- ``model`` or ``model:<pydantic-ai model>``: a chat model ranks the passages listwise (the
  configured chat model, or the one named); its tokens count in the run that searched
  (``counting_usage``).

Rerankers are synchronous (LanceDB's interface): the stage runs them in a worker thread, so a
network call or a model's compute never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from lancedb.rerankers import Reranker
from pydantic import BaseModel, Field

from .models import SearchHit

__all__ = [
    "DEFAULT_RERANK_DEPTH",
    "ModelReranker",
    "RerankerError",
    "counting_usage",
    "rerank_hits",
    "resolve_reranker",
]

DEFAULT_RERANK_DEPTH = 20
_PASSAGE_CHARS = 700  # of each passage shown to a listwise model: its opening says what it is about
_usage: contextvars.ContextVar[Any] = contextvars.ContextVar("ragstream_rerank_usage", default=None)


class RerankerError(ValueError):
    """The reranker setting names nothing this code can build, or what it names cannot load."""


def resolve_reranker(spec: str | Reranker | None, *, chat_model: str | None = None) -> Reranker | None:
    """The reranker a setting names (see the module's list); ``None`` for ``none``.

    ``chat_model`` is the configured chat model, which ``model`` ranks with.
    """
    if spec is None or isinstance(spec, Reranker):
        return spec
    kind, _, name = spec.strip().partition(":")
    kind = kind.lower()
    if kind in ("", "none"):
        return None
    if kind == "model":
        model = name or chat_model
        if not model:
            raise RerankerError(
                "RAGSTREAM_RERANKER=model ranks with the chat model, but none is configured (RAGSTREAM_MODEL); "
                "name one (model:openai:gpt-4o-mini) or choose another reranker"
            )
        return ModelReranker(model)
    if kind in _PROVIDERS:
        if not name:
            raise RerankerError(f"name the model: {kind}:<model>, for example {kind}:{_PROVIDERS[kind][1]}")
        return _provider(kind, name)
    raise RerankerError(
        f"unknown reranker {spec!r}; use none, cross-encoder:<model>, cohere:<model>, jina:<model>, "
        "voyage:<model> or model[:<chat model>]"
    )


_PROVIDERS: dict[str, tuple[str, str]] = {
    "cross-encoder": ("CrossEncoderReranker", "cross-encoder/ms-marco-MiniLM-L-6-v2"),
    "cohere": ("CohereReranker", "rerank-v3.5"),
    "jina": ("JinaReranker", "jina-reranker-v2-base-multilingual"),
    "voyage": ("VoyageAIReranker", "rerank-2"),
}


def _provider(kind: str, name: str) -> Reranker:
    from lancedb import rerankers

    cls = getattr(rerankers, _PROVIDERS[kind][0])
    try:
        return cls(model_name=name)  # type: ignore[no-any-return]
    except ImportError as exc:  # LanceDB imports the provider's package on first use
        raise RerankerError(f"the {kind} reranker needs a package that is not installed: {exc}") from exc


@contextmanager
def counting_usage(usage: Any) -> Iterator[None]:
    """Count the model requests of rerankers run inside the block into ``usage`` (a pydantic-ai
    ``RunUsage``: the run's own, so its usage limit and the day's budget see them)."""
    token = _usage.set(usage)
    try:
        yield
    finally:
        _usage.reset(token)


async def rerank_hits(
    reranker: Reranker, query: str, hits: Sequence[SearchHit], texts: Sequence[str]
) -> list[SearchHit]:
    """``hits`` in the reranker's order (each read as its ``texts``), scored by it."""
    if len(hits) < 2:
        return list(hits)
    table = pa.table(
        {
            "text": list(texts),
            "_position": list(range(len(hits))),
            "_distance": pa.array([0.0] * len(hits), type=pa.float32()),
        }
    )
    ranked = await asyncio.to_thread(reranker.rerank_vector, query, table)  # the context (usage) goes along
    positions = ranked["_position"].to_pylist()
    scores = ranked["_relevance_score"].to_pylist() if "_relevance_score" in ranked.column_names else None
    kept = set(positions)
    order = [*positions, *(p for p in range(len(hits)) if p not in kept)]  # a reranker may drop some
    reordered = []
    for rank, position in enumerate(order):
        score = float(scores[rank]) if scores is not None and rank < len(scores) else 0.0
        reordered.append(hits[position].model_copy(update={"score": score}))
    return reordered


class _Ranking(BaseModel):
    """The passages' numbers, most relevant first."""

    ranking: list[int] = Field(description="Passage numbers from the most to the least relevant.")


class ModelReranker(Reranker):
    """A chat model ranks the passages listwise: it reads them numbered and returns their order."""

    def __init__(self, model: Any) -> None:
        super().__init__(return_score="relevance")
        self.model = model

    def __str__(self) -> str:
        return f"ModelReranker({getattr(self.model, 'model_name', self.model)})"

    def _rerank(self, query: str, table: pa.Table, score_column: str) -> pa.Table:
        from pydantic_ai import Agent

        texts = table["text"].to_pylist()
        numbered = "\n\n".join(
            f"[{n}] {' '.join(t.split())[:_PASSAGE_CHARS]}" for n, t in enumerate(texts, 1)
        )
        agent = Agent(
            self.model,
            output_type=_Ranking,
            instructions=(
                "Rank the passages by how well each answers the question. Return every passage "
                "number once, the most relevant first."
            ),
        )
        result = agent.run_sync(f"Question: {query}\n\nPassages:\n\n{numbered}", usage=_usage.get())
        seen: list[int] = []
        for number in result.output.ranking:
            if 1 <= number <= len(texts) and number - 1 not in seen:
                seen.append(number - 1)
        order = seen + [i for i in range(len(texts)) if i not in seen]
        ranked = table.take(order)
        scores = [1.0 - rank / len(order) for rank in range(len(order))]
        ranked = ranked.append_column("_relevance_score", pa.array(scores, type=pa.float32()))
        return ranked.drop_columns([score_column]) if score_column in ranked.column_names else ranked

    def rerank_vector(self, query: str, vector_results: pa.Table) -> pa.Table:
        return self._rerank(query, vector_results, "_distance")

    def rerank_fts(self, query: str, fts_results: pa.Table) -> pa.Table:
        return self._rerank(query, fts_results, "_score")

    def rerank_hybrid(self, query: str, vector_results: pa.Table, fts_results: pa.Table) -> pa.Table:
        return self._rerank(query, self.merge_results(vector_results, fts_results), "_distance")
