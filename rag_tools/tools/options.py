"""What a user tool may declare about itself: tags, approval, timeout, retries, availability.

``@tool_options(...)`` attaches a ``ToolOptions`` to a plain function, so a module can export
bare functions and still say how they must be run; ``ToolRegistry.add_tool`` takes the same
options as keywords. ``ToolOptions`` is the one place the options are declared.
"""

from __future__ import annotations

import dataclasses
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

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(
                f"RetryPolicy.attempts counts the first call too: at least 1, not {self.attempts!r}"
            )
        if not isinstance(self.backoff, int | float) or self.backoff < 0:
            raise ValueError(f"RetryPolicy.backoff is seconds, at least 0, not {self.backoff!r}")


Unavailable = Callable[[], str | None]
"""Returns why a tool cannot run on this server right now, or ``None`` when it can."""

Instructions = str | Callable[..., Any]
"""Instructions for the model: text, or a function (sync or async, with or without the run context)
returning the text (or ``None`` for none) before each model request, as pydantic-ai's own."""


@dataclass(frozen=True)
class ToolOptions:
    """How the tool system runs one tool: the one declaration of the tool options.

    ``@tool_options(...)``, ``ToolRegistry.add_tool(..., **options)`` and ``@registry.tool(...)``
    all take exactly these fields as keywords (an unknown keyword is a ``TypeError``).

    - ``tags``: labels global hooks may select tools by;
    - ``approval``: why the tool may need a person's approval (see ``ApprovalInfo``);
    - ``timeout``: seconds a call may take (pydantic-ai's per-tool timeout);
    - ``retry``: retry transient errors (see ``RetryPolicy``);
    - ``sequential``: no other tool runs beside this one within a run step (pydantic-ai's);
    - ``lock``: every call of this tool, across all runs of the process (and across workers when
      the server has Redis), runs alone; hooks run outside the lock, and a call that has to wait
      reports "waiting for <tool>" as progress;
    - ``instructions``: added to the agent's instructions while the tool is offered (text, or a
      function of the run context, see ``Instructions``);
    - ``unavailable``: says why the tool cannot run on this server right now (then it is left out).
    """

    tags: frozenset[str] = frozenset()
    approval: ApprovalInfo | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    sequential: bool = False
    lock: bool = False
    instructions: Instructions | None = field(default=None, compare=False)
    unavailable: Unavailable | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", frozenset((self.tags,) if isinstance(self.tags, str) else self.tags))
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ValueError(f"timeout is seconds, more than 0, not {timeout!r}")
        for name in ("sequential", "lock"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} is True or False, not {getattr(self, name)!r}")
        for name, kind in (("retry", RetryPolicy), ("approval", ApprovalInfo)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")

    def updated(self, **given: Any) -> ToolOptions:
        """These options with ``given`` ones winning (tags are joined); unknown names raise ``TypeError``."""
        if "tags" in given:
            given["tags"] = self.tags | ToolOptions(tags=given["tags"]).tags
        return dataclasses.replace(self, **given)


def tool_options(**options: Any) -> Callable[[F], F]:
    """Declare how a plain function tool must be run (fields: see ``ToolOptions``)."""
    declared = ToolOptions(**options)

    def attach(func: F) -> F:
        setattr(func, _ATTRIBUTE, declared)
        return func

    return attach


def options_of(func: Any) -> ToolOptions | None:
    """The options ``@tool_options`` attached to ``func``, if any."""
    return getattr(func, _ATTRIBUTE, None)
