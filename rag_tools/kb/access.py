"""Who may read a document: its ``groups`` (empty: everyone) against a reader's groups.

This is the one document-read rule. A document is readable by everyone (no groups) or by the
members of any of its groups; ``Reader`` is a caller's side of it (its groups, or ``ALL`` for a
process that reads everything: a CLI, a library user, the single local principal). The rule is
applied inside every knowledge-base query (``Reader.to_sql``: a LanceDB predicate, a prefilter
before top-k), and again against the documents table, the publication, after a search
(``Reader.may_read``), so a change of groups takes effect at the ``documents`` commit.

In storage a public document's ``groups`` is ``["*"]`` (``EVERYONE``) rather than empty, so that
the read predicate is a single ``array_has_any`` that the LABEL_LIST index answers; an
``array_length(groups) = 0 OR ...`` predicate cannot use it and was 3x slower (bench/RESULTS.md).
Clients never see the marker: ``shown_groups`` turns it back into ``[]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .filters import sql_literal

__all__ = [
    "ALL",
    "EVERYONE",
    "MAX_GROUPS",
    "InvalidGroups",
    "Reader",
    "check_groups",
    "shown_groups",
    "stored_groups",
]

#: The stored group of a document everyone may read (never a valid group name).
EVERYONE = "*"
#: How many groups one document may name.
MAX_GROUPS = 64
_GROUP = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@/\-]{0,127}")


class InvalidGroups(ValueError):
    """A group list that cannot be stored: the message names the first bad entry."""


def check_groups(groups: Iterable[str]) -> tuple[str, ...]:
    """``groups`` deduplicated and sorted, each a valid group name; ``InvalidGroups`` otherwise.

    A group name is 1-128 characters of letters, digits and ``_ . : @ / -``, not starting with a
    punctuation mark (so no spaces, commas or the ``*`` marker). At most ``MAX_GROUPS``.
    """
    if isinstance(groups, str):
        raise InvalidGroups("groups must be a list of names, not one string")
    names = list(groups)
    for name in names:
        if not isinstance(name, str) or not _GROUP.fullmatch(name):
            raise InvalidGroups(
                f"invalid group name {name!r}: use 1-128 letters, digits and _ . : @ / -, "
                "starting with a letter, digit or _"
            )
    unique = tuple(sorted(set(names)))
    if len(unique) > MAX_GROUPS:
        raise InvalidGroups(f"a document may name at most {MAX_GROUPS} groups, got {len(unique)}")
    return unique


def stored_groups(groups: Sequence[str]) -> list[str]:
    """The ``groups`` column value for a document readable by ``groups`` (``[]``: everyone)."""
    return list(groups) if groups else [EVERYONE]


def shown_groups(stored: Sequence[str] | None) -> list[str]:
    """The groups clients see for a stored value (``[]``: everyone)."""
    if not stored or EVERYONE in stored:
        return []
    return list(stored)


@dataclass(frozen=True)
class Reader:
    """Who reads: the groups of a caller, or ``groups=None`` for a reader of every document."""

    groups: frozenset[str] | None = None

    @classmethod
    def member_of(cls, groups: Iterable[str]) -> Reader:
        """A reader of public documents and of those of ``groups``."""
        return cls(frozenset(groups))

    @property
    def reads_all(self) -> bool:
        return self.groups is None

    def may_read(self, stored: Sequence[str] | None) -> bool:
        """The rule itself, on a stored ``groups`` value (``None``: a row without the column)."""
        if self.groups is None:
            return True
        if stored is None:
            return False
        return EVERYONE in stored or not self.groups.isdisjoint(stored)

    def to_sql(self) -> str | None:
        """The LanceDB predicate for the rows this reader may read (``None``: every row)."""
        if self.groups is None:
            return None
        names = ", ".join(sql_literal(g) for g in (EVERYONE, *sorted(self.groups)))
        return f"array_has_any(groups, [{names}])"


ALL = Reader()
"""The reader of every document (the default of the library's own calls)."""
