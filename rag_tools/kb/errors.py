"""The knowledge base's error types, and the decorator that turns storage failures into one of them."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = [
    "EmbedderMismatchError",
    "KnowledgeBaseError",
    "KnowledgeBaseFormatError",
    "KnowledgeBaseUnavailable",
    "storage_errors",
]


class KnowledgeBaseError(RuntimeError):
    """The knowledge base cannot do what was asked (missing, unreadable, misconfigured)."""


class EmbedderMismatchError(KnowledgeBaseError):
    """The knowledge base was built with another embedder; its vectors are not comparable."""


class KnowledgeBaseFormatError(KnowledgeBaseError):
    """The knowledge base was written in a storage format this version cannot read."""


class KnowledgeBaseUnavailable(KnowledgeBaseError):
    """The knowledge base's files could not be read or written (moved, deleted, unreadable, full).

    LanceDB reports such failures as ``OSError`` or ``RuntimeError("lance error: ...")``; every public
    method of ``KnowledgeBase`` turns them into this one type so that callers can tell "the knowledge
    base is unavailable" from a bug.
    """


class _HasUri(Protocol):
    uri: str


_S = TypeVar("_S", bound=_HasUri)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def storage_errors(
    method: Callable[Concatenate[_S, _P], Awaitable[_T]],
) -> Callable[Concatenate[_S, _P], Awaitable[_T]]:
    """Re-raise ``OSError`` / ``RuntimeError`` from storage as ``KnowledgeBaseUnavailable``."""

    @functools.wraps(method)
    async def wrapper(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(self, *args, **kwargs)
        except KnowledgeBaseError:
            raise
        except (OSError, RuntimeError) as error:
            raise KnowledgeBaseUnavailable(
                f"the knowledge base at {self.uri} is unavailable: {error}"
            ) from error

    return wrapper
