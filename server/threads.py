"""Threads as the HTTP API shows them: listing, the hydration view of one thread, deletion.

A thread belongs to the principal that created it; to anyone else it does not exist (404).
The hydration view is what a reloaded page needs to continue: the messages in AG-UI form, the
state exactly as runs emit it, the interrupts still waiting for an answer and the active run.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import Interrupt
from pydantic_ai.ui.ag_ui._interrupt import approval_to_interrupt  # what RUN_FINISHED carries, byte for byte

from rag_tools.state import CacheEntry
from rag_tools.tools import APPROVAL_NAMESPACE, ApprovalPolicy

from .errors import ApiError
from .history import agui_messages, stored_messages
from .services import Services

__all__ = [
    "check_thread_access",
    "delete_thread",
    "list_threads",
    "owned_entry",
    "set_approval_policy",
    "thread_view",
]


async def owned_entry(services: Services, thread_id: str, principal: str) -> CacheEntry:
    """The thread's cache entry if ``principal`` owns it; ``ApiError(404)`` otherwise."""
    entry = await services.cache.get_entry(thread_id)
    if entry.is_new or entry.record.owner != principal:
        raise ApiError(404, f"thread {thread_id!r} not found")
    return entry


async def check_thread_access(services: Services, thread_id: str, principal: str) -> None:
    """``ApiError(404)`` when the thread exists and belongs to someone else (new threads are fine)."""
    entry = await services.cache.get_entry(thread_id)
    if entry.record.owner is not None and entry.record.owner != principal:
        raise ApiError(404, f"thread {thread_id!r} not found")


async def list_threads(services: Services, principal: str, limit: int) -> list[dict[str, Any]]:
    infos = await services.store.list_threads(principal, limit=limit)
    return [
        {"threadId": i.thread_id, "title": i.title, "updatedAt": i.updated_at, "version": i.version}
        for i in infos
    ]


async def thread_view(services: Services, thread_id: str, principal: str) -> dict[str, Any]:
    entry = await owned_entry(services, thread_id, principal)
    _, conversation = await stored_messages(entry.record.extras, thread_id)
    messages = await agui_messages(entry.record.extras, thread_id)
    interrupts: list[Interrupt] = []
    pending_calls: list[str] = []
    if conversation is not None and conversation.deferred_tool_requests is not None:
        requests = conversation.deferred_tool_requests
        interrupts = [approval_to_interrupt(call, requests.metadata) for call in requests.approvals]
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


async def delete_thread(services: Services, thread_id: str, principal: str) -> None:
    await owned_entry(services, thread_id, principal)
    if await services.runs.locks.holder(thread_id) is not None:
        raise ApiError(409, f"thread {thread_id!r} has a run in progress; stop it first", code="thread_busy")
    await services.cache.delete(thread_id)


async def set_approval_policy(
    services: Services, thread_id: str, principal: str, patterns: list[str]
) -> list[str]:
    """Replace the thread's list of tools (names or globs) that need approval; saved at once."""
    await owned_entry(services, thread_id, principal)
    if await services.runs.locks.holder(thread_id) is not None:
        raise ApiError(
            409,
            f"thread {thread_id!r} has a run in progress; change its policy after it ends",
            code="thread_busy",
        )
    async with services.cache.transaction(thread_id) as entry:
        policy = entry.context.get_or_create(APPROVAL_NAMESPACE, ApprovalPolicy)
        policy.need_user_approve_tools = list(dict.fromkeys(patterns))
        entry.context.mark_changed(APPROVAL_NAMESPACE)
    return policy.need_user_approve_tools
