"""``AGUIRun``: one AG-UI run, the adapter's event stream plus what ragstream adds around it.

It is the ``RunSource`` the engine runs (``ragstream.runs``). Its event pipeline:

- RUN_STARTED carries the messages the run answers (AG-UI's ``input``, with only the client's
  new turn: its question): a client that did not send them (a page following the run after a
  reload, another tab) shows the question with the answer; one that did finds them by id;
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
- a cancelled run is known from the adapter's ``on_cancel``, not from RUN_FINISHED's outcome,
  which the adapter leaves out for a client that did not declare AG-UI 1.0: such a client too
  gets the restoring snapshot, and a timeout its RUN_ERROR;
- an interrupt for a tool's question says the question and asks for the answer (``interrupts``);
  a client that answers live gets the question mid-run instead, while it follows the run
  (``questions``);
- a run with no messages and nothing to resume restates the thread (MESSAGES_SNAPSHOT) instead of
  calling the model;
- every event encoded once; the terminal one tells the engine how the run ended. The pipeline
  never raises: whatever escapes the adapter becomes a RUN_ERROR from the one list of codes;
- with tracing on, RUN_STARTED carries the run's trace id (``metadata["ragstream.traceId"]``), and
  with metrics on the first text token's delay is measured, once per run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, cast

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    EventType,
    Message,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
)
from pydantic_ai import CancellationToken
from pydantic_ai.conversation import Conversation
from pydantic_ai.exceptions import RunCancelled, RunTimedOut
from pydantic_ai.run import AgentRunResult
from pydantic_ai.ui.ag_ui import AGUIAdapter

from rag_tools import ChatDeps
from rag_tools.state import ToolContext, Transaction

from ..observe import metrics, tracing
from ..quotas import RunAdmission
from ..runs import FailureCode, RunEvent, RunFailure, RunStatus
from .adapter import classify
from .branch_state import StepStates, stage_step_states
from .budget import RunTokens
from .encoding import encode_event, run_error_event
from .history import ThreadConversationStore, Withhold, thread_messages, thread_title
from .interrupts import with_question_interrupts
from .message_ids import RunIds
from .questions import RunQuestions

__all__ = ["TRACE_ID_KEY", "AGUIRun"]

#: Where RUN_STARTED carries the run's trace id (AG-UI 1.0 event metadata, namespaced).
TRACE_ID_KEY = "ragstream.traceId"

logger = logging.getLogger("ragstream.runs")

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
    cancelled: bool = False
    stopped_by: RunFailure | None = None  # why the engine stopped it, when no user did (``cancel``)
    timed_out: bool = False
    admission: RunAdmission | None = None
    steps: StepStates | None = None
    start: str | None = None  # the entry the run continues from (its new entries come after it)
    count_metrics: bool = False
    created: float = field(default_factory=time.perf_counter)
    questions: RunQuestions | None = None
    new_turn: list[Message] = field(default_factory=list)  # the client's messages the run answers
    withhold: Withhold | None = None  # tool results the caller may not see (``rag_tools.readable``)
    tokens: RunTokens | None = None  # what its model responses used (the run's end line says it)

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
        awaiting_token = self.count_metrics
        try:
            # closed here, at the terminal event, not left to the garbage collector: asyncio would
            # finalize the adapter's generators from another task, through the loop's self-pipe
            async with aclosing(self._pipeline()) as pipeline:
                async for event in pipeline:
                    if awaiting_token and event.type == EventType.TEXT_MESSAGE_CONTENT:
                        metrics.TIME_TO_FIRST_TOKEN.observe(time.perf_counter() - self.created)
                        awaiting_token = False
                    status = _status(event, cancelled=self.cancelled)
                    terminal = status is not None
                    code = getattr(event, "code", None) if status == "error" else None
                    yield RunEvent(
                        encode_event(event), status, flush=event.type == EventType.RUN_STARTED, code=code
                    )
                    if terminal:
                        return
        except Exception as exc:  # the adapter's own stream failed outside its error handling
            if terminal:
                raise
            for restore in self._restore_last_saved_state():
                yield RunEvent(encode_event(restore))
            failure = classify(exc)
            yield RunEvent(
                encode_event(run_error_event(failure)),
                "error",
                code=failure.code.value,
            )

    def usage_note(self) -> str | None:
        """The model tokens the run used, for its end line (``None``: it asked no model)."""
        return self.tokens.note() if self.tokens is not None else None

    def cancel(self, failure: RunFailure | None = None) -> None:
        self.stopped_by = failure
        self.token.cancel()

    def unattended(self) -> bool:
        """No client follows the run: a question it waits on becomes an interrupt (see ``questions``)."""
        return self.questions.leave() if self.questions is not None else False

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
        # the adapter's stream is an async generator (``transform_stream``): closed with the run
        async with aclosing(cast(AsyncGenerator[BaseEvent], self.stream)) as stream:
            async for event in stream:
                kind = event.type
                if kind == EventType.RUN_ERROR:
                    for restore in self._restore_last_saved_state():
                        yield restore
                elif kind == EventType.TOOL_CALL_RESULT and self.steps is not None:
                    self.steps.note(event.tool_call_id)  # type: ignore[attr-defined]
                elif kind == EventType.RUN_FINISHED and _outcome(event) == "interrupt":
                    event = with_question_interrupts(event)
                elif kind == EventType.RUN_FINISHED and self.cancelled:
                    for restore in self._restore_last_saved_state():
                        yield restore
                    failure = self.stopped_by
                    if self.timed_out:
                        failure = RunFailure(
                            FailureCode.TIMEOUT,
                            f"The run took longer than {self.run_timeout:g} s and was stopped.",
                        )
                    if failure is not None:
                        if failure.code == FailureCode.SHUTDOWN:
                            await self._keep_first_question()
                        yield run_error_event(failure)
                        return
                if kind == EventType.RUN_STARTED:
                    yield _with_trace_id(self._with_input(event))
                    yield StateSnapshotEvent(snapshot=self.baseline)
                    continue
                yield event

    def _with_input(self, event: BaseEvent) -> BaseEvent:
        """RUN_STARTED with the new turn as its ``input`` (no state, tools or context: the baseline
        snapshot follows, and the rest is the client's own)."""
        if not self.new_turn:
            return event
        run_input = RunAgentInput(
            thread_id=self.thread_id,
            run_id=self.run_id,
            messages=self.new_turn,
            state={},
            tools=[],
            context=[],
            forwarded_props={},
        )
        return event.model_copy(update={"input": run_input})

    async def on_complete(self, result: AgentRunResult[Any]) -> AsyncIterator[BaseEvent]:
        """Runs before RUN_FINISHED of a successful (or interrupted) run: save, then final state."""
        record = self.txn.entry.record
        if record.owner is None:
            record.owner = self.principal
        # the title is the shown path's first question: an edit of it renames the thread
        record.title = thread_title(result.all_messages()) or record.title
        events = self.deps.state_update_events(force=True)
        if self.steps is not None:
            stage_step_states(record.extras, self.steps, self.start)
        await self.txn.commit()
        for event in events:
            yield event

    async def on_cancel(self, cancelled: RunCancelled) -> None:
        self.cancelled = True
        self.timed_out = isinstance(cancelled, RunTimedOut)

    async def _restate(self) -> AsyncIterator[BaseEvent]:
        """A run with nothing to do: restate messages and state, save a client proposal."""
        yield _with_trace_id(
            RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)
        )
        messages = thread_messages(self.txn.entry.record.extras, self.withhold).messages
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
        return [StateSnapshotEvent(snapshot=self._last_saved_context().build_state_snapshot())]

    def _last_saved_context(self) -> ToolContext:
        saved = ToolContext.from_dump(self.txn.entry.record.state, state_key=self.deps.tool_context.state_key)
        self.prepare(saved)
        return saved

    async def _keep_first_question(self) -> None:
        """A new thread whose first turn a shutdown cut (a deploy): save the thread with the client's
        question, its words only (as a client's unstored history is kept), and nothing of the run, so
        a reload after the restart shows the question and it can be asked again. The thread of any
        later turn keeps its last good state, as after every failed run. Best effort: the store may
        be going away too."""
        entry = self.txn.entry
        questions = [message for message in self.new_turn if message.role == "user"]
        if not entry.is_new or not questions or self.txn.committed:
            return
        try:
            store = ThreadConversationStore(entry.record.extras, RunIds.for_new_turn(questions))
            conversation = await store.load(self.thread_id, scope=self.principal)
            conversation = conversation or Conversation(conversation_id=self.thread_id)
            conversation.messages.extend(AGUIAdapter.load_messages(questions))
            await store.save(conversation, scope=self.principal)
            entry.context = self._last_saved_context()
            entry.record.owner = entry.record.owner or self.principal
            entry.record.title = thread_title(conversation.messages)
            await self.txn.commit()
        except Exception:
            logger.warning(
                "the question of the new thread %s could not be kept", self.thread_id, exc_info=True
            )


def _with_trace_id(event: BaseEvent) -> BaseEvent:
    """RUN_STARTED with the run's trace id in its metadata, when the run is traced."""
    trace_id = tracing.current_trace_id()
    if trace_id is None:
        return event
    return event.model_copy(update={"metadata": {**(event.metadata or {}), TRACE_ID_KEY: trace_id}})


def _outcome(event: BaseEvent) -> str | None:
    outcome = getattr(event, "outcome", None)
    return getattr(outcome, "type", None)


def _status(event: BaseEvent, *, cancelled: bool = False) -> RunStatus | None:
    if event.type == EventType.RUN_FINISHED:
        return "cancelled" if cancelled else _OUTCOME_STATUS.get(_outcome(event) or "", "finished")
    if event.type == EventType.RUN_ERROR:
        return "error"
    return None
