"""Interrupts as ragstream sends them: pydantic-ai's, plus what a tool's question needs.

A tool that calls ``ask(ctx, question)`` (``rag_tools.tools.calls``) pauses the run with an
approval request whose metadata has ``kind: "question"``. pydantic-ai turns it into an interrupt
that asks "Approve tool(args)?" and advertises the approval payload; ``for_client`` makes such an
interrupt say the question and advertise ``answer`` (a string, required) beside ``approved``, so
a client that renders forms from ``responseSchema`` asks for the answer. The live RUN_FINISHED
(``AGUIRun``) and a reloaded thread (``thread_view``, ``pending_interrupts``) both send interrupts
through it. ``resume_problem`` checks a resume's payload against the interrupt it answers before
the run starts.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from ag_ui.core import BaseEvent, EventType, Interrupt, ResumeEntry
from pydantic_ai import ToolApproved
from pydantic_ai.conversation_store import ConversationRecord
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ToolCallPart

from rag_tools.tools.calls import ANSWER_KEY, QUESTION_KIND

from ._upstream import approval_to_interrupt, resume_entry_to_approval

__all__ = ["for_client", "pending_interrupts", "resume_problem", "with_question_interrupts"]


def for_client(interrupt: Interrupt) -> Interrupt:
    """``interrupt`` as the client should see it (a tool's question asks for its answer)."""
    metadata = interrupt.metadata if isinstance(interrupt.metadata, dict) else {}
    if metadata.get("kind") != QUESTION_KIND or not isinstance(metadata.get("question"), str):
        return interrupt
    schema: dict[str, Any] = deepcopy(interrupt.response_schema or {"type": "object", "properties": {}})
    schema.setdefault("properties", {})[ANSWER_KEY] = {"type": "string"}
    schema["required"] = sorted({*schema.get("required", []), "approved", ANSWER_KEY})
    return interrupt.model_copy(update={"message": metadata["question"], "response_schema": schema})


def _interrupt_of(call: ToolCallPart, metadata: dict[str, dict[str, Any]]) -> Interrupt:
    """The interrupt for a pending approval (or question) of a stored conversation."""
    return for_client(approval_to_interrupt(call, metadata))


def pending_interrupts(record: ConversationRecord | None) -> list[Interrupt]:
    """The interrupts a stored conversation waits on (approvals and tools' questions), as the client
    was sent them: what a reloaded page shows and what a resume may answer."""
    requests = record.deferred_tool_requests if record is not None else None
    return [_interrupt_of(call, requests.metadata) for call in requests.approvals] if requests else []


def resume_problem(interrupt: Interrupt, entry: ResumeEntry) -> str | None:
    """What is wrong with ``entry``'s payload as an answer to ``interrupt`` (the shape its
    ``responseSchema`` advertises), or ``None``.

    pydantic-ai checks the approval fields only once the stream runs (a RUN_ERROR), and a tool's
    question not at all: an approval without its answer would run the tool again, repeat what it
    did before asking, and ask again.
    """
    if entry.status == "cancelled":
        return None
    try:
        approval = resume_entry_to_approval(entry)
    except UserError as exc:
        return str(exc)
    metadata = interrupt.metadata if isinstance(interrupt.metadata, dict) else {}
    if isinstance(approval, ToolApproved) and metadata.get("kind") == QUESTION_KIND:
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if not isinstance(payload.get(ANSWER_KEY), str):
            return (
                f"interrupt {entry.interrupt_id!r} is a tool's question: approving it needs the answer,"
                f' a string in "{ANSWER_KEY}" (or "approved": false to decline)'
            )
    return None


def with_question_interrupts(event: BaseEvent) -> BaseEvent:
    """A RUN_FINISHED whose interrupts went through ``for_client``; any other event unchanged."""
    outcome = getattr(event, "outcome", None)
    if event.type != EventType.RUN_FINISHED or getattr(outcome, "type", None) != "interrupt":
        return event
    interrupts = [for_client(i) for i in outcome.interrupts]  # type: ignore[union-attr]
    return event.model_copy(update={"outcome": outcome.model_copy(update={"interrupts": interrupts})})  # type: ignore[union-attr]
