"""Who may see and use a thread: the one access rule every route and every run start calls.

A thread belongs to the principal whose first run created it. To anyone else it does not exist:
every refusal is ``ThreadNotFound``, the same answer as for a thread that was never created, so
ids cannot be probed. A thread that was never saved is free: a new run may claim it. Runs follow
their thread (``RunManager.find`` applies the same rule to run ids). Ingestion jobs follow the same
rule: another principal's job does not exist.

Changing the knowledge base (upload, delete, regrouping) is for editors: the configured principals and the
members of the configured groups, or the single local principal when nobody signs in.

Reading is per document (``rag_tools.kb.access``: a document names the groups that may read it,
none meaning everyone). ``reader_of`` turns a caller into the ``Reader`` every knowledge-base
query of that caller applies: the principals named in ``editors`` (the administrators) and the
local principal read every document; everyone else reads the public ones and their groups'.
``check_document_editor`` is the change rule: an administrator changes any document; a member of
an editor group changes only documents whose groups are all among its own groups (a public
document has none, so it qualifies), and may give a document only groups among its own (or none).
A document the caller may not read does not exist for it (``DocumentNotFound``, as for a missing
one); one it may read but not change is ``DocumentForbidden``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rag_tools.kb import Document, KnowledgeBase
from rag_tools.kb.access import ALL, Reader
from rag_tools.state import CacheEntry, ToolContextCache

__all__ = [
    "LOCAL_PRINCIPAL",
    "DocumentForbidden",
    "DocumentNotFound",
    "JobFinished",
    "JobNotFound",
    "MessageNotFound",
    "NotAnEditor",
    "StateItemNotFound",
    "ThreadNotFound",
    "check_claimable",
    "check_document_change",
    "check_document_editor",
    "check_editor",
    "check_job_owner",
    "may_use",
    "owned_entry",
    "reader_of",
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
            "uploading and deleting documents is for the principals in RAGSTREAM_EDITORS and the "
            "members of RAGSTREAM_EDITOR_GROUPS"
        )


def check_editor(
    principal: str,
    groups: Collection[str],
    *,
    editors: Collection[str],
    editor_groups: Collection[str],
    sign_in_required: bool,
) -> None:
    """``NotAnEditor`` unless ``principal`` may upload and delete documents: it is named in
    ``editors`` or belongs to one of ``editor_groups`` (anyone, when nobody signs in)."""
    if is_administrator(principal, editors=editors, sign_in_required=sign_in_required):
        return
    if not any(group in editor_groups for group in groups):
        raise NotAnEditor(principal)


class DocumentNotFound(LookupError):
    """No such document for this caller (absent, or one it may not read: existence is not revealed)."""

    def __init__(self, document_id: str) -> None:
        super().__init__(f"document {document_id!r} not found")
        self.document_id = document_id


class DocumentForbidden(PermissionError):
    """An editor may read the document (or name the groups) but not change it (or give them)."""


def is_administrator(principal: str, *, editors: Collection[str], sign_in_required: bool) -> bool:
    """A principal named in ``editors`` (or the local principal when nobody signs in): it reads and
    changes every document."""
    return not sign_in_required or principal in editors


def reader_of(
    principal: str, groups: Collection[str], *, editors: Collection[str], sign_in_required: bool
) -> Reader:
    """Whose documents ``principal`` reads: every one for an administrator, else the public ones and
    those of its ``groups``."""
    if is_administrator(principal, editors=editors, sign_in_required=sign_in_required):
        return ALL
    return Reader.member_of(groups)


def check_document_editor(
    principal: str,
    groups: Collection[str],
    *,
    document_id: str | None,
    current: Sequence[str] | None,
    new: Sequence[str] | None,
    editors: Collection[str],
    editor_groups: Collection[str],
    sign_in_required: bool,
) -> None:
    """May ``principal`` (an editor: ``check_editor`` first) change a document whose groups are
    ``current`` (``None``: a new document) into one readable by ``new`` (``None``: unchanged)?

    An administrator may do anything. A group editor may change a document only when all of its
    current groups are among the editor's (none, for a public one) and may give it only groups
    among its own: ``DocumentNotFound`` for an existing document it may not read,
    ``DocumentForbidden`` otherwise.
    """
    check_editor(
        principal, groups, editors=editors, editor_groups=editor_groups, sign_in_required=sign_in_required
    )
    if is_administrator(principal, editors=editors, sign_in_required=sign_in_required):
        return
    own = frozenset(groups)
    if current is not None and document_id is not None:
        if current and own.isdisjoint(current):
            raise DocumentNotFound(document_id)
        outside = sorted(set(current) - own)
        if outside:
            raise DocumentForbidden(
                f"{principal!r} may not change document {document_id!r}: it is also readable by "
                f"{', '.join(outside)}, groups {principal!r} is not a member of"
            )
    outside = sorted(set(new or ()) - own)
    if outside:
        raise DocumentForbidden(
            f"{principal!r} may only give documents groups it is a member of, not {', '.join(outside)}"
        )


async def check_document_change(
    kb: KnowledgeBase,
    principal: str,
    groups: Collection[str],
    document_id: str,
    *,
    new: Sequence[str] | None,
    must_exist: bool,
    editors: Collection[str],
    editor_groups: Collection[str],
    sign_in_required: bool,
) -> Document | None:
    """``check_document_editor`` for the document ``document_id`` as ``kb`` (unrestricted) holds it
    now; a new one when ``must_exist`` is false. Returns the document as checked (``None``: no such
    document yet), which the write then expects to be unchanged."""
    document = await kb.get_document_by_id(document_id)
    if document is None and must_exist:
        raise DocumentNotFound(document_id)
    check_document_editor(
        principal,
        groups,
        document_id=document_id,
        current=document.groups if document is not None else None,
        new=new,
        editors=editors,
        editor_groups=editor_groups,
        sign_in_required=sign_in_required,
    )
    return document


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
