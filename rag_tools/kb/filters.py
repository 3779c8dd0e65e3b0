"""Structured document filters and their translation into LanceDB predicates.

Nobody outside this module writes SQL: the model names documents, the browser edits a list of
names, developers pass ``DocumentFilter`` values. Every user-supplied string reaches the predicate
as a single-quoted literal with its quotes doubled, and matching uses ``strpos``/``starts_with``
rather than ``LIKE``, so ``%``, ``_``, ``--`` or ``' OR 1=1`` match literally.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["AllOf", "DocumentFilter", "Filter", "combine_filters", "sql_literal"]

_Term = Annotated[str, StringConstraints(min_length=1, max_length=500)]


def sql_literal(value: str) -> str:
    """``value`` as a SQL string literal that always parses and always means exactly ``value``."""
    return "'" + value.replace("'", "''") + "'"


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

    @property
    def is_empty(self) -> bool:
        return not (self.names or self.document_ids or self.uri_prefixes)

    def to_sql(self) -> str | None:
        """The LanceDB predicate, or ``None`` when the filter matches everything."""
        terms = [_name_predicate(n) for n in self.names]
        if self.document_ids:
            terms.append(f"document_id IN ({', '.join(sql_literal(i) for i in self.document_ids)})")
        terms.extend(f"starts_with(uri, {sql_literal(p)})" for p in self.uri_prefixes)
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"


class AllOf(BaseModel):
    """A conjunction of filters: a document must match every one of them."""

    model_config = ConfigDict(frozen=True)

    filters: tuple[DocumentFilter, ...]

    @property
    def is_empty(self) -> bool:
        return all(f.is_empty for f in self.filters)

    def to_sql(self) -> str | None:
        parts = [p for p in (f.to_sql() for f in self.filters) if p]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"


Filter = DocumentFilter | AllOf


def _parts(value: Filter | None) -> Iterable[DocumentFilter]:
    if value is None:
        return ()
    return value.filters if isinstance(value, AllOf) else (value,)


def combine_filters(a: Filter | None, b: Filter | None) -> Filter | None:
    """Both restrictions at once; ``None`` or empty filters drop out."""
    parts = tuple(f for f in (*_parts(a), *_parts(b)) if not f.is_empty)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else AllOf(filters=parts)
