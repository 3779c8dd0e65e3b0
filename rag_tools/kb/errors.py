"""The knowledge base's error types, and the decorator that turns storage failures into one of them."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = [
    "AmbiguousDocumentError",
    "DocumentChanged",
    "EmbedderMismatchError",
    "KnowledgeBaseDamaged",
    "KnowledgeBaseError",
    "KnowledgeBaseFormatError",
    "KnowledgeBaseUnavailable",
    "is_commit_conflict",
    "storage_errors",
    "unavailable",
]


class KnowledgeBaseError(RuntimeError):
    """The knowledge base cannot do what was asked (missing, unreadable, misconfigured)."""


class AmbiguousDocumentError(KnowledgeBaseError):
    """A display uri names several documents where one is needed; the message lists their ids."""


class DocumentChanged(KnowledgeBaseError):
    """A change made on condition that the document is still as the caller read it (its version and
    groups) found it changed meanwhile; nothing was changed."""


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


class KnowledgeBaseDamaged(KnowledgeBaseUnavailable):
    """A file of the knowledge base is there but cannot be read as what it is (truncated, overwritten):
    waiting will not bring it back, it must be rebuilt (docs/knowledge-base.md, "Rebuilding a damaged knowledge
    base"). A subclass of ``KnowledgeBaseUnavailable``: every caller that handles an outage handles it.
    ``reason`` says what is wrong without naming any path (for clients, such as ``/ready``'s)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


#: What LanceDB says of a file that is there but is not what it should be (a truncated file reads past
#: its end: the footer, which every Lance file ends with, is gone).
_DAMAGED = re.compile(
    r"failed to fill whole buffer|unexpected end of file|not a lance file|invalid (?:magic|footer)|corrupt",
    re.IGNORECASE,
)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.\-]+){2,}")
_RUST_LOCATION = re.compile(r",? /\S+\.rs:\d+:\d+")
_UNREACHABLE = re.compile(r"error sending request|tcp connect error|dns error|timed out", re.IGNORECASE)
_ENDPOINT = re.compile(r"https?://[^/\s?\"]+")


def storage_reason(error: BaseException) -> str:
    """One readable line from a LanceDB / object-store error (they can be pages of Rust debug output)."""
    text = str(error)
    endpoint = _ENDPOINT.search(text)
    at = f" ({endpoint.group(0)})" if endpoint else ""
    if "BadScheme" in text:
        return f'the object-store endpoint is plain http{at}: set AWS_ALLOW_HTTP=true (or "allow_http")'
    if code := re.search(r"<Code>(\w+)</Code>", text):
        return f"the object store answered {code.group(1)}{at}"
    if _UNREACHABLE.search(text):
        messages = re.findall(r'message: \\?"([^"\\]+)', text)
        return f"cannot reach the object store{at}" + (f": {messages[-1]}" if messages else "")
    text = _RUST_LOCATION.sub("", text).removeprefix("lance error: ").strip()
    return text if len(text) <= 400 else text[:400] + "…"


def is_commit_conflict(error: BaseException) -> bool:
    """LanceDB refused a commit because another writer (another process, another host) committed first."""
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "commit conflict" in text or "preempted by concurrent" in text
    )


def unavailable(uri: str, error: BaseException) -> KnowledgeBaseUnavailable:
    """The error for a knowledge base whose storage failed: names the location and the reason, and
    tells a damaged file (``KnowledgeBaseDamaged``) from an outage."""
    if _DAMAGED.search(str(error)):
        reason = f"a data file cannot be read: {storage_reason(error)}"
        return KnowledgeBaseDamaged(
            f'the knowledge base at {uri} is damaged ({reason}); rebuild it: docs/knowledge-base.md, "Rebuilding a damaged '
            'knowledge base"',
            _PATH.sub("…", reason),
        )
    return KnowledgeBaseUnavailable(f"the knowledge base at {uri} is unavailable: {storage_reason(error)}")


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
            raise unavailable(self.uri, error) from error

    return wrapper
