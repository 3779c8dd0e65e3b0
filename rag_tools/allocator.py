"""The C allocator's share of a process's memory: fewer malloc arenas, free pages handed back.

Under glibc every thread that allocates may get a malloc arena of its own (up to eight per core),
and freed memory stays in those arenas, counted in the process's RSS. LanceDB's and onnxruntime's
worker threads allocate a great deal while an ingest writes and an index is built, so:

- ``limit_arenas`` caps the arenas (what ``MALLOC_ARENA_MAX=2`` does, for a process started
  without it): the same ingest peaked 47-60 MB lower, at the same speed;
- ``release_free_memory`` (``malloc_trim(0)``) returns the free pages of every arena to the
  system: after a vector index build over 60,000 chunks it gave back 90-140 MB in about 10 ms.

Both are no-ops (``False``) off glibc. Figures: ``bench/RESULTS.md`` (issue 49.2).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from functools import cache

__all__ = ["ARENAS", "limit_arenas", "release_free_memory"]

#: The arenas ``limit_arenas`` keeps when the process was not started with ``MALLOC_ARENA_MAX``.
ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


@cache
def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` unless ``MALLOC_ARENA_MAX`` is set; whether it did.

    Call it first thing in a process: arenas made before stay (importing LanceDB makes one, for
    its event loop's thread), so the ``ragstream`` command ends with three instead of up to eight
    per core; ``MALLOC_ARENA_MAX`` in the environment (the image sets it) caps them all.
    """
    libc = _glibc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def release_free_memory() -> bool:
    """Hand the free pages of every malloc arena back to the system; whether any were released."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
