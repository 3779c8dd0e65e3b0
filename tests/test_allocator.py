"""rag_tools.allocator: malloc arenas capped for the ragstream command, free memory handed back.

Each check runs in a fresh interpreter: an arena cap only holds for arenas made after it, and the
memory figures must not carry the test process's history.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator"
)

# Threads that each allocate and keep 2 KB blocks (malloc, not pymalloc), then the arenas counted
# from glibc's own report (malloc_info's XML: one <heap> per arena).
_ARENAS = """
import ctypes, json, sys, tempfile, threading
from rag_tools.allocator import limit_arenas

libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
def arenas():
    with tempfile.NamedTemporaryFile("r") as report:
        stream = libc.fopen(report.name.encode(), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        return report.read().count("<heap nr=")
before = arenas()  # the main arena and the one of LanceDB's event loop thread, made at import

limited = None
if sys.argv[1] == "limit":
    limited = limit_arenas()
elif sys.argv[1] == "cli":  # the ragstream command, started as a user starts it
    from server.cli import main
    try:
        main(["--version"])
    except SystemExit:
        pass
kept = []
def work():
    kept.append([bytes(2048) for _ in range(2000)])
threads = [threading.Thread(target=work) for _ in range(12)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"limited": limited, "before": before, "arenas": arenas()}))
"""

# 400 MB in 2 KB blocks of a worker thread's arena, every 64th kept so the arena cannot shrink
# from its top by itself; the anonymous RSS after the free and after release_free_memory.
_RELEASE = """
import json, threading
from rag_tools.allocator import release_free_memory

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) // 1024
kept = []
def work():
    blocks = [bytes(2048) for _ in range(200_000)]
    kept.extend(blocks[::64])
    del blocks
thread = threading.Thread(target=work)
thread.start()
thread.join()
freed = anon()
released = release_free_memory()
print(json.dumps({"freed": freed, "released": released, "after": anon()}))
"""


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_limit_arenas_caps_the_arenas_that_threads_make() -> None:
    free = _run(_ARENAS, "free")
    limited = _run(_ARENAS, "limit")
    assert limited["limited"] is True
    assert limited["arenas"] <= max(2, limited["before"]) < free["arenas"]  # type: ignore[call-overload,operator]


def test_limit_arenas_leaves_an_operators_malloc_arena_max_alone() -> None:
    result = _run(_ARENAS, "limit", env={"MALLOC_ARENA_MAX": "4"})
    assert result["limited"] is False
    assert result["arenas"] <= 4  # type: ignore[operator]


def test_release_free_memory_hands_freed_pages_back() -> None:
    result = _run(_RELEASE)
    assert result["released"] is True
    assert result["after"] < result["freed"] - 200  # type: ignore[operator]  # of ~400 MB freed


def test_the_ragstream_command_caps_arenas_first() -> None:
    result = _run(_ARENAS, "cli")
    assert result["arenas"] <= max(2, result["before"])  # type: ignore[call-overload,operator]
