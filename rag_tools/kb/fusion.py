"""How hybrid search fuses its vector and full-text rankings into one.

Both halves are asked for ``candidates`` rows each (more than the caller's limit: a passage that
either half ranks 15th can still be the best of both), then fused on LanceDB's reranker interface
(``lancedb.rerankers.Reranker``), by one of two methods:

- ``score`` (the default): LanceDB's ``LinearCombinationReranker`` over the halves' normalised
  scores, each half weighted. A strong match in one half is not pulled down by a weak ranking in
  the other, which rank fusion does: on the PostgreSQL manual, whose users' words the full-text
  half finds poorly, rank fusion ranked below vector search alone, score fusion above it.
- ``rank``: weighted reciprocal rank fusion (``WeightedRRFReranker``): a row scores
  ``weight / (k + rank)`` in each ranking it appears in.

The defaults were chosen on real manuals (bench/RESULTS.md, "Real manuals"); ``Fusion`` lets a
caller tune them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
from lancedb.rerankers import LinearCombinationReranker, Reranker

__all__ = ["DEFAULT_FUSION", "Fusion", "WeightedRRFReranker"]


@dataclass(frozen=True)
class Fusion:
    """Hybrid search's fusion: the method, candidates per half, each half's weight (relative: only
    their ratio counts) and the RRF constant ``k`` (``rank`` only)."""

    method: Literal["score", "rank"] = "score"
    candidates: int = 15
    vector_weight: float = 0.65
    text_weight: float = 0.35
    k: int = 60

    def __post_init__(self) -> None:
        if self.candidates < 1 or self.k < 1:
            raise ValueError("candidates and k must be at least 1")
        if self.vector_weight < 0 or self.text_weight < 0 or not (self.vector_weight or self.text_weight):
            raise ValueError("the weights must not be negative, and one of them must be positive")
        if self.method not in ("score", "rank"):
            raise ValueError(f"unknown fusion method {self.method!r}; use score or rank")

    def reranker(self) -> Reranker:
        """The LanceDB reranker that applies this fusion."""
        if self.method == "rank":
            return WeightedRRFReranker(self.k, self.vector_weight, self.text_weight)
        return LinearCombinationReranker(weight=self.vector_weight / (self.vector_weight + self.text_weight))


DEFAULT_FUSION = Fusion()


class WeightedRRFReranker(Reranker):
    """Reciprocal rank fusion with a weight per ranking (LanceDB's ``RRFReranker`` weighs both as 1)."""

    def __init__(self, k: int = 60, vector_weight: float = 1.0, text_weight: float = 1.0) -> None:
        super().__init__(return_score="relevance")
        self.k = k
        self.vector_weight = vector_weight
        self.text_weight = text_weight

    def __str__(self) -> str:
        return f"WeightedRRFReranker(k={self.k}, vector={self.vector_weight}, text={self.text_weight})"

    def rerank_hybrid(self, query: str, vector_results: pa.Table, fts_results: pa.Table) -> pa.Table:
        scores: defaultdict[int, float] = defaultdict(float)
        for results, weight in ((vector_results, self.vector_weight), (fts_results, self.text_weight)):
            if results is None or not results.num_rows:
                continue
            for rank, row_id in enumerate(results["_rowid"].to_pylist(), 1):
                scores[row_id] += weight / (self.k + rank)
        combined = self.merge_results(vector_results, fts_results)
        relevance = [scores[row_id] for row_id in combined["_rowid"].to_pylist()]
        combined = combined.append_column("_relevance_score", pa.array(relevance, type=pa.float32()))
        return self._keep_relevance_score(combined.sort_by([("_relevance_score", "descending")]))
