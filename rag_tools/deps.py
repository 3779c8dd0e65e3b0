"""Agent dependencies: the knowledge base client and the thread's ``ToolContext``, as an AG-UI state handler.

``AgentDeps`` implements pydantic-ai's ``StateHandler`` protocol. When the AG-UI adapter hands it
the client's ``state`` at the start of a run, the setter applies the client's proposal (client-owned
fields only; an invalid proposal is ignored and recorded, never raised, so no adapter answers 500).
Every run carries its own baseline: the first state event of a run is a STATE_SNAPSHOT, and after
every later tool call that changed the context, ``emit_state_update`` sends one STATE_DELTA against
the run's single baseline (or a snapshot when that is smaller) through ``ctx.emit``, so it works
under any pydantic-ai AG-UI integration, and a consumer that folds one run's events from ``{}``
(CopilotKit's runtime, a logger, a replay) reaches the server's state. A server that sends the
snapshot itself at the start of the run says so with ``begin_run``.

Create deps per run: pydantic-ai writes ``deps.state`` in place.

The toolsets need less than ``AgentDeps``: any deps object with ``client`` and ``tool_context``
(the ``RAGDeps`` protocol) works, and its state changes still reach an AG-UI client: the first
state event of each run is a snapshot of the context, later ones are deltas against it (the run's
tracker is kept beside the context, keyed by the run id). Background work of such deps belongs to
the process and lands in the context directly.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ag_ui.core import BaseEvent, StateDeltaEvent, StateSnapshotEvent
from pydantic import ValidationError
from pydantic_ai import CustomEvent, RunContext
from pydantic_ai.capabilities import AbstractCapability, Hooks

from .config import RagConfig
from .kb import KnowledgeBase
from .questions import QuestionChannel
from .state import SESSION_NAMESPACE, SessionState, StateTracker, ToolContext

__all__ = [
    "CITATIONS_CAPABILITY_ID",
    "AGUIEvent",
    "AgentDeps",
    "ChatDeps",
    "RAGDeps",
    "TaskTracker",
    "apply_later",
    "citation_hooks",
    "emit_state_update",
    "spawn",
]

CITATIONS_CAPABILITY_ID = "ragstream-citations"
"""The id of ``citation_hooks``: with it in a run, search cards wait until the answer cites them."""

RUN_TRACKERS_KEPT = 8
"""Per context, how many runs' state trackers are kept for deps that are not ``AgentDeps``."""


@runtime_checkable
class RAGDeps(Protocol):
    """What the RAG toolsets need from an agent's deps: the knowledge base and the thread's context.

    ``AgentDeps`` satisfies it; so does any class of yours with these two attributes. With
    ``tool_context=None`` the tools work but keep nothing between calls.
    """

    client: KnowledgeBase
    tool_context: ToolContext | None


@dataclass(kw_only=True)
class AGUIEvent(CustomEvent, name="ragstream_agui_event"):
    """Carries a ready AG-UI event through ``ctx.emit``; the AG-UI stream passes it on verbatim."""

    event: Any

    def to_payload(self) -> Any:
        return self.event


class TaskTracker(Protocol):
    """Something that owns background tasks (the server's cache entry does, per thread).

    It may also offer ``async apply(change)``: apply a late change to the thread's context and
    save it (see ``AgentDeps.apply_later``).
    """

    def track(self, task: asyncio.Task[Any]) -> None: ...


class _LocalTasks:
    """Keeps references to background tasks so they are not garbage collected mid-flight."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def track(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


@dataclass
class AgentDeps:
    """What the RAG tools need during a run: ``client`` (the knowledge base) and ``tool_context``."""

    client: KnowledgeBase
    tool_context: ToolContext
    tasks: TaskTracker = field(default_factory=_LocalTasks, repr=False)
    tracker: StateTracker | None = field(default=None, repr=False)
    questions: QuestionChannel | None = field(default=None, repr=False)
    """Where a tool's ``ask`` waits for a live answer (``questions.py``); ``None``: interrupts only."""
    model_capabilities: tuple[AbstractCapability[Any], ...] = field(default=(), repr=False)
    """What a model call a tool makes inside the run gets (``rag_tools.models.model_run_options``):
    the run's ``ModelGuard`` and, in the server, its token metrics, traces and daily budget."""
    rejected_state: ValidationError | None = field(default=None, repr=False)
    _run_baseline: Any = field(default=None, repr=False)
    _emitted_version: int = field(default=-1, repr=False)

    @property
    def state(self) -> dict[str, Any]:
        """The AG-UI state: the context's snapshot (under its ``state_key``, if any)."""
        return self.tool_context.build_state_snapshot()

    @state.setter
    def state(self, value: Any) -> None:
        if value is not None and value is self._run_baseline:
            return  # the baseline ``begin_run`` set, handed back by the adapter: already applied
        self.receive_client_state(value)

    def receive_client_state(self, value: Any) -> None:
        """Apply the client's proposal (client-owned fields only) and start the run without a baseline.

        An invalid proposal is recorded in ``rejected_state`` and ignored, never raised. The run's
        first state event will then be a STATE_SNAPSHOT (every run carries its own baseline).
        """
        try:
            self.tool_context.apply_client_proposal(value if isinstance(value, dict) else {})
            self.rejected_state = None
        except (ValidationError, TypeError) as exc:
            self.rejected_state = exc if isinstance(exc, ValidationError) else None
        self.tracker = StateTracker()
        self._run_baseline = None
        self._emitted_version = -1

    def begin_run(self, baseline: dict[str, Any]) -> None:
        """Start a run whose client already received ``baseline`` (a STATE_SNAPSHOT sent by the caller).

        Later state events are deltas against it; giving the same object back through the
        ``state`` setter changes nothing.
        """
        self.tracker = StateTracker(baseline)
        self._run_baseline = baseline
        self._emitted_version = self.tool_context.version

    def state_update_events(self, *, force: bool = False) -> list[BaseEvent]:
        """The AG-UI events that bring the client's copy up to date (empty when it is).

        The first of a run without a baseline is a STATE_SNAPSHOT; then STATE_DELTAs against it
        (or a snapshot when that is smaller). ``force`` re-dumps every namespace first, catching
        in-place changes nobody marked.
        """
        context = self.tool_context
        if self.tracker is None or (not force and context.version == self._emitted_version):
            return []
        if force:
            for namespace in context.namespaces:
                context.mark_changed(namespace)
        self._emitted_version = context.version
        update = self.tracker.update(context.build_state_snapshot())
        if update.kind == "delta":
            return [StateDeltaEvent(delta=update.ops)]
        if update.kind == "snapshot":
            return [StateSnapshotEvent(snapshot=update.snapshot)]
        return []

    async def apply_later(self, change: Callable[[ToolContext], Any]) -> None:
        """Apply a change that a background task produced after the run, and keep it.

        With a tracker that can save (the server's cache entry), the change is applied under the
        thread's lock and saved, even when the run that started the task committed long ago;
        otherwise it is applied to this context. ``change`` marks the namespaces it changes.
        """
        persist = getattr(self.tasks, "apply", None)
        if persist is not None:
            await persist(change)
        else:
            change(self.tool_context)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start a background task owned by this thread (cancelled when the thread is evicted)."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.track(task)
        return task


@dataclass
class ChatDeps(AgentDeps):
    """Deps of the chat agent: adds the configuration the chat tools and prompts read."""

    config: RagConfig = field(default_factory=RagConfig)


_PROCESS_TASKS = _LocalTasks()
_RUN_TRACKERS: weakref.WeakKeyDictionary[ToolContext, dict[str, list[Any]]] = weakref.WeakKeyDictionary()


def _run_state_events(context: ToolContext, run_id: str) -> list[BaseEvent]:
    """``AgentDeps.state_update_events`` for deps that keep no tracker: one per run, beside the context."""
    runs = _RUN_TRACKERS.setdefault(context, {})
    entry = runs.get(run_id)
    if entry is None:
        entry = runs[run_id] = [StateTracker(), -1]
        while len(runs) > RUN_TRACKERS_KEPT:
            del runs[next(iter(runs))]
    tracker, emitted = entry
    if context.version == emitted:
        return []
    entry[1] = context.version
    update = tracker.update(context.build_state_snapshot())
    if update.kind == "delta":
        return [StateDeltaEvent(delta=update.ops)]
    if update.kind == "snapshot":
        return [StateSnapshotEvent(snapshot=update.snapshot)]
    return []


async def emit_state_update(ctx: RunContext[Any]) -> None:
    """Send the client what changed in the thread's state since it last heard (no-op outside AG-UI).

    Works with any deps holding a ``tool_context``: ``AgentDeps`` keeps the run's baseline itself,
    other deps get a per-run tracker (the run's first state event is a snapshot).
    """
    deps = ctx.deps
    if isinstance(deps, AgentDeps):
        events = deps.state_update_events()
    else:
        context = getattr(deps, "tool_context", None)
        if not isinstance(context, ToolContext):
            return
        events = _run_state_events(context, ctx.run_id or "")
    for event in events:
        await ctx.emit(AGUIEvent(event=event))


def spawn(deps: Any, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Start background work for ``deps``: the thread's (``AgentDeps.spawn``), else the process's."""
    if isinstance(deps, AgentDeps):
        return deps.spawn(coroutine)
    task = asyncio.get_running_loop().create_task(coroutine)
    _PROCESS_TASKS.track(task)
    return task


async def apply_later(deps: Any, context: ToolContext, change: Callable[[ToolContext], Any]) -> None:
    """Apply a late change: saved with the thread (``AgentDeps.apply_later``), else to ``context``."""
    if isinstance(deps, AgentDeps):
        await deps.apply_later(change)
    else:
        change(context)


def citation_hooks(limit: int = 200) -> Hooks[Any]:
    """A capability that shows only the citation cards a run's final answer cites.

    Without it a search shows the cards of its hits at once (a toolset cannot see the final
    answer). With it searches number their hits but keep the cards server-side; when the answer is
    text, every ``[n]`` in it brings card ``n`` into the emitted state (at most ``limit`` cards are
    kept), sent to the client as a STATE_DELTA before the run finishes.
    """

    async def show_cited(ctx: RunContext[Any], *, output_context: Any, output: Any) -> Any:
        context = getattr(ctx.deps, "tool_context", None)
        if isinstance(context, ToolContext) and isinstance(output, str):
            session = context.get(SESSION_NAMESPACE, SessionState)
            if session is not None and session.promote_cited(output, limit=limit):
                context.mark_changed(SESSION_NAMESPACE)
                await emit_state_update(ctx)
        return output

    return Hooks(after_output_process=show_cited, id=CITATIONS_CAPABILITY_ID, description="show cited cards")
