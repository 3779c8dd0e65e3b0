"""Every place ragstream reaches into pydantic-ai internals, in one module, each with its way out.

``tests/test_upstream.py`` imports and probes all of them, so an upgrade that moves or renames
one fails there, loudly, instead of somewhere in a run.

- ``approval_to_interrupt`` (``pydantic_ai.ui.ag_ui._interrupt``): the AG-UI ``Interrupt`` that
  RUN_FINISHED carries for a pending approval, rebuilt byte for byte when a reloaded page asks for
  its thread. Goes when pydantic-ai exports it (or a "pending interrupts of a conversation" API).
- ``interrupt_id_to_tool_call_id`` (same module): the tool call an interrupt's resume answers, so
  the answer to a tool's ``ask`` reaches that call's metadata. Goes when pydantic-ai exports it,
  or when its AG-UI adapter passes resume payload fields on as ``DeferredToolResults.metadata``.
- ``get_ui_message_id`` / ``set_ui_message_id`` (``pydantic_ai.ui._utils``): the id a client gave
  a message, kept in its metadata, so a thread's history keeps the client's ids; ragstream also
  stamps each stored model response with the id its stream used, so ``dump_messages`` gives a
  reloaded client the ids it already holds. Go when pydantic-ai's AG-UI stream and store agree on
  message ids themselves (the stream minting the id the stored message keeps).
- ``install_fast_stream_locks`` (opt-in; ``ragstream serve`` turns it on): pydantic-ai serialises
  pulls from a model stream with three ``anyio.Lock``s (``AgentStream._anext_lock``,
  ``AgentStream._model_pull_lock``, ``PeekableAsyncStream._source_lock``) created with anyio's
  default ``fast_acquire=False``, so every uncontended acquire ends in a cancel-shielded
  ``sleep(0)``: four extra trips through the event loop per streamed event, about half the CPU of
  a streamed token (``bench/RESULTS.md``). The patch gives those locks ``fast_acquire=True`` as
  pydantic-ai creates them (what httpx did for its pool). Mutual exclusion and waiting on a held
  lock are unchanged; the run still yields once per event where ``run_stream_events`` hands it to
  the consumer, so other streams keep their turns and cancellation arrives as before. It first
  checks that the attributes it replaces are there and are ``anyio.Lock``s; if not, it logs once
  and leaves pydantic-ai alone. Goes when pydantic-ai creates those locks with
  ``fast_acquire=True`` (or drops them).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import anyio
from pydantic_ai import _utils as _pydantic_ai_utils
from pydantic_ai import result as _pydantic_ai_result
from pydantic_ai.ui._utils import get_ui_message_id, set_ui_message_id
from pydantic_ai.ui.ag_ui._interrupt import approval_to_interrupt, interrupt_id_to_tool_call_id

__all__ = [
    "approval_to_interrupt",
    "fast_stream_locks_installed",
    "get_ui_message_id",
    "install_fast_stream_locks",
    "interrupt_id_to_tool_call_id",
    "set_ui_message_id",
]

logger = logging.getLogger("ragstream.upstream")

_STREAM_LOCKS = ("_anext_lock", "_model_pull_lock")
_PEEKABLE_LOCKS = ("_source_lock",)
_state: dict[str, bool | None] = {"installed": None}  # None: not tried yet


class _NoSource:
    def __aiter__(self) -> _NoSource:
        return self

    async def __anext__(self) -> Any:
        raise StopAsyncIteration


def _missing_lock_attributes() -> list[str]:
    """What the patch would replace but cannot find (an upgrade moved it); empty when all is there."""
    missing = []
    fields = {f.name: f for f in dataclasses.fields(_pydantic_ai_result.AgentStream)}
    for name in _STREAM_LOCKS:
        factory = getattr(fields.get(name), "default_factory", None)
        if factory is not anyio.Lock:
            missing.append(f"AgentStream.{name}")
    if "__post_init__" not in vars(_pydantic_ai_result.AgentStream):
        missing.append("AgentStream.__post_init__")
    probe = _pydantic_ai_utils.PeekableAsyncStream(_NoSource())
    missing.extend(
        f"PeekableAsyncStream.{name}"
        for name in _PEEKABLE_LOCKS
        if not isinstance(getattr(probe, name, None), anyio.Lock)
    )
    return missing


def install_fast_stream_locks() -> bool:
    """Make pydantic-ai's per-event stream locks fast (process-wide, idempotent).

    Returns whether the patch is in place; when pydantic-ai no longer has what it replaces, logs
    once and returns ``False`` (streams are then merely slower).
    """
    if _state["installed"] is not None:
        return bool(_state["installed"])
    missing = _missing_lock_attributes()
    if missing:
        logger.warning(
            "fast stream locks not installed: this pydantic-ai has no %s; streams run unpatched",
            ", ".join(missing),
        )
        _state["installed"] = False
        return False
    _wrap(_pydantic_ai_result.AgentStream, "__post_init__", _STREAM_LOCKS)
    _wrap(_pydantic_ai_utils.PeekableAsyncStream, "__init__", _PEEKABLE_LOCKS)
    _state["installed"] = True
    return True


def fast_stream_locks_installed() -> bool:
    """Whether ``install_fast_stream_locks`` patched pydantic-ai in this process."""
    return bool(_state["installed"])


def _wrap(cls: type, method: str, names: tuple[str, ...]) -> None:
    original = getattr(cls, method)

    @functools.wraps(original)
    def with_fast_locks(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for name in names:
            lock = getattr(self, name, None)
            if isinstance(lock, anyio.Lock) and not lock.locked():
                setattr(self, name, anyio.Lock(fast_acquire=True))

    setattr(cls, method, with_fast_locks)
