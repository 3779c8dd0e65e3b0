"""Answers and summaries assembled from retrieved text, for when no language model is configured.

Sentences are scored by cosine similarity to the question with the knowledge base's own embedder,
plus a small bonus for shared content words; the best few become the answer, each followed by the
``[n]`` of the passage it came from. Nothing is generated: every sentence is a quotation.
"""

from __future__ import annotations

import re
import textwrap
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

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
_SENTENCE_END = re.compile(  # the closing marks after the stop stay with the sentence they close
    r"(?:(?<=[.!?])|(?<=[.!?][\"”')\]])|(?<=[.!?][\"”')\]]{2}))\s+(?=[\"“(\[`]{0,2}[A-Za-z0-9`])"
)
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
    "about into than then these those has have had not no yes any all each get set use used using "
    "what's that's it's there's here's i'm i've i'd you're don't doesn't isn't aren't can't won't".split()
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
# A line that is only code, in one or more spans: a definition's term (``shutil.copytree(src, dst)``,
# ``work_mem`` (``integer``)), as documentation generators write a definition list's term.
_TERM_LINE = re.compile(r"^(?:class |async )?`[^`]+`(?:[\s(),;]*`[^`]+`)*\)?$")
_CODE_SPAN = re.compile(r"`([^`]+)`")
# A section heading that is a definition's term: a signature, or a setting's name (with an
# underscore, so a plain "Overview (draft)" is not one) and its type.
_SECTION_SIGNATURE = re.compile(r"^(?:class |async |@)?[A-Za-z_][\w.]*\(.*\)$")
_SECTION_SETTING = re.compile(r"^([a-z][a-z0-9]*_[a-z0-9_]+) \(([a-z][a-z ]*)\)$")
_CALL = re.compile(r"\(.*\)$")  # a signature's parameters
_TERM_CHARS = 90  # a longer term leads a quotation with its signatures' parameters cut
_CODE_LINE_CHARS = 100  # a one-line code block this long or shorter is quoted with its lead-in
_CODE_BLOCK_LINES = 8  # a longer code block is quoted after its lead-in as a block when no longer
_CODE_BLOCK_CHARS = 400
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


def _blocks(text: str) -> list[tuple[list[str], bool]]:
    """``text``'s blocks, each its lines and whether it is code: prose blocks end at a blank line,
    a fenced code block at its closing fence (blank lines inside it do not end it)."""
    blocks: list[tuple[list[str], bool]] = []
    lines: list[str] = []
    in_code = False

    def flush(code: bool) -> None:
        nonlocal lines
        if lines:
            blocks.append((lines, code))
        lines = []

    for raw in text.splitlines():
        if _FENCE.match(raw):
            flush(in_code)
            in_code = not in_code
        elif in_code or raw.strip():
            lines.append(raw)
        else:
            flush(False)
    flush(in_code)  # a code block cut at the passage's end is still code
    return blocks


def _units(lines: Sequence[str]) -> list[_Unit]:
    """A prose block's lines joined into logical units: list items, table rows, headings, paragraphs.

    Wrapped lines (PDF text, hard-wrapped Markdown) continue the unit before them: a line opening
    in lower case always does; a short line without closing punctuation reads as a heading and
    stands alone.
    """
    units: list[_Unit] = []
    current: list[str] = []
    current_item = False
    previous_closed = True
    header: list[str] | None = None
    last_cells: list[str] | None = None

    def close() -> None:
        nonlocal current
        if current:
            units.append(_Unit(" ".join(current), item=current_item))
            current = []

    for raw in lines:
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
        opening = piece.lstrip("\"“(['‘")  # a quotation or an aside opens as its first word does
        starts = bool(opening) and (
            opening[0].isupper()
            or opening[0].isdigit()
            or opening[0] == "`"
            or bool(_TERM_START.match(piece))
        )
        ends = n < len(pieces) - 1 or unit.complete
        whole.append((piece, (starts or unit.row) and ends))
    return whole


@dataclass(frozen=True)
class _Statement:
    """A sentence with the ones after it that lean back on it, and what it is about.

    ``whole``: its first sentence starts and ends as a sentence does, so it may be quoted.
    ``term``: the definition it belongs to (an API signature, a setting's name) when its passage
    defines one, to lead the quotation: "Recursively copy an entire directory tree" answers "how
    do I copy a tree?" only with the ``shutil.copytree()`` it describes.
    """

    sentences: tuple[str, ...]
    whole: bool
    term: str | None = None
    code: str | None = None  # the short example its lead-in ("... like this:") introduces

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _section_term(heading: str | None) -> str | None:
    """The definition a passage's section is, from its heading path's last part (``title: a > b >
    c``), when that part is code: a signature (``shutil.copytree(src, dst)``) or a setting with
    its type (``work_mem (integer)``). A passage cut from the middle of a long definition does
    not repeat its term line; its section still names it."""
    if not heading or " > " not in heading:
        return None
    last = heading.rsplit(" > ", 1)[-1].strip()
    if _SECTION_SIGNATURE.match(last):
        return f"`{last}`"
    setting = _SECTION_SETTING.match(last)
    return f"`{setting[1]}` (`{setting[2]}`)" if setting else None


def _statements(text: str, term: str | None = None) -> list[_Statement]:
    """Sentences grouped with the ones right after them that open with a pronoun, each group with
    whether it may be quoted (its first sentence is whole) and the definition it belongs to
    (``term`` until a term line of the text names another).

    "Normal change: any other change. It needs approval from two engineers." is one statement: its
    second sentence says nothing on its own, and its first does not say who approves. A lead-in
    ("... is done by running:") followed by a one-line code block quotes that line with it, and a
    short example (``_CODE_BLOCK_LINES``, ``_CODE_BLOCK_CHARS``) after it as a block; other code is
    left out: an answer quotes prose.
    """
    statements: list[_Statement] = []
    for lines, code in _blocks(text):
        if code:
            shown = [line.strip() for line in lines if line.strip()]
            last = statements[-1] if statements else None
            if not (last and last.text.endswith(":") and last.code is None):
                continue
            if len(shown) == 1 and len(shown[0]) <= _CODE_LINE_CHARS:
                line = shown[0].replace("`", "")
                statements[-1] = replace(
                    last, sentences=(*last.sentences[:-1], f"{last.sentences[-1]} `{line}`")
                )
            elif len(lines) <= _CODE_BLOCK_LINES and sum(map(len, lines)) <= _CODE_BLOCK_CHARS:
                statements[-1] = replace(last, code=textwrap.dedent("\n".join(lines)).strip("\n"))
            continue
        for unit in _units(lines):
            if _TERM_LINE.match(unit.text):  # a definition's term: what the sentences after it describe
                term = unit.text
                statements.append(_Statement((unit.text,), True, term))
                continue
            for n, (piece, whole) in enumerate(_sentences(unit)):
                last = statements[-1] if statements else None
                if (
                    n
                    and last
                    and _LEANS_BACK.match(piece)
                    and len(last.sentences) <= _MAX_FOLLOWERS
                    and whole
                ):
                    statements[-1] = replace(last, sentences=(*last.sentences, piece))
                    continue
                if last and last.text == last.term:  # the term stands alone only where nothing defines it
                    statements.pop()
                statements.append(_Statement((piece,), whole, term))
    return statements


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (inline code marks dropped); list items, table rows and headings count
    as sentences of their own."""
    return [_plain(sentence) for statement in _statements(text) for sentence in statement.sentences]


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


def _says_something(statement: _Statement) -> bool:
    """Whether a statement can be quoted as an answer: a whole sentence (not a piece cut at a
    passage's edge or opening mid-phrase), not a rule line (``-----`` under a plain-text heading),
    not a one-word heading (``Fixes``, ``Changes``), which would score on its passage's heading
    alone and answer nothing, and not a lead-in to what it does not quote ("Equivalent to:")."""
    text = statement.text
    lead_in = text.endswith(":") and statement.code is None
    return statement.whole and not lead_in and len(_content_words(_plain(text))) >= 2


def _callable(span: str) -> str:
    """A code span without its parameters: ``shutil.copytree`` of ``shutil.copytree(src, dst)``."""
    return _CALL.sub("", span)


def _defined_name(span: str) -> str:
    """The name a code span defines: ``copytree`` of ``class shutil.copytree(src)``; "" for blank."""
    words = _callable(span).split(".")[-1].split()
    return words[-1] if words else ""


def _term_names(term: str) -> set[str]:
    """The names a term defines: ``copytree`` of ``shutil.copytree(src, dst)``, ``IGNORECASE``
    of ``re.I; re.IGNORECASE`` (names of three characters or more: a sentence naming one is
    already about its term)."""
    return {name for name in map(_defined_name, _CODE_SPAN.findall(term)) if len(name) >= 3}


def _parameters(signature: str) -> list[str]:
    """The parameters between a signature's outer parentheses, split at its top-level commas."""
    inner = signature[signature.index("(") + 1 : signature.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    return [part for part in (*parts, inner[start:].strip()) if part]


def _asked_about(parameter: str, name: str, asked: set[str]) -> bool:
    """A parameter the question speaks of: a word of its name begins one of the question's words
    or is begun by one (``capture_output`` for "capture", ``indent`` for "indentation"); words the
    callable's own ``name`` holds do not count (``copy_function`` of ``copytree``)."""
    words = [
        w
        for w in re.split(r"[^a-z0-9]+", parameter.split("=")[0].lower())
        if len(w) >= 4 and not (w in name or name.startswith(w) or w.startswith(name))
    ]
    return any(a.startswith(w) or w.startswith(a) for w in words for a in asked if len(a) >= 4)


def _shown_term(term: str, asked: set[str]) -> str:
    """The term as it leads a quotation: whole when short, else each signature with only the
    parameters the question speaks of (``subprocess.run(…, capture_output=False, …)``), each
    signature once."""
    if len(term) <= _TERM_CHARS:
        return term
    shown: dict[str, None] = {}
    for span in _CODE_SPAN.findall(term):
        if not _CALL.search(span):
            shown[span] = None
            continue
        kept: list[str] = []
        name = _defined_name(span).lower()
        for parameter in _parameters(span):
            if _asked_about(parameter, name, asked):
                kept.append(parameter)
            elif kept[-1:] != ["…"]:
                kept.append("…")
        shown[f"{_callable(span)}({', '.join(kept)})"] = None
    return "; ".join(f"`{span}`" for span in shown)


def _quoted(statement: _Statement, terms_said: set[str], asked: set[str]) -> str:
    """The statement's text as quoted: led by its term the first time the answer uses that term,
    unless it already names it (or is the term itself)."""
    text = statement.text
    term = statement.term
    if term is None or term in terms_said:
        return text
    terms_said.add(term)
    names = _term_names(term)
    if text == term or any(re.search(rf"(?<![\w.]){re.escape(name)}\b", text) for name in names):
        return text
    return f"{_shown_term(term, asked)}: {text}"


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
_PER_PASSAGE = 3  # sentences one passage may give: the answer is often all in the best one
_ECHO_PENALTY = 0.15
# "Changed in version 3.8:" dates a sentence; its number is not a value the sentence states
_VERSION_NOTE = re.compile(
    r"\b(?:new|changed|deprecated|removed|added)(?: in| since)? (?:version )?[\d.]+\b", re.IGNORECASE
)


async def _ranked(
    model: EmbeddingModel, question: str, passages: Sequence[Passage], focus: str | None
) -> list[tuple[float, int, _Statement]]:
    """Every quotable statement of ``passages`` with its score and citation, best first."""
    candidates = list(
        dict.fromkeys(
            (p.citation, p.heading, statement)
            for p in passages
            for statement in _statements(p.text, _section_term(p.heading))
            if _says_something(statement)
        )
    )
    if not candidates or not question.strip():
        return []
    question_vector = (await _cache.vectors(model, [question], query=True))[0]
    # A statement is read sentence by sentence and, when it has several, as a whole: it scores its
    # best reading and is quoted whole.
    readings = [
        (n, _plain(text))
        for n, (_, _, statement) in enumerate(candidates)
        for text in (
            statement.sentences if len(statement.sentences) == 1 else (*statement.sentences, statement.text)
        )
    ]
    headed = [f"{candidates[n][1]}: {text}" if candidates[n][1] else text for n, text in readings]
    similarity = (await _cache.vectors(model, headed)) @ question_vector
    asked = _content_words(question)
    focused = {stem(w) for w in _content_words(focus or "")}
    asks_value = bool(_ASKS_VALUE.search(focus or question))  # the user's own words, not a borrowed topic
    asked_stems = {stem(w) for w in asked}
    best_of: dict[int, float] = {}
    for (n, text), sim in zip(readings, similarity, strict=True):
        own = _content_words(text)
        statement = candidates[n][2]
        words = own | _content_words(_plain(statement.term or "")) | _content_words(statement.code or "")
        overlap = len(asked & words) / max(len(asked), 1)
        if focused:
            overlap += len(focused & {stem(w) for w in words}) / len(focused)
        value = _VALUE_BONUS if asks_value and _STATES_VALUE.search(_VERSION_NOTE.sub("", text)) else 0.0
        said = {stem(w) for w in own}
        new_words = len(said - asked_stems) / max(len(said), 1)
        echo = _ECHO_PENALTY * max(0.0, 1.0 - 2.0 * new_words)  # the question said back adds nothing
        best_of[n] = max(best_of.get(n, -1.0), float(sim) + 0.25 * overlap + value - echo)
    return sorted(
        ((score, candidates[n][0], candidates[n][2]) for n, score in best_of.items()),
        key=lambda item: item[0],
        reverse=True,
    )


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
    is new in the question picks the sentence ("And in winter?" quotes the winter row). The first
    sentence quoted of a definition is led by its term (``shutil.copytree(…)``: ...).
    ``found`` is False (and ``text`` empty) when no sentence reaches ``min_score``.
    """
    scores = await _ranked(model, question, passages, focus)
    if not scores:
        return ExtractiveAnswer("")
    best = scores[0][0]
    if best < min_score:
        return ExtractiveAnswer("", confidence=max(best, 0.0))
    chosen: list[tuple[float, int, _Statement]] = []
    per_passage: dict[int, int] = {}
    for score, citation, statement in scores:
        if len(chosen) >= max_sentences or score < max(min_score, best - 0.25):
            break
        if per_passage.get(citation, 0) >= _PER_PASSAGE or any(
            statement.text == seen.text for *_, seen in chosen
        ):
            continue
        per_passage[citation] = per_passage.get(citation, 0) + 1
        chosen.append((score, citation, statement))
    answer = ""
    terms_said: set[str] = set()
    asked = _content_words(focus or question)
    for _, citation, statement in chosen:
        sentence = _quoted(statement, terms_said, asked).rstrip(",;: ")  # a list item's "...;" ends here
        if _LOWER_TERM.match(sentence):  # a glossary term or a column label leads: "Descriptor: Any..."
            sentence = sentence[0].upper() + sentence[1:]
        if answer and not answer.endswith("\n"):
            answer += " "
        if statement.code is not None:  # its lead-in, then the example as a block of its own
            answer += f"{sentence} [{citation}]:\n\n```\n{statement.code}\n```\n\n"
            continue
        body = sentence if sentence[-1] in ".!?" else sentence + "."
        answer += f"{body[:-1]} [{citation}]{body[-1]}"
    citations = list(dict.fromkeys(c for _, c, _ in chosen))
    return ExtractiveAnswer(
        answer.strip(), citations, confidence=round(min(1.0, max(0.0, best)), 3), found=True
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
