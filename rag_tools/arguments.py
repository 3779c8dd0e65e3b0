"""Checks of what library callers pass where the API takes a collection.

A ``str`` is an iterable of strings, so ``ingest_paths("notes.md")`` used to walk ``"n"``, ``"o"``,
..., ``"."`` (the whole working folder) and ``build_multi_document_filter("handbook")`` to match
every title holding an ``a``. Every public parameter typed as a collection of names or paths goes
through ``as_list``, so one string is a ``TypeError`` at the call, saying what to write instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

__all__ = ["NAME_CHARS", "as_list"]

T = TypeVar("T")

NAME_CHARS = 500
"""The longest document name a filter takes (part of a title or uri): one bound for the session's
document filter, a model's ``document_name`` and ``DocumentFilter``, so a name one of them accepts
never fails in another."""


def as_list(values: Iterable[T], what: str) -> list[T]:
    """``values`` as a list; ``TypeError`` for one string, bytes or path given instead of a list."""
    if isinstance(values, str | bytes | os.PathLike):
        raise TypeError(f"{what} must be a list, not one {type(values).__name__}: pass [{values!r}]")
    return list(values)
