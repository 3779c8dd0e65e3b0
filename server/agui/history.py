"""Message history: pydantic-ai's ``ConversationStore`` kept inside the thread's stored record.

The conversation of a thread (its entries and record) lives in ``ThreadRecord.extras`` next to the
thread's state, so the AG-UI adapter loads and saves it through the standard ``ConversationStore``
API while ragstream persists both in one atomic write when a run succeeds, and discards both when
it fails. A store instance is bound to one cache entry for the duration of a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ag_ui.core import Message
from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.ui.ag_ui import AGUIAdapter

from ._upstream import get_ui_message_id

__all__ = ["CONVERSATION_KEY", "ThreadConversationStore", "agui_messages", "stored_messages"]

CONVERSATION_KEY = "conversation"

_records: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)


def _dump_entry(entry: ConversationEntry) -> dict[str, Any]:
    # Messages go through ModelMessagesTypeAdapter: it carries binary content as base64.
    message = ModelMessagesTypeAdapter.dump_python([entry.message], mode="json")[0]
    return {"id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind, "message": message}


def _load_entry(raw: dict[str, Any]) -> ConversationEntry:
    message = ModelMessagesTypeAdapter.validate_python([raw["message"]])[0]
    return ConversationEntry(id=raw["id"], parent_id=raw["parent_id"], message=message, kind=raw["kind"])


class ThreadConversationStore(ConversationStore):
    """The conversation of one thread, read from and staged into that thread's record extras."""

    def __init__(self, extras: dict[str, Any]) -> None:
        self._data: dict[str, Any] = extras.setdefault(CONVERSATION_KEY, {"record": None, "entries": {}})

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
        for entry in new_entries:
            entries[entry.id] = _dump_entry(entry)
        self._data["record"] = _records.dump_python(record, mode="json")

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        current = await self.read_record(conversation_id)
        if current is None or current.revision != expected_revision:
            raise ConversationConflict(conversation_id)
        self._data["record"] = None
        self._data["entries"] = {}

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
        return [_load_entry(raw) for raw in reversed(chain)]


async def _history(
    extras: dict[str, Any], thread_id: str
) -> tuple[list[ConversationEntry], ConversationRecord | None]:
    empty = {"record": None, "entries": {}}
    store = ThreadConversationStore({CONVERSATION_KEY: extras.get(CONVERSATION_KEY) or empty})
    record = await store.read_record(thread_id)
    if record is None:
        return [], None
    return await store.read_history(record.head_id), record


async def stored_messages(
    extras: dict[str, Any], thread_id: str
) -> tuple[list[ModelMessage], ConversationRecord | None]:
    """A thread's stored messages (oldest first) and its conversation record, without changing anything."""
    entries, record = await _history(extras, thread_id)
    return [entry.message for entry in entries], record


async def agui_messages(extras: dict[str, Any], thread_id: str) -> list[Message]:
    """The thread's messages in AG-UI form, with ids that are the same on every call.

    Messages keep the id the client gave them; the others are named after their stored entry
    (pydantic-ai would mint fresh random ids on every dump).
    """
    entries, _ = await _history(extras, thread_id)
    messages: list[Message] = []
    for entry in entries:
        dumped = AGUIAdapter.dump_messages([entry.message])
        client_id = get_ui_message_id(entry.message)
        for index, message in enumerate(dumped):
            stable = (client_id or entry.id) if index == len(dumped) - 1 else f"{entry.id}-{index}"
            messages.append(message.model_copy(update={"id": stable}))
    return messages
