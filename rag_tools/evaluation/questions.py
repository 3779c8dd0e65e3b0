"""Labelled questions: the JSONL file ``ragstream eval`` reads, and how a fact is matched.

One JSON object per line (blank lines are skipped)::

    {"id": "py001", "question": "How do I ...?", "pages": ["library/functions.html"], "fact": "..."}

``pages`` are the document uris (as the knowledge base shows them) that answer the question, any
one of them being enough; ``fact`` (optional) is a short string the answering page states. Other
keys are kept out of the way (``tags``, ``notes``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

__all__ = ["LabelledQuestion", "QuestionsFileError", "contains_fact", "load_questions", "normalise"]

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class LabelledQuestion(BaseModel):
    """A question, the pages that answer it, and a fact a correct answer states."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: _Text
    question: _Text
    pages: list[_Text] = Field(min_length=1)
    fact: _Text | None = None


class QuestionsFileError(ValueError):
    """A questions file that cannot be read: missing, not JSONL, or a line that is not a question."""


def _field_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "line"
    if error["type"] == "missing":
        return f"field {field!r} is missing"
    return f"field {field!r}: {error['msg'][0].lower()}{error['msg'][1:]}"


def load_questions(path: str | Path) -> list[LabelledQuestion]:
    """The questions of a JSONL file; ``QuestionsFileError`` names the line and field at fault."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise QuestionsFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionsFileError(f"{path}: cannot be read ({exc})") from None
    questions: list[LabelledQuestion] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise QuestionsFileError(
                f"{path} line {number}: not JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(item, dict):
            raise QuestionsFileError(f"{path} line {number}: not a JSON object")
        try:
            question = LabelledQuestion.model_validate(item)
        except ValidationError as exc:
            raise QuestionsFileError(f"{path} line {number}: {_field_error(exc)}") from None
        if question.id in seen:
            raise QuestionsFileError(
                f"{path} line {number}: field 'id': {question.id!r} is the id of line {seen[question.id]} too"
            )
        seen[question.id] = number
        questions.append(question)
    if not questions:
        raise QuestionsFileError(f"{path}: no questions in the file")
    return questions


_MARKS = re.compile(r"[`*]|\\(?=[^\sA-Za-z0-9])")


def normalise(text: str) -> str:
    """``text`` lower-cased, Markdown marks (backticks, asterisks, backslash escapes) dropped, and
    whitespace collapsed: how a fact is compared with a passage or an answer."""
    return " ".join(_MARKS.sub("", text).lower().split())


def contains_fact(text: str, fact: str) -> bool:
    """Whether ``text`` states ``fact``, both normalised."""
    return normalise(fact) in normalise(text)
