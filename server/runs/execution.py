"""One run from start to end: the AG-UI adapter's stream, plus what ragstream adds around it.

``prepare_run`` does everything that can still be answered with an HTTP error (ownership, the
client's state proposal, the adapter's own input checks) while the thread is locked.
``RunExecution.events`` is then the event pipeline:

- a STATE_SNAPSHOT right after RUN_STARTED exactly when the client's copy of the state differs;
- STATE_DELTAs from the tools (``rag_tools.deps``), plus a final catch-all before RUN_FINISHED;
- the thread's state and messages saved before RUN_FINISHED, in one write, only on success;
- on failure, cancellation or timeout nothing is saved, and if the client was already sent state
  from this run it gets a STATE_SNAPSHOT of the last saved state before the terminal event;
- a run timeout ends in RUN_ERROR (the adapter would report a cancellation);
- a run with no messages and nothing to resume restates the thread (MESSAGES_SNAPSHOT) instead of
  calling the model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    EventType,
    Message,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
)
from pydantic import ValidationError
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import RunCancelled, RunTimedOut
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.run import AgentRunResult
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.usage import UsageLimits

from rag_tools import ChatDeps, RagConfig
from rag_tools.kb import KnowledgeBase
from rag_tools.state import ToolContext, Transaction

from ..errors import ApiError, validation_details
from ..history import ThreadConversationStore, agui_messages
from .adapter import RagstreamAdapter

__all__ = ["RunExecution", "prepare_run"]

REQUESTS_PER_RUN = 50
TITLE_CHARS = 80


@dataclass
class RunExecution:
    """A prepared run: the locked thread, its deps, and the adapter stream to wrap."""

    run_input: RunAgentInput
    principal: str
    txn: Transaction
    token: CancellationToken
    deps: ChatDeps
    diverged: bool
    prepare: Any
    run_timeout: float
    stream: AsyncIterator[BaseEvent] | None = None
    timed_out: bool = False
    state_sent: bool = False

    @property
    def thread_id(self) -> str:
        return self.run_input.thread_id

    @property
    def run_id(self) -> str:
        return self.run_input.run_id

    async def events(self) -> AsyncIterator[BaseEvent]:
        """The run's AG-UI events, first RUN_STARTED, last exactly one terminal event."""
        if self.stream is None:
            async for event in self._restate():
                yield event
            return
        async for event in self.stream:
            kind = event.type
            if kind in (EventType.STATE_DELTA, EventType.STATE_SNAPSHOT):
                self.state_sent = True
            elif kind == EventType.RUN_ERROR:
                async for restore in self._restore_last_saved_state():
                    yield restore
            elif kind == EventType.RUN_FINISHED and _outcome(event) == "cancelled":
                async for restore in self._restore_last_saved_state():
                    yield restore
                if self.timed_out:
                    yield RunErrorEvent(
                        message=f"The run took longer than {self.run_timeout:g} s and was stopped.",
                        code="timeout",
                    )
                    return
            yield event
            if kind == EventType.RUN_STARTED and self.diverged:
                self.state_sent = True
                yield StateSnapshotEvent(
                    snapshot=self.deps.tracker.baseline if self.deps.tracker else self.deps.state
                )

    async def on_complete(self, result: AgentRunResult[Any]) -> AsyncIterator[BaseEvent]:
        """Runs before RUN_FINISHED of a successful (or interrupted) run: save, then final state."""
        record = self.txn.entry.record
        if record.owner is None:
            record.owner = self.principal
        if record.title is None:
            record.title = _title(result)
        events = self.deps.state_update_events(force=True)
        await self.txn.commit()
        for event in events:
            self.state_sent = True
            yield event

    async def on_cancel(self, cancelled: RunCancelled) -> None:
        self.timed_out = isinstance(cancelled, RunTimedOut)

    async def _restate(self) -> AsyncIterator[BaseEvent]:
        """A run with nothing to do: restate messages and state, save a client proposal."""
        yield RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)
        messages = await agui_messages(self.txn.entry.record.extras, self.thread_id)
        if messages:
            yield MessagesSnapshotEvent(messages=messages)
        if self.diverged:
            yield StateSnapshotEvent(snapshot=self.deps.state)
        record = self.txn.entry.record
        if record.owner is None:
            record.owner = self.principal
        await self.txn.commit()
        yield RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, outcome=RunFinishedSuccessOutcome()
        )

    async def _restore_last_saved_state(self) -> AsyncIterator[BaseEvent]:
        if not self.state_sent or self.txn.committed:
            return
        saved = ToolContext.from_dump(self.txn.entry.record.state, state_key=self.deps.tool_context.state_key)
        self.prepare(saved)
        yield StateSnapshotEvent(snapshot=saved.build_state_snapshot())

    def finish(self) -> None:
        """Release the thread: roll back unless the run committed."""
        if not self.txn.committed:
            self.txn.rollback()
        self.txn.close()


def _outcome(event: BaseEvent) -> str | None:
    outcome = getattr(event, "outcome", None)
    return getattr(outcome, "type", None)


def _conversion_can_fail(message: Message) -> bool:
    """Whether the adapter could fail to convert ``message`` once the stream has started.

    Plain-text user messages (most of every request) always convert; tool messages need their tool
    call, which may be held by the server, so the adapter checks those itself.
    """
    if message.role == "tool":
        return False
    plain_text = isinstance(message.content, str) and getattr(message, "encrypted_value", None) is None
    return not (message.role == "user" and plain_text)


def _title(result: AgentRunResult[Any]) -> str | None:
    for message in result.all_messages():
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if (
                    isinstance(part, UserPromptPart)
                    and isinstance(part.content, str)
                    and part.content.strip()
                ):
                    text = " ".join(part.content.split())
                    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    return None


async def prepare_run(
    *,
    run_input: RunAgentInput,
    principal: str,
    txn: Transaction,
    agent: Agent[Any, Any],
    kb: KnowledgeBase,
    config: RagConfig,
    prepare: Any,
    run_timeout: float,
    toolsets: Sequence[AbstractToolset[Any]] = (),
    capabilities: Sequence[AbstractCapability[Any]] = (),
) -> RunExecution:
    """Check the request against the locked thread and build the run; ``ApiError`` for a bad request."""
    entry = txn.entry
    if entry.record.owner is not None and entry.record.owner != principal:
        raise ApiError(404, f"thread {run_input.thread_id!r} not found")
    try:
        diverged = entry.context.apply_client_proposal(run_input.state if run_input.state is not None else {})
    except ValidationError as exc:
        raise ApiError(422, "state is invalid", details=validation_details(exc, ("state",))) from exc
    except TypeError as exc:
        raise ApiError(
            422, f"state is invalid: {exc}", details=[{"loc": ["state"], "message": str(exc)}]
        ) from exc
    deps = ChatDeps(client=kb, tool_context=entry.context, config=config, tasks=entry)
    server_state = entry.context.build_state_snapshot()
    deps.receive_client_state(server_state)
    token = CancellationToken()
    execution = RunExecution(run_input, principal, txn, token, deps, diverged, prepare, run_timeout)
    if not run_input.messages and not run_input.resume:
        return execution

    for index, message in enumerate(run_input.messages):
        if not _conversion_can_fail(message):
            continue
        try:  # content the adapter would fail to convert mid-stream (bad base64, malformed parts)
            AGUIAdapter.load_messages([message])
        except ValueError as exc:
            detail = (
                exc.errors(include_url=False, include_input=False)[0]["msg"]
                if isinstance(exc, ValidationError)
                else str(exc)
            )
            raise ApiError(
                422, f"messages[{index}] cannot be read: {detail}", details=[{"loc": ["messages", index]}]
            ) from exc

    store = ThreadConversationStore(entry.record.extras)
    conversation = await store.read_record(run_input.thread_id)
    prior_requests = conversation.usage.requests if conversation is not None else 0
    adapter = RagstreamAdapter(
        agent=agent,
        run_input=run_input.model_copy(update={"state": server_state}),
        conversation_store=store,
        conversation_scope=principal,
    )
    try:
        execution.stream = adapter.run_stream(
            deps=deps,
            cancellation_token=token,
            timeout=run_timeout,
            usage_limits=UsageLimits(request_limit=prior_requests + REQUESTS_PER_RUN),
            on_complete=execution.on_complete,
            on_cancel=execution.on_cancel,
            toolsets=list(toolsets) or None,
            capabilities=list(capabilities) or None,
        )
    except ValueError as exc:  # the adapter's synchronous input checks (history that does not fit, ...)
        raise ApiError(422, f"invalid run input: {exc}") from exc
    return execution
