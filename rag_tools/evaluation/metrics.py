"""Ranking figures by ir-measures (on pytrec_eval), the ``eval`` extra.

A question's ranking is its pages in the order of their first passage among the top ``DEPTH``
search results; its labelled pages are relevant (grade 1) and any one answers it, so recall@k is
ir-measures' ``Success@k`` (a labelled page among the first k), MRR@10 is ``RR@10`` and nDCG@10
``nDCG@10`` over the labelled pages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..extras import MissingExtra, require_extra

__all__ = ["DEPTH", "RANKING_FIGURES", "MissingExtra", "ranking_figures", "require_metrics"]

DEPTH = 10
"""How many search results a question's ranking holds."""

RANKING_FIGURES = ("recall@1", "recall@5", "recall@10", "MRR@10", "nDCG@10")


def require_metrics() -> Any:
    """The ``ir_measures`` module; ``MissingExtra`` naming the ``eval`` extra that installs it."""
    return require_extra("eval", "ir_measures")


def _measures(ir: Any) -> dict[str, Any]:
    return {
        "recall@1": ir.Success @ 1,
        "recall@5": ir.Success @ 5,
        "recall@10": ir.Success @ 10,
        "MRR@10": ir.RR @ 10,
        "nDCG@10": ir.nDCG @ 10,
    }


def ranking_figures(
    relevant: Mapping[str, Sequence[str]], rankings: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Per question id, each of ``RANKING_FIGURES``; ``relevant`` maps each id to its labelled pages,
    ``rankings`` to its pages best first (a question with no ranking scores 0 everywhere)."""
    ir = require_metrics()
    measures = _measures(ir)
    names = {measure: name for name, measure in measures.items()}
    qrels = [ir.Qrel(qid, page, 1) for qid, pages in relevant.items() for page in dict.fromkeys(pages)]
    run = [
        ir.ScoredDoc(qid, page, float(len(pages) - rank))
        for qid, pages in rankings.items()
        for rank, page in enumerate(pages)
    ]
    figures = {qid: dict.fromkeys(RANKING_FIGURES, 0.0) for qid in relevant}
    if run:
        for metric in ir.iter_calc(list(measures.values()), qrels, run):
            figures[metric.query_id][names[metric.measure]] = float(metric.value)
    return figures
