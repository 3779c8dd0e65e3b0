"""Threads as the HTTP API shows them: listing, the hydration view of one thread, deletion, policy.

Access follows the one rule in ``server.access``: a thread that is not the caller's does not
exist. The hydration view is what a reloaded page needs to continue: the messages in AG-UI form,
the state exactly as runs emit it, the interrupts still waiting for an answer and the active run.
Tool attachments are read one at a time, by reference.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import Interrupt

from rag_tools.tools import APPROVAL_NAMESPACE, ATTACHMENTS_NAMESPACE, ApprovalPolicy, ToolAttachments
from rag_tools.tools.results import AttachmentRecord

from .access import StateItemNotFound, owned_entry
from .agui.history import agui_messages, stored_messages
from .agui.interrupts import interrupt_of
from .runs import RunConflict
from .services import Services

__all__ = [
    "attachment",
    "delete_thread",
    "list_threads",
    "set_approval_policy",
    "state_item",
    "thread_view",
]


async def list_threads(services: Services, principal: str, limit: int) -> list[dict[str, Any]]:
    infos = await services.store.list_threads(principal, limit=limit)
    return [
        {"threadId": i.thread_id, "title": i.title, "updatedAt": i.updated_at, "version": i.version}
        for i in infos
    ]


async def thread_view(services: Services, thread_id: str, principal: str) -> dict[str, Any]:
    entry = await owned_entry(services.cache, thread_id, principal)
    _, conversation = await stored_messages(entry.record.extras, thread_id)
    messages = await agui_messages(entry.record.extras, thread_id)
    interrupts: list[Interrupt] = []
    pending_calls: list[str] = []
    if conversation is not None and conversation.deferred_tool_requests is not None:
        requests = conversation.deferred_tool_requests
        interrupts = [interrupt_of(call, requests.metadata) for call in requests.approvals]
        pending_calls = [call.tool_call_id for call in requests.calls]
    return {
        "threadId": thread_id,
        "title": entry.record.title,
        "updatedAt": entry.record.updated_at,
        "version": entry.record.version,
        "messages": [m.model_dump(mode="json", by_alias=True) for m in messages],
        "state": entry.context.build_state_snapshot(),
        "interrupts": [i.model_dump(mode="json", by_alias=True) for i in interrupts],
        "pendingToolCallIds": pending_calls,
        "activeRunId": await services.runs.locks.holder(thread_id),
    }


async def state_item(
    services: Services, thread_id: str, principal: str, field: str, key: str | None = None
) -> Any:
    """A state field in full (beyond what runs emit of it), or one of its items by key.

    Runs emit only the latest items of growing fields (citations, searches, QA history); the rest
    stays with the thread and is read here, e.g. the card of an old answer's ``[n]``.
    """
    entry = await owned_entry(services.cache, thread_id, principal)
    try:
        return entry.context.read_field(field) if key is None else entry.context.read_item(field, key)
    except KeyError:
        what = f"{field!r}" if key is None else f"{field}[{key!r}]"
        raise StateItemNotFound(f"thread {thread_id!r} has no state item {what}") from None


async def attachment(
    services: Services, thread_id: str, principal: str, ref: str
) -> tuple[AttachmentRecord, bytes]:
    """A tool attachment the thread keeps (``ToolResult.attachments``): its record and bytes."""
    entry = await owned_entry(services.cache, thread_id, principal)
    kept = entry.context.get(ATTACHMENTS_NAMESPACE, ToolAttachments)
    found = kept.content(ref) if kept is not None else None
    if found is None:
        raise StateItemNotFound(f"thread {thread_id!r} keeps no attachment {ref!r}")
    return found


async def _check_idle(services: Services, thread_id: str, doing: str) -> None:
    if await services.runs.locks.holder(thread_id) is not None:
        raise RunConflict(f"thread {thread_id!r} has a run in progress; {doing}", "thread_busy")


async def delete_thread(services: Services, thread_id: str, principal: str) -> None:
    await owned_entry(services.cache, thread_id, principal)
    await _check_idle(services, thread_id, "stop it first")
    await services.cache.delete(thread_id)


async def set_approval_policy(
    services: Services, thread_id: str, principal: str, patterns: list[str]
) -> list[str]:
    """Replace the thread's list of tools (names or globs) that need approval; saved at once."""
    await owned_entry(services.cache, thread_id, principal)
    await _check_idle(services, thread_id, "change its policy after it ends")
    async with services.cache.transaction(thread_id) as entry:
        policy = entry.context.get_or_create(APPROVAL_NAMESPACE, ApprovalPolicy)
        policy.need_user_approve_tools = list(dict.fromkeys(patterns))
        entry.context.mark_changed(APPROVAL_NAMESPACE)
    return policy.need_user_approve_tools
