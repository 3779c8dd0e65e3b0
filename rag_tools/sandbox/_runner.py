"""Run model-written Python in Monty with limits, with ``kb`` methods served by this process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import json
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_monty import (
    ClassInstance,
    ExcType,
    ExternalExceptionData,
    ExternalResult,
    FunctionSnapshot,
    Monty,
    MontyComplete,
    MontyCrashedError,
    MontyError,
    MontyRuntimeError,
    MontySession,
    MontySyntaxError,
)

__all__ = ["SANDBOX_MODULES", "SandboxLimits", "SandboxResult", "run_sandboxed"]

_MIB = 1 << 20
ErrorKind = Literal[
    "timeout", "time", "memory", "recursion", "kb_calls", "blocked", "exception", "crash", "unavailable"
]
Bridge = Mapping[str, Callable[..., Awaitable[Any]] | Callable[..., Any]]

#: The modules sandboxed code can import (Monty 1.4's standard library, minus the ones that
#: have nothing to work on in the sandbox: os, sys, pathlib, time, asyncio).
SANDBOX_MODULES = (
    "base64",
    "binascii",
    "bisect",
    "collections",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "functools",
    "hashlib",
    "itertools",
    "json",
    "math",
    "random",
    "re",
    "tomllib",
    "typing",
    "unicodedata",
)
_MAX_CONCURRENT_RUNS = 8
_GRACE_SECONDS = 5.0
_MAX_TRACEBACK_FRAMES = 6
_MAX_ERROR_CHARS = 4000
_BLOCKED_HINT = (
    " (the sandbox has no files, network, processes or environment variables: "
    "reach the documents through kb.search and kb.get_document)"
)
_MODULES_HINT = f" (the sandbox can import only: {', '.join(SANDBOX_MODULES)})"
# Turns the program's ``result`` into JSON text inside the sandbox, so that only a bounded string
# (or, when too large, its length) crosses into this process. ``{limit}`` is filled per run.
_RESULT_PROGRAM = """
def __ragstream_plain(value, depth):
    if depth > 100:
        raise ValueError("the result is nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {{str(k): __ragstream_plain(v, depth + 1) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [__ragstream_plain(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted([__ragstream_plain(v, depth + 1) for v in value], key=repr)
    return repr(value)
import json as __ragstream_json
__ragstream_text = __ragstream_json.dumps(__ragstream_plain(result, 0))
__ragstream_text if len(__ragstream_text) <= {limit} else len(__ragstream_text)
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandbox run; every limit that is hit ends the run with a clear error."""

    cpu_seconds: float = 10.0
    """Execution time of the program in the interpreter; waiting for ``kb`` calls is not counted."""
    wall_seconds: float = 30.0
    """Wall-clock time of the whole run, ``kb`` calls included."""
    memory_bytes: int = 256 * _MIB
    """Heap of the interpreter, checked at every allocation."""
    recursion_depth: int = 1000
    """Deepest call stack of the program."""
    kb_calls: int = 200
    """``kb`` calls (and other requests to this process) a run may make."""
    output_bytes: int = 64 * 1024
    """Printed output kept; the rest is dropped with a note."""
    message_bytes: int = 1 * _MIB
    """Largest ``kb`` request, ``kb`` reply or ``result`` value (JSON bytes)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be positive")


@dataclass
class SandboxResult:
    """Outcome of one sandbox run; ``error`` is None when the program finished normally."""

    output: str
    value: Any
    error: str | None
    error_kind: ErrorKind | None
    duration_s: float


class KB:
    """The ``kb`` object of sandboxed code: its method calls are answered by the run's bridge."""


class _Stopped(Exception):
    """The run was stopped from outside (wall-clock limit or cancellation)."""


class _Output:
    """Printed output, kept up to a byte limit."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[str] = []
        self._kept = 0
        self.dropped = 0

    def write(self, stream: str, text: str) -> None:
        data = text.encode("utf-8", errors="replace")
        room = self._limit - self._kept
        if len(data) <= room:
            self._parts.append(text)
            self._kept += len(data)
            return
        if room > 0:
            self._parts.append(data[:room].decode("utf-8", errors="ignore"))
            self._kept = self._limit
        self.dropped += len(data) - max(room, 0)

    def text(self) -> str:
        text = "".join(self._parts)
        if self.dropped:
            text += f"\n[output truncated: {self.dropped} more bytes not shown]"
        return text


_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _sandbox_executor() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that drive the sandbox sessions (Monty's synchronous client), apart from to_thread's."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                _MAX_CONCURRENT_RUNS, thread_name_prefix="ragstream-sandbox"
            )
        return _executor


async def run_sandboxed(
    code: str, *, limits: SandboxLimits = SandboxLimits(), bridge: Bridge | None = None
) -> SandboxResult:
    """Run untrusted Python ``code`` in a Monty worker process under ``limits``.

    The code sees a ``kb`` object with one method per ``bridge`` entry; each call suspends the
    program and is answered here, on this event loop (coroutine functions are awaited). The code
    may set a top-level ``result``, returned as JSON-compatible data. Problems of the code and hit
    limits are reported in the returned :class:`SandboxResult`, never raised; cancelling the
    awaiting task kills the worker and re-raises :class:`asyncio.CancelledError`.
    """
    bridge = dict(bridge or {})
    for name in bridge:
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"invalid bridge method name: {name!r}")
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    try:
        # Built here, on the loop's thread: resolving the worker binary is not thread-safe.
        pool = Monty(min_processes=1, max_processes=1, request_timeout=limits.cpu_seconds + _GRACE_SECONDS)
    except (OSError, MontyError) as exc:
        message = f"the analysis sandbox is not available: {type(exc).__name__}: {exc}"
        return SandboxResult("", None, message, "unavailable", 0.0)
    run = _Run(code, limits, bridge, loop, pool)
    future = loop.run_in_executor(_sandbox_executor(), run.execute)
    try:
        async with asyncio.timeout(limits.wall_seconds):
            result = await asyncio.shield(future)
    except TimeoutError:
        run.stop()
        await asyncio.wait([future], timeout=_GRACE_SECONDS)
        message = f"wall-clock limit of {limits.wall_seconds:g}s exceeded"
        result = SandboxResult(run.output.text(), None, message, "timeout", 0.0)
    except asyncio.CancelledError:
        run.stop()
        with contextlib.suppress(BaseException):
            await asyncio.wait([future], timeout=_GRACE_SECONDS)
        raise
    result.duration_s = time.monotonic() - started
    return result


class _Run:
    """One program in one Monty session, driven from a sandbox thread."""

    def __init__(
        self, code: str, limits: SandboxLimits, bridge: Bridge, loop: asyncio.AbstractEventLoop, pool: Monty
    ) -> None:
        self.code = code
        self.limits = limits
        self.bridge = bridge
        self.loop = loop
        self.pool = pool
        self.output = _Output(limits.output_bytes)
        self.handle = ClassInstance(KB(), allowed_methods=frozenset(bridge))
        self._lock = threading.Lock()
        self._stopped = False
        self._worker_pid: int | None = None
        self._pending: concurrent.futures.Future[Any] | None = None

    def stop(self) -> None:
        """Stop the run from another thread: kill its worker and abandon a pending ``kb`` call."""
        with self._lock:
            self._stopped = True
            if self._pending is not None:
                self._pending.cancel()
            if self._worker_pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self._worker_pid, signal.SIGKILL)

    def execute(self) -> SandboxResult:
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.pool)  # spawns the worker
            except Exception as exc:
                message = f"the analysis sandbox is not available: {type(exc).__name__}: {exc}"
                return SandboxResult("", None, message, "unavailable", 0.0)
            value, error, kind = self._run_in(stack)
        if error is not None and len(error) > _MAX_ERROR_CHARS:
            error = error[:_MAX_ERROR_CHARS] + " [...]"
        return SandboxResult(self.output.text(), value, error, kind, 0.0)

    def _run_in(self, stack: contextlib.ExitStack) -> tuple[Any, str | None, ErrorKind | None]:
        """Run the program in a session of the (entered) pool: (value, error, error kind)."""
        try:
            limits = self._monty_limits()
            session = stack.enter_context(self.pool.checkout(limits=limits, os_policy={"sleep": "zero"}))
            with self._lock:
                if self._stopped:
                    raise _Stopped
                self._worker_pid = session.worker_pid
            try:
                self._feed(session)
                return self._result(session)
            finally:
                with self._lock:
                    self._worker_pid = None
        except _Stopped:
            return None, None, None  # reported by run_sandboxed
        except MontyCrashedError as exc:
            if self._stopped:
                return None, None, None  # stop() killed the worker
            if exc.timed_out:
                return None, f"time limit of {self.limits.cpu_seconds:g}s exceeded", "time"
            return None, f"the sandbox worker crashed: {exc}", "crash"
        except (MontyRuntimeError, MontySyntaxError) as exc:
            return None, *self._describe(exc)
        except Exception as exc:  # the Monty client itself failed: report it, never raise into the tool
            return None, f"the sandbox failed: {type(exc).__name__}: {exc}", "crash"

    def _monty_limits(self) -> dict[str, Any]:
        return {
            "max_feed_duration_secs": self.limits.cpu_seconds,
            "max_memory": self.limits.memory_bytes,
            "max_recursion_depth": self.limits.recursion_depth,
            "max_suspensions": self.limits.kb_calls,
        }

    def _feed(self, session: MontySession) -> None:
        snapshot = session.feed_start(self.code, inputs={"kb": self.handle}, print_callback=self.output.write)
        while not isinstance(snapshot, MontyComplete):
            if isinstance(snapshot, FunctionSnapshot) and snapshot.object_id == self.handle.id:
                answer = self._call(str(snapshot.function_name), snapshot.args, snapshot.kwargs)
                snapshot = snapshot.resume(answer)
            else:  # file and OS calls get Monty's refusal; unknown names raise NameError
                snapshot = snapshot.resume_auto()

    def _result(self, session: MontySession) -> tuple[Any, str | None, ErrorKind | None]:
        limit = self.limits.message_bytes
        try:
            text = session.feed_run(
                _RESULT_PROGRAM.format(limit=limit),
                external_lookup={"result": None},
                print_callback=self.output.write,
            )
        except MontyRuntimeError as exc:
            return None, f"the `result` value could not be returned: {exc.display('type-msg')}", "exception"
        if not isinstance(text, str):
            message = f"the `result` value is too large to return ({text} characters, limit {limit})"
            return None, message, "exception"
        return json.loads(text), None, None

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ExternalResult:
        """Answer one ``kb.<name>(...)`` call of the program by running the bridge on the loop."""
        function = self.bridge.get(name)
        if function is None:
            available = ", ".join(self.bridge) or "none"
            return _raise("AttributeError", f"kb has no method {name!r} (available: {available})")
        try:
            request = json.dumps([list(args), kwargs], allow_nan=False)
        except (TypeError, ValueError) as exc:
            return _raise("TypeError", f"kb.{name}(): arguments must be JSON-serialisable ({exc})")
        if len(request) > self.limits.message_bytes:
            return _raise("ValueError", f"kb.{name}(): request too large ({len(request)} bytes)")
        try:
            future = asyncio.run_coroutine_threadsafe(_invoke(function, args, kwargs), self.loop)
        except RuntimeError as exc:  # the event loop is gone
            raise _Stopped from exc
        with self._lock:
            if self._stopped:
                future.cancel()
                raise _Stopped
            self._pending = future
        try:
            value = future.result()
        except concurrent.futures.CancelledError:
            raise _Stopped from None
        except Exception as exc:
            return _raise("RuntimeError", f"kb.{name}() failed: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._pending = None
        try:
            encoded = json.dumps(value, default=_json_default)
        except (TypeError, ValueError) as exc:
            return _raise("RuntimeError", f"kb.{name}() returned a non-JSON value ({exc})")
        if len(encoded) > self.limits.message_bytes:
            message = (
                f"kb.{name}() reply too large ({len(encoded)} bytes, limit {self.limits.message_bytes}); "
                "ask for less data"
            )
            return _raise("RuntimeError", message)
        return {"return_value": json.loads(encoded)}

    def _describe(self, exc: MontyRuntimeError | MontySyntaxError) -> tuple[str, ErrorKind]:
        limits = self.limits
        inner = exc.exception()
        summary = exc.display("type-msg")
        trace = _traceback(exc)
        text = str(inner)
        if isinstance(inner, TimeoutError) and "time limit" in text:
            return f"time limit of {limits.cpu_seconds:g}s exceeded{trace}", "time"
        if isinstance(inner, MemoryError):
            return f"memory limit ({limits.memory_bytes / _MIB:g} MiB) exceeded ({text}){trace}", "memory"
        if isinstance(inner, RecursionError):
            return f"recursion limit ({limits.recursion_depth}) exceeded{trace}", "recursion"
        if isinstance(inner, RuntimeError) and "suspension limit" in text:
            return f"limit of {limits.kb_calls} kb calls exceeded{trace}", "kb_calls"
        if isinstance(inner, ModuleNotFoundError):
            return f"{summary}{_MODULES_HINT}{trace}", "blocked"
        if isinstance(inner, PermissionError) or "not supported in this environment" in text:
            return f"{summary}{_BLOCKED_HINT}{trace}", "blocked"
        return f"{summary}{trace}", "exception"


async def _invoke(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    value = function(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


def _raise(exc_type: ExcType, message: str) -> ExternalExceptionData:
    """The answer that raises ``exc_type(message)`` at the program's ``kb`` call."""
    return {"exc_type": exc_type, "message": message}


def _traceback(exc: MontyRuntimeError | MontySyntaxError) -> str:
    frames = exc.traceback()
    if not frames:
        return ""
    lines = ["", "Traceback (most recent call last):"]
    for frame in frames[-_MAX_TRACEBACK_FRAMES:]:
        lines.append(f"  line {frame.line}, in {frame.function_name or '<module>'}")
        if frame.source_line:
            lines.append(f"    {frame.source_line.strip()[:200]}")
    return "\n".join(lines)


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(model_dump):
        return model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
