"""State follows the branch: citations, searches, QA history and the summary belong to a path.

A thread keeps one live state (``ThreadRecord.state``): that of its active path. So that another
path can be made active, the state each run ends with is kept beside the entry its path ends at,
as a **checkpoint**: a JSON Patch (RFC 6902) against the checkpoint of the thread's previous save,
or the whole state once a chain of patches gets long (``MAX_CHAIN``). Making another entry the
head loads the state of its nearest checkpointed ancestor (``state_at``); a run that edits or
regenerates an earlier turn therefore starts from the state the conversation had there, and a
citation card of an answer it replaces is not on the new branch.

Checkpoints are written in one place, ``checkpoint_on_save``, which the thread cache calls before
every save of a thread (runs, late background changes, branch switches), so a checkpoint is always
exactly the state that was saved with its entry as the head. A run also marks the state after each
tool step that changed it (``StepStates``): regenerating an answer from a tool's result starts
from the state that tool left, not from before it.

What a branch owns is ``ToolContext.branch_dump``: every namespace except the thread-wide ones
(``rag_tools.tools.THREAD_NAMESPACES``: the approval policy, kept outputs and attachments), and
without client-owned fields (the document filter stays what the client chose).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson

from rag_tools.state import CacheEntry, ToolContext
from rag_tools.state.delta import make_patch
from rag_tools.tools import THREAD_NAMESPACES

from .tree import CONVERSATION_KEY, ConversationTree

__all__ = [
    "MAX_CHAIN",
    "StepStates",
    "checkpoint_on_save",
    "fork_states",
    "restore_state_at",
    "stage_step_states",
    "state_at",
]

MAX_CHAIN = 48
"""Patches at most between a checkpoint and a whole state: bounds what a switch replays."""

_STATES = "states"  # entry id -> {"full": state} | {"base": entry id, "patch": [...], "chain": n}
_SAVED_AT = "state_at"  # the entry whose checkpoint is the state last saved
_STAGED = "staged_states"  # [[entry id, state], ...] a run's step states, written by the next save

Branch = dict[str, dict[str, Any]]


def _branch(context: ToolContext, dump: dict[str, dict[str, Any]] | None = None) -> Branch:
    return context.branch_dump(dump, exclude=THREAD_NAMESPACES)


def checkpoint_on_save(entry: CacheEntry, state: dict[str, dict[str, Any]]) -> None:
    """Keep the state about to be saved as the checkpoint of the thread's head (the cache's hook).

    The previous save's state is exactly the checkpoint of the entry it was saved at, so the new
    checkpoint is a patch from there: from whichever branch the thread was on, and across any
    step states a run staged on the way.
    """
    data = entry.record.extras.get(CONVERSATION_KEY)
    record = data.get("record") if data else None
    if record is None:
        return
    head = record.get("head_id")
    states: dict[str, Any] = data.setdefault(_STATES, {})
    staged = data.pop(_STAGED, None) or []
    previous_id: str | None = data.get(_SAVED_AT)
    previous = _branch(entry.context, entry.record.state)
    for entry_id, current in [*staged, [head, _branch(entry.context, state)]]:
        if entry_id is None:
            continue
        if entry_id == previous_id and entry_id in states:
            if current != previous:
                _extend(states, entry_id, previous, current)
        elif entry_id not in states:  # (one that has one is the state loaded from it: a switch)
            _write(states, entry_id, previous_id, previous, current)
        previous_id, previous = entry_id, current
    data[_SAVED_AT] = head


def _write(states: dict[str, Any], entry_id: str, base: str | None, before: Branch, after: Branch) -> None:
    chain = states[base].get("chain", 0) + 1 if base is not None and base in states else None
    if chain is None or chain > MAX_CHAIN:
        states[entry_id] = {"full": after}
    else:
        states[entry_id] = {"base": base, "patch": make_patch(before, after), "chain": chain}


def _extend(states: dict[str, Any], entry_id: str, before: Branch, after: Branch) -> None:
    checkpoint = states[entry_id]
    if "full" in checkpoint:
        checkpoint["full"] = after
    else:
        checkpoint["patch"] = [*checkpoint["patch"], *make_patch(before, after)]


def _reconstruct(states: dict[str, Any], entry_id: str) -> Branch:
    patches: list[list[dict[str, Any]]] = []
    current = entry_id
    for _ in range(len(states) + 1):
        checkpoint = states[current]
        if "full" in checkpoint:
            state = orjson.loads(orjson.dumps(checkpoint["full"]))  # a copy the patches may change
            for patch in reversed(patches):
                state = jsonpatch.apply_patch(state, patch, in_place=True)
            return state  # type: ignore[no-any-return]
        patches.append(checkpoint["patch"])
        current = checkpoint["base"]
    raise ValueError(f"the state checkpoints of entry {entry_id!r} form a loop")


def state_at(data: dict[str, Any], entry_id: str | None) -> Branch | None:
    """The branch state a path ending at ``entry_id`` has (``None`` for the root: an empty one).

    That of the nearest checkpointed entry on the path. ``None`` when the thread has no
    checkpoints at all (kept before branches had state): its live state is all there is.
    """
    states: dict[str, Any] = data.get(_STATES) or {}
    if entry_id is None:
        return {}
    if not states:
        return None
    tree = ConversationTree(data)
    for ancestor in tree.ancestors(entry_id):
        if ancestor in states:
            return _reconstruct(states, ancestor)
    return {}


def restore_state_at(context: ToolContext, data: dict[str, Any], entry_id: str | None) -> None:
    """Make the context's branch state that of the path ending at ``entry_id`` (``data``: the conversation)."""
    state = state_at(data, entry_id)
    if state is not None:
        context.restore_branch(state, exclude=THREAD_NAMESPACES)


def fork_states(context: ToolContext, head: str) -> dict[str, Any]:
    """The checkpoints of a new thread whose path ends at ``head`` with ``context``'s state."""
    return {_STATES: {head: {"full": _branch(context)}}, _SAVED_AT: head}


@dataclass
class StepStates:
    """A run's branch state after each tool result that changed it, by tool call id.

    The run's pipeline calls ``note`` on every TOOL_CALL_RESULT; a state is taken only when the
    context changed since the last one.
    """

    context: ToolContext
    marks: list[tuple[str, Branch]] = field(default_factory=list)
    _version: int = -1

    def __post_init__(self) -> None:
        self._version = self.context.version

    def note(self, tool_call_id: str) -> None:
        if self.context.version != self._version:
            self._version = self.context.version
            self.marks.append((tool_call_id, _branch(self.context)))


def stage_step_states(extras: dict[str, Any], steps: StepStates, start: str | None) -> None:
    """Stage the step states of the run's new entries (after ``start``) for the save to checkpoint.

    The state after a tool step belongs to the entry holding that step's results: the last mark
    among its tool calls.
    """
    if not steps.marks:
        return
    data = extras[CONVERSATION_KEY]
    tree = ConversationTree(data)
    added: list[str] = []
    for entry_id in tree.ancestors(tree.head):
        if entry_id == start:
            break
        added.append(entry_id)
    staged = []
    for entry_id in reversed(added):
        calls = set(_tool_calls(tree.entries[entry_id]))
        state = next((s for call, s in reversed(steps.marks) if call in calls), None)
        if state is not None:
            staged.append([entry_id, state])
    if staged:
        data[_STAGED] = staged


def _tool_calls(raw: dict[str, Any]) -> Iterable[str]:
    message = raw["message"]
    if message.get("kind") != "request":
        return ()
    return (p["tool_call_id"] for p in message.get("parts", ()) if "tool_call_id" in p)
