"""Every place ragstream reaches into pydantic-ai internals, in one module, each with its way out.

``tests/test_upstream.py`` imports and probes all of them, so an upgrade that moves or renames
one fails there, loudly, instead of somewhere in a run.

- ``approval_to_interrupt`` (``pydantic_ai.ui.ag_ui._interrupt``): the AG-UI ``Interrupt`` that
  RUN_FINISHED carries for a pending approval, rebuilt byte for byte when a reloaded page asks for
  its thread. Goes when pydantic-ai exports it (or a "pending interrupts of a conversation" API).
- ``interrupt_id_to_tool_call_id`` (same module): the tool call an interrupt's resume answers, so
  the answer to a tool's ``ask`` reaches that call's metadata. Goes when pydantic-ai exports it,
  or when its AG-UI adapter passes resume payload fields on as ``DeferredToolResults.metadata``.
- ``resume_entry_to_approval`` (same module): pydantic-ai's own check of a resume payload against
  the ``responseSchema`` its interrupts advertise, run before the run starts so a payload that
  does not fit is a 422 naming it, not a RUN_ERROR once the stream is open. Goes when pydantic-ai
  exports it (or checks resume payloads in its adapter's synchronous input checks).
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
- ``install_handoff_drain_fix`` (opt-in; ``ragstream serve`` turns it on): pydantic-ai 2.68 hands work
  between two tasks twice in a run: the run to its ``wrap_run`` hooks (``agent._run_lifecycle_hooks``)
  and each streamed model request's stream to the run (``_agent_graph``, the "Normal path" of
  ``ModelRequestNode._stream``). Both then drain the already finished readiness waiter with
  ``cancel_and_drain``, whose shielded ``gather`` still takes one trip through the event loop. A
  run cancelled in that trip (a stop, a run timeout, a client gone after the grace period) raises
  before the ``try`` whose ``finally`` releases the other task, which then waits forever (on
  ``_run_done`` or ``stream_done``) holding the run's frames, deps and thread context for the
  life of the process (found by a soak of stopped runs: about one stop in forty under load). The
  fix drains only tasks still running, so draining finished ones is no await, and a cancellation
  can only arrive where pydantic-ai handles it; the finished tasks' exceptions are still
  retrieved. Goes when pydantic-ai closes those windows itself (``tests/test_upstream.py`` then
  passes without it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
from typing import Any

import anyio
from pydantic_ai import _agent_graph as _pydantic_ai_graph
from pydantic_ai import _utils as _pydantic_ai_utils
from pydantic_ai import result as _pydantic_ai_result
from pydantic_ai.ui._utils import get_ui_message_id, set_ui_message_id
from pydantic_ai.ui.ag_ui._interrupt import (
    approval_to_interrupt,
    interrupt_id_to_tool_call_id,
    resume_entry_to_approval,
)

__all__ = [
    "approval_to_interrupt",
    "fast_stream_locks_installed",
    "get_ui_message_id",
    "install_fast_stream_locks",
    "install_handoff_drain_fix",
    "interrupt_id_to_tool_call_id",
    "resume_entry_to_approval",
    "set_ui_message_id",
]

logger = logging.getLogger("ragstream.upstream")

_STREAM_LOCKS = ("_anext_lock", "_model_pull_lock")
_PEEKABLE_LOCKS = ("_source_lock",)
_state: dict[str, bool | None] = {"installed": None, "drain": None}  # None: not tried yet


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


def install_handoff_drain_fix() -> bool:
    """Keep a run cancelled during one of pydantic-ai's handoffs from leaving pydantic-ai tasks behind
    (process-wide, idempotent; see the module doc). ``False`` when pydantic-ai no longer has it."""
    if _state["drain"] is not None:
        return bool(_state["drain"])
    # ``agent`` calls it as ``_utils.cancel_and_drain``, ``_agent_graph`` by its own imported name
    modules = (_pydantic_ai_utils, _pydantic_ai_graph)
    original = getattr(_pydantic_ai_utils, "cancel_and_drain", None)
    if (
        original is None
        or not inspect.iscoroutinefunction(original)
        or getattr(_pydantic_ai_graph, "cancel_and_drain", None) is not original
    ):
        logger.warning("handoff drain fix not installed: pydantic-ai's cancel_and_drain moved")
        _state["drain"] = False
        return False

    @functools.wraps(original)
    async def drain_running(*tasks: asyncio.Task[Any], msg: object = None) -> None:
        running = [task for task in tasks if not task.done()]
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved, as the gather with return_exceptions=True did
        if running:
            await original(*running, msg=msg)

    for module in modules:
        module.cancel_and_drain = drain_running  # type: ignore[attr-defined]
    _state["drain"] = True
    return True
