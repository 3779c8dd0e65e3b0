"""Locks in pydantic-ai's streaming path that do not yield to the event loop when uncontended.

pydantic-ai serialises pulls from a model stream with three ``anyio.Lock``s
(``AgentStream._anext_lock``, ``AgentStream._model_pull_lock``,
``PeekableAsyncStream._source_lock``), created with anyio's default ``fast_acquire=False``: every
uncontended acquire ends in a cancel-shielded ``sleep(0)``. Four of them per streamed event meant
four extra trips through the event loop, each resuming the run's whole stack of generators: about
half of the CPU time of a streamed token (profile in ``bench/RESULTS.md``). httpx made the same
change for its connection pool (``fast_acquire=True``, anyio >= 4.5).

``install()`` gives those locks ``fast_acquire=True`` as pydantic-ai creates them. Mutual exclusion
and waiting on a held lock are unchanged; only the yield after an uncontended acquire goes. The run
still yields once per event where ``run_stream_events`` hands it from the agent's task to the
consumer (a zero-buffer memory stream), so other streams keep their turns and cancellation is
delivered as before. It touches private pydantic-ai attributes, so it only replaces a lock that is
there and not held; if a release renames them, nothing is replaced and streams are merely slower.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio
from pydantic_ai import _utils, result

__all__ = ["install"]

_STREAM_LOCKS = ("_anext_lock", "_model_pull_lock")
_PEEKABLE_LOCKS = ("_source_lock",)
_installed = False


def install() -> None:
    """Make pydantic-ai's per-event stream locks fast (idempotent, process-wide)."""
    global _installed
    if _installed:
        return
    _wrap(result.AgentStream, "__post_init__", _STREAM_LOCKS)
    _wrap(_utils.PeekableAsyncStream, "__init__", _PEEKABLE_LOCKS)
    _installed = True


def _wrap(cls: type, method: str, names: tuple[str, ...]) -> None:
    original = getattr(cls, method)

    @functools.wraps(original)
    def with_fast_locks(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for name in names:
            lock = getattr(self, name, None)
            if isinstance(lock, anyio.Lock) and not lock.locked():
                setattr(self, name, anyio.Lock(fast_acquire=True))

    setattr(cls, method, with_fast_locks)
