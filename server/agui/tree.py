"""A thread's conversation as a tree: entries linked by ``parent_id``, one path of them shown.

pydantic-ai's ``ConversationStore`` keeps a conversation as entries that point at the entry before
them, and a record whose ``head_id`` ends the history a run continues. Every edit, regenerate or
replaced turn leaves its old entries stored, so the entries form a tree; the **active path** is the
chain from the root to ``head_id``, which is what the model is sent and what ``GET /threads/{id}``
shows. ``ConversationTree`` reads that tree straight from the stored JSON (no message validation,
so it is cheap on long threads) and moves the head.

Each stored entry carries ``ui``: the AG-UI messages it shows as, ``[id, role, hash]`` in order
(``message_ids``), written when the entry is stored. ``id`` is the id the stream gave the message
(or the client, for its own messages), so a client's message list can be laid over the tree by
id: ``align`` finds where the client's history leaves the stored one, which is where a run
branches. ``hash`` fingerprints a user message's text, so an edit that keeps the message's id is
still an edit.

Besides upstream's ``record`` and ``entries`` the conversation keeps ``selected`` (each entry's
child on the path last shown below it, so switching to a branch shows that branch as it was left)
and ``deferred`` (the tool calls a branch tip was waiting on when the head left it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import Message

from .message_ids import CONVERSATION_ROLES, UiMessage, entry_ui, rename_taken_ids

__all__ = [
    "CONVERSATION_KEY",
    "Alignment",
    "ConversationTree",
    "empty_conversation",
]

CONVERSATION_KEY = "conversation"

_ROOT = ""  # the key of the root in ``selected``


def empty_conversation() -> dict[str, Any]:
    """A conversation with no record and no entries (the shape ``history`` stores)."""
    return {"record": None, "entries": {}}


@dataclass(frozen=True)
class Alignment:
    """Where a client's messages leave the stored tree.

    ``branch_point`` is the last stored entry both histories share (``None``: none, the root);
    ``new_turn`` the client's messages after it, which the run adds.
    """

    branch_point: str | None
    new_turn: list[Message]
    by_old_id: tuple[str, ...] = ()
    """Entries the client named by the id an in-place edit took from them (``give_back_ids``)."""


class ConversationTree:
    """A read-and-move view of one thread's stored conversation (``extras["conversation"]``)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.entries: dict[str, dict[str, Any]] = data.setdefault("entries", {})
        self._children: dict[str, list[str]] | None = None

    # -- reading -----------------------------------------------------------------------------

    @property
    def record(self) -> dict[str, Any] | None:
        return self.data.get("record")

    @property
    def head(self) -> str | None:
        """The entry the active path ends at."""
        record = self.record
        return record.get("head_id") if record is not None else None

    def parent(self, entry_id: str) -> str | None:
        return self.entries[entry_id].get("parent_id")

    def children(self, entry_id: str | None) -> list[str]:
        """The entries stored right after ``entry_id`` (``None``: the first entries), oldest first."""
        if self._children is None:
            index: dict[str, list[str]] = {}
            for key, raw in self.entries.items():
                index.setdefault(raw.get("parent_id") or _ROOT, []).append(key)
            self._children = index
        return self._children.get(entry_id or _ROOT, [])

    def ui(self, entry_id: str) -> list[UiMessage]:
        """The AG-UI messages ``entry_id`` shows as (computed once for entries stored without them)."""
        raw = self.entries[entry_id]
        found = raw.get("ui")
        if found is None:  # an entry stored before ``ui`` was kept: worked out once, then kept
            found = raw["ui"] = entry_ui(raw)
        return [UiMessage(*item) for item in found]

    def path(self, head: str | None = None) -> list[str]:
        """The entries from the root to ``head`` (default: the active head), oldest first."""
        entry_id = self.head if head is None else head
        chain: list[str] = []
        while entry_id is not None:
            chain.append(entry_id)
            entry_id = self.entries[entry_id].get("parent_id")
        chain.reverse()
        return chain

    def ancestors(self, entry_id: str | None) -> Iterator[str]:
        """``entry_id`` and the entries before it, nearest first."""
        while entry_id is not None:
            yield entry_id
            entry_id = self.entries[entry_id].get("parent_id")

    def entry_of(self, message_id: str) -> str | None:
        """The entry a message id names: the entry it is the first shown message of, else any that shows it."""
        fallback = None
        for key in self.entries:
            ui = self.ui(key)
            if ui and ui[0].id == message_id:
                return key
            if fallback is None and any(item.id == message_id for item in ui):
                fallback = key
        return fallback

    def first_id(self, entry_id: str) -> str | None:
        """The id of the first conversation message an entry shows (what names it to a client)."""
        return next((m.id for m in self.ui(entry_id) if m.role in CONVERSATION_ROLES), None)

    def siblings(self, path: Sequence[str]) -> dict[str, dict[str, Any]]:
        """For each entry of ``path`` that has siblings: its message id, the siblings' ids and its index."""
        found: dict[str, dict[str, Any]] = {}
        for entry_id in path:
            peers = [e for e in self._visible_children(self.parent(entry_id)) if self.first_id(e) is not None]
            if len(peers) < 2 or entry_id not in peers:
                continue
            shown = self.first_id(entry_id)
            assert shown is not None
            found[shown] = {
                "ids": [self.first_id(e) for e in peers],
                "index": peers.index(entry_id),
            }
        return found

    def _visible_children(self, entry_id: str | None) -> list[str]:
        """Children, looking through entries that show no conversation message (to their children)."""
        out: list[str] = []
        for child in self.children(entry_id):
            if any(m.role in CONVERSATION_ROLES for m in self.ui(child)):
                out.append(child)
            else:
                out.extend(self._visible_children(child))
        return out

    def tip(self, entry_id: str) -> str:
        """The end of the path last shown below ``entry_id`` (following ``selected``), else its newest leaf."""
        selected: dict[str, str] = self.data.get("selected", {})
        while True:
            children = self.children(entry_id)
            if not children:
                return entry_id
            chosen = selected.get(entry_id)
            entry_id = chosen if chosen in children else children[-1]

    # -- the client's history against the tree ----------------------------------------------

    def align(self, messages: Sequence[Message]) -> Alignment:
        """Lay the client's messages over the tree; the run continues from where they part.

        The client's conversation messages (user, assistant, tool) are matched from the root, entry
        by entry, by id (and text, for user messages). The last entry whose messages all match is
        the branch point; the client's messages after it are the new turn. Among children that
        match, the one on the active path wins, then the one last shown, then the newest.

        A client that sends only its new turn (no assistant message, no message the thread
        stores) continues the active path, as clients that leave the history to the server do.
        A client that sends a window of its history (its earliest turns trimmed away) is matched
        from where the window starts: its first message names a stored entry. A history that
        shares nothing with the stored one starts a new branch from the root.
        """
        convo = [(i, m) for i, m in enumerate(messages) if m.role in CONVERSATION_ROLES]
        on_path = set(self.path()) if self.head is not None else set()
        node: str | None = self._window_start(convo, on_path)
        shared_until = -1  # index in ``messages`` of the last message of a fully matched entry
        by_old_id: list[str] = []
        k = 0
        while k < len(convo):
            candidate = self._matching_child(node, convo[k][1], on_path)
            if candidate is None and convo[k][1].role == "tool":
                k += 1  # a result the thread does not keep (of a call it never ran): it decides nothing
                continue
            if candidate is None:
                break
            expected = [m for m in self.ui(candidate) if m.role in CONVERSATION_ROLES]
            if len(convo) - k < len(expected) or not all(
                item.matches(convo[k + j][1]) for j, item in enumerate(expected)
            ):
                break
            if expected and expected[0].id != convo[k][1].id:
                by_old_id.append(candidate)
            k += len(expected)
            node = candidate
            shared_until = convo[k - 1][0]
        if node is None and self._only_a_new_turn(convo):
            return Alignment(self.head, list(messages))
        return Alignment(node, list(messages[shared_until + 1 :]), tuple(by_old_id))

    def _window_start(self, convo: Sequence[tuple[int, Message]], on_path: set[str]) -> str | None:
        """The entry a trimmed history hangs below: the parent of the entry its first message names,
        when that is not a first entry (``None``, the root, otherwise). Copying the window as a new
        branch from the root would store its messages a second time under ids the thread holds."""
        first = next((m for _, m in convo if m.role != "tool"), None)
        if first is None or self._matching_child(None, first, on_path) is not None:
            return None
        named = [key for key in self.entries if self.first_id(key) == first.id]
        if not named:
            return None
        entry = next((key for key in named if key in on_path), named[-1])
        return self.parent(entry)

    def _matching_child(self, node: str | None, message: Message, on_path: set[str]) -> str | None:
        matches = [
            c
            for c in self._visible_children(node)
            if (ui := self._first_conversation(c)) and ui.matches(message)
        ]
        if not matches:
            return None
        if len(matches) == 1:
            return matches[0]
        preferred = [c for c in matches if c in on_path]
        selected = self.data.get("selected", {}).get(node or _ROOT)
        return preferred[0] if preferred else selected if selected in matches else matches[-1]

    def _first_conversation(self, entry_id: str) -> UiMessage | None:
        return next((m for m in self.ui(entry_id) if m.role in CONVERSATION_ROLES), None)

    def _only_a_new_turn(self, convo: Sequence[tuple[int, Message]]) -> bool:
        if self.head is None or any(m.role == "assistant" for _, m in convo):
            return False
        stored = {item.id for key in self.entries for item in self.ui(key)}
        return not any(m.id in stored for _, m in convo)

    def give_back_ids(self, entries: Sequence[str]) -> None:
        """Give ``entries`` (``Alignment.by_old_id``) back the ids the client sends them by.

        An in-place edit takes its question's id and renames the version it replaces; a client that
        later goes back to that version by its text under the old id (an edit back to the earlier
        words) shows it under that id, so the thread does too: the version takes the id back, keeping
        the name it had as an alias, and the sibling holding the id is renamed in turn.
        """
        for entry_id in entries:
            raw = self.entries[entry_id]
            first = next((item for item in raw.get("ui") or () if item[1] in CONVERSATION_ROLES), None)
            if first is not None and len(first) > 3 and first[3]:
                first[:] = [first[3], first[1], first[2], first[0]]
                rename_taken_ids(self.entries, raw)

    # -- moving the head ---------------------------------------------------------------------

    def move_head(self, entry_id: str | None, revision: str) -> None:
        """Make ``entry_id`` the end of the active path (``None``: an empty path), keeping what it leaves.

        The path left behind stays stored and joins the record's ``branches`` (upstream's list of
        the tips a conversation left); the calls its tip was waiting on are kept with it and come
        back when the head returns there.
        """
        record = self.record
        assert record is not None, "a conversation with entries has a record"
        old = record.get("head_id")
        if old == entry_id:
            return
        deferred: dict[str, Any] = self.data.setdefault("deferred", {})
        if old is not None and record.get("deferred_tool_requests") is not None:
            deferred[old] = record["deferred_tool_requests"]
        record["deferred_tool_requests"] = deferred.pop(entry_id, None) if entry_id is not None else None
        branches = [tip for tip in record.get("branches", []) if tip not in (old, entry_id)]
        if old is not None and old not in set(self.path(entry_id)):
            branches.append(old)
        record["branches"] = branches
        record["head_id"] = entry_id
        record["revision"] = revision
        self.mark_shown(entry_id)

    def mark_shown(self, head: str | None) -> None:
        """Remember the path to ``head`` as the one shown below each of its entries.

        Only choices that differ from the default (the newest child) are kept, so a thread
        without branches keeps none.
        """
        selected: dict[str, str] = self.data.setdefault("selected", {})
        for entry_id in self.ancestors(head):
            parent = self.entries[entry_id].get("parent_id") or _ROOT
            if self.children(parent or None)[-1] == entry_id:
                selected.pop(parent, None)
            else:
                selected[parent] = entry_id
