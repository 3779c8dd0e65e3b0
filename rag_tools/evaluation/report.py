"""What an evaluation found: per mode and per question, as a model (JSON) and as text."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .metrics import RANKING_FIGURES

__all__ = ["FIGURES", "AnswerFigures", "AnswerResult", "EvalReport", "ModeReport", "QuestionResult", "Result"]

FIGURES = (*RANKING_FIGURES, "fact@5")
"""The figures of a search mode, in the order they are shown."""

_LABELS = {"fact@5": "fact in top 5"}


class Result(BaseModel):
    """One search result as the report shows it."""

    uri: str
    title: str
    location: str = ""
    score: float
    text: str = Field(description="The passage's opening (300 characters at most).")


class QuestionResult(BaseModel):
    """How one search mode did on one question."""

    id: str
    rank: int | None = Field(description="Rank of the first labelled page among the results' pages.")
    fact_in_top5: bool | None = Field(description="None when the question has no fact.")
    figures: dict[str, float]
    top: list[Result] = Field(description="The first five results.")


class ModeReport(BaseModel):
    """One search mode over every question: the mean figures and each question's outcome."""

    mode: str
    figures: dict[str, float | None]
    questions: list[QuestionResult]

    @property
    def misses(self) -> list[QuestionResult]:
        """The questions whose first result is not from a labelled page."""
        return [q for q in self.questions if q.rank != 1]


class AnswerResult(BaseModel):
    """The chat agent's answer to one question."""

    id: str
    answer: str
    fact_found: bool | None = Field(description="None when the question has no fact.")
    cites_page: bool = Field(description="Some [n] of the answer cites a labelled page.")
    cited: list[str] = Field(default_factory=list, description="The uris the answer's markers cite.")
    fragments: list[str] = Field(default_factory=list, description="Sentences starting mid-phrase.")
    escapes: int = Field(0, description="Markdown escapes (\\_, \\*) in the answer.")


class AnswerFigures(BaseModel):
    """Answers to every question: rates over the questions, counts over the answers."""

    model: str
    fact_rate: float | None
    citation_rate: float
    fragments: int
    escapes: int
    answers: list[AnswerResult]


class EvalReport(BaseModel):
    """An evaluation of labelled questions against a knowledge base."""

    questions: dict[str, dict[str, object]] = Field(
        description="By id: question, pages and fact as labelled."
    )
    documents: int
    chunks: int
    embedder: str
    depth: int
    unknown_pages: list[str] = Field(description="Labelled pages the knowledge base does not hold.")
    modes: list[ModeReport]
    answers: AnswerFigures | None = None

    def text(self) -> str:
        """The figures side by side (a Markdown table), then the misses of each mode."""
        lines = [
            f"{len(self.questions)} questions, {self.documents} documents, {self.chunks} chunks "
            f"(embedder {self.embedder}); top {self.depth} results per question",
        ]
        if self.unknown_pages:
            lines.append(
                f"warning: {len(self.unknown_pages)} labelled pages are not in the knowledge base "
                f"(their questions miss): {', '.join(self.unknown_pages)}"
            )
        lines += ["", "| figure | " + " | ".join(m.mode for m in self.modes) + " |"]
        lines.append("|---" * (len(self.modes) + 1) + "|")
        for name in FIGURES:
            values = [m.figures.get(name) for m in self.modes]
            shown = " | ".join("-" if v is None else f"{v:.3f}" for v in values)
            lines.append(f"| {_LABELS.get(name, name)} | {shown} |")
        if self.answers is not None:
            a = self.answers
            fact = "-" if a.fact_rate is None else f"{a.fact_rate:.3f}"
            lines += [
                "",
                f"Answers ({a.model}, a fresh thread per question):",
                "",
                "| answer states the fact | answer cites a labelled page | fragments | escapes |",
                "|---|---|---|---|",
                f"| {fact} | {a.citation_rate:.3f} | {a.fragments} | {a.escapes} |",
            ]
        for mode in self.modes:
            lines += ["", f"Misses, {mode.mode} (first result not from a labelled page):"]
            lines += [f"  {_miss(q)}" for q in mode.misses] or ["  none"]
            facts = [q.id for q in mode.questions if q.fact_in_top5 is False]
            lines.append(f"Fact not in the top 5, {mode.mode}: {', '.join(facts) or 'none'}")
        if self.answers is not None:
            answers = self.answers.answers
            lines += ["", "Answer misses:"]
            lines.append(
                f"  fact not stated: {', '.join(a.id for a in answers if a.fact_found is False) or 'none'}"
            )
            lines.append(
                f"  no labelled page cited: {', '.join(a.id for a in answers if not a.cites_page) or 'none'}"
            )
            fragmented = [f"{a.id} ({len(a.fragments)})" for a in answers if a.fragments]
            lines.append(f"  fragments: {', '.join(fragmented) or 'none'}")
            escaped = [f"{a.id} ({a.escapes})" for a in answers if a.escapes]
            lines.append(f"  escapes: {', '.join(escaped) or 'none'}")
        return "\n".join(lines)


def _miss(result: QuestionResult) -> str:
    where = f"rank {result.rank}" if result.rank else "not in the results"
    if not result.top:
        return f"{result.id} ({where}): no results"
    first = result.top[0]
    location = f" ({first.location})" if first.location else ""
    return f"{result.id} ({where}): first {first.uri}{location}"
