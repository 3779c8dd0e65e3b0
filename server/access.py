"""Who may see and use a thread: the one access rule every route and every run start calls.

A thread belongs to the principal whose first run created it. To anyone else it does not exist:
every refusal is ``ThreadNotFound``, the same answer as for a thread that was never created, so
ids cannot be probed. A thread that was never saved is free: a new run may claim it. Runs follow
their thread (``RunManager.find`` applies the same rule to run ids). Ingestion jobs follow the same
rule: another principal's job does not exist.

Changing the knowledge base (upload, delete) is for editors: the configured list of principals, or
the single local principal when no tokens are configured. Reading and searching is for everyone.
"""

from __future__ import annotations

from collections.abc import Collection

from rag_tools.state import CacheEntry, ToolContextCache

__all__ = [
    "LOCAL_PRINCIPAL",
    "JobFinished",
    "JobNotFound",
    "MessageNotFound",
    "NotAnEditor",
    "StateItemNotFound",
    "ThreadNotFound",
    "check_claimable",
    "check_editor",
    "check_job_owner",
    "may_use",
    "owned_entry",
]


#: Who every caller is when no tokens are configured (a one-user machine).
LOCAL_PRINCIPAL = "local"


class ThreadNotFound(LookupError):
    """The thread does not exist for this principal (absent, or someone else's)."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"thread {thread_id!r} not found")
        self.thread_id = thread_id


class StateItemNotFound(LookupError):
    """No such field in the thread's state, or no such item in it (an attachment, a card)."""


class MessageNotFound(LookupError):
    """The thread (which the caller may see) holds no message with this id, on any branch."""

    def __init__(self, thread_id: str, message_id: str) -> None:
        super().__init__(f"thread {thread_id!r} has no message {message_id!r}")
        self.message_id = message_id


class JobNotFound(LookupError):
    """The ingestion job does not exist for this principal (absent, expired, or someone else's)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"ingestion job {job_id!r} not found")
        self.job_id = job_id


class JobFinished(ValueError):
    """The job has ended (done, failed or cancelled): there is nothing left to cancel."""

    def __init__(self, job_id: str, state: str) -> None:
        super().__init__(f"job {job_id!r} has already ended ({state}); there is nothing to cancel")


class NotAnEditor(PermissionError):
    """The principal may read the knowledge base but not change it."""

    def __init__(self, principal: str) -> None:
        super().__init__(
            f"{principal!r} may read and search the knowledge base but not change it: "
            "uploading and deleting documents is for the principals in RAGSTREAM_EDITORS"
        )


def check_editor(principal: str, editors: Collection[str], *, tokens_configured: bool) -> None:
    """``NotAnEditor`` unless ``principal`` may upload and delete documents."""
    if tokens_configured and principal not in editors:
        raise NotAnEditor(principal)


def check_job_owner(job_id: str, owner: str | None, principal: str) -> None:
    """``JobNotFound`` unless the job exists (``owner`` is not ``None``) and is the principal's."""
    if owner is None or owner != principal:
        raise JobNotFound(job_id)


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
