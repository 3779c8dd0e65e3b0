"""Structured document filters and their translation into LanceDB predicates.

Nobody outside this module writes SQL from input: the model names documents, the browser edits a
list of names, developers pass ``DocumentFilter`` values. Every user-supplied string reaches the
predicate as a single-quoted literal with its quotes doubled, and matching uses
``strpos``/``starts_with`` rather than ``LIKE``, so ``%``, ``_``, ``--`` or ``' OR 1=1`` match
literally.

The one exception is the developer's own ``base_filter``, which may be a SQL WHERE string (the
seed toolkit's form), written in code, never taken from a request: ``SqlFilter`` keeps it as one
parenthesised term, checked to stay one term (balanced parentheses outside literals, no ``;``,
no comments), so combining it with the structured filters (``AND``) cannot change their meaning.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from ..arguments import NAME_CHARS

__all__ = [
    "AllOf",
    "DocumentFilter",
    "Filter",
    "FilterLike",
    "SqlFilter",
    "all_of",
    "as_filter",
    "combine_filters",
    "in_list",
    "sql_literal",
]

_Term = Annotated[str, StringConstraints(min_length=1, max_length=NAME_CHARS)]


def sql_literal(value: str) -> str:
    """``value`` as a SQL string literal that always parses and always means exactly ``value``."""
    return "'" + value.replace("'", "''") + "'"


def in_list(column: str, values: Iterable[str]) -> str:
    """``column IN (...)`` over ``values`` as literals (callers batch long lists)."""
    return f"{column} IN ({', '.join(sql_literal(v) for v in values)})"


def all_of(*predicates: str | None) -> str | None:
    """The predicates that are given, each parenthesised, joined with ``AND``; ``None`` when none is."""
    given = [p for p in predicates if p]
    if len(given) < 2:
        return given[0] if given else None
    return " AND ".join(f"({p})" for p in given)


def _name_predicate(name: str) -> str:
    """Case-insensitive containment in title or uri, also ignoring spaces (``"user guide"`` ~ ``userguide``)."""
    needle = sql_literal(name.lower())
    squashed = sql_literal(name.lower().replace(" ", ""))
    return (
        f"(strpos(lower(title), {needle}) > 0 OR strpos(lower(uri), {needle}) > 0"
        f" OR strpos(replace(lower(title), ' ', ''), {squashed}) > 0"
        f" OR strpos(replace(lower(uri), ' ', ''), {squashed}) > 0)"
    )


class DocumentFilter(BaseModel):
    """Restrict a search or listing to documents matching any of the given terms.

    ``names`` match titles and uris case-insensitively (spaces ignored), ``document_ids`` match
    exactly, ``uri_prefixes`` match the start of the uri. An empty filter matches everything.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    names: tuple[_Term, ...] = Field(default=(), max_length=100)
    document_ids: tuple[_Term, ...] = Field(default=(), max_length=1000)
    uri_prefixes: tuple[_Term, ...] = Field(default=(), max_length=100)

    @field_validator("names")
    @classmethod
    def _names_not_blank(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        # A name of spaces only matches as "" once spaces are ignored: every document.
        if any(not name.strip() for name in names):
            raise ValueError("a document name must not be blank")
        return names

    @property
    def is_empty(self) -> bool:
        return not (self.names or self.document_ids or self.uri_prefixes)

    def to_sql(self) -> str | None:
        """The LanceDB predicate, or ``None`` when the filter matches everything."""
        terms = [_name_predicate(n) for n in self.names]
        if self.document_ids:
            terms.append(in_list("document_id", self.document_ids))
        terms.extend(f"starts_with(uri, {sql_literal(p)})" for p in self.uri_prefixes)
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"


def _check_where(where: str) -> str:
    """``where`` stripped, when it is one self-contained SQL term; else ``ValueError`` saying why."""
    text = where.strip()
    if not text:
        raise ValueError("a SQL filter must not be empty")
    depth, quote, i = 0, "", 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == quote:
                if text[i + 1 : i + 2] == quote:
                    i += 1  # a doubled quote inside a literal
                else:
                    quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"a SQL filter closes a parenthesis it did not open: {where!r}")
        elif char == ";" or text[i : i + 2] in ("--", "/*"):
            raise ValueError(f"a SQL filter must be one expression, without ';' or comments: {where!r}")
        i += 1
    if quote or depth:
        raise ValueError(f"a SQL filter leaves a literal or a parenthesis open: {where!r}")
    return text


class SqlFilter(BaseModel):
    """A trusted SQL WHERE expression over the ``document_id``, ``title`` and ``uri`` columns.

    For developers' ``base_filter`` only (code, not requests). It is kept as one parenthesised term.
    """

    model_config = ConfigDict(frozen=True)

    where: str

    def __init__(self, where: str | None = None, /, **data: object) -> None:
        if where is not None:
            data["where"] = where
        super().__init__(**data)

    _checked = field_validator("where")(classmethod(lambda cls, value: _check_where(value)))

    @property
    def is_empty(self) -> bool:
        return False

    def to_sql(self) -> str:
        return f"({self.where})"


class AllOf(BaseModel):
    """A conjunction of filters: a document must match every one of them."""

    model_config = ConfigDict(frozen=True)

    filters: tuple[DocumentFilter | SqlFilter, ...]

    @property
    def is_empty(self) -> bool:
        return all(f.is_empty for f in self.filters)

    def to_sql(self) -> str | None:
        parts = [p for p in (f.to_sql() for f in self.filters) if p]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"


Filter = DocumentFilter | SqlFilter | AllOf
FilterLike = Filter | str
"""A filter, or a trusted SQL WHERE string (a ``base_filter`` written in code)."""


def as_filter(value: FilterLike | None) -> Filter | None:
    """``value`` as a ``Filter``: a string becomes a checked ``SqlFilter``; anything else that is
    not a filter is a ``TypeError`` here rather than an ``AttributeError`` deep in a query."""
    if isinstance(value, str):
        return SqlFilter(value)
    if value is None or isinstance(value, DocumentFilter | SqlFilter | AllOf):
        return value
    raise TypeError(
        "a filter is a DocumentFilter, a SqlFilter, an AllOf or a SQL WHERE string, "
        f"not {type(value).__name__}"
    )


def _parts(value: FilterLike | None) -> Iterable[DocumentFilter | SqlFilter]:
    value = as_filter(value)
    if value is None:
        return ()
    return value.filters if isinstance(value, AllOf) else (value,)


def combine_filters(a: FilterLike | None, b: FilterLike | None) -> Filter | None:
    """Both restrictions at once (``AND``, each part parenthesised); ``None`` or empty filters drop out.

    Either may be a trusted SQL WHERE string (see ``SqlFilter``).
    """
    parts = tuple(f for f in (*_parts(a), *_parts(b)) if not f.is_empty)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else AllOf(filters=parts)
