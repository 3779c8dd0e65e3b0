"""Tests of the analysis sandbox (rag_tools.sandbox).

Every hostile snippet must end in a clear SandboxResult error, leave no sandbox process behind and
leave the parent able to run the next sandbox. Tests with ``python_guards=False`` disable the
Python-level guards to show that the kernel-level isolation holds on its own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag_tools.sandbox import SandboxLimits, SandboxResult, _runner, run_sandboxed, sandbox_available

AVAILABLE, REASON = sandbox_available()
needs_sandbox = pytest.mark.skipif(not AVAILABLE, reason=f"sandbox unavailable: {REASON}")

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=5.0, memory_bytes=256 * 2**20)
GUARD_MODES = [pytest.param(True, id="guards"), pytest.param(False, id="kernel-only")]
HANG_GUARD_S = 60.0  # generous outer timeout so that a broken test fails instead of hanging


async def _run(
    code: str, *, guards: bool = True, limits: SandboxLimits = LIMITS, bridge: _runner.Bridge | None = None
) -> SandboxResult:
    return await asyncio.wait_for(_runner._run(code, limits, bridge, python_guards=guards), HANG_GUARD_S)


def _sandbox_pids() -> list[int]:
    return list(_runner._iter_sandbox_pids())


async def _assert_healthy() -> None:
    """No sandbox process is left and the parent can still run a sandbox."""
    assert _sandbox_pids() == []
    result = await _run("print('still fine')\nresult = 42")
    assert result.error is None, result.error
    assert (result.output, result.value) == ("still fine\n", 42)
    assert _sandbox_pids() == []


@pytest.fixture
def outside_path() -> Iterator[Path]:
    path = Path("/tmp") / f"sandbox-pwned-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# happy paths


@needs_sandbox
async def test_output_and_result_value() -> None:
    code = "import sys\nprint('hello')\nprint('to stderr', file=sys.stderr)\nresult = {'a': [1, 2.5, None], 'b': 'x'}"
    result = await _run(code)
    assert result.error is None and result.error_kind is None
    assert result.output == "hello\nto stderr\n"
    assert result.value == {"a": [1, 2.5, None], "b": "x"}
    assert result.duration_s > 0
    await _assert_healthy()


@needs_sandbox
async def test_public_entry_point_and_defaults() -> None:
    result = await asyncio.wait_for(run_sandboxed("result = sum(range(10))"), HANG_GUARD_S)
    assert (result.error, result.value) == (None, 45)


@needs_sandbox
async def test_no_result_and_non_json_result() -> None:
    assert (await _run("x = 1")).value is None
    result = await _run("class Thing:\n    def __repr__(self):\n        return 'Thing()'\nresult = Thing()")
    assert (result.error, result.value) == (None, "Thing()")


@needs_sandbox
async def test_standard_library_imports() -> None:
    code = (
        "import json, math, statistics, re, collections, itertools, datetime, csv, textwrap, tempfile\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as f:\n"
        "    f.write('a,b')\n"
        "with open('local.txt', 'w') as g:\n"
        "    g.write('written in the work directory')\n"
        "result = [statistics.mean([1, 2, 3]), open('local.txt').read(), open(f.name).read()]"
    )
    result = await _run(code)
    assert result.error is None, result.error
    assert result.value == [2, "written in the work directory", "a,b"]


@pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="numpy not installed")
@needs_sandbox
async def test_numpy_is_importable() -> None:
    result = await _run("import numpy as np\nresult = (np.arange(4) * 2).sum()")
    assert (result.error, result.value) == (None, 12)


@needs_sandbox
async def test_exception_has_short_user_traceback() -> None:
    result = await _run("x = 1\ndef f():\n    return x / 0\nf()")
    assert result.error_kind == "exception"
    assert result.error is not None
    assert result.error.startswith("ZeroDivisionError: division by zero")
    assert "line 3, in f" in result.error and "return x / 0" in result.error
    assert "_child" not in result.error and "<string>" not in result.error
    syntax = await _run("def broken(:\n    pass")
    assert syntax.error_kind == "exception" and "SyntaxError" in (syntax.error or "")


@needs_sandbox
async def test_output_is_truncated() -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=5.0, memory_bytes=256 * 2**20, output_bytes=1000)
    result = await _run("print('x' * 5000)\nresult = 'done'", limits=limits)
    assert result.error is None and result.value == "done"
    assert result.output.startswith("x" * 1000)
    assert "[output truncated: 4001 more bytes not shown]" in result.output
    await _assert_healthy()


# ---------------------------------------------------------------------------------------------
# bridge


@needs_sandbox
async def test_bridge_calls_with_args_and_returns_data() -> None:
    calls: list[tuple[Any, ...]] = []

    async def search(query: str, limit: int = 10) -> list[dict[str, Any]]:
        calls.append(("search", query, limit))
        return [{"doc": f"d{i}", "query": query} for i in range(limit)]

    async def get_document(name: str) -> dict[str, str]:
        calls.append(("get_document", name))
        return {"name": name, "text": "body"}

    def word_count(text: str) -> int:  # plain functions work too
        return len(text.split())

    code = (
        "hits = kb.search('hello world', limit=2)\n"
        "doc = kb.get_document(hits[1]['doc'])\n"
        "print(kb)\n"
        "result = {'hits': hits, 'doc': doc, 'words': kb.word_count('a b c')}"
    )
    bridge = {"search": search, "get_document": get_document, "word_count": word_count}
    result = await _run(code, bridge=bridge)
    assert result.error is None, result.error
    assert calls == [("search", "hello world", 2), ("get_document", "d1")]
    assert result.value == {
        "hits": [{"doc": "d0", "query": "hello world"}, {"doc": "d1", "query": "hello world"}],
        "doc": {"name": "d1", "text": "body"},
        "words": 3,
    }
    assert "get_document" in result.output


@needs_sandbox
async def test_bridge_errors_reach_the_code() -> None:
    async def failing(name: str) -> None:
        raise LookupError(f"no document named {name}")

    async def huge() -> str:
        return "x" * 5000

    limits = SandboxLimits(cpu_seconds=2, wall_seconds=5.0, memory_bytes=256 * 2**20, message_bytes=1000)
    code = (
        "messages = []\n"
        "for call in (lambda: kb.get_document('nope'), kb.huge, lambda: kb.search('q'),\n"
        "             lambda: kb.get_document(object())):\n"
        "    try:\n"
        "        call()\n"
        "    except Exception as exc:\n"
        "        messages.append(f'{type(exc).__name__}: {exc}')\n"
        "result = messages\n"
        "kb.get_document('again')\n"
    )
    result = await _run(code, bridge={"get_document": failing, "huge": huge}, limits=limits)
    assert result.value is not None and len(result.value) == 4
    assert result.value[0] == "RuntimeError: kb.get_document() failed: LookupError: no document named nope"
    assert result.value[1].startswith("RuntimeError: kb.huge() reply too large")
    assert result.value[2].startswith("AttributeError: kb has no method 'search'")
    assert result.value[3].startswith("TypeError: kb.get_document(): arguments must be JSON-serialisable")
    assert result.error_kind == "exception"
    assert result.error is not None and "LookupError: no document named again" in result.error
    await _assert_healthy()


@needs_sandbox
async def test_garbage_on_the_control_pipe_is_a_protocol_error() -> None:
    code = (
        "import os, sys\nos.write(int(sys.argv[2]), b'\\xff\\xff\\xff\\xffjunk')\nimport time\ntime.sleep(30)"
    )
    result = await _run(code)
    assert result.error_kind == "exception"
    assert result.error is not None and "protocol error" in result.error
    await _assert_healthy()


def test_invalid_bridge_name_is_rejected() -> None:
    async def noop() -> None:
        return None

    with pytest.raises(ValueError, match="invalid bridge method name"):
        asyncio.run(run_sandboxed("pass", bridge={"_private": noop}))


# ---------------------------------------------------------------------------------------------
# limits


@needs_sandbox
@pytest.mark.parametrize("guards", GUARD_MODES)
async def test_infinite_loop_is_stopped(guards: bool) -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=8.0, memory_bytes=256 * 2**20)
    result = await _run("while True:\n    pass", guards=guards, limits=limits)
    assert result.error_kind in ("cpu", "timeout")
    expected = (
        "CPU time limit of 1s exceeded" if result.error_kind == "cpu" else "wall-clock limit of 8s exceeded"
    )
    assert result.error is not None and result.error.startswith(expected)
    await _assert_healthy()


@needs_sandbox
async def test_sleeping_code_hits_the_wall_clock() -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=1.5, memory_bytes=256 * 2**20)
    result = await _run("import time\nprint('before', flush=True)\ntime.sleep(60)", limits=limits)
    assert (result.error, result.error_kind) == ("wall-clock limit of 1.5s exceeded", "timeout")
    assert result.output == "before\n"
    await _assert_healthy()


@needs_sandbox
@pytest.mark.parametrize("guards", GUARD_MODES)
@pytest.mark.parametrize(
    "code",
    [
        pytest.param("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))", id="growing"),
        pytest.param("data = bytearray(10**11)", id="huge"),
    ],
)
async def test_memory_bomb(guards: bool, code: str) -> None:
    result = await _run(code, guards=guards)
    assert result.error_kind == "memory", result.error
    assert result.error is not None and result.error.startswith("memory limit (256 MiB) exceeded")
    await _assert_healthy()


@needs_sandbox
@pytest.mark.parametrize("guards", GUARD_MODES)
async def test_fork_bomb(guards: bool) -> None:
    result = await _run("import os\nwhile True:\n    os.fork()", guards=guards)
    assert result.error_kind in ("blocked", "process"), result.error
    if guards:
        assert result.error is not None and result.error.startswith("os.fork is blocked in the sandbox")
    else:
        assert result.error is not None and result.error.startswith("process limit (32) reached")
    await _assert_healthy()


@needs_sandbox
async def test_fork_bomb_that_swallows_errors() -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=3.0, memory_bytes=256 * 2**20, max_processes=8)
    result = await _run(code, guards=False, limits=limits)
    assert result.error_kind in ("cpu", "timeout"), result.error
    await _assert_healthy()


@needs_sandbox
async def test_file_size_limit() -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=5.0, memory_bytes=256 * 2**20, file_bytes=1000)
    code = "try:\n    with open('big.bin', 'wb') as f:\n        f.write(b'x' * 5000)\nexcept OSError as exc:\n    result = str(exc)"
    result = await _run(code, limits=limits)
    assert result.error is None and "File too large" in str(result.value)


# ---------------------------------------------------------------------------------------------
# network


@needs_sandbox
@pytest.mark.parametrize(
    ("code", "module"),
    [
        ("import socket", "socket"),
        ("import _socket", "_socket"),
        ("import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/')", "socket"),
        ("import http.client", "socket"),
        ("import asyncio", "socket"),
        ("import ssl", "ssl"),
    ],
)
async def test_network_modules_are_blocked(code: str, module: str) -> None:
    result = await _run(code)
    assert result.error_kind == "network", result.error
    assert result.error is not None
    assert result.error.startswith(f"module '{module}' is blocked in the sandbox (no network access)")
    await _assert_healthy()


@needs_sandbox
async def test_network_namespace_has_no_reachable_network() -> None:
    """Without the Python guards, the kernel still gives the code no network at all."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        code = (
            "import socket\n"
            "with open('/proc/net/dev') as f:\n"
            "    interfaces = [line.split(':')[0].strip() for line in f.read().splitlines()[2:]]\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        )
        result = await _run(code, guards=False)
        assert result.error_kind == "network", result.error
        assert result.error is not None and result.error.startswith("network access is not available")
        assert "Network is unreachable" in result.error
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected to the parent's listener
        probe = await _run(
            code.rsplit("socket.create_connection", 1)[0] + "result = interfaces", guards=False
        )
        assert probe.value == ["lo"]
    finally:
        server.close()
    await _assert_healthy()


@needs_sandbox
async def test_unix_sockets_of_the_host_are_not_reachable(tmp_path: Path) -> None:
    path = tmp_path / "service.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.setblocking(False)
    os.chmod(tmp_path, 0o755)
    os.chmod(path, 0o777)
    try:
        code = f"import socket\nsocket.socket(socket.AF_UNIX).connect({str(path)!r})"
        result = await _run(code, guards=False)
        assert result.error_kind == "exception" and result.error is not None
        assert "FileNotFoundError" in result.error or "ConnectionRefusedError" in result.error
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    await _assert_healthy()


@needs_sandbox
@pytest.mark.parametrize(
    "code", ["import importlib\nimportlib.import_module('socket')", "__import__('_socket')"]
)
async def test_dynamic_imports_of_network_modules_are_blocked(code: str) -> None:
    result = await _run(code)
    assert result.error_kind == "network", result.error


# ---------------------------------------------------------------------------------------------
# filesystem and processes


@needs_sandbox
@pytest.mark.parametrize("guards", GUARD_MODES)
@pytest.mark.parametrize("target", ["tmp", "/etc/sandbox-pwned", "/var/tmp/sandbox-pwned"])
async def test_write_outside_the_work_directory(guards: bool, target: str, outside_path: Path) -> None:
    path = str(outside_path) if target == "tmp" else target
    result = await _run(f"open({path!r}, 'w').write('pwned')", guards=guards)
    assert result.error_kind == "filesystem", result.error
    assert result.error is not None
    assert result.error.startswith(f"writing outside the sandbox directory is not allowed: {path}")
    assert not os.path.exists(path)
    await _assert_healthy()


@needs_sandbox
@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.makedirs('/tmp/sandbox-pwned-dir')",
        "import os\nos.rename('/etc/hostname', '/etc/hostname2')",
        "import os\nos.open('/etc/sandbox-pwned', os.O_WRONLY | os.O_CREAT)",
        "import shutil\nshutil.rmtree('/etc')",
    ],
)
async def test_filesystem_changes_outside_are_blocked(code: str) -> None:
    result = await _run(code)
    assert result.error_kind == "filesystem", result.error
    assert not os.path.exists("/tmp/sandbox-pwned-dir") and not os.path.exists("/etc/sandbox-pwned")
    assert os.path.exists("/etc/hostname")


@needs_sandbox
async def test_private_directories_are_hidden_and_privileges_dropped() -> None:
    code = (
        "import os\n"
        "result = {'uid': os.getuid(), 'home': os.path.expanduser('~') == os.getcwd(),\n"
        "          'tmp': os.listdir('/tmp'), 'run': os.listdir('/run'),\n"
        "          'pids': [p for p in os.listdir('/proc') if p.isdigit()], 'env': sorted(os.environ)}"
    )
    result = await _run(code, guards=False)
    assert result.error is None, result.error
    value = result.value
    if os.geteuid() == 0:
        assert value["uid"] in _runner.UID_POOL
    assert value["home"] is True
    # /tmp holds the run's own directory, plus the path to Python's own files when those live under
    # /tmp (a checkout in /tmp/<name>: only its interpreter and library directories are bound back)
    python_dirs = {
        os.path.realpath(p).split("/")[2]
        for p in sys.path
        if p and os.path.isdir(p) and os.path.realpath(p).startswith("/tmp/")
    }
    assert len(set(value["tmp"]) - python_dirs) == 1 and value["run"] == []
    assert value["pids"] == ["1"]
    allowed = {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", *_runner._THREAD_VARS}
    assert "PATH" in value["env"] and set(value["env"]) <= allowed


@needs_sandbox
@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("import subprocess", "module 'subprocess' is blocked in the sandbox"),
        ("import ctypes", "module 'ctypes' is blocked in the sandbox"),
        ("import multiprocessing", "module 'multiprocessing' is blocked in the sandbox"),
        ("import _posixsubprocess", "module '_posixsubprocess' is blocked in the sandbox"),
        ("import os\nos.system('id')", "os.system is blocked in the sandbox"),
        ("import os\nos.execv('/bin/sh', ['sh'])", "os.exec is blocked in the sandbox"),
        ("import os\nos.posix_spawn('/bin/sh', ['sh'], {})", "os.posix_spawn is blocked in the sandbox"),
    ],
)
async def test_blocked_modules_and_calls(code: str, message: str) -> None:
    result = await _run(code)
    assert result.error_kind == "blocked", result.error
    assert result.error is not None and result.error.startswith(message)
    await _assert_healthy()


# ---------------------------------------------------------------------------------------------
# parent behaviour


@needs_sandbox
async def test_cancellation_kills_the_child() -> None:
    started = asyncio.Event()

    async def mark_started() -> None:
        started.set()

    limits = SandboxLimits(cpu_seconds=2, wall_seconds=30.0, memory_bytes=256 * 2**20)
    code = "kb.mark_started()\nimport time\ntime.sleep(60)"
    task = asyncio.create_task(run_sandboxed(code, limits=limits, bridge={"mark_started": mark_started}))
    await asyncio.wait_for(started.wait(), HANG_GUARD_S)
    assert _sandbox_pids() != []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD_S)
    assert _sandbox_pids() == []
    await _assert_healthy()


@needs_sandbox
async def test_event_loop_is_not_blocked() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        result = await _run("import time\ntime.sleep(1)\nresult = 'slept'")
    finally:
        task.cancel()
    assert result.value == "slept"
    assert ticks >= 2


@needs_sandbox
async def test_concurrent_runs_are_separated() -> None:
    code = "import os\nopen('mine.txt', 'w').write('x')\nresult = [os.getuid(), os.getcwd(), sorted(os.listdir('.'))]"
    results = await asyncio.gather(*(_run(code) for _ in range(4)))
    assert all(r.error is None for r in results), [r.error for r in results]
    assert len({r.value[1] for r in results}) == 4
    assert all(r.value[2] == ["mine.txt"] for r in results)
    if os.geteuid() == 0:
        assert len({r.value[0] for r in results}) == 4
    await _assert_healthy()


async def test_unavailable_sandbox_does_not_run_code(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def ran() -> None:
        calls.append("ran")

    async def must_not_spawn(self: object) -> SandboxResult:
        raise AssertionError("the sandbox process must not be started")

    monkeypatch.setattr(_runner, "sandbox_available", lambda: (False, "simulated: no network namespace"))
    monkeypatch.setattr(_runner._Run, "execute", must_not_spawn)
    result = await asyncio.wait_for(run_sandboxed("kb.ran()\nresult = 1", bridge={"ran": ran}), HANG_GUARD_S)
    assert result.error_kind == "unavailable"
    assert result.error is not None and "simulated: no network namespace" in result.error
    assert result.value is None and result.output == ""
    assert calls == []


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)
