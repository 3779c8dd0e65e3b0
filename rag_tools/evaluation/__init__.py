"""Evaluation on labelled questions (``ragstream eval``): search figures per mode, answer figures.

``load_questions`` reads a JSONL file of ``LabelledQuestion``; ``evaluate`` runs them against a
knowledge base and gives an ``EvalReport`` (``.text()``, ``.model_dump_json()``, ``render_html``).
Ranking figures come from ir-measures, the ``eval`` extra (``metrics``).
"""

from .html import render_html
from .metrics import DEPTH, MissingExtra, ranking_figures, require_metrics
from .questions import LabelledQuestion, QuestionsFileError, contains_fact, load_questions, normalise
from .report import FIGURES, AnswerFigures, AnswerResult, EvalReport, ModeReport, QuestionResult, Result
from .runner import evaluate, evaluation_steps, fragments

__all__ = [
    "DEPTH",
    "FIGURES",
    "AnswerFigures",
    "AnswerResult",
    "EvalReport",
    "LabelledQuestion",
    "MissingExtra",
    "ModeReport",
    "QuestionResult",
    "QuestionsFileError",
    "Result",
    "contains_fact",
    "evaluate",
    "evaluation_steps",
    "fragments",
    "load_questions",
    "normalise",
    "ranking_figures",
    "render_html",
    "require_metrics",
]
