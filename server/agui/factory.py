"""``AGUIRunFactory``: how an AG-UI run is built and started, in order, in one place.

Built once at startup with everything a run needs (agent, knowledge base, thread cache, tool
system parts, settings). ``start`` reads top to bottom:

1. take the thread's run lock (``RunManager.reserve``; a busy thread the caller may not see is
   answered as missing, not busy);
2. take the thread's cache transaction and check, under the lock, that the caller may use it;
3. lay the client's messages over the thread's conversation tree: where they leave the stored
   path the run branches, with the state the conversation had there (``tree``,
   ``branch_state``); what follows is the new turn; then drop the cached results of documents
   the caller may not read now (``rag_tools.readable``);
4. apply the client's state proposal, once (client-owned fields only; invalid values refuse the
   request with their field errors); the result is the run's baseline;
5. check messages and frontend tools the adapter could otherwise only reject mid-stream (a tool
   named like a server tool), and that every resume entry answers an interrupt still pending on
   the thread (a stale one is a 409, not a failed run);
6. admit the run under the principal's limits (``ragstream.quotas``: runs per minute, concurrent runs,
   the day's model tokens, whose rest becomes the run's token limit);
7. build the deps (with a live question channel when the client answers tools' questions live)
   and the adapter's stream (history from the thread record, the new turn from the client), and
   hand the run to the engine, which opens its event log and starts it.

Anything refused before step 7 leaves nothing behind: the transaction is rolled back and the lock
released. The order of the thread guards (run lock, then cache lock, then the store's
compare-and-set on commit) is explained in ``server/NOTES.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import Message, ResumeEntry, RunAgentInput, Tool
from pydantic import ValidationError
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationRecord
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.usage import RunUsage, UsageLimits

from rag_tools import ChatDeps, RagConfig
from rag_tools.kb import KnowledgeBase
from rag_tools.kb.access import ALL, Reader
from rag_tools.models import ModelGuard
from rag_tools.state import ToolContext, ToolContextCache, Transaction
from rag_tools.tools import static_tool_names

from ..access import ThreadNotFound, check_claimable, may_use
from ..quotas import Limits, MemoryQuotas, Quotas
from ..runs import RunConflict, RunInfo, RunManager, run_key
from ..validation import InvalidRequest, field_errors
from .adapter import RagstreamAdapter
from .branch_state import StepStates, restore_state_at
from .budget import RunTokens, TokenBudget
from .execution import AGUIRun
from .history import ThreadConversationStore, conversation_of, drop_unreadable_from_thread
from .interrupts import pending_interrupts, resume_problem
from .message_ids import RunIds
from .questions import RunQuestions, wants_live_questions
from .telemetry import model_call_capabilities
from .tree import ConversationTree

__all__ = ["REQUESTS_PER_RUN", "AGUIRunFactory"]

REQUESTS_PER_RUN = 50

#: Seconds beyond the run timeout after which a run's concurrent-run slot frees itself (a dead worker).
SLOT_MARGIN_SECONDS = 60


@dataclass
class AGUIRunFactory:
    """Starts AG-UI runs on the engine; one per server."""

    runs: RunManager
    cache: ToolContextCache
    agent: Agent[Any, Any]
    kb: KnowledgeBase
    config: RagConfig
    prepare: Callable[[ToolContext], Any]
    run_timeout: float
    toolsets: Sequence[AbstractToolset[Any]] = ()
    capabilities: Sequence[AbstractCapability[Any]] = ()
    quotas: Quotas = field(default_factory=lambda: MemoryQuotas(Limits()))
    count_metrics: bool = False
    question_timeout: float = 120.0
    server_tools: frozenset[str] = field(init=False)
    """The names of the server's tools known without a run (a dynamic toolset's only a run knows)."""

    def __post_init__(self) -> None:
        toolsets = [*self.agent.toolsets, *self.toolsets]
        self.server_tools = frozenset(name for t in toolsets for name in static_tool_names(t) or ())

    async def start(self, run_input: RunAgentInput, principal: str, reader: Reader = ALL) -> RunInfo:
        """Start the run; ``RunConflict``, ``ThreadNotFound`` or ``InvalidRequest`` when it cannot.

        The run's tools read the knowledge base as ``reader`` (the caller's groups).
        """
        thread_id = run_input.thread_id

        async def answer_busy_as_missing(owner: str | None) -> None:
            await check_claimable(self.cache, thread_id, principal)
            if owner is not None and not may_use(owner, principal):  # a new thread's first run
                raise ThreadNotFound(thread_id)

        async with self.runs.reserve(
            thread_id, run_input.run_id, principal, on_busy=answer_busy_as_missing
        ) as slot:
            txn = await self.cache.begin(thread_id)
            try:
                run = await self._build(run_input, principal, txn, reader)
            except BaseException:
                txn.rollback()
                txn.close()
                raise
            await slot.launch(run)
        return slot.info

    async def _build(
        self, run_input: RunAgentInput, principal: str, txn: Transaction, reader: Reader = ALL
    ) -> AGUIRun:
        entry = txn.entry
        if not may_use(entry.record.owner, principal):
            raise ThreadNotFound(run_input.thread_id)
        context = entry.context
        tree = ConversationTree(conversation_of(entry.record.extras))
        new_turn = self._follow_client(tree, context, run_input.messages, bool(run_input.resume))
        kb = self.kb.restricted(reader)
        # cached results the caller may not read (any more): gone from the state, withheld from history
        withholding = await drop_unreadable_from_thread(context, kb, entry.record.extras)
        try:
            context.apply_client_proposal(run_input.state if run_input.state is not None else {})
        except ValidationError as exc:
            raise InvalidRequest("state is invalid", field_errors(exc, ("state",))) from exc
        except TypeError as exc:
            raise InvalidRequest(
                f"state is invalid: {exc}", [{"loc": ["state"], "message": str(exc)}]
            ) from exc
        baseline = context.build_state_snapshot()
        deps = ChatDeps(client=kb, tool_context=context, config=self.config, tasks=entry)
        deps.begin_run(baseline)
        run = AGUIRun(
            run_input,
            principal,
            txn,
            CancellationToken(),
            deps,
            baseline,
            self.prepare,
            self.run_timeout,
            steps=StepStates(context),
            start=tree.head,
            count_metrics=self.count_metrics,
            withhold=withholding or None,
        )
        if wants_live_questions(run_input):
            key = run_key(run_input.thread_id, run_input.run_id)
            run.questions = deps.questions = RunQuestions(self.runs.questions, key, self.question_timeout)
        for index, message in enumerate(run_input.messages):
            _check_convertible(index, message)
        _check_frontend_tools(run_input.tools or (), self.server_tools)
        history, new_turn = _split_client_history(new_turn)
        if tree.head is None and not history and not run_input.resume and _nothing_to_answer(new_turn):
            raise InvalidRequest(
                "messages hold nothing to answer: a new thread needs a user message"
                " (system and developer messages only instruct; reasoning and activity messages only show)",
                [{"loc": ["messages"]}],
            )
        if history:
            await _store_client_history(entry.record.extras, run_input.thread_id, principal, history)
            run.start = ConversationTree(conversation_of(entry.record.extras)).head
        if not new_turn and not run_input.resume and not _waits_for_the_model(tree, tree.head):
            return run  # nothing to ask the model: the run restates the thread
        ids = RunIds.for_new_turn(new_turn)
        store = ThreadConversationStore(entry.record.extras, ids, withholding or None)
        conversation = await store.read_record(run_input.thread_id)
        if run_input.resume:
            _check_resumable(run_input.resume, conversation)
        _check_tool_results(run_input.messages, new_turn, history, conversation)
        prior = conversation.usage if conversation is not None else RunUsage()
        # the limits per principal, last: a request refused above counts against none of them
        admission = await self.quotas.admit_run(
            principal,
            run_key(run_input.thread_id, run_input.run_id),
            hold_seconds=self.run_timeout + SLOT_MARGIN_SECONDS,
            running=self.runs.running,
        )
        run.admission = admission
        tokens = None if admission.tokens_left is None else prior.total_tokens + admission.tokens_left
        usage_limits = UsageLimits(request_limit=prior.requests + REQUESTS_PER_RUN, total_tokens_limit=tokens)
        capabilities = list(self.capabilities)
        # the model calls the run's tools make count as the run's own (rag_tools.models.model_run_options)
        inner = [
            ModelGuard.from_config(self.config),
            *model_call_capabilities(count_metrics=self.count_metrics),
        ]
        run.tokens = RunTokens()
        capabilities.append(run.tokens)
        inner.append(run.tokens)
        if tokens is not None:
            budget = TokenBudget(self.quotas, principal, tokens)
            capabilities.append(budget)
            inner.append(budget)
        deps.model_capabilities = tuple(inner)
        run.new_turn = new_turn
        adapter = RagstreamAdapter(
            agent=self.agent,
            run_input=run_input.model_copy(update={"state": baseline, "messages": new_turn}),
            conversation_store=store,
            conversation_scope=principal,
            ids=ids,
        )
        try:
            run.stream = adapter.run_stream(
                deps=deps,
                cancellation_token=run.token,
                timeout=self.run_timeout,
                usage_limits=usage_limits,
                on_complete=run.on_complete,
                on_cancel=run.on_cancel,
                toolsets=list(self.toolsets) or None,
                capabilities=capabilities or None,
            )
        except ValueError as exc:  # the adapter's synchronous input checks (history that does not fit, ...)
            admission.release()
            raise InvalidRequest(f"invalid run input: {exc}") from exc
        return run

    @staticmethod
    def _follow_client(
        tree: ConversationTree, context: ToolContext, messages: list[Message], resume: bool
    ) -> list[Message]:
        """Put the thread on the branch the client's messages show; returns the client's new turn.

        Where the client's history leaves the stored path (an edit, a regenerate, an older branch
        sent again), the head moves to the last message both share and the branch's state is
        restored from there, in the run's transaction: a run that fails leaves the thread as it was.
        A history that only stops short of the stored path, with nothing after it to ask, moves
        nothing: the turns it leaves out would otherwise hang below the head with no sibling to
        pick them by, and the run restates the thread.
        """
        if not messages:
            return []
        alignment = tree.align(messages)
        tree.give_back_ids(alignment.by_old_id)
        if alignment.branch_point != tree.head:
            shorter = alignment.branch_point is None or alignment.branch_point in tree.path()
            if (
                shorter
                and not alignment.new_turn
                and not resume
                and not _waits_for_the_model(tree, alignment.branch_point)
            ):
                return []
            restore_state_at(context, tree.data, alignment.branch_point)
            tree.move_head(alignment.branch_point, str(uuid.uuid4()))
        return alignment.new_turn


def _split_client_history(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """Split the client's unstored messages into history (to the last assistant message) and new turn."""
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    return messages[: last + 1], messages[last + 1 :]


async def _store_client_history(
    extras: dict[str, Any], thread_id: str, principal: str, history: list[Message]
) -> None:
    """Add history the client shows but the thread never stored (a conversation from elsewhere) to the
    run's branch, so the model sees the conversation the user sees.

    It is taken as text only: the assistant's words, never its tool calls or their results. A call a
    client wrote would otherwise be run (or offered for approval) as if the model had made it.
    """
    said = [_as_text(m) for m in history if m.role not in ("tool", "activity", "reasoning")]
    kept = [m for m in said if m is not None]
    if not kept:
        return
    try:
        messages = AGUIAdapter.load_messages(kept)
    except ValueError as exc:
        raise InvalidRequest(f"messages cannot be read: {exc}", [{"loc": ["messages"]}]) from exc
    store = ThreadConversationStore(extras, RunIds.for_new_turn(kept))
    conversation = await store.load(thread_id, scope=principal)
    if conversation is None:
        conversation = Conversation(conversation_id=thread_id)
    conversation.messages.extend(messages)
    await store.save(conversation, scope=principal)


def _as_text(message: Message) -> Message | None:
    """An assistant message without its tool calls (``None`` when nothing is left); others as they are."""
    if message.role != "assistant":
        return message
    if not message.content:
        return None
    return message.model_copy(update={"tool_calls": None})


def _nothing_to_answer(messages: list[Message]) -> bool:
    """Whether ``messages`` (at least one) are instructions (system, developer) or what a client
    shows beside the conversation (reasoning, activity), and nothing else."""
    return bool(messages) and all(
        m.role in ("system", "developer", "reasoning", "activity") for m in messages
    )


def _waits_for_the_model(tree: ConversationTree, entry_id: str | None) -> bool:
    """Whether a path ending at ``entry_id`` ends with a request (a question or tool results) no answer follows."""
    return entry_id is not None and tree.entries[entry_id]["message"].get("kind") == "request"


def _check_resumable(resume: Sequence[ResumeEntry], conversation: ConversationRecord | None) -> None:
    """``RunConflict`` (``interrupt_not_pending``) for a resume entry that answers nothing pending,
    ``InvalidRequest`` for one whose payload does not fit the interrupt it answers, for an interrupt
    answered twice, and for a resume that leaves a pending interrupt unanswered (AG-UI 1.0: every
    open interrupt is answered in one resume).

    An interrupt already answered (a second click on "approve", a resume replayed after the run that
    took it) or never asked is refused before the run starts, so the thread stays as it was and the
    client learns which entry is stale and what is pending now.
    """
    pending = {interrupt.id: interrupt for interrupt in pending_interrupts(conversation)}
    answered: set[str] = set()
    for index, entry in enumerate(resume):
        if entry.interrupt_id in answered:
            raise InvalidRequest(
                f"resume[{index}] answers interrupt {entry.interrupt_id!r} again: answer each interrupt once",
                [{"loc": ["resume", index, "interruptId"]}],
            )
        answered.add(entry.interrupt_id)
        interrupt = pending.get(entry.interrupt_id)
        if interrupt is None:
            waiting = ", ".join(repr(i) for i in pending) or "nothing"
            raise RunConflict(
                f"resume[{index}] answers interrupt {entry.interrupt_id!r}, which is not pending on"
                f" this thread (pending: {waiting})",
                "interrupt_not_pending",
            )
        problem = resume_problem(interrupt, entry)
        if problem is not None:
            raise InvalidRequest(
                f"resume[{index}].payload: {problem}", [{"loc": ["resume", index, "payload"]}]
            )
    unanswered = [i for i in pending if i not in answered]
    if unanswered:  # pydantic-ai would fail the run on it once started
        raise InvalidRequest(
            "resume must answer every pending interrupt (approve, deny or cancel each);"
            f" unanswered: {', '.join(repr(i) for i in unanswered)}",
            [{"loc": ["resume"]}],
        )


def _check_tool_results(
    messages: Sequence[Message],
    new_turn: Sequence[Message],
    history: Sequence[Message],
    conversation: ConversationRecord | None,
) -> None:
    """``RunConflict`` (``tool_call_not_pending``) for a tool result in the new turn that answers no
    call the thread waits on a result for (an answered call, one never made, a call awaiting approval).

    pydantic-ai drops such a result and the run "succeeds" without it; after an edit it even leaves
    the thread at the answered call. Results for calls of the client's own unstored assistant
    messages (a conversation from elsewhere) are not checked: those calls are taken as text.
    """
    requests = conversation.deferred_tool_requests if conversation is not None else None
    waiting = [call.tool_call_id for call in requests.calls] if requests is not None else []
    written = {call.id for m in history if m.role == "assistant" for call in m.tool_calls or ()}
    for message in new_turn:
        if message.role != "tool" or message.tool_call_id in waiting or message.tool_call_id in written:
            continue
        index = next(i for i, m in enumerate(messages) if m is message)
        raise RunConflict(
            f"messages[{index}] is a result for tool call {message.tool_call_id!r}, which this thread is"
            f" not waiting on (waiting on: {', '.join(repr(c) for c in waiting) or 'nothing'})",
            "tool_call_not_pending",
            details=[{"loc": ["messages", index, "toolCallId"]}],
        )


def _check_frontend_tools(tools: Sequence[Tool], server_tools: frozenset[str]) -> None:
    """``InvalidRequest`` for a client tool named like a server tool: the model could not tell them
    apart, and pydantic-ai would fail the run on it once the stream started."""
    for index, tool in enumerate(tools):
        if tool.name in server_tools:
            raise InvalidRequest(
                f"tools[{index}].name {tool.name!r} is the name of a server tool; give the frontend"
                " tool another name",
                [{"loc": ["tools", index, "name"]}],
            )


def _check_convertible(index: int, message: Message) -> None:
    """``InvalidRequest`` for content the adapter would fail to convert once the stream started.

    Plain-text user messages (most of every request) always convert; tool messages need their tool
    call, which may be held by the server, so the adapter checks those itself.
    """
    if message.role == "tool":
        return
    if message.role == "user" and message.content == []:
        raise InvalidRequest(
            f"messages[{index}] has no content this server can read: an empty list, or only parts of"
            " kinds it does not know",
            [{"loc": ["messages", index, "content"]}],
        )
    plain_text = isinstance(message.content, str) and getattr(message, "encrypted_value", None) is None
    if message.role == "user" and plain_text:
        return
    try:  # bad base64, malformed parts
        AGUIAdapter.load_messages([message])
    except ValueError as exc:
        detail = (
            exc.errors(include_url=False, include_input=False)[0]["msg"]
            if isinstance(exc, ValidationError)
            else str(exc)
        )
        raise InvalidRequest(
            f"messages[{index}] cannot be read: {detail}", [{"loc": ["messages", index]}]
        ) from exc
