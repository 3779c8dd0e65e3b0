"""Threads as the HTTP API shows them: listing, the hydration view of one thread, deletion, policy.

Access follows the one rule in ``ragstream.access``: a thread that is not the caller's does not
exist. The hydration view is what a reloaded page needs to continue: the messages in AG-UI form,
the state exactly as runs emit it, the interrupts still waiting for an answer and the active run.
Tool attachments are read one at a time, by reference.

The conversation is a tree (``agui.tree``): ``switch_branch`` makes another branch the one shown
(and its state the thread's), ``fork_thread`` copies the path up to a message into a new thread.
"""

from __future__ import annotations

import base64
import functools
import operator
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson

from rag_tools.kb import KnowledgeBase
from rag_tools.kb.access import ALL, Reader
from rag_tools.readable import NOTHING_WITHHELD, DocumentNames, Withholding, hides_any, unreadable_names
from rag_tools.state import (
    SESSION_NAMESPACE,
    CacheEntry,
    ListPosition,
    SessionState,
    ThreadRecord,
    ToolContext,
)
from rag_tools.tools import (
    APPROVAL_NAMESPACE,
    ATTACHMENTS_NAMESPACE,
    THREAD_NAMESPACES,
    ApprovalPolicy,
    ToolAttachments,
)
from rag_tools.tools.results import AttachmentRecord

from .access import MessageNotFound, StateItemNotFound, ThreadNotFound, owned_entry
from .agui.branch_state import fork_states, restore_state_at, state_at
from .agui.history import (
    conversation_of,
    drop_unreadable_from_thread,
    path_title,
    stored_record,
    thread_messages,
)
from .agui.interrupts import pending_interrupts
from .agui.tree import ConversationTree
from .runs import FailureCode, RunConflict, RunFailure, RunInfo, RunNotFound
from .services import Services
from .validation import InvalidRequest

__all__ = [
    "attachment",
    "delete_thread",
    "fork_thread",
    "list_threads",
    "readable_run_events",
    "set_approval_policy",
    "state_item",
    "switch_branch",
    "thread_view",
]


async def list_threads(
    services: Services, principal: str, limit: int, cursor: str | None = None
) -> dict[str, Any]:
    """A page of the principal's threads, newest first; ``next`` is the cursor of the page after
    it (``None`` on the last page)."""
    infos = await services.store.list_threads(
        principal, limit=limit, after=None if cursor is None else _position(cursor)
    )
    return {
        "threads": [
            {"threadId": i.thread_id, "title": i.title, "updatedAt": i.updated_at, "version": i.version}
            for i in infos
        ],
        "next": _cursor(infos[-1].position) if len(infos) == limit else None,
    }


def _cursor(position: ListPosition) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(position)).decode().rstrip("=")


def _position(cursor: str) -> ListPosition:
    """The listing position a cursor of ``_cursor`` names; ``InvalidRequest`` for anything else."""
    try:
        updated, thread_id = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(updated, int | float) and isinstance(thread_id, str):
            return (float(updated), thread_id)
    except (ValueError, TypeError):
        pass
    raise InvalidRequest(
        "cursor is not one this server gave (take it from a listing's next)", [{"loc": ["query", "cursor"]}]
    )


async def _readable_state(
    services: Services, context: ToolContext, reader: Reader, extras: dict[str, Any] | None = None
) -> tuple[ToolContext, Withholding]:
    """The thread's state as ``reader`` may see it now (a copy without what it may not read), and
    which tool results on the active path of ``extras`` (when given) the reader may not see."""
    if reader.reads_all and not hides_any(context):
        return context, NOTHING_WITHHELD
    view = context.view()
    withholding = await drop_unreadable_from_thread(view, services.kb.restricted(reader), extras)
    return view, withholding


async def thread_view(
    services: Services, thread_id: str, principal: str, reader: Reader = ALL
) -> dict[str, Any]:
    """What a reloaded page needs; the state holds only what ``reader`` may read now.

    A new thread whose first run (the caller's) is under way has a view too, with nothing saved
    yet (``saved`` false) and the run to follow: a page reloaded during a new chat's first answer
    picks it up as it would any other.
    """
    active_run = await services.runs.locks.holder(thread_id)
    try:
        entry = await owned_entry(services.cache, thread_id, principal)
    except ThreadNotFound:
        entry = await _first_run_entry(services, thread_id, principal, active_run)
    context, withholding = await _readable_state(services, entry.context, reader, entry.record.extras)
    state = context.build_state_snapshot()
    conversation = stored_record(entry.record.extras, thread_id)
    path = thread_messages(entry.record.extras, withholding or None)
    requests = conversation.deferred_tool_requests if conversation is not None else None
    pending_calls = [call.tool_call_id for call in requests.calls] if requests is not None else []
    return {
        "threadId": thread_id,
        "title": entry.record.title,
        "updatedAt": entry.record.updated_at,
        "version": entry.record.version,
        "messages": [m.model_dump(mode="json", by_alias=True) for m in path.messages],
        "branches": path.branches,
        "editedArgs": path.edited_args,
        "state": state,
        "interrupts": [i.model_dump(mode="json", by_alias=True) for i in pending_interrupts(conversation)],
        "pendingToolCallIds": pending_calls,
        "activeRunId": active_run,
        "saved": not entry.is_new,
    }


async def _first_run_entry(
    services: Services, thread_id: str, principal: str, run_id: str | None
) -> CacheEntry:
    """The entry of a new thread whose first run, ``run_id``, ``principal`` started and is under
    way; ``ThreadNotFound`` otherwise (as for a thread that is someone else's)."""
    entry = await services.cache.get_entry(thread_id)
    if entry.is_new and run_id is not None:
        try:
            await services.runs.find(thread_id, run_id, principal)
        except RunNotFound:
            pass
        else:
            return entry
    raise ThreadNotFound(thread_id)


async def state_item(
    services: Services,
    thread_id: str,
    principal: str,
    field: str,
    key: str | None = None,
    reader: Reader = ALL,
) -> Any:
    """A state field in full (beyond what runs emit of it), or one of its items by key.

    Runs emit only the latest items of growing fields (citations, searches, QA history); the rest
    stays with the thread and is read here, e.g. the card of an old answer's ``[n]``.
    """
    entry = await owned_entry(services.cache, thread_id, principal)
    context, _ = await _readable_state(services, entry.context, reader)
    try:
        return context.read_field(field) if key is None else context.read_item(field, key)
    except KeyError:
        what = f"{field!r}" if key is None else f"{field}[{key!r}]"
        raise StateItemNotFound(f"thread {thread_id!r} has no state item {what}") from None


async def attachment(
    services: Services, thread_id: str, principal: str, ref: str, reader: Reader = ALL
) -> tuple[AttachmentRecord, bytes]:
    """A tool attachment the thread keeps (``ToolResult.attachments``): its record and bytes, when
    ``reader`` may read what the tool's result named (else not found, as if it were not kept)."""
    entry = await owned_entry(services.cache, thread_id, principal)
    context, _ = await _readable_state(services, entry.context, reader)
    kept = context.get(ATTACHMENTS_NAMESPACE, ToolAttachments)
    found = kept.content(ref) if kept is not None else None
    if found is None:
        raise StateItemNotFound(f"thread {thread_id!r} keeps no attachment {ref!r}")
    return found


async def readable_run_events(
    services: Services, info: RunInfo, after: int, reader: Reader = ALL
) -> AsyncIterator[list[tuple[int, bytes]]]:
    """The run's events after ``after`` (``RunManager.subscribe``), as ``reader`` may see them.

    A run's event log keeps what the run streamed for a while after it ends; a document may have
    left the reader's groups since, or be gone. For a reader who cannot read everything, the
    replay stops before the first event naming a document it may not read now (by id, by ``uri``,
    or by the thread's citation number, as a patch to ``/citations/{n}`` does), with a
    ``withheld`` error (the thread itself shows what the reader may see).
    """
    batches = services.runs.subscribe(info, after)
    if reader.reads_all:
        async for batch in batches:
            yield batch
        return
    kb = services.kb.restricted(reader)
    cited = _CitedDocuments(services, info.thread_id)
    try:
        async for batch in batches:
            named = [(i, names) for i, (_, data) in enumerate(batch) if (names := _names_in_event(data))]
            every = functools.reduce(operator.or_, (names for _, names in named), DocumentNames())
            if every and not await _all_readable(kb, every, cited):  # one look per batch; then the event
                for index, names in named:
                    if not await _all_readable(kb, names, cited):
                        if index:
                            yield batch[:index]
                        withheld = RunFailure(FailureCode.WITHHELD)
                        yield [(batch[index][0], services.runs.encode_failure(withheld))]
                        return
            yield batch
    finally:
        await batches.aclose()  # type: ignore[attr-defined]


def _names_in_event(data: bytes) -> DocumentNames:
    """The documents an encoded AG-UI event names: in its fields, in tool results given as JSON
    text, and in the citation cards its state patches change (``/citations/3/passage``)."""
    event = orjson.loads(data)
    names = DocumentNames.of(event)
    for text in _json_texts(event):
        names |= DocumentNames.in_text(text)
    if event.get("type") == "STATE_DELTA":
        patched = {int(m[1]) for op in event.get("delta", ()) if (m := _CARD_PATH.match(str(op.get("path"))))}
        if patched:
            names |= DocumentNames(citations=frozenset(patched))
    return names


_CARD_PATH = re.compile(r"^/citations/(\d+)(?:/|$)")


class _CitedDocuments:
    """The documents a thread's citation numbers point at, read from the thread once, when asked."""

    def __init__(self, services: Services, thread_id: str) -> None:
        self._services = services
        self._thread_id = thread_id
        self._session: SessionState | None = None
        self._read = False

    async def of(self, citations: frozenset[int]) -> dict[int, str | None]:
        if not self._read:
            entry = await self._services.cache.get_entry(self._thread_id)
            self._session = entry.context.get(SESSION_NAMESPACE, SessionState)
            self._read = True
        if self._session is None:
            return dict.fromkeys(citations)
        return self._session.documents_of(citations)


def _json_texts(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and item.startswith(("{", "[")):
            yield item


async def _all_readable(kb: KnowledgeBase, names: DocumentNames, cited: _CitedDocuments) -> bool:
    """Whether the reader may read every document ``names`` names, by the rule the thread's tool
    results are withheld by (``unreadable_names``: a document gone counts as unreadable); a citation
    number the thread cannot place counts as unreadable too."""
    documents = await cited.of(names.citations) if names.citations else {}
    if any(document is None for document in documents.values()):
        return False
    return not await unreadable_names(kb, names, documents)


async def _idle_owned_entry(services: Services, thread_id: str, principal: str, doing: str) -> CacheEntry:
    """``owned_entry`` of a thread no run is streaming on; ``RunConflict`` (409) while one is.

    A thread's first run saves it only when it ends: meanwhile, on another host, the thread is
    not stored yet, and a caller whose own run holds it gets the 409 rather than a 404 that would
    let a delete "succeed" before the run saves the thread."""
    busy = RunConflict(f"thread {thread_id!r} has a run in progress; {doing}", "thread_busy")
    try:
        entry = await owned_entry(services.cache, thread_id, principal)
    except ThreadNotFound:
        run_id = await services.runs.locks.holder(thread_id)
        if run_id is None:
            raise
        try:
            await services.runs.find(thread_id, run_id, principal)
        except RunNotFound:
            raise ThreadNotFound(thread_id) from None
        raise busy from None
    if await services.runs.locks.holder(thread_id) is not None:
        raise busy
    return entry


async def delete_thread(services: Services, thread_id: str, principal: str) -> None:
    await _idle_owned_entry(services, thread_id, principal, "stop it first")
    await services.runs.forget(thread_id)
    await services.cache.delete(thread_id)


async def set_approval_policy(
    services: Services, thread_id: str, principal: str, patterns: list[str]
) -> list[str]:
    """Replace the thread's list of tools (names or globs) that need approval; saved at once."""
    await _idle_owned_entry(services, thread_id, principal, "change its policy after it ends")
    async with services.cache.transaction(thread_id) as entry:
        policy = entry.context.get_or_create(APPROVAL_NAMESPACE, ApprovalPolicy)
        policy.need_user_approve_tools = list(dict.fromkeys(patterns))
        entry.context.mark_changed(APPROVAL_NAMESPACE)
    return policy.need_user_approve_tools


async def switch_branch(
    services: Services, thread_id: str, principal: str, message_id: str, reader: Reader = ALL
) -> dict[str, Any]:
    """Show the branch ``message_id`` is on: the path through it, as it was last shown below it.

    The thread's state becomes that branch's, so the next run's baseline shows it; the branch left
    stays stored. Returns the thread view.
    """
    shown = await _idle_owned_entry(services, thread_id, principal, "switch branches after it ends")
    tree = ConversationTree(conversation_of(shown.record.extras))
    target = tree.entry_of(message_id)
    if target is None:
        raise MessageNotFound(thread_id, message_id)
    if tree.tip(target) == tree.head:  # already shown: nothing to save, the thread keeps its place
        return await thread_view(services, thread_id, principal, reader)
    async with services.cache.transaction(thread_id) as entry:
        tree = ConversationTree(conversation_of(entry.record.extras))
        target = tree.entry_of(message_id)
        if target is None:
            raise MessageNotFound(thread_id, message_id)
        head = tree.tip(target)
        if head != tree.head:
            restore_state_at(entry.context, tree.data, head)
            tree.move_head(head, str(uuid.uuid4()))
            entry.record.title = path_title(entry.record.extras) or entry.record.title
    return await thread_view(services, thread_id, principal, reader)


async def fork_thread(
    services: Services, thread_id: str, principal: str, message_id: str, reader: Reader = ALL
) -> dict[str, Any]:
    """A new thread of ``principal``'s holding the path up to ``message_id`` and the state it had there.

    The thread's settings (approval policy, kept tool outputs and attachments) come along; the
    branches off the path do not. Returns the new thread's view.
    """
    entry = await owned_entry(services.cache, thread_id, principal)
    data = conversation_of(entry.record.extras)
    tree = ConversationTree(data)
    target = tree.entry_of(message_id)
    if target is None:
        raise MessageNotFound(thread_id, message_id)
    new_id = uuid.uuid4().hex
    path = tree.path(target)
    context = ToolContext.from_dump(entry.record.state)
    branch = state_at(data, target)
    if branch is not None:
        context.restore_branch(branch, exclude=THREAD_NAMESPACES)
    source = dict(data["record"])
    record = {
        **source,
        "conversation_id": new_id,
        "head_id": target,
        "branches": [],
        # the calls the fork point waits on: the record's when it is the head, else kept with the tip
        "deferred_tool_requests": (
            source.get("deferred_tool_requests")
            if target == tree.head
            else data.get("deferred", {}).get(target)
        ),
        "scope": principal,
        "forked_from": thread_id,
        "forked_at": target,
        "revision": str(uuid.uuid4()),
    }
    entries = {key: orjson.loads(orjson.dumps(tree.entries[key])) for key in path}
    conversation = {"record": record, "entries": entries, **fork_states(context, target)}
    ConversationTree(conversation).mark_shown(target)
    await services.store.save(
        ThreadRecord(
            new_id,
            owner=principal,
            title=path_title({"conversation": conversation}) or entry.record.title,
            state=context.dump_namespaces(),
            extras={"conversation": conversation},
        )
    )
    return await thread_view(services, new_id, principal, reader)
