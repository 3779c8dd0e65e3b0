"""Answers and summaries assembled from retrieved text, for when no language model is configured.

Sentences are scored by cosine similarity to the question with the knowledge base's own embedder,
plus a small bonus for shared content words; the best few become the answer, each followed by the
``[n]`` of the passage it came from. Nothing is generated: every sentence is a quotation.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic_ai.embeddings import EmbeddingModel

__all__ = [
    "STOP_WORDS",
    "ExtractiveAnswer",
    "Passage",
    "extractive_answer",
    "extractive_summary",
    "split_sentences",
    "stem",
]

# A sentence ends at . ! ? and a space, the next one starting in upper case, a digit, code, or in
# lower case: "Copy a tree. mode and verbose are as for mkpath()" is two sentences, the second not
# one to quote (it opens in lower case); abbreviations ("e.g. the") are joined again.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”')\]]*\s+(?=[\"“(\[`]?[A-Za-z0-9`])")
# A full stop that ends an abbreviation, not a sentence: "e.g. Python", "Fig. 3", "vs. MySQL".
_ABBREVIATION = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|approx|fig|no|nr|dr|mr|mrs|ms|st|ca)\.|\b[A-Za-z]\.)$", re.IGNORECASE
)
# Markup that is not quoted: emphasis, headings' #, list markers, images, quote marks. Inline
# code keeps its backticks (a reader of the answer sees code as code); ``_plain`` drops them.
_MARKUP = re.compile(r"(\*\*|__|^#+\s*|^\s*(?:[-*+]|\d+[.)])\s+|!\[[^\]]*\]\([^)]*\)|^>\s*)", re.MULTILINE)
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|<>~])")  # a Markdown backslash escape: the character itself
_WORD = re.compile(r"[a-z0-9][a-z0-9'.:-]*[a-z0-9]|[a-z0-9]")
STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its me my of on or so that the this to "
    "was what when where which who why will with you your should would could there their they them we our "
    "about into than then these those has have had not no yes any all each get set use used using".split()
)
_CACHE_LIMIT = 20_000


@dataclass(frozen=True)
class Passage:
    """Text that may be quoted, with the citation number to quote it under."""

    citation: int
    text: str
    heading: str | None = None  # title and section, to give short sentences their context


@dataclass
class ExtractiveAnswer:
    """A quoted answer: its text with ``[n]`` markers, the citations used, a 0-1 confidence."""

    text: str
    citations: list[int] = field(default_factory=list)
    confidence: float = 0.0
    found: bool = False


def _plain(text: str) -> str:
    """``text`` without inline code marks: what is embedded and matched against the question."""
    return text.replace("`", "")


def _clean(line: str) -> str:
    line = _LINK.sub(r"\1", line)
    line = _MARKUP.sub("", line).strip()
    if line.startswith("|") and line.endswith("|"):
        cells = table_cells(line)
        if all(set(c) <= set("-: ") for c in cells):
            return ""
        line = ", ".join(c for c in cells if c)
    return re.sub(r"\s+", " ", _ESCAPE.sub(r"\1", line)).strip()


def table_cells(row: str) -> list[str]:
    """The cells of a Markdown table row; ``\\|`` is a pipe inside a cell, not a border."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


_UNIT_START = re.compile(r"^\s*([-*+]\s|\d+[.)]\s|\||#)")
_FENCE = re.compile(r"^\s*(```|~~~)")
# The start of a definition line a reader can quote although it opens in lower case: an API name
# such as ``os.makedirs(name, mode=0o777): ...`` or ``str.removeprefix(prefix, /): ...``.
_TERM_START = re.compile(r"^(?:class |async |awaitable )?[\w.]+(?:\([^)]*\))?(?:; [^:]+)?: \S")


@dataclass(frozen=True)
class _Unit:
    """A logical line: a paragraph, a list item, a table row with its headers, a heading."""

    text: str
    row: bool = False  # a table row, read with its headers: whole as it is
    item: bool = False  # a list item: complete without a full stop

    @property
    def complete(self) -> bool:
        """Ends as a sentence does, or is a row or item (which need no full stop)."""
        return self.row or self.item or self.text[-1:] in ".!?:;)\"”'`" or len(self.text) < 50


def _units(block: str) -> list[_Unit]:
    """Lines of a block joined into logical units: list items, table rows, headings, paragraphs.

    Wrapped lines (PDF text, hard-wrapped Markdown) continue the unit before them: a line opening
    in lower case always does; a short line without closing punctuation reads as a heading and
    stands alone. Code blocks are left out: an answer quotes prose.
    """
    units: list[_Unit] = []
    current: list[str] = []
    current_item = False
    previous_closed = True
    header: list[str] | None = None
    last_cells: list[str] | None = None
    in_code = False

    def close() -> None:
        nonlocal current
        if current:
            units.append(_Unit(" ".join(current), item=current_item))
            current = []

    for raw in block.splitlines():
        if _FENCE.match(raw):
            in_code = not in_code
            continue
        if in_code or not raw.strip():
            continue
        if raw.lstrip().startswith("|"):  # a table row: pair each cell with its column header
            cells = table_cells(raw)
            close()
            if all(set(c) <= set("-: ") for c in cells):
                header = [_clean(c) for c in last_cells] if last_cells else None
                if last_cells and units:
                    units.pop()  # the header row itself is not a sentence
            elif header and len(header) == len(cells):
                pairs = (f"{h}: {_clean(c)}" for h, c in zip(header, cells, strict=True) if c)
                units.append(_Unit(", ".join(pairs), row=True))
            else:
                units.append(_Unit(_clean(raw), row=True))
            last_cells = cells
            previous_closed = True
            continue
        starts_unit = bool(_UNIT_START.match(raw))
        line = _clean(raw)
        if not line:
            continue
        continues = bool(current) and line[0].islower() and not starts_unit
        heading_like = len(line) < 50 and line[-1] not in ".,;:!?)" and not starts_unit and not continues
        if current and not continues and (starts_unit or previous_closed or heading_like):
            close()
        if not current:
            current_item = starts_unit
        current.append(line)
        previous_closed = heading_like or line.endswith(":")
    close()
    return units


_LEANS_BACK = re.compile(
    r"^(it|its|they|their|them|this|that|these|those|he|she|his|her|such)\b", re.IGNORECASE
)
_MAX_FOLLOWERS = 2
_LOWER_TERM = re.compile(r"^[a-z][\w' -]{0,40}: ")


def _sentences(unit: _Unit) -> list[tuple[str, bool]]:
    """A unit's sentences, each with whether it is whole: starts as a sentence starts (a capital, a
    digit, code, an API name) and ends as one ends. A unit's last sentence is only as whole as the
    unit's end (a passage cut in the middle of a sentence ends in a piece of one)."""
    pieces: list[str] = []
    for piece in (p.strip() for p in _SENTENCE_END.split(unit.text)):
        if pieces and _ABBREVIATION.search(pieces[-1]):
            pieces[-1] = f"{pieces[-1]} {piece}"  # "e.g. Python" goes on
        elif len(piece) > 2:
            pieces.append(piece)
    whole = []
    for n, piece in enumerate(pieces):
        starts = (
            piece[0].isupper() or piece[0].isdigit() or piece[0] in '`"“([' or bool(_TERM_START.match(piece))
        )
        ends = n < len(pieces) - 1 or unit.complete
        whole.append((piece, (starts or unit.row) and ends))
    return whole


def _statements(text: str) -> list[tuple[tuple[str, ...], bool]]:
    """Sentences grouped with the ones right after them that open with a pronoun, each group with
    whether it may be quoted (its first sentence is whole).

    "Normal change: any other change. It needs approval from two engineers." is one statement: its
    second sentence says nothing on its own, and its first does not say who approves.
    """
    statements: list[tuple[tuple[str, ...], bool]] = []
    for block in re.split(r"\n\s*\n", text):
        for unit in _units(block):
            for n, (piece, whole) in enumerate(_sentences(unit)):
                if n and _LEANS_BACK.match(piece) and len(statements[-1][0]) <= _MAX_FOLLOWERS and whole:
                    statements[-1] = ((*statements[-1][0], piece), statements[-1][1])
                else:
                    statements.append(((piece,), whole))
    return statements


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (inline code marks dropped); list items, table rows and headings count
    as sentences of their own."""
    return [_plain(sentence) for statement, _ in _statements(text) for sentence in statement]


def stem(word: str) -> str:
    """``word`` without a possessive or plural ``s`` ("sundays", "bakery's"), so forms meet."""
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) > 1}


class _VectorCache:
    """Sentence vectors by text, so repeated answers over the same passages do not re-embed."""

    def __init__(self) -> None:
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    async def vectors(
        self, model: EmbeddingModel, texts: Sequence[str], *, query: bool = False
    ) -> np.ndarray:
        kind = "q" if query else "d"
        key = model.model_name + kind
        missing = [t for t in dict.fromkeys(texts) if (key, t) not in self._vectors]
        if missing:
            result = await model.embed(missing, input_type="query" if query else "document")
            for text, vector in zip(missing, result.embeddings, strict=True):
                v = np.asarray(vector, dtype=np.float32)
                self._vectors[(key, text)] = v / max(float(np.linalg.norm(v)), 1e-12)
            while len(self._vectors) > _CACHE_LIMIT:
                self._vectors.popitem(last=False)
        return np.stack([self._vectors[(key, t)] for t in texts]) if texts else np.zeros((0, 1), np.float32)


_cache = _VectorCache()


def _says_something(statement: tuple[str, ...], whole: bool) -> bool:
    """Whether a statement can be quoted as an answer: a whole sentence (not a piece cut at a
    passage's edge or opening mid-phrase), not a rule line (``-----`` under a plain-text heading),
    not a one-word heading (``Fixes``, ``Changes``), which would score on its passage's heading
    alone and answer nothing, and not a lead-in to what it does not quote ("Equivalent to:")."""
    text = " ".join(statement)
    return whole and not text.endswith(":") and len(_content_words(_plain(text))) >= 2


# Questions that ask for a value (a size, a number, a time, a default): a sentence that states one
# answers them better than one that only talks about the same thing.
_ASKS_VALUE = re.compile(
    r"\b(how (much|many|long|big|large|old|far|fast|wide|deep)|what (size|port|version|year|"
    r"limit|number|percentage|is the default|default)|which (port|version|year)|maximum|minimum|"
    r"max|min|default|limit|largest|smallest|biggest)\b",
    re.IGNORECASE,
)
_STATES_VALUE = re.compile(r"\d|\bdefaults? (is|to)\b|\bdefault:", re.IGNORECASE)
_VALUE_BONUS = 0.08


async def extractive_answer(
    model: EmbeddingModel,
    question: str,
    passages: Sequence[Passage],
    *,
    max_sentences: int = 3,
    min_score: float = 0.35,
    focus: str | None = None,
) -> ExtractiveAnswer:
    """The sentences of ``passages`` that best answer ``question``, each cited.

    A sentence scores its similarity to the question plus a bonus for the content words they
    share, and a second bonus for those it shares with ``focus``: a follow-up searched with a
    borrowed topic passes its own question there, so the topic steers the similarity while what
    is new in the question picks the sentence ("And in winter?" quotes the winter row).
    ``found`` is False (and ``text`` empty) when no sentence reaches ``min_score``.
    """
    candidates = list(
        dict.fromkeys(
            (p.citation, p.heading, statement)
            for p in passages
            for statement, whole in _statements(p.text)
            if _says_something(statement, whole)
        )
    )
    if not candidates or not question.strip():
        return ExtractiveAnswer("")
    question_vector = (await _cache.vectors(model, [question], query=True))[0]
    # A statement is read sentence by sentence and, when it has several, as a whole: it scores its
    # best reading and is quoted whole.
    readings = [
        (n, _plain(text))
        for n, (_, _, statement) in enumerate(candidates)
        for text in (statement if len(statement) == 1 else (*statement, " ".join(statement)))
    ]
    headed = [f"{candidates[n][1]}: {text}" if candidates[n][1] else text for n, text in readings]
    similarity = (await _cache.vectors(model, headed)) @ question_vector
    asked = _content_words(question)
    focused = {stem(w) for w in _content_words(focus or "")}
    asks_value = bool(_ASKS_VALUE.search(focus or question))  # the user's own words, not a borrowed topic
    best_of: dict[int, float] = {}
    for (n, text), sim in zip(readings, similarity, strict=True):
        words = _content_words(text)
        overlap = len(asked & words) / max(len(asked), 1)
        if focused:
            overlap += len(focused & {stem(w) for w in words}) / len(focused)
        value = _VALUE_BONUS if asks_value and _STATES_VALUE.search(text) else 0.0
        best_of[n] = max(best_of.get(n, -1.0), float(sim) + 0.25 * overlap + value)
    scores = sorted(
        ((score, candidates[n][0], " ".join(candidates[n][2])) for n, score in best_of.items()),
        key=lambda item: item[0],
        reverse=True,
    )
    best = scores[0][0]
    if best < min_score:
        return ExtractiveAnswer("", confidence=max(best, 0.0))
    chosen: list[tuple[float, int, str]] = []
    per_passage: dict[int, int] = {}
    for score, citation, sentence in scores:
        if len(chosen) >= max_sentences or score < max(min_score, best - 0.25):
            break
        if per_passage.get(citation, 0) >= 2 or any(sentence == seen for _, _, seen in chosen):
            continue
        per_passage[citation] = per_passage.get(citation, 0) + 1
        chosen.append((score, citation, sentence))
    parts = []
    for _, citation, sentence in chosen:
        sentence = sentence.rstrip(",;: ")  # a list item's "...;" ends its sentence here
        if _LOWER_TERM.match(sentence):  # a glossary term or a column label leads: "Descriptor: Any..."
            sentence = sentence[0].upper() + sentence[1:]
        body = sentence if sentence[-1] in ".!?" else sentence + "."
        parts.append(f"{body[:-1]} [{citation}]{body[-1]}")
    citations = list(dict.fromkeys(c for _, c, _ in chosen))
    return ExtractiveAnswer(
        " ".join(parts), citations, confidence=round(min(1.0, max(0.0, best)), 3), found=True
    )


async def extractive_summary(model: EmbeddingModel, text: str, *, max_sentences: int = 5) -> str:
    """The ``max_sentences`` sentences closest to the text's centroid, in their original order."""
    sentences = [s for s in split_sentences(text) if len(s) > 20] or split_sentences(text)
    if len(sentences) <= max_sentences:
        return " ".join(sentences)
    vectors = await _cache.vectors(model, sentences)
    centroid = vectors.mean(axis=0)
    ranked = np.argsort(-(vectors @ centroid))[:max_sentences]
    return " ".join(sentences[i] for i in sorted(ranked.tolist()))
