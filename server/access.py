"""Who may see and use a thread: the one access rule every route and every run start calls.

A thread belongs to the principal whose first run created it. To anyone else it does not exist:
every refusal is ``ThreadNotFound``, the same answer as for a thread that was never created, so
ids cannot be probed. A thread that was never saved is free: a new run may claim it. Runs follow
their thread (``RunManager.find`` applies the same rule to run ids).
"""

from __future__ import annotations

from rag_tools.state import CacheEntry, ToolContextCache

__all__ = ["ThreadNotFound", "check_claimable", "may_use", "owned_entry"]


class ThreadNotFound(LookupError):
    """The thread does not exist for this principal (absent, or someone else's)."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"thread {thread_id!r} not found")
        self.thread_id = thread_id


def may_use(owner: str | None, principal: str) -> bool:
    """The rule itself: an unowned (new) thread, or one of the principal's own."""
    return owner is None or owner == principal


async def owned_entry(cache: ToolContextCache, thread_id: str, principal: str) -> CacheEntry:
    """The cache entry of a saved thread that ``principal`` owns; ``ThreadNotFound`` otherwise."""
    entry = await cache.get_entry(thread_id)
    if entry.is_new or not may_use(entry.record.owner, principal):
        raise ThreadNotFound(thread_id)
    return entry


async def check_claimable(cache: ToolContextCache, thread_id: str, principal: str) -> None:
    """``ThreadNotFound`` unless a run of ``principal`` may use the thread (new, or its own)."""
    entry = await cache.get_entry(thread_id)
    if not may_use(entry.record.owner, principal):
        raise ThreadNotFound(thread_id)
