"""Tests of the analysis sandbox (rag_tools.sandbox, on Monty).

Every hostile program must end in a clear SandboxResult error with nothing done outside the
sandbox, leave no worker process behind and leave this process able to run the next program.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag_tools.sandbox import SANDBOX_MODULES, SandboxLimits, SandboxResult, run_sandboxed
from tests.sandbox_procs import sandbox_workers, wait_for_no_sandbox_workers

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=8.0, memory_bytes=256 * 2**20)
HANG_GUARD_S = 60.0  # generous outer timeout so that a broken test fails instead of hanging
ROOT = Path(__file__).resolve().parent.parent


async def _run(
    code: str, *, limits: SandboxLimits = LIMITS, bridge: dict[str, Any] | None = None
) -> SandboxResult:
    return await asyncio.wait_for(run_sandboxed(code, limits=limits, bridge=bridge), HANG_GUARD_S)


async def _assert_healthy() -> None:
    """No worker is left and this process can still run a program."""
    assert wait_for_no_sandbox_workers() == []
    result = await _run("print('still fine')\nresult = 42")
    assert result.error is None, result.error
    assert (result.output, result.value) == ("still fine\n", 42)
    assert wait_for_no_sandbox_workers() == []


@pytest.fixture
def outside_path() -> Iterator[Path]:
    path = ROOT / "test-artifacts" / f"sandbox-pwned-{uuid.uuid4().hex}"
    path.parent.mkdir(exist_ok=True)
    yield path
    path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# happy paths


async def test_output_and_result_value() -> None:
    code = (
        "import sys\nprint('hello')\nprint('to stderr', file=sys.stderr)\n"
        "result = {'a': [1, 2.5, None], 'b': 'x', 'tags': {'y', 'x'}, 'pair': (1, 'z')}"
    )
    result = await _run(code)
    assert result.error is None and result.error_kind is None
    assert result.output == "hello\nto stderr\n"
    assert result.value == {"a": [1, 2.5, None], "b": "x", "tags": ["x", "y"], "pair": [1, "z"]}
    assert result.duration_s > 0


async def test_public_entry_point_and_defaults() -> None:
    result = await asyncio.wait_for(run_sandboxed("result = sum(range(10))"), HANG_GUARD_S)
    assert (result.error, result.value) == (None, 45)


async def test_no_result_and_non_json_result() -> None:
    assert (await _run("x = 1")).value is None
    code = (
        "from dataclasses import dataclass\n"
        "@dataclass\nclass Point:\n    x: int\n"
        "class Thing:\n    def __repr__(self):\n        return 'Thing()'\n"
        "result = {'thing': Thing(), 'point': Point(3), 7: 'seven'}"
    )
    result = await _run(code)
    assert result.error is None, result.error
    assert result.value == {"thing": "Thing()", "point": "Point(x=3)", "7": "seven"}


async def test_the_offered_modules_import_and_others_say_what_there_is() -> None:
    imports = "\n".join(f"import {name}" for name in SANDBOX_MODULES)
    result = await _run(f"{imports}\nresult = statistics_free = 'ok'")
    assert (result.error, result.value) == (None, "ok")
    for module in ("statistics", "numpy", "heapq"):
        missing = await _run(f"import {module}")
        assert missing.error_kind == "blocked"
        assert missing.error is not None
        assert missing.error.startswith(f"ModuleNotFoundError: No module named '{module}'")
        assert "the sandbox can import only: base64" in missing.error


async def test_realistic_program_with_classes_regex_and_json() -> None:
    code = """
import json, math, re
from collections import Counter, defaultdict
text = "Alpha kept 30 days. Beta kept 90 days. Alpha again kept 30 days."
days = [int(d) for d in re.findall(r"(\\d+) days", text)]
class Stats:
    def __init__(self, values):
        self.values = sorted(values)
    def mean(self):
        return sum(self.values) / len(self.values)
    def stdev(self):
        m = self.mean()
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (len(self.values) - 1))
by_name = defaultdict(list)
for name, n in re.findall(r"(\\w+) (?:again )?kept (\\d+) days", text):
    by_name[name].append(int(n))
stats = Stats(days)
result = json.loads(json.dumps({
    "mean": stats.mean(), "stdev": round(stats.stdev(), 3),
    "names": Counter(re.findall(r"Alpha|Beta", text)).most_common(),
    "by_name": dict(sorted(by_name.items())),
}))
"""
    result = await _run(code)
    assert result.error is None, result.error
    assert result.value == {
        "mean": 50.0,
        "stdev": 34.641,
        "names": [["Alpha", 2], ["Beta", 1]],
        "by_name": {"Alpha": [30, 30], "Beta": [90]},
    }


async def test_exception_has_short_user_traceback() -> None:
    result = await _run("x = 1\ndef f():\n    return x / 0\nf()")
    assert result.error_kind == "exception"
    assert result.error is not None
    assert result.error.startswith("ZeroDivisionError: division by zero")
    assert "line 3, in f" in result.error and "return x / 0" in result.error
    assert "pydantic_monty" not in result.error and "_runner" not in result.error
    syntax = await _run("def broken(:\n    pass")
    assert syntax.error_kind == "exception" and (syntax.error or "").startswith("SyntaxError")


async def test_output_is_truncated() -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=8.0, output_bytes=1000)
    result = await _run("print('x' * 5000)\nresult = 'done'", limits=limits)
    assert result.error is None and result.value == "done"
    assert result.output.startswith("x" * 1000)
    assert "[output truncated: 4001 more bytes not shown]" in result.output


# ---------------------------------------------------------------------------------------------
# kb calls


async def test_kb_calls_with_args_and_returns_data() -> None:
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


async def test_kb_errors_reach_the_code() -> None:
    async def failing(name: str) -> None:
        raise LookupError(f"no document named {name}")

    async def huge() -> str:
        return "x" * 5000

    limits = SandboxLimits(cpu_seconds=2, wall_seconds=8.0, message_bytes=1000)
    code = (
        "messages = []\n"
        "for name, args in (('get_document', ('nope',)), ('huge', ()), ('search', ('q',)),\n"
        "                   ('get_document', ({1, 2},))):\n"
        "    try:\n"
        "        if name == 'get_document':\n"
        "            kb.get_document(*args)\n"
        "        elif name == 'huge':\n"
        "            kb.huge()\n"
        "        else:\n"
        "            kb.search(*args)\n"
        "    except Exception as exc:\n"
        "        messages.append(f'{type(exc).__name__}: {exc}')\n"
        "result = messages\n"
        "kb.get_document('again')\n"
    )
    result = await _run(code, bridge={"get_document": failing, "huge": huge}, limits=limits)
    assert result.error_kind == "exception"
    assert result.error is not None and "LookupError: no document named again" in result.error
    assert result.value is None  # the program failed: its partial result is not returned
    listing = await _run(
        code.rsplit("kb.get_document('again')", 1)[0],
        bridge={"get_document": failing, "huge": huge},
        limits=limits,
    )
    messages = listing.value
    assert messages[0] == "RuntimeError: kb.get_document() failed: LookupError: no document named nope"
    assert messages[1].startswith("RuntimeError: kb.huge() reply too large")
    assert messages[2].startswith("AttributeError: kb has no method 'search' (available: get_document, huge)")
    assert messages[3].startswith("TypeError: kb.get_document(): arguments must be JSON-serialisable")
    await _assert_healthy()


def test_invalid_bridge_name_is_rejected() -> None:
    async def noop() -> None:
        return None

    with pytest.raises(ValueError, match="invalid bridge method name"):
        asyncio.run(run_sandboxed("pass", bridge={"_private": noop}))


# ---------------------------------------------------------------------------------------------
# limits


async def test_endless_loop_hits_the_time_limit() -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=8.0)
    result = await _run("while True:\n    pass", limits=limits)
    assert result.error_kind == "time"
    assert result.error is not None and result.error.startswith("time limit of 1s exceeded")
    await _assert_healthy()


async def test_a_slow_kb_call_hits_the_wall_clock() -> None:
    async def slow() -> None:
        await asyncio.sleep(60)

    limits = SandboxLimits(cpu_seconds=2, wall_seconds=1.5)
    result = await _run("print('before')\nkb.slow()", limits=limits, bridge={"slow": slow})
    assert (result.error, result.error_kind) == ("wall-clock limit of 1.5s exceeded", "timeout")
    assert result.output == "before\n"
    await _assert_healthy()


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("blocks = []\nwhile True:\n    blocks.append('x' * 10**7)", id="growing"),
        pytest.param("data = 'x' * (10 ** 11)", id="huge"),
        pytest.param("x = 10 ** (10 ** 9)", id="huge-int"),
    ],
)
async def test_memory_bombs(code: str) -> None:
    result = await _run(code)
    assert result.error_kind == "memory", result.error
    assert result.error is not None and result.error.startswith("memory limit (256 MiB) exceeded")
    await _assert_healthy()


async def test_recursion_limit_is_configurable() -> None:
    code = "def depth(n):\n    return n if n == 0 else 1 + depth(n - 1)\nresult = depth({n})"
    limits = SandboxLimits(recursion_depth=50)
    assert (await _run(code.format(n=40), limits=limits)).value == 40
    result = await _run(code.format(n=60), limits=limits)
    assert result.error_kind == "recursion"
    assert result.error is not None and result.error.startswith("recursion limit (50) exceeded")
    endless = await _run("def f(n):\n    return f(n + 1)\nf(0)")
    assert endless.error_kind == "recursion" and (endless.error or "").startswith("recursion limit (1000)")
    await _assert_healthy()


async def test_kb_call_limit() -> None:
    calls = 0

    def ping() -> int:
        nonlocal calls
        calls += 1
        return calls

    result = await _run(
        "while True:\n    kb.ping()", limits=SandboxLimits(kb_calls=20), bridge={"ping": ping}
    )
    assert result.error_kind == "kb_calls"
    assert result.error is not None and result.error.startswith("limit of 20 kb calls exceeded")
    assert calls == 20


async def test_result_too_large() -> None:
    result = await _run("result = 'x' * 5000", limits=SandboxLimits(message_bytes=1000))
    assert result.error_kind == "exception" and result.value is None
    assert result.error == "the `result` value is too large to return (5002 characters, limit 1000)"


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)
    with pytest.raises(ValueError, match="recursion_depth"):
        SandboxLimits(recursion_depth=-1)


# ---------------------------------------------------------------------------------------------
# escape attempts: files, network, processes, the interpreter's internals, the environment

ESCAPES = {
    "read-file": ("result = open('/etc/passwd').read()", "PermissionError: Permission denied: '/etc/passwd'"),
    "read-pathlib": (
        "from pathlib import Path\nresult = Path('/etc/hostname').read_text()",
        "PermissionError: Permission denied",
    ),
    "list-dir": ("import os\nresult = os.listdir('/')", "PermissionError: Permission denied: '/'"),
    "environ": ("import os\nresult = dict(os.environ)", "RuntimeError: 'os.environ' is not supported"),
    "getenv": ("import os\nresult = os.getenv('PATH')", "RuntimeError: 'os.getenv' is not supported"),
    "socket": ("import socket", "ModuleNotFoundError: No module named 'socket'"),
    "urllib": ("import urllib.request", "ModuleNotFoundError: No module named 'urllib'"),
    "subprocess": ("import subprocess", "ModuleNotFoundError: No module named 'subprocess'"),
    "ctypes": ("import ctypes", "ModuleNotFoundError: No module named 'ctypes'"),
    "threading": ("import threading", "ModuleNotFoundError: No module named 'threading'"),
    "importlib": ("import importlib", "ModuleNotFoundError: No module named 'importlib'"),
    "os.system": ("import os\nos.system('id')", "AttributeError: module 'os' has no attribute 'system'"),
    "os.fork": (
        "import os\nwhile True:\n    os.fork()",
        "AttributeError: module 'os' has no attribute 'fork'",
    ),
    "os.execv": (
        "import os\nos.execv('/bin/sh', ['sh'])",
        "AttributeError: module 'os' has no attribute 'execv'",
    ),
    "sys.modules": (
        "import sys\nresult = list(sys.modules)",
        "AttributeError: module 'sys' has no attribute 'modules'",
    ),
    "dunder-subclasses": (
        "result = ().__class__.__base__.__subclasses__()",
        "AttributeError: 'tuple' object has no attribute '__class__'",
    ),
    "function-globals": (
        "result = (lambda: 0).__globals__",
        "AttributeError: 'function' object has no attribute",
    ),
    "builtins": ("result = __builtins__", "NameError: name '__builtins__' is not defined"),
    "__import__": ("__import__('os')", "NameError: name '__import__' is not defined"),
    "exec-import": ("exec('import subprocess')", "ModuleNotFoundError: No module named 'subprocess'"),
    "kb-internals": (
        "result = type(kb).__init__.__globals__",
        "AttributeError: type object 'KB' has no attribute",
    ),
    "kb-dict": ("result = kb.__dict__", "AttributeError: 'KB' object has no attribute '__dict__'"),
}


@pytest.mark.parametrize("case", list(ESCAPES))
async def test_escape_attempts_are_refused_with_a_clear_error(case: str) -> None:
    code, message = ESCAPES[case]
    result = await _run(code)
    assert result.error is not None and result.error.startswith(message), result.error
    assert result.error_kind in ("blocked", "exception"), result.error_kind
    assert result.value is None
    await _assert_healthy()


@pytest.mark.parametrize("mode", ["w", "a", "wb"])
async def test_writes_outside_never_reach_the_disk(mode: str, outside_path: Path) -> None:
    code = f"open({str(outside_path)!r}, {mode!r}).write(b'pwned' if 'b' in {mode!r} else 'pwned')"
    result = await _run(code)
    assert result.error_kind == "blocked", result.error
    assert result.error is not None and result.error.startswith("PermissionError: Permission denied")
    assert "the sandbox has no files" in result.error
    assert not outside_path.exists()
    for change in (
        f"import os\nos.makedirs({str(outside_path)!r})",
        f"import os\nos.rename('/etc/hostname', {str(outside_path)!r})",
        f"from pathlib import Path\nPath({str(outside_path)!r}).write_text('pwned')",
        "import os\nos.remove('/etc/hostname')",
    ):
        refused = await _run(change)
        assert refused.error is not None and "PermissionError" in refused.error, refused.error
    assert not outside_path.exists() and os.path.exists("/etc/hostname")


async def test_no_connection_reaches_a_host_listener() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        for code in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}))",
            f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/')",
            f"import http.client\nhttp.client.HTTPConnection('127.0.0.1', {port}).request('GET', '/')",
            f"import asyncio\nasyncio.run(asyncio.open_connection('127.0.0.1', {port}))",
        ):
            result = await _run(code)
            assert result.error is not None, code
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected
    finally:
        server.close()
    await _assert_healthy()


async def test_server_secrets_are_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("RAGSTREAM_SANDBOX_TEST_KEY", secret)
    code = (
        "import os\nfound = []\n"
        "for attempt in (lambda: dict(os.environ), lambda: os.getenv('RAGSTREAM_SANDBOX_TEST_KEY'),\n"
        "                lambda: open('/proc/self/environ').read(), lambda: open('/proc/1/environ').read()):\n"
        "    try:\n"
        "        found.append(str(attempt()))\n"
        "    except Exception as exc:\n"
        "        found.append(f'{type(exc).__name__}: {exc}')\n"
        "print(found)\nresult = found\n"
    )
    result = await _run(code)
    assert result.error is None, result.error
    assert secret not in result.output and secret not in str(result.value)
    assert all(entry.startswith(("RuntimeError", "PermissionError")) for entry in result.value), result.value


# ---------------------------------------------------------------------------------------------
# this process: crashes, cancellation, concurrency


async def test_a_crashed_worker_is_a_clear_error() -> None:
    """A worker that dies mid-run (here: killed from outside) ends the run, not this process."""

    def kill_the_worker() -> str:
        for pid in sandbox_workers():
            os.kill(pid, signal.SIGKILL)
        return "killed"

    result = await _run(
        "kb.kill_the_worker()\nresult = 'survived'", bridge={"kill_the_worker": kill_the_worker}
    )
    assert result.error_kind == "crash", result.error
    assert result.error is not None and result.error.startswith("the sandbox worker crashed")
    assert result.value is None
    await _assert_healthy()


async def test_cancellation_kills_the_worker() -> None:
    started = asyncio.Event()

    async def mark_started() -> None:
        started.set()

    limits = SandboxLimits(cpu_seconds=30, wall_seconds=60.0)
    code = "kb.mark_started()\nwhile True:\n    pass"
    task = asyncio.create_task(run_sandboxed(code, limits=limits, bridge={"mark_started": mark_started}))
    await asyncio.wait_for(started.wait(), HANG_GUARD_S)
    await asyncio.sleep(0.2)
    assert sandbox_workers() != []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD_S)
    assert wait_for_no_sandbox_workers() == []
    await _assert_healthy()


async def test_cancellation_during_a_kb_call() -> None:
    entered = asyncio.Event()

    async def slow() -> None:
        entered.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(run_sandboxed("kb.slow()", bridge={"slow": slow}))
    await asyncio.wait_for(entered.wait(), HANG_GUARD_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG_GUARD_S)
    assert wait_for_no_sandbox_workers() == []
    await _assert_healthy()


async def test_event_loop_is_not_blocked() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        busy = "import time\nstart = time.monotonic()\nwhile time.monotonic() - start < 0.5:\n    pass\nresult = 'busy'"
        result = await _run(busy, limits=SandboxLimits(cpu_seconds=30, wall_seconds=60))
    finally:
        task.cancel()
    assert result.value == "busy", result.error
    assert ticks >= 2


async def test_concurrent_runs_are_separated() -> None:
    async def whoami(run: int) -> int:
        await asyncio.sleep(0.05)
        return run

    code = "me = kb.whoami({run})\nseen = globals_probe = [me]\nresult = [me, len(seen)]"
    results = await asyncio.gather(*(_run(code.format(run=i), bridge={"whoami": whoami}) for i in range(6)))
    assert [r.value for r in results] == [[i, 1] for i in range(6)], [r.error for r in results]
    assert wait_for_no_sandbox_workers() == []


async def test_unavailable_worker_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def ran() -> None:
        calls.append("ran")

    monkeypatch.setenv("MONTY_BIN", "/nonexistent/monty")
    result = await _run("kb.ran()\nresult = 1", bridge={"ran": ran})
    assert result.error_kind == "unavailable"
    assert result.error is not None and result.error.startswith("the analysis sandbox is not available")
    assert "/nonexistent/monty" in result.error
    assert (result.value, result.output, calls) == (None, "", [])
