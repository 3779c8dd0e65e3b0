"""``AGUIRun``: one AG-UI run, the adapter's event stream plus what ragstream adds around it.

It is the ``RunSource`` the engine runs (``server.runs``). Its event pipeline:

- right after RUN_STARTED, a STATE_SNAPSHOT of the run's baseline: the thread's state with the
  client's proposal applied. Every run carries its own baseline, so a consumer that folds one
  run's events from ``{}`` (CopilotKit's runtime, a logger, a replay, a resume on another
  worker) reaches the server's state;
- STATE_DELTAs from the tools (``rag_tools.deps``) against that baseline, plus a final catch-all
  before RUN_FINISHED;
- the thread's state and messages saved before RUN_FINISHED, in one write, only on success;
- on failure, cancellation or timeout nothing is saved, and the client gets a STATE_SNAPSHOT of
  the last saved state before the terminal event;
- a run timeout ends in RUN_ERROR (the adapter would report a cancellation);
- an interrupt for a tool's question says the question and asks for the answer (``interrupts``);
- a run with no messages and nothing to resume restates the thread (MESSAGES_SNAPSHOT) instead of
  calling the model;
- every event encoded once; the terminal one tells the engine how the run ended. The pipeline
  never raises: whatever escapes the adapter becomes a RUN_ERROR from the one list of codes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    EventType,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
)
from pydantic_ai import CancellationToken
from pydantic_ai.exceptions import RunCancelled, RunTimedOut
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.run import AgentRunResult

from rag_tools import ChatDeps
from rag_tools.state import ToolContext, Transaction

from ..quotas import RunAdmission
from ..runs import FailureCode, RunEvent, RunFailure, RunStatus
from .adapter import classify
from .encoding import encode_event
from .history import agui_messages
from .interrupts import with_question_interrupts

__all__ = ["AGUIRun"]

TITLE_CHARS = 80

_OUTCOME_STATUS: dict[str, RunStatus] = {"interrupt": "interrupted", "cancelled": "cancelled"}


@dataclass
class AGUIRun:
    """A prepared AG-UI run: the locked thread, its deps, and the adapter stream to wrap."""

    run_input: RunAgentInput
    principal: str
    txn: Transaction
    token: CancellationToken
    deps: ChatDeps
    baseline: dict[str, Any]
    prepare: Callable[[ToolContext], Any]
    run_timeout: float
    stream: AsyncIterator[BaseEvent] | None = None
    timed_out: bool = False
    admission: RunAdmission | None = None

    @property
    def thread_id(self) -> str:
        return self.run_input.thread_id

    @property
    def run_id(self) -> str:
        return self.run_input.run_id

    # -- RunSource ---------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[RunEvent]:
        """The run's encoded events: first RUN_STARTED, last exactly one terminal event."""
        terminal = False
        try:
            async for event in self._pipeline():
                status = _status(event)
                terminal = status is not None
                yield RunEvent(encode_event(event), status, flush=event.type == EventType.RUN_STARTED)
                if terminal:
                    return
        except Exception as exc:  # the adapter's own stream failed outside its error handling
            if terminal:
                raise
            for restore in self._restore_last_saved_state():
                yield RunEvent(encode_event(restore))
            failure = classify(exc)
            yield RunEvent(
                encode_event(RunErrorEvent(message=failure.message, code=failure.code.value)), "error"
            )

    def cancel(self) -> None:
        self.token.cancel()

    def close(self) -> None:
        """Release the thread (rolled back unless the run committed) and the run's limits slot."""
        if not self.txn.committed:
            self.txn.rollback()
        self.txn.close()
        if self.admission is not None:
            self.admission.release()

    # -- the pipeline ------------------------------------------------------------------------

    async def _pipeline(self) -> AsyncIterator[BaseEvent]:
        if self.stream is None:
            async for event in self._restate():
                yield event
            return
        async for event in self.stream:
            kind = event.type
            if kind == EventType.RUN_ERROR:
                for restore in self._restore_last_saved_state():
                    yield restore
            elif kind == EventType.RUN_FINISHED and _outcome(event) == "interrupt":
                event = with_question_interrupts(event)
            elif kind == EventType.RUN_FINISHED and _outcome(event) == "cancelled":
                for restore in self._restore_last_saved_state():
                    yield restore
                if self.timed_out:
                    failure = RunFailure(
                        FailureCode.TIMEOUT,
                        f"The run took longer than {self.run_timeout:g} s and was stopped.",
                    )
                    yield RunErrorEvent(message=failure.message, code=failure.code.value)
                    return
            yield event
            if kind == EventType.RUN_STARTED:
                yield StateSnapshotEvent(snapshot=self.baseline)

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
            yield event

    async def on_cancel(self, cancelled: RunCancelled) -> None:
        self.timed_out = isinstance(cancelled, RunTimedOut)

    async def _restate(self) -> AsyncIterator[BaseEvent]:
        """A run with nothing to do: restate messages and state, save a client proposal."""
        yield RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)
        messages = await agui_messages(self.txn.entry.record.extras, self.thread_id)
        if messages:
            yield MessagesSnapshotEvent(messages=messages)
        yield StateSnapshotEvent(snapshot=self.baseline)
        record = self.txn.entry.record
        if record.owner is None:
            record.owner = self.principal
        await self.txn.commit()
        yield RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, outcome=RunFinishedSuccessOutcome()
        )

    def _restore_last_saved_state(self) -> list[BaseEvent]:
        """A snapshot of the last saved state, for a client that got this run's uncommitted state."""
        if self.txn.committed:
            return []
        saved = ToolContext.from_dump(self.txn.entry.record.state, state_key=self.deps.tool_context.state_key)
        self.prepare(saved)
        return [StateSnapshotEvent(snapshot=saved.build_state_snapshot())]


def _outcome(event: BaseEvent) -> str | None:
    outcome = getattr(event, "outcome", None)
    return getattr(outcome, "type", None)


def _status(event: BaseEvent) -> RunStatus | None:
    if event.type == EventType.RUN_FINISHED:
        return _OUTCOME_STATUS.get(_outcome(event) or "", "finished")
    if event.type == EventType.RUN_ERROR:
        return "error"
    return None


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
