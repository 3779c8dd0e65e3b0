"""What a user tool may declare about itself: tags, approval, timeout, retries, availability.

``@tool_options(...)`` attaches a ``ToolOptions`` to a plain function, so a module can export
bare functions and still say how they must be run; ``ToolRegistry.add_tool`` takes the same
options as keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = ["ApprovalInfo", "Instructions", "RetryPolicy", "ToolOptions", "Unavailable", "tool_options"]

F = TypeVar("F", bound=Callable[..., Any])

_ATTRIBUTE = "__ragstream_tool_options__"


@dataclass(frozen=True)
class ApprovalInfo:
    """Why a tool may need a person's approval, carried into the AG-UI interrupt.

    ``required`` makes the tool always ask; otherwise it asks when the thread's approval policy
    names it.
    """

    reason: str
    risk: Literal["low", "medium", "high"] = "medium"
    required: bool = False

    def metadata(self) -> dict[str, Any]:
        return {"reason": self.reason, "risk": self.risk}


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a tool on transient errors, waiting ``backoff * 2**attempt`` seconds in between."""

    attempts: int = 3
    backoff: float = 0.2
    on: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


Unavailable = Callable[[], str | None]
"""Returns why a tool cannot run on this server right now, or ``None`` when it can."""

Instructions = str | Callable[..., Any]
"""Instructions for the model: text, or a function (sync or async, with or without the run context)
returning the text (or ``None`` for none) before each model request, as pydantic-ai's own."""


@dataclass(frozen=True)
class ToolOptions:
    """How the tool system runs one tool."""

    tags: frozenset[str] = frozenset()
    approval: ApprovalInfo | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    sequential: bool = False
    instructions: Instructions | None = field(default=None, compare=False)
    unavailable: Unavailable | None = field(default=None, compare=False)


def tool_options(
    *,
    tags: tuple[str, ...] | frozenset[str] = (),
    approval: ApprovalInfo | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    sequential: bool = False,
    instructions: Instructions | None = None,
    unavailable: Unavailable | None = None,
) -> Callable[[F], F]:
    """Declare how a plain function tool must be run (read by ``ToolRegistry`` and the loader)."""

    def attach(func: F) -> F:
        setattr(
            func,
            _ATTRIBUTE,
            ToolOptions(frozenset(tags), approval, timeout, retry, sequential, instructions, unavailable),
        )
        return func

    return attach


def options_of(func: Any) -> ToolOptions | None:
    """The options ``@tool_options`` attached to ``func``, if any."""
    return getattr(func, _ATTRIBUTE, None)
