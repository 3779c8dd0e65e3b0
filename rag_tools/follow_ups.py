"""Follow-up questions: when a question depends on the turn before it, and what it borrows.

A question is searched as asked unless it cannot name its topic by itself. The rule reads the
question's own content words (what is left once function words, question words and pro-forms are
set aside) and, for a short question, what the previous turn retrieved:

1. no content word at all ("Why?", "Who does them?"): a follow-up;
2. a pro-form (it, they, those, one(s), ...) and at most two content words to anchor it ("How long
   are they kept?", "And the monthly ones?"): a follow-up;
3. four or more content words: the question names its own topic and stands alone, whatever word
   it opens with ("And who approves production database changes?");
4. one to three content words: a follow-up when all of them occur in the passages the previous
   turn retrieved ("And on Sundays?" after the opening-hours table, "What about carbon
   frames?" after the warranty table). Otherwise it is searched alone first, and searched again
   with the previous topic only if that search answers weakly: "What is RRF?" after a question
   on backups finds its answer alone, "How far ahead are customers told?" does not.

A follow-up is searched as the question followed by the previous turn's topic in parentheses: the
content words of the query that turn searched (so a chain of follow-ups keeps its anchor), never
the whole transcript. ``NOTES.md`` says why these signals and thresholds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .extractive import STOP_WORDS, stem

__all__ = ["ResolvedQuestion", "Turn", "content_words", "is_follow_up", "resolve_follow_up"]

_WORD = re.compile(r"[a-z0-9][a-z0-9'.:-]*[a-z0-9]|[a-z0-9]")
# Words that point back at something said before instead of naming it.
_PRO_FORMS = frozenset(
    "it its itself they them their theirs themselves this that these those one ones "
    "he him his she her hers such same then".split()
)
# Question words, auxiliaries, modals, the adverbs of "how long / often / much / far" and discourse
# particles: they say what is asked or how, not what about.
_FUNCTION_WORDS = STOP_WORDS | frozenset(
    "whom whose much many long often far did must may might shall were been being am also too "
    "else just now ok okay please".split()
)
_OWN_TOPIC = 4  # content words from which a question names its own topic
_PRO_FORM_ANCHOR = 2  # content words a question with a pro-form may have and still lean back
_TOPIC_WORDS = 12  # content words borrowed at most
_CONFIDENT = 0.5  # best sentence score (similarity + overlap) of an answer that needs no retry


@dataclass(frozen=True)
class Turn:
    """An earlier turn: what was asked, what was last searched, and the text that came back."""

    question: str
    query: str | None = None
    material: str = ""


@dataclass(frozen=True)
class ResolvedQuestion:
    """A question and the query to search for it.

    ``topic`` holds what the query borrowed from the previous turn (empty when the question stands
    alone); ``retry`` is the borrowed query to search next if ``query`` answers weakly.
    """

    question: str
    query: str
    topic: str = ""
    retry: str | None = None

    @property
    def borrowed(self) -> bool:
        return bool(self.topic)

    def retry_after(self, searched: str, confidence: float) -> str | None:
        """The query to search next, when ``searched`` was this question alone and answered with
        less than the confidence of a direct answer (an ``ExtractiveAnswer.confidence``)."""
        if self.retry and searched == self.query and confidence < _CONFIDENT:
            return self.retry
        return None


def content_words(text: str) -> list[str]:
    """The words of ``text`` that name things, in order, once each (lower case)."""
    words = (w for w in _WORD.findall(text.lower()) if w not in _FUNCTION_WORDS and w not in _PRO_FORMS)
    return list(dict.fromkeys(w for w in words if len(w) > 1))


def _anchored(own: list[str], previous: Turn) -> bool:
    """Whether every word of ``own`` occurs in what the previous turn searched and retrieved."""
    seen = {
        stem(w) for w in _WORD.findall(f"{previous.query or previous.question}\n{previous.material}".lower())
    }
    return all(stem(w) in seen for w in own)


def is_follow_up(question: str, previous: Turn | None) -> bool:
    """Whether ``question`` leans on ``previous`` by rules 1, 2 and 4 of this module."""
    if previous is None:
        return False
    own = content_words(question)
    if not own:
        return True
    if any(w in _PRO_FORMS for w in _WORD.findall(question.lower())) and len(own) <= _PRO_FORM_ANCHOR:
        return True
    return len(own) < _OWN_TOPIC and _anchored(own, previous)


def _with_topic(question: str, previous: Turn) -> tuple[str, str]:
    own = set(content_words(question))
    borrowed = [w for w in content_words(previous.query or previous.question) if w not in own]
    topic = " ".join(borrowed[:_TOPIC_WORDS])
    return (f"{question} ({topic})" if topic else question), topic


def resolve_follow_up(question: str, previous: Turn | None) -> ResolvedQuestion:
    """The query to search for ``question``: the question itself, or with the previous topic."""
    question = question.strip()
    if previous is None:
        return ResolvedQuestion(question, question)
    query, topic = _with_topic(question, previous)
    if is_follow_up(question, previous):
        return ResolvedQuestion(question, query, topic)
    short = len(content_words(question)) < _OWN_TOPIC
    return ResolvedQuestion(question, question, retry=query if short and topic else None)
