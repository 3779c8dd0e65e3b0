"""Message ids: the id a client sees in a run's stream is the id the thread stores and returns.

pydantic-ai's AG-UI stream mints message ids as it streams (a fresh one per model response and
per tool result), and its history keeps only the id of a message the client sent. So a run
records the ids it streamed (``RunIds``, filled by the event stream) and the ids of the client's
new messages, and when its entries are stored each gets

- its model response stamped with the streamed id (pydantic-ai's own UI-message-id metadata,
  which ``dump_messages`` puts back on the assistant message), and
- ``ui``: every AG-UI message the entry shows as, ``[id, role, hash]``, in ``dump_messages``
  order, so the thread view, the branch tree and a client's history all speak the same ids
  without dumping anything again. Tool results take the id they streamed with (or the client's,
  for a frontend tool), user and system messages the client's own ids, in order.

Entries stored before ``ui`` existed get it worked out the old way: a message keeps the id the
client gave it, the last message of an entry is named after the entry, the others
``<entry>-<index>``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import Message
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.ui.ag_ui import AGUIAdapter

from ._upstream import get_ui_message_id, set_ui_message_id

__all__ = [
    "CONVERSATION_ROLES",
    "RunIds",
    "UiMessage",
    "content_hash",
    "entry_ui",
    "load_message",
    "load_messages",
    "rename_taken_ids",
]

#: The roles a client's history is matched on. Reasoning, activity and instruction messages are
#: shown beside the conversation but do not decide which branch it is on.
CONVERSATION_ROLES = frozenset({"user", "assistant", "tool"})


def content_hash(content: Any) -> str | None:
    """A fingerprint of a user message's text; ``None`` for content that holds none to compare.

    Text given as parts counts as its text parts' text, one per line: pydantic-ai stores a single
    text part as a plain string, and a client may send either form of the same question. Other
    parts (images, files) are left out: their stored form differs from what a client sends, and a
    difference there would make every resent history look like an edit.
    """
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(text for part in content if (text := _part_text(part)) is not None)
    else:
        return None
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _part_text(part: Any) -> str | None:
    """The text of a text part (an AG-UI content model or its JSON); ``None`` for other parts."""
    fields = part if isinstance(part, dict) else vars(part) if hasattr(part, "__dict__") else {}
    text = fields.get("text")
    return text if fields.get("type") == "text" and isinstance(text, str) else None


@dataclass(frozen=True)
class UiMessage:
    """One AG-UI message an entry shows as.

    ``alias`` is the id it was sent with when an edit that kept that id took it over (``renamed``).
    """

    id: str
    role: str
    hash: str | None = None
    alias: str | None = None

    def matches(self, message: Message) -> bool:
        """Whether ``message`` (from a client) is this message: same id, and for text the same text."""
        if message.id not in (self.id, self.alias) or message.role != self.role:
            return False
        if self.role != "user" or self.hash is None:
            return True
        theirs = content_hash(getattr(message, "content", None))
        return theirs is None or theirs == self.hash


@dataclass
class RunIds:
    """The message ids of one run: what its stream sent and what its client's new turn carried."""

    responses: list[str] = field(default_factory=list)
    """The assistant message id streamed for each model response, in order."""
    tool_results: dict[str, str] = field(default_factory=dict)
    """Tool call id to the id of its result message (streamed, or sent by the client)."""
    client: list[tuple[str, str]] = field(default_factory=list)
    """``(role, id)`` of the client's new-turn messages that are not tool results, in order."""
    _next_response: int = 0

    @classmethod
    def for_new_turn(cls, messages: list[Message]) -> RunIds:
        ids = cls()
        for message in messages:
            if message.role == "tool":
                ids.tool_results[message.tool_call_id] = message.id
            elif message.role != "assistant":
                ids.client.append((message.role, message.id))
        return ids

    def stamp(self, message: ModelMessage) -> None:
        """Give a new model response the id its stream used (one without parts was never streamed)."""
        if (
            isinstance(message, ModelResponse)
            and message.parts
            and get_ui_message_id(message) is None
            and self._next_response < len(self.responses)
        ):
            set_ui_message_id(message, self.responses[self._next_response])
            self._next_response += 1

    def take_client_id(self, role: str) -> str | None:
        if self.client and self.client[0][0] == role:
            return self.client.pop(0)[1]
        return None


def load_message(raw: dict[str, Any]) -> ModelMessage:
    """A stored entry's message (``ModelMessagesTypeAdapter`` carries binary content as base64)."""
    return ModelMessagesTypeAdapter.validate_python([raw["message"]])[0]


def load_messages(raws: list[dict[str, Any]]) -> list[ModelMessage]:
    """Stored entries' messages, validated in one call: much cheaper than one by one (pydantic-ai's
    validators do per-call work: 15x on a long thread, ``bench/RESULTS.md``)."""
    return ModelMessagesTypeAdapter.validate_python([raw["message"] for raw in raws])


def entry_ui(
    raw: dict[str, Any], message: ModelMessage | None = None, ids: RunIds | None = None
) -> list[list[Any]]:
    """The ``[id, role, hash]`` of every AG-UI message a stored entry shows as, in order."""
    message = message if message is not None else load_message(raw)
    dumped = AGUIAdapter.dump_messages([message])
    own_id = get_ui_message_id(message)
    out: list[list[Any]] = []
    for index, shown in enumerate(dumped):
        last = index == len(dumped) - 1
        message_id: str | None = None
        if shown.role == "tool":
            message_id = ids.tool_results.get(shown.tool_call_id) if ids is not None else None
        elif ids is not None and shown.role in ("user", "system", "developer"):
            message_id = ids.take_client_id(shown.role)
        if message_id is None:
            message_id = (own_id or raw["id"]) if last else f"{raw['id']}-{index}"
        digest = content_hash(shown.content) if shown.role == "user" else None
        out.append([message_id, shown.role, digest])
    return out


def rename_taken_ids(entries: dict[str, dict[str, Any]], added: dict[str, Any]) -> None:
    """Keep message ids unique among siblings when an edit reuses its question's id.

    A client that edits a message in place sends it again under the same id; the new entry keeps
    that id (the client shows it), and the replaced sibling, which the client no longer shows, is
    named after its entry instead, keeping the old id as an alias a stale client may still send.
    A version renamed before is renamed from its original id (``u1~<entry>``, never ``u1~a~b``),
    so ids do not grow with every edit.
    """
    first = next((item for item in added.get("ui", ()) if item[1] in CONVERSATION_ROLES), None)
    if first is None:
        return
    siblings = [key for key, raw in entries.items() if raw.get("parent_id") == added.get("parent_id")]
    taken = {item[0] for key in siblings for item in entries[key].get("ui") or ()}
    for key in siblings:
        if key == added["id"]:
            continue
        for item in entries[key].get("ui") or ():
            if item[0] == first[0]:
                original = _before_renames(item[0], entries)
                # named after its own entry; if an edit already took that name, after another one
                renamed = next(
                    name
                    for suffix in (key, added["id"], *siblings)
                    if (name := f"{original}~{suffix}") not in taken
                )
                taken.add(renamed)
                item[:] = [renamed, item[1], item[2], item[0]]


def _before_renames(message_id: str, entries: dict[str, dict[str, Any]]) -> str:
    """``message_id`` without the ``~<entry>`` suffixes earlier renames gave it."""
    while True:
        head, tilde, tail = message_id.rpartition("~")
        if not tilde or tail not in entries:
            return message_id
        message_id = head
