"""``AGUIRunFactory``: how an AG-UI run is built and started, in order, in one place.

Built once at startup with everything a run needs (agent, knowledge base, thread cache, tool
system parts, settings). ``start`` reads top to bottom:

1. take the thread's run lock (``RunManager.reserve``; a busy thread the caller may not see is
   answered as missing, not busy);
2. take the thread's cache transaction and check, under the lock, that the caller may use it;
3. apply the client's state proposal, once (client-owned fields only; invalid values refuse the
   request with their field errors); the result is the run's baseline;
4. check messages the adapter could otherwise only reject mid-stream;
5. admit the run under the principal's limits (``server.quotas``: runs per minute, concurrent runs,
   the day's model tokens, whose rest becomes the run's token limit);
6. build the deps and the adapter's stream (history from the thread record), and hand the run
   to the engine, which opens its event log and starts it.

Anything refused before step 6 leaves nothing behind: the transaction is rolled back and the lock
released. The order of the thread guards (run lock, then cache lock, then the store's
compare-and-set on commit) is explained in ``server/NOTES.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import Message, RunAgentInput
from pydantic import ValidationError
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.usage import RunUsage, UsageLimits

from rag_tools import ChatDeps, RagConfig
from rag_tools.kb import KnowledgeBase
from rag_tools.state import ToolContext, ToolContextCache, Transaction

from ..access import ThreadNotFound, check_claimable, may_use
from ..quotas import Limits, MemoryQuotas, Quotas
from ..runs import RunInfo, RunManager, run_key
from ..validation import InvalidRequest, field_errors
from .adapter import RagstreamAdapter
from .budget import TokenBudget
from .execution import AGUIRun
from .history import ThreadConversationStore

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

    async def start(self, run_input: RunAgentInput, principal: str) -> RunInfo:
        """Start the run; ``RunConflict``, ``ThreadNotFound`` or ``InvalidRequest`` when it cannot."""
        thread_id = run_input.thread_id

        async def answer_busy_as_missing() -> None:
            await check_claimable(self.cache, thread_id, principal)

        async with self.runs.reserve(
            thread_id, run_input.run_id, principal, on_busy=answer_busy_as_missing
        ) as slot:
            txn = await self.cache.begin(thread_id)
            try:
                run = await self._build(run_input, principal, txn)
            except BaseException:
                txn.rollback()
                txn.close()
                raise
            await slot.launch(run)
        return slot.info

    async def _build(self, run_input: RunAgentInput, principal: str, txn: Transaction) -> AGUIRun:
        entry = txn.entry
        if not may_use(entry.record.owner, principal):
            raise ThreadNotFound(run_input.thread_id)
        context = entry.context
        try:
            context.apply_client_proposal(run_input.state if run_input.state is not None else {})
        except ValidationError as exc:
            raise InvalidRequest("state is invalid", field_errors(exc, ("state",))) from exc
        except TypeError as exc:
            raise InvalidRequest(
                f"state is invalid: {exc}", [{"loc": ["state"], "message": str(exc)}]
            ) from exc
        baseline = context.build_state_snapshot()
        deps = ChatDeps(client=self.kb, tool_context=context, config=self.config, tasks=entry)
        deps.begin_run(baseline)
        run = AGUIRun(
            run_input, principal, txn, CancellationToken(), deps, baseline, self.prepare, self.run_timeout
        )
        if not run_input.messages and not run_input.resume:
            return run  # nothing to ask the model: the run restates the thread
        for index, message in enumerate(run_input.messages):
            _check_convertible(index, message)
        store = ThreadConversationStore(entry.record.extras)
        conversation = await store.read_record(run_input.thread_id)
        prior = conversation.usage if conversation is not None else RunUsage()
        # the limits per principal, last: a request refused above counts against none of them
        admission = await self.quotas.admit_run(
            principal,
            run_key(run_input.thread_id, run_input.run_id),
            hold_seconds=self.run_timeout + SLOT_MARGIN_SECONDS,
        )
        run.admission = admission
        tokens = None if admission.tokens_left is None else prior.total_tokens + admission.tokens_left
        usage_limits = UsageLimits(request_limit=prior.requests + REQUESTS_PER_RUN, total_tokens_limit=tokens)
        capabilities = list(self.capabilities)
        if tokens is not None:
            capabilities.append(TokenBudget(self.quotas, principal, tokens))
        adapter = RagstreamAdapter(
            agent=self.agent,
            run_input=run_input.model_copy(update={"state": baseline}),
            conversation_store=store,
            conversation_scope=principal,
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


def _check_convertible(index: int, message: Message) -> None:
    """``InvalidRequest`` for content the adapter would fail to convert once the stream started.

    Plain-text user messages (most of every request) always convert; tool messages need their tool
    call, which may be held by the server, so the adapter checks those itself.
    """
    if message.role == "tool":
        return
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
