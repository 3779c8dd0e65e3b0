"""Parent side of the analysis sandbox: spawning, supervision, bridge and cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import grp
import inspect
import itertools
import json
import logging
import os
import pwd
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

__all__ = ["SandboxLimits", "SandboxResult", "run_sandboxed", "sandbox_available"]

logger = logging.getLogger(__name__)

_MIB = 1 << 20
ErrorKind = Literal[
    "timeout", "cpu", "memory", "blocked", "network", "filesystem", "process", "exception", "unavailable"
]
Bridge = Mapping[str, Callable[..., Awaitable[Any]] | Callable[..., Any]]

#: Marker in the child's command line, to recognise sandbox processes in /proc.
PROCESS_MARKER = "ragstream-sandbox"
#: Unprivileged uids (and gids of the same number) used for the sandboxed code when running as root;
#: one per concurrent run, so runs cannot see each other's files or share the process limit.
UID_POOL = range(64_000, 65_000)

_CHILD_SOURCE = (Path(__file__).with_name("_child.py")).read_text(encoding="utf-8")
_CHILD_ENV_KEEP = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"}
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
_GRACE_SECONDS = 5.0
_PROBE_CODE = (
    "import os\n"
    "with open('/proc/net/dev') as f:\n"
    "    interfaces = sorted(line.split(':')[0].strip() for line in f.read().splitlines()[2:])\n"
    "result = {'uid': os.getuid(), 'interfaces': interfaces}\n"
)


@dataclass(frozen=True)
class SandboxLimits:
    """Hard limits of one sandbox run."""

    cpu_seconds: int = 10
    """CPU time (RLIMIT_CPU); SIGKILL one second after the soft limit."""
    wall_seconds: float = 20.0
    """Wall-clock time, bridge calls included; the whole process tree is killed after it."""
    memory_bytes: int = 512 * _MIB
    """Address space of each sandbox process (RLIMIT_AS)."""
    file_bytes: int = 10 * _MIB
    """Largest file the code may write (RLIMIT_FSIZE)."""
    max_processes: int = 32
    """Processes and threads of the sandbox user (RLIMIT_NPROC)."""
    output_bytes: int = 64 * 1024
    """Captured stdout/stderr kept; the rest is dropped with a note."""
    message_bytes: int = 1 * _MIB
    """Largest bridge request, bridge reply or returned ``result`` value (JSON bytes)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be positive")


@dataclass
class SandboxResult:
    """Outcome of one sandbox run; ``error`` is None when the code finished normally."""

    output: str
    value: Any
    error: str | None
    error_kind: ErrorKind | None
    duration_s: float


class _ProtocolError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# availability


_availability: tuple[bool, str] | None = None
_availability_lock = threading.Lock()


def sandbox_available() -> tuple[bool, str]:
    """Return ``(True, "")`` if this machine can isolate sandbox runs, else ``(False, reason)``.

    The first call runs a probe sandbox (network namespace, privilege drop, read-only filesystem)
    and blocks for a fraction of a second; the answer is cached for the life of the process.
    """
    global _availability
    with _availability_lock:
        if _availability is None:
            _availability = _probe()
            if not _availability[0]:
                logger.warning("analysis sandbox unavailable: %s", _availability[1])
        return _availability


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, "the sandbox needs Linux namespaces"
    outcome: list[SandboxResult | BaseException] = []

    def target() -> None:
        try:
            limits = SandboxLimits(cpu_seconds=5, wall_seconds=15.0, memory_bytes=256 * _MIB)
            outcome.append(asyncio.run(_run(_PROBE_CODE, limits, None, check_available=False)))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, name="sandbox-probe", daemon=True)
    thread.start()
    thread.join(30)
    if not outcome:
        return False, "the sandbox probe did not finish"
    result = outcome[0]
    if isinstance(result, BaseException):
        return False, f"the sandbox probe failed: {type(result).__name__}: {result}"
    if result.error is not None:
        return False, result.error
    value = result.value if isinstance(result.value, dict) else {}
    if value.get("interfaces") != ["lo"]:
        return False, f"the network namespace is not isolated (interfaces: {value.get('interfaces')})"
    if os.geteuid() == 0 and value.get("uid") == 0:
        return False, "could not drop root privileges in the sandbox"
    return True, ""


# ---------------------------------------------------------------------------------------------
# public entry point


async def run_sandboxed(
    code: str,
    *,
    limits: SandboxLimits = SandboxLimits(),
    bridge: Bridge | None = None,
    hide: Sequence[str | os.PathLike[str]] = (),
) -> SandboxResult:
    """Run untrusted Python ``code`` in an isolated, resource-limited child process.

    The code sees a ``kb`` object with one method per ``bridge`` entry (each call is served by
    awaiting that coroutine function here) and may set a top-level ``result``. Problems of the code
    are reported in the returned :class:`SandboxResult`; cancelling the awaiting task kills the
    whole child process tree and re-raises :class:`asyncio.CancelledError`.

    Besides the private system directories, the current working directory (the application's
    project) and every directory in ``hide`` (data directories, configuration) are covered by
    empty mounts: the code cannot read them, even where their files are world-readable.
    """
    return await _run(code, limits, bridge, hide=[os.getcwd(), *map(os.fspath, hide)])


async def _run(
    code: str,
    limits: SandboxLimits,
    bridge: Bridge | None,
    *,
    python_guards: bool = True,
    check_available: bool = True,
    hide: Sequence[str] = (),
) -> SandboxResult:
    """Implementation of :func:`run_sandboxed`; ``python_guards=False`` is for tests only."""
    bridge = dict(bridge or {})
    for name in bridge:
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"invalid bridge method name: {name!r}")
    started = time.monotonic()
    if check_available:
        available, reason = await asyncio.to_thread(sandbox_available)
        if not available:
            message = f"the analysis sandbox is not available on this machine: {reason}"
            return SandboxResult("", None, message, "unavailable", 0.0)
    try:
        lease = _lease_uid()
        with lease as uid:
            workdir = _make_workdir(uid)
            try:
                run = _Run(code, limits, bridge, uid, workdir, python_guards, hide)
                result = await run.execute()
                if not run.reaped:
                    lease.quarantine()
            finally:
                await _remove_workdir(workdir)
    except (_Unavailable, OSError) as exc:
        message = f"the analysis sandbox is not available: {type(exc).__name__}: {exc}"
        return SandboxResult("", None, message, "unavailable", time.monotonic() - started)
    result.duration_s = time.monotonic() - started
    return result


# ---------------------------------------------------------------------------------------------
# uid pool and work directories


class _Unavailable(Exception):
    pass


_quarantined: list[int] = []  # lock fds of uids whose processes could not be confirmed dead
_uid_cursor = itertools.count()


class _UidLease:
    """Exclusive use of one sandbox uid, across processes (flock on a lock file)."""

    def __init__(self, uid: int, fd: int | None) -> None:
        self.uid = uid
        self._fd = fd

    def quarantine(self) -> None:
        if self._fd is not None:
            _quarantined.append(self._fd)
            self._fd = None
            logger.error("sandbox uid %d quarantined: its processes could not be confirmed dead", self.uid)

    def __enter__(self) -> int:
        return self.uid

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _lease_uid() -> _UidLease:
    if os.geteuid() != 0:
        return _UidLease(os.geteuid(), None)
    lock_dir = _base_dir() / "locks"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    candidates = _free_uids()
    if not candidates:
        raise _Unavailable(f"no usable uid in {UID_POOL}")
    start = next(_uid_cursor)
    for offset in range(len(candidates)):
        uid = candidates[(start + offset) % len(candidates)]
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return _UidLease(uid, fd)
    raise _Unavailable("all sandbox uids are in use")


_free_uid_cache: list[int] | None = None


def _free_uids() -> list[int]:
    """Uids of the pool that no account or group uses."""
    global _free_uid_cache
    if _free_uid_cache is None:
        taken = {entry.pw_uid for entry in pwd.getpwall()} | {entry.gr_gid for entry in grp.getgrall()}
        _free_uid_cache = [uid for uid in UID_POOL if uid not in taken]
    return _free_uid_cache


_base_dir_cache: Path | None = None


def _base_dir() -> Path:
    """A directory owned by us (0711) holding the per-run work directories and uid locks."""
    global _base_dir_cache
    if _base_dir_cache is None:
        base = Path(tempfile.gettempdir()) / f"ragstream-sandbox-{os.geteuid()}"
        with contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o711)
        info = base.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            base = Path(tempfile.mkdtemp(prefix="ragstream-sandbox-"))
        base.chmod(0o711)
        _base_dir_cache = base
    return _base_dir_cache


def _make_workdir(uid: int) -> str:
    workdir = tempfile.mkdtemp(prefix="run-", dir=_base_dir())
    if os.geteuid() == 0:
        os.chown(workdir, uid, uid)
    return os.path.realpath(workdir)


async def _remove_workdir(workdir: str) -> None:
    def remove() -> None:
        def on_error(function: Any, path: str, exc_info: Any) -> None:
            with contextlib.suppress(OSError):
                os.chmod(os.path.dirname(path), 0o700)
                os.chmod(path, 0o700)
                function(path)

        shutil.rmtree(workdir, onerror=on_error)

    try:
        await asyncio.shield(asyncio.to_thread(remove))
    except asyncio.CancelledError:
        remove()
        raise
    except OSError:
        logger.warning("could not remove sandbox work directory %s", workdir, exc_info=True)


# ---------------------------------------------------------------------------------------------
# one run


def _mib(value: int) -> str:
    return f"{value / _MIB:g} MiB"


class _Run:
    def __init__(
        self,
        code: str,
        limits: SandboxLimits,
        bridge: dict[str, Callable[..., Any]],
        uid: int,
        workdir: str,
        guards: bool,
        hide: Sequence[str] = (),
    ) -> None:
        self.hide = [os.path.realpath(p) for p in hide]
        self.code = code
        self.limits = limits
        self.bridge = bridge
        self.uid = uid
        self.workdir = workdir
        self.guards = guards
        self.output = bytearray()
        self.dropped = 0
        self.done: dict[str, Any] | None = None
        self.unavailable: str | None = None
        self.protocol_error: str | None = None
        self.status: dict[str, Any] = {}
        self.reaped = False
        self._proc: asyncio.subprocess.Process | None = None
        self._transports: list[asyncio.BaseTransport] = []

    async def execute(self) -> SandboxResult:
        ctl_r, ctl_w = os.pipe()
        rep_r, rep_w = os.pipe()
        st_r, st_w = os.pipe()
        child_fds = (ctl_w, rep_r, st_w)
        ours = [os.fdopen(ctl_r, "rb", buffering=0), os.fdopen(st_r, "rb", buffering=0)]
        ours.append(os.fdopen(rep_w, "wb", buffering=0))
        try:
            try:
                await self._spawn(child_fds)
            finally:
                for fd in child_fds:
                    os.close(fd)
            ctl = await self._reader(ours[0])
            status = await self._reader(ours[1])
            replies = await self._writer(ours[2])
            return await self._supervise(ctl, status, replies)
        except asyncio.CancelledError:
            self._kill()
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._reap())
            raise
        finally:
            self._kill()
            for transport in self._transports:
                transport.close()
            for pipe in ours:
                pipe.close()

    async def _spawn(self, child_fds: tuple[int, ...]) -> None:
        env = {**_CHILD_ENV_KEEP, "HOME": self.workdir, "TMPDIR": self.workdir}
        env.update(dict.fromkeys(_THREAD_VARS, "1"))
        fds = [str(fd) for fd in child_fds]
        self._proc = proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-u",
            "-X",
            "utf8",
            "-c",
            _CHILD_SOURCE,
            PROCESS_MARKER,
            *fds,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.workdir,
            env=env,
            pass_fds=child_fds,
            start_new_session=True,
        )
        config = {
            "code": self.code,
            "workdir": self.workdir,
            "uid": self.uid,
            "gid": self.uid,
            "userns": os.geteuid() != 0,
            "limits": dataclasses.asdict(self.limits),
            "bridge": sorted(self.bridge),
            "python_guards": self.guards,
            "hidden": self.hide,
        }
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(config).encode())
        with contextlib.suppress(ConnectionError):
            await proc.stdin.drain()
        proc.stdin.close()

    async def _reader(self, pipe: BinaryIO) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=self.limits.message_bytes + 8)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        self._transports.append(transport)
        return reader

    async def _writer(self, pipe: BinaryIO) -> asyncio.StreamWriter:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), pipe
        )
        self._transports.append(transport)
        return asyncio.StreamWriter(transport, protocol, None, loop)

    async def _supervise(
        self, ctl: asyncio.StreamReader, st: asyncio.StreamReader, replies: asyncio.StreamWriter
    ) -> SandboxResult:
        assert self._proc is not None and self._proc.stdout is not None
        timed_out = False
        tasks = [
            asyncio.ensure_future(self._pump_output(self._proc.stdout)),
            asyncio.ensure_future(self._serve(ctl, replies)),
            asyncio.ensure_future(self._read_status(st)),
        ]
        try:
            async with asyncio.timeout(self.limits.wall_seconds):
                await asyncio.gather(tasks[1], self._proc.wait())
                await asyncio.gather(*tasks)
        except TimeoutError:
            timed_out = self.done is None and self.unavailable is None
        finally:
            self._kill()
            await self._reap()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return self._result(timed_out)

    async def _reap(self) -> None:
        """Wait for the direct child: it exits only after every process of the sandbox is gone."""
        if self._proc is None:
            return
        try:
            await asyncio.wait_for(self._proc.wait(), _GRACE_SECONDS)
            self.reaped = True
        except TimeoutError:
            logger.error("sandbox process %d did not exit after SIGKILL", self._proc.pid)

    def _kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    async def _pump_output(self, stdout: asyncio.StreamReader) -> None:
        limit = self.limits.output_bytes
        while chunk := await stdout.read(1 << 16):
            room = limit - len(self.output)
            if room > 0:
                self.output += chunk[:room]
            self.dropped += max(0, len(chunk) - max(room, 0))

    async def _read_status(self, st: asyncio.StreamReader) -> None:
        with contextlib.suppress(_ProtocolError):
            message = await self._read_frame(st)
            if message is not None:
                self.status = message
                if "unavailable" in message:
                    self.unavailable = str(message["unavailable"])

    async def _read_frame(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        try:
            header = await reader.readexactly(4)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise _ProtocolError("truncated frame header") from None
            return None
        size = int.from_bytes(header, "big")
        if size > self.limits.message_bytes + 1024:
            raise _ProtocolError(f"message of {size} bytes exceeds the limit")
        try:
            message = json.loads(await reader.readexactly(size))
        except (asyncio.IncompleteReadError, ValueError) as exc:
            raise _ProtocolError(f"unreadable message ({type(exc).__name__})") from None
        if not isinstance(message, dict):
            raise _ProtocolError("message is not an object")
        return message

    async def _serve(self, ctl: asyncio.StreamReader, replies: asyncio.StreamWriter) -> None:
        """Handle the child's messages until it closes the control pipe."""
        try:
            while (message := await self._read_frame(ctl)) is not None:
                kind = message.get("t")
                if kind == "call":
                    reply = await self._call(message)
                    data = json.dumps(reply).encode()
                    replies.write(len(data).to_bytes(4, "big") + data)
                    await replies.drain()
                elif kind == "done":
                    self.done = message
                elif kind == "unavailable":
                    self.unavailable = str(message.get("reason"))
                else:
                    raise _ProtocolError(f"unknown message type {kind!r}")
        except _ProtocolError as exc:
            self.protocol_error = str(exc)
            self._kill()
        except ConnectionError:
            pass  # the child died while we were replying

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        call_id = message.get("id")
        name = message.get("name")
        args = message.get("args", [])
        kwargs = message.get("kwargs", {})
        function = self.bridge.get(name) if isinstance(name, str) else None
        if function is None or not isinstance(args, list) or not isinstance(kwargs, dict):
            return {"id": call_id, "ok": False, "error": f"kb has no method {name!r}"}
        try:
            value = function(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            return {"id": call_id, "ok": False, "error": f"kb.{name}() failed: {type(exc).__name__}: {exc}"}
        try:
            encoded = json.dumps(value, default=_json_default)
        except (TypeError, ValueError) as exc:
            return {"id": call_id, "ok": False, "error": f"kb.{name}() returned a non-JSON value ({exc})"}
        if len(encoded) > self.limits.message_bytes:
            error = (
                f"kb.{name}() reply too large ({len(encoded)} bytes, limit {self.limits.message_bytes}); "
                "ask for less data"
            )
            return {"id": call_id, "ok": False, "error": error}
        return {"id": call_id, "ok": True, "value": json.loads(encoded)}

    def _result(self, timed_out: bool) -> SandboxResult:
        output = self.output.decode("utf-8", errors="replace")
        if self.dropped:
            output += f"\n[output truncated: {self.dropped} more bytes not shown]"
        limits = self.limits
        if self.unavailable is not None:
            message = f"the analysis sandbox is not available: {self.unavailable}"
            return SandboxResult("", None, message, "unavailable", 0.0)
        done = self.done or {}
        value = done.get("value")
        error: str | None = done.get("error")
        kind: ErrorKind | None = done.get("kind")
        if timed_out:
            error, kind = f"wall-clock limit of {limits.wall_seconds:g}s exceeded", "timeout"
        elif self.protocol_error is not None:
            error, kind = f"sandbox protocol error: {self.protocol_error}", "exception"
        elif not self.done:
            error, kind = self._diagnose_exit(output)
        return SandboxResult(output, value, error, kind, 0.0)

    def _diagnose_exit(self, output: str) -> tuple[str | None, ErrorKind | None]:
        """Explain why the code ended without reporting back."""
        limits = self.limits
        signum = self.status.get("signal")
        cpu = float(self.status.get("cpu") or 0.0)
        if signum in (signal.SIGKILL, signal.SIGXCPU) and cpu >= limits.cpu_seconds - 0.5:
            return f"CPU time limit of {limits.cpu_seconds}s exceeded", "cpu"
        if signum is not None:
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = f"signal {signum}"
            if "MemoryError" in output or "out of memory" in output.lower():
                return (
                    f"memory limit ({_mib(limits.memory_bytes)}) exceeded (process killed by {name})",
                    "memory",
                )
            return f"the sandbox process was killed by {name}", "process"
        code = self.status.get("exit")
        if code is None:
            return "the sandbox process ended without reporting a status", "exception"
        if code != 0:
            return f"the sandbox process exited with code {code}", "exception"
        return None, None


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(model_dump):
        return model_dump(mode="json")
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return tolist()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _iter_sandbox_pids() -> Iterator[int]:
    """Pids of live sandbox processes of this machine (by the command-line marker)."""
    marker = PROCESS_MARKER.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                args = handle.read().split(b"\0")
        except OSError:
            continue
        if marker in args:
            yield int(entry)
