"""Message history: pydantic-ai's ``ConversationStore`` kept inside the thread's stored record.

The conversation of a thread (its entries and record) lives in ``ThreadRecord.extras`` next to the
thread's state, so the AG-UI adapter loads and saves it through the standard ``ConversationStore``
API while ragstream persists both in one atomic write when a run succeeds, and discards both when
it fails. A store instance is bound to one cache entry for the duration of a run.

Entries are stored with the AG-UI ids they show as (``message_ids``), so what a run streamed is
what the thread returns; the entries form a tree whose active path is the conversation
(``tree``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from ag_ui.core import Message
from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.ui.ag_ui import AGUIAdapter

from rag_tools.kb import KnowledgeBase
from rag_tools.readable import DocumentNames, Withholding, drop_unreadable
from rag_tools.state import ToolContext
from rag_tools.tools.approval import EDITED_ARGS_KEY

from .message_ids import RunIds, entry_ui, load_message, load_messages, rename_taken_ids
from .tree import CONVERSATION_KEY, ConversationTree, empty_conversation

__all__ = [
    "CONVERSATION_KEY",
    "ThreadConversationStore",
    "ThreadPath",
    "Withhold",
    "conversation_of",
    "drop_unreadable_from_thread",
    "path_document_names",
    "path_title",
    "stored_messages",
    "stored_record",
    "thread_messages",
    "thread_title",
]

_records: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)


def conversation_of(extras: dict[str, Any]) -> dict[str, Any]:
    """The thread's stored conversation data (created empty in ``extras`` when it has none)."""
    data = extras.get(CONVERSATION_KEY)
    if data is None:
        data = extras[CONVERSATION_KEY] = empty_conversation()
    return data  # type: ignore[no-any-return]


def _dump_entry(entry: ConversationEntry, ids: RunIds | None) -> dict[str, Any]:
    if ids is not None:
        ids.stamp(entry.message)
    # Messages go through ModelMessagesTypeAdapter: it carries binary content as base64.
    message = ModelMessagesTypeAdapter.dump_python([entry.message], mode="json")[0]
    raw = {"id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind, "message": message}
    raw["ui"] = entry_ui(raw, entry.message, ids)
    if _tool_returns(raw):  # kept beside the results, so serving a thread need not read them all
        raw[_NAMES_KEY] = _names_of(raw)
    return raw


def _without_repeated_parts(entries: dict[str, Any], entry: ConversationEntry) -> ConversationEntry:
    """``entry`` without the parts it repeats of the request it follows.

    A path may end with a request no answer follows (a fork up to a question). pydantic-ai merges
    the client's next turn into a copy of that request and saves the copy below it: the path would
    hold the question twice (the model sees it twice from then on, and the thread shows the new
    message's id on both). The entry keeps what the turn added; the model still got both at once.
    """
    parent = entries.get(entry.parent_id) if entry.parent_id is not None else None
    message = entry.message
    if parent is None or parent["message"].get("kind") != "request" or not isinstance(message, ModelRequest):
        return entry
    stored = parent["message"].get("parts", [])
    parts = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]["parts"]
    if not stored or len(parts) <= len(stored) or parts[: len(stored)] != stored:
        return entry
    return replace(entry, message=replace(message, parts=message.parts[len(stored) :]))


Withhold = Callable[[Any], Any]
"""A tool result as a reader may see it (``rag_tools.readable.Withholding``): itself or a stand-in."""

_TOOL_RETURN = "tool-return"


def _tool_returns(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in raw["message"].get("parts", ()) if p.get("part_kind") == _TOOL_RETURN]


def _withheld(raw: dict[str, Any], withhold: Withhold) -> dict[str, Any]:
    """``raw``, or a copy whose tool results ``withhold`` replaces (the stored entry is not changed)."""
    shown, changed = [], False
    for part in raw["message"].get("parts", ()):
        if part.get("part_kind") == _TOOL_RETURN:
            named = _named_by(part)  # a cut result names in its metadata what the whole named
            stand_in = withhold(named)
            if stand_in is not named:
                part, changed = {**part, "content": stand_in, "metadata": None}, True
        shown.append(part)
    return {**raw, "message": {**raw["message"], "parts": shown}} if changed else raw


_NAMES_KEY = "names"


def _names_of(raw: dict[str, Any]) -> dict[str, list[Any]]:
    """What an entry's tool results name (``DocumentNames`` as JSON): as stored with it, or read
    from them (an entry stored before names were)."""
    stored = raw.get(_NAMES_KEY)
    if stored is not None:
        return stored  # type: ignore[no-any-return]
    returns = _tool_returns(raw)
    return DocumentNames.of([_named_by(p) for p in returns]).to_json() if returns else {}


def _named_by(part: dict[str, Any]) -> list[Any]:
    """Where a stored tool result names documents: its content and its metadata. Content given as
    text is read as JSON when it is (a failed ``ToolResult``'s message is its output's JSON)."""
    content = part.get("content")
    if isinstance(content, str):
        content = DocumentNames.in_text(content).references()
    return [content, part.get("metadata")]


def path_document_names(extras: dict[str, Any]) -> DocumentNames:
    """Everything the tool results on the thread's active path name."""
    data = extras.get(CONVERSATION_KEY)
    if not data or data.get("record") is None:
        return DocumentNames()
    tree = ConversationTree(data)
    return DocumentNames.from_json_many(_names_of(tree.entries[key]) for key in tree.path())


async def drop_unreadable_from_thread(
    context: ToolContext, kb: KnowledgeBase, extras: dict[str, Any] | None = None
) -> Withholding:
    """``drop_unreadable`` for a thread: its state ``context``, and the tool results on the active
    path of ``extras`` (none asked for: ``None``). A reader of everything costs next to nothing,
    not even reading what the path's results name."""
    if kb.reader.reads_all:
        return await drop_unreadable(context, kb)  # shows what an earlier reader was not shown
    return await drop_unreadable(
        context, kb, path_document_names(extras) if extras is not None else DocumentNames()
    )


def _load_entry(raw: dict[str, Any]) -> ConversationEntry:
    return ConversationEntry(
        id=raw["id"], parent_id=raw["parent_id"], message=load_message(raw), kind=raw["kind"]
    )


class ThreadConversationStore(ConversationStore):
    """The conversation of one thread, read from and staged into that thread's record extras.

    ``ids`` are the message ids of the run writing through it: its new entries are stored with
    the ids the run streamed (``message_ids``). ``withhold`` replaces the tool results its reader
    may not see in the history it reads (the stored entries keep them).
    """

    def __init__(
        self, extras: dict[str, Any], ids: RunIds | None = None, withhold: Withhold | None = None
    ) -> None:
        self._data: dict[str, Any] = conversation_of(extras)
        self._ids = ids
        self._withhold = withhold

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        raw = self._data.get("record")
        if raw is None:
            return None
        record = _records.validate_python(raw)
        return record if record.conversation_id == conversation_id else None

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        raw = self._data.get("record")
        if raw is None:
            return []
        record = _records.validate_python(raw)
        return [record] if scope is None or record.scope == scope else []

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        current = await self.read_record(record.conversation_id)
        if (current.revision if current is not None else None) != expected_revision:
            raise ConversationConflict(record.conversation_id)
        entries: dict[str, Any] = self._data["entries"]
        if (
            record.head_id is not None
            and record.head_id not in entries
            and record.head_id not in {e.id for e in new_entries}
        ):
            raise ConversationConflict(record.conversation_id)
        for index, entry in enumerate(new_entries):
            if index == 0:
                entry = _without_repeated_parts(entries, entry)
            entries[entry.id] = raw = _dump_entry(entry, self._ids)
            if index == 0:  # where a run's entries branch off: an edit may have reused a sibling's id
                rename_taken_ids(entries, raw)
        self._data["record"] = _records.dump_python(record, mode="json")
        if new_entries and record.head_id is not None:
            ConversationTree(self._data).mark_shown(record.head_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        current = await self.read_record(conversation_id)
        if current is None or current.revision != expected_revision:
            raise ConversationConflict(conversation_id)
        self._data.clear()
        self._data.update(empty_conversation())

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        raw = self._data["entries"].get(entry_id)
        if raw is None:
            raise LookupError(entry_id)
        return _load_entry(raw)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        entries: dict[str, Any] = self._data["entries"]
        chain: list[Any] = []
        while head_id is not None and (limit is None or len(chain) < limit):
            raw = entries.get(head_id)
            if raw is None:
                raise LookupError(head_id)
            chain.append(raw)
            head_id = raw.get("parent_id")
        chain.reverse()
        if self._withhold is not None:
            chain = [_withheld(raw, self._withhold) for raw in chain]
        return [
            ConversationEntry(id=raw["id"], parent_id=raw["parent_id"], message=message, kind=raw["kind"])
            for raw, message in zip(chain, load_messages(chain), strict=True)
        ]


def stored_record(extras: dict[str, Any], thread_id: str) -> ConversationRecord | None:
    """The thread's conversation record (head, usage, the calls it waits on), or ``None``."""
    data = extras.get(CONVERSATION_KEY)
    if not data or data.get("record") is None:
        return None
    record = _records.validate_python(data["record"])
    return record if record.conversation_id == thread_id else None


def stored_messages(
    extras: dict[str, Any], thread_id: str
) -> tuple[list[ModelMessage], ConversationRecord | None]:
    """The messages of a thread's active path (oldest first) and its conversation record; changes nothing."""
    record = stored_record(extras, thread_id)
    if record is None:
        return [], None
    tree = ConversationTree(extras[CONVERSATION_KEY])
    return load_messages([tree.entries[key] for key in tree.path()]), record


class ThreadPath(NamedTuple):
    """A thread's active path as a client reads it."""

    messages: list[Message]
    """The messages, in AG-UI form, each with the id it was streamed (or sent) with."""
    branches: dict[str, dict[str, Any]]
    """For each message with siblings (an edited question, a regenerated answer): the siblings' ids
    and the index of the one shown."""
    edited_args: dict[str, dict[str, Any]]
    """The arguments calls ran with where a person edited them on approving, by tool call id (the
    calls in ``messages`` show what the model proposed)."""


def thread_messages(extras: dict[str, Any], withhold: Withhold | None = None) -> ThreadPath:
    """The active path in AG-UI form, with its branches and the calls run with edited arguments;
    ``withhold`` replaces the tool results its reader may not see."""
    data = extras.get(CONVERSATION_KEY)
    if not data or data.get("record") is None:
        return ThreadPath([], {}, {})
    tree = ConversationTree(data)
    path = tree.path()
    raws = [tree.entries[key] for key in path]
    if withhold is not None:
        raws = [_withheld(raw, withhold) for raw in raws]
    models = load_messages(raws)
    uis = [[item.id for item in tree.ui(key)] for key in path]
    dumped = AGUIAdapter.dump_messages(models)  # one call for the path: dumping is per message anyway
    if sum(map(len, uis)) != len(dumped):  # not what the entries were stored as (another pydantic-ai)
        uis = [[item[0] for item in entry_ui(raw, model)] for raw, model in zip(raws, models, strict=True)]
        dumped = [m for model in models for m in AGUIAdapter.dump_messages([model])]
    ids = [i for entry_ids in uis for i in entry_ids]
    messages: list[Message] = [m.model_copy(update={"id": i}) for m, i in zip(dumped, ids, strict=True)]
    return ThreadPath(messages, tree.siblings(path), _edited_args(models))


def _edited_args(models: Iterable[ModelMessage]) -> dict[str, dict[str, Any]]:
    edited = {}
    for model in models:
        if not isinstance(model, ModelRequest):
            continue
        for part in model.parts:
            if isinstance(part, ToolReturnPart) and isinstance(part.metadata, dict):
                args = part.metadata.get(EDITED_ARGS_KEY)
                if isinstance(args, dict):
                    edited[part.tool_call_id] = args
    return edited


TITLE_CHARS = 80


def thread_title(messages: Iterable[ModelMessage]) -> str | None:
    """A thread's title: the first question of the path shown (whitespace folded, at most
    ``TITLE_CHARS``), so editing that question, or showing another version of it, renames it.

    A question sent as content parts counts as its text parts (images and files have none)."""
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if not isinstance(part, UserPromptPart):
                    continue
                content = [part.content] if isinstance(part.content, str) else part.content
                text = " ".join(" ".join(item for item in content if isinstance(item, str)).split())
                if text:
                    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    return None


def path_title(extras: dict[str, Any]) -> str | None:
    """``thread_title`` of the active path, reading its entries only as far as the first question
    (not the whole path: a switch renames the thread and then shows it, which reads the path once)."""
    data = extras.get(CONVERSATION_KEY)
    if not data or data.get("record") is None:
        return None
    tree = ConversationTree(data)
    return thread_title(load_message(tree.entries[key]) for key in tree.path())
