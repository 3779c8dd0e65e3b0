"""The JSON Patch (RFC 6902) delta engine that keeps a client's copy of the state in sync.

``make_patch(old, new)`` walks both documents together and prunes every subtree that is the same
object (``is``) or equal (``==``, evaluated in C). Snapshots built by ``ToolContext`` share the
dicts of unchanged items, so a change costs one pass over the changed namespace's keys plus the
size of what changed, where ``jsonpatch.make_patch`` re-walks the whole document in Python.

Lists get the operations a growing, bounded history needs: appends become ``add .../-``, and
items evicted from the front become ``remove .../0``; anything else is diffed position by position.

``StateTracker`` holds one baseline per run and decides, per change, between a delta and a
snapshot: a snapshot is sent only when it would be smaller than the patch. It keeps a lower bound
of the baseline's encoded size so that the exact size is computed only when the patch is large
enough for the choice to be in doubt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

__all__ = ["StateTracker", "StateUpdate", "encoded_size", "make_patch"]

Op = dict[str, Any]
_MAX_FRONT_SHIFT = 16
_NO_BASELINE: Any = object()


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1") if ("~" in key or "/" in key) else key


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` encoded as compact JSON."""
    return len(orjson.dumps(value))


def make_patch(old: Any, new: Any) -> list[Op]:
    """RFC 6902 operations that turn ``old`` into ``new`` (neither is modified)."""
    ops: list[Op] = []
    _diff(old, new, "", ops, None)
    return ops


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _diff(a: Any, b: Any, path: str, ops: list[Op], removed: list[Any] | None) -> None:
    if a is b:
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        if a == b:
            return
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
                if removed is not None:
                    removed.append((key, a[key]))
        for key, value in b.items():
            child = f"{path}/{_escape(key)}"
            if key not in a:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                old_value = a[key]
                if old_value is not value:
                    _diff(old_value, value, child, ops, removed)
        return
    if ta is list and tb is list:
        if a == b:
            return
        _diff_list(a, b, path, ops, removed)
        return
    if ta is not tb or a != b:
        ops.append({"op": "replace", "path": path, "value": b})
        if removed is not None:
            removed.append(("", a))


def _diff_list(a: list[Any], b: list[Any], path: str, ops: list[Op], removed: list[Any] | None) -> None:
    shift = _front_shift(a, b)
    if shift:
        for value in a[:shift]:
            ops.append({"op": "remove", "path": f"{path}/0"})
            if removed is not None:
                removed.append(("", value))
        a = a[shift:]
    common = min(len(a), len(b))
    for i in range(common):
        if a[i] is not b[i]:
            _diff(a[i], b[i], f"{path}/{i}", ops, removed)
    for i in range(len(a) - 1, common - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{i}"})
        if removed is not None:
            removed.append(("", a[i]))
    ops.extend({"op": "add", "path": f"{path}/-", "value": value} for value in b[common:])


def _front_shift(a: list[Any], b: list[Any]) -> int:
    """How many items left the front of ``a`` (a bounded history evicting its oldest)."""
    if not a or not b or _same(a[0], b[0]):
        return 0
    for shift in range(1, min(len(a), _MAX_FRONT_SHIFT) + 1):
        rest = len(a) - shift
        if rest == 0:
            return shift
        if (
            rest <= len(b)
            and _same(a[shift], b[0])
            and all(_same(x, y) for x, y in zip(a[shift:], b, strict=False))
        ):
            return shift
    return 0


@dataclass(frozen=True)
class StateUpdate:
    """What to send after a change: nothing, a STATE_DELTA (``ops``) or a STATE_SNAPSHOT."""

    kind: Literal["none", "delta", "snapshot"]
    ops: list[Op] | None = None
    snapshot: Any = None
    patch_bytes: int = 0
    snapshot_bytes: int | None = None


class StateTracker:
    """The state a client holds, and the cheapest message that brings it to the server's state.

    Create it with the client's current copy; ``update(new)`` returns the ``StateUpdate`` to send
    and makes ``new`` the baseline for the next change (one baseline per run). Created without a
    baseline (the client's copy is unknown, or a run must carry its own), the first update is a
    snapshot.
    """

    def __init__(self, baseline: Any = _NO_BASELINE, *, baseline_size: int | None = None) -> None:
        self.baseline = baseline
        if baseline is _NO_BASELINE:
            self._size_floor = 0
        else:
            self._size_floor = baseline_size if baseline_size is not None else encoded_size(baseline)

    @property
    def has_baseline(self) -> bool:
        """Whether the client holds a known copy (else the next update is a snapshot)."""
        return self.baseline is not _NO_BASELINE

    def update(self, new: Any) -> StateUpdate:
        """The update that turns the baseline into ``new``; ``new`` becomes the baseline."""
        if self.baseline is _NO_BASELINE:
            self.baseline = new
            self._size_floor = encoded_size(new)
            return StateUpdate("snapshot", snapshot=new, snapshot_bytes=self._size_floor)
        removed: list[Any] = []
        ops: list[Op] = []
        _diff(self.baseline, new, "", ops, removed)
        self.baseline = new
        if not ops:
            return StateUpdate("none")
        patch_bytes = encoded_size(ops)
        # A lower bound of len(encode(new)): the old size minus everything removed or replaced,
        # each with its encoded key, colon and comma.
        floor = self._size_floor - sum(encoded_size(value) + encoded_size(key) + 2 for key, value in removed)
        if patch_bytes < floor:
            self._size_floor = floor
            return StateUpdate("delta", ops=ops, patch_bytes=patch_bytes)
        snapshot_bytes = encoded_size(new)
        self._size_floor = snapshot_bytes
        if snapshot_bytes < patch_bytes:
            return StateUpdate(
                "snapshot", snapshot=new, patch_bytes=patch_bytes, snapshot_bytes=snapshot_bytes
            )
        return StateUpdate("delta", ops=ops, patch_bytes=patch_bytes, snapshot_bytes=snapshot_bytes)

    def reset(self, baseline: Any) -> None:
        """Start over from ``baseline`` (after a snapshot was sent by other means)."""
        self.baseline = baseline
        self._size_floor = encoded_size(baseline)
