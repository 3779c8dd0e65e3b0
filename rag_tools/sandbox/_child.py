"""Bootstrap run in the sandbox child as ``python -I -c <this source> MARKER CTL_W REP_R STATUS_W``.

Standard library only: it is executed by a fresh interpreter, never imported by the package.

Stage A (the direct child of the parent, still privileged) reads the run configuration from stdin,
enters new network/mount/PID/IPC/UTS namespaces (plus a user namespace when not root) and forks
stage B, which is PID 1 of the new PID namespace. A only waits for B and reports how it ended on
the status pipe: when B exits, the kernel kills every other process of the namespace.

Stage B makes the filesystem read-only except the work directory, sets the resource limits, drops
privileges, installs the Python guards (audit hook + import blocker, defence in depth only) and
runs the user code. It talks to the parent over two pipes with length-prefixed JSON frames.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import json
import linecache
import os
import resource
import signal
import stat
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_NOATIME = 1024
_MS_NODIRATIME = 2048
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_RELATIME = 1 << 21
_MS_STRICTATIME = 1 << 24
_MOUNT_OPTION_FLAGS = {
    "nosuid": _MS_NOSUID,
    "nodev": _MS_NODEV,
    "noexec": _MS_NOEXEC,
    "noatime": _MS_NOATIME,
    "nodiratime": _MS_NODIRATIME,
    "relatime": _MS_RELATIME,
    "strictatime": _MS_STRICTATIME,
}
# Kernel pseudo filesystems: left as they are (only root can write there anyway).
_PSEUDO_FS = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "securityfs",
        "debugfs",
        "tracefs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "autofs",
        "binfmt_misc",
        "efivarfs",
        "selinuxfs",
        "nsfs",
    }
)

# Covered by an empty tmpfs in the sandbox: private data and IPC endpoints (unix sockets).
_HIDDEN_DIRS = ("/root", "/home", "/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_NOFILE = 128
_USER_FILENAME = "<sandbox>"
_MAX_TB_FRAMES = 6
_MAX_ERROR_CHARS = 4000

_BLOCKED_MODULES = {
    "socket": "network",
    "_socket": "network",
    "ssl": "network",
    "_ssl": "network",
    "subprocess": "blocked",
    "_posixsubprocess": "blocked",
    "multiprocessing": "blocked",
    "_multiprocessing": "blocked",
    "_posixshmem": "blocked",
    "ctypes": "blocked",
    "_ctypes": "blocked",
    "pty": "blocked",
}
_PROCESS_EVENTS = frozenset(
    {"os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn"}
)
_NETWORK_EVENT_PREFIXES = (
    "socket.",
    "http.client.",
    "urllib.",
    "ftplib.",
    "smtplib.",
    "poplib.",
    "imaplib.",
    "nntplib.",
    "telnetlib.",
    "webbrowser.",
)
# audit event -> positions of the arguments that are paths being created or modified
_WRITE_EVENTS: dict[str, tuple[int, ...]] = {
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.symlink": (1,),
    "os.link": (1,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
    "shutil.move": (0, 1),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NETWORK_ERRNOS = frozenset(
    {errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL, errno.ECONNREFUSED}
)


class SandboxViolation(PermissionError):
    """Raised inside the sandbox when the user code attempts a forbidden operation."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.sandbox_kind = kind


class SandboxImportError(ImportError):
    """Raised inside the sandbox when the user code imports a blocked module."""

    def __init__(self, name: str, kind: str) -> None:
        reason = " (no network access)" if kind == "network" else ""
        super().__init__(f"module {name!r} is blocked in the sandbox{reason}", name=name)
        self.sandbox_kind = kind


class CpuLimitExceeded(BaseException):
    """Raised from the SIGXCPU handler (a BaseException so ``except Exception`` does not hide it)."""


class _SetupError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# framing


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 16))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    _write_all(fd, len(data).to_bytes(4, "big") + data)


# ---------------------------------------------------------------------------------------------
# libc helpers (ctypes is only used before the user code runs, then purged)


class _Libc:
    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.lib = ctypes.CDLL(None, use_errno=True)

    def check(self, ret: int, what: str) -> None:
        if ret != 0:
            err = self.ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def unshare(self, flags: int) -> None:
        self.check(self.lib.unshare(flags), "unshare")

    def mount(
        self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None
    ) -> None:
        def enc(value: str | None) -> bytes | None:
            return None if value is None else os.fsencode(value)

        ret = self.lib.mount(enc(source), enc(target), enc(fstype), self.ctypes.c_ulong(flags), enc(data))
        self.check(ret, f"mount {target}")

    def prctl(self, option: int, arg: int) -> None:
        ulong = self.ctypes.c_ulong
        self.check(self.lib.prctl(option, ulong(arg), ulong(0), ulong(0), ulong(0)), f"prctl({option})")

    def drop_capabilities(self) -> None:
        header = (self.ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (self.ctypes.c_uint32 * 6)()
        self.check(self.lib.capset(header, data), "capset")


# ---------------------------------------------------------------------------------------------
# stage A


def main() -> None:
    """Entry point of the child: stage A."""
    ctl_w, rep_r, status_w = (int(arg) for arg in sys.argv[2:5])
    config = json.loads(sys.stdin.buffer.read())
    libc = _Libc()
    with contextlib.suppress(OSError):
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    unix_sockets = _listening_unix_sockets()  # read while still in the host network namespace
    try:
        _enter_namespaces(libc, config)
    except OSError as exc:
        _send(status_w, {"unavailable": f"cannot create isolated namespaces ({exc})"})
        os._exit(0)
    lifeline_r, lifeline_w = os.pipe()  # EOF for stage B once stage A is gone
    pid = os.fork()
    if pid == 0:
        os.close(status_w)
        os.close(lifeline_w)
        code = 70
        holder = [libc]  # so that no frame of the user code's call stack keeps ctypes reachable
        del libc
        try:
            _stage_b(holder, config, ctl_w, rep_r, unix_sockets, lifeline_r)
        except BaseException:  # pragma: no cover - last resort, reported by the parent
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(ctl_w)
    os.close(rep_r)
    os.close(lifeline_r)

    def on_alarm(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    # Backstop in case the parent's wall-clock enforcement is gone.
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(config["limits"]["wall_seconds"]) + 10)
    _, status, usage = os.wait4(pid, 0)
    report: dict[str, Any] = {"cpu": usage.ru_utime + usage.ru_stime}
    if os.WIFSIGNALED(status):
        report["signal"] = os.WTERMSIG(status)
    else:
        report["exit"] = os.WEXITSTATUS(status)
    _send(status_w, report)
    os._exit(0)


def _enter_namespaces(libc: _Libc, config: dict[str, Any]) -> None:
    flags = _CLONE_NEWNET | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
    if not config["userns"]:
        libc.unshare(flags)
        return
    uid, gid = os.getuid(), os.getgid()
    libc.unshare(_CLONE_NEWUSER | flags)
    for name, content in (
        ("setgroups", "deny"),
        ("gid_map", f"{gid} {gid} 1"),
        ("uid_map", f"{uid} {uid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(content)


# ---------------------------------------------------------------------------------------------
# stage B: setup


def _stage_b(
    holder: list[_Libc],
    config: dict[str, Any],
    ctl_w: int,
    rep_r: int,
    unix_sockets: list[str],
    lifeline: int,
) -> None:
    libc = holder.pop()
    try:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        _setup_filesystem(libc, config, unix_sockets)
        _setup_limits(config["limits"])
        _drop_privileges(libc, config)
        # The parent-death signal is only armed now; if stage A died before, nobody supervises us.
        os.set_blocking(lifeline, False)
        try:
            if os.read(lifeline, 1) == b"":
                os._exit(0)
        except BlockingIOError:
            pass
        os.close(lifeline)
    except (OSError, _SetupError) as exc:
        _send(ctl_w, {"t": "unavailable", "reason": f"sandbox setup failed ({exc})"})
        os._exit(0)
    del libc
    for name in ("ctypes", "ctypes._endian", "_ctypes"):
        sys.modules.pop(name, None)
    import gc

    gc.collect()
    _Runner(config, ctl_w, rep_r).run()


def _setup_filesystem(libc: _Libc, config: dict[str, Any], unix_sockets: list[str]) -> None:
    """Private mount namespace: read-only everywhere except the work directory.

    Directories with private data or IPC endpoints are covered by empty tmpfs mounts (the
    directories the interpreter and the work directory need are bind-mounted back), and the
    remaining listening unix sockets are masked: a network namespace does not isolate them.
    """
    workdir: str = config["workdir"]
    libc.mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
    needed = sorted({os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)} | {workdir})
    covers = {os.path.realpath(d) for d in (*_HIDDEN_DIRS, *config.get("hidden", ())) if os.path.isdir(d)}
    if not config["userns"]:
        covers |= _blocking_ancestors(needed, config["uid"], config["gid"])
    covers = {c for c in covers if not any(c.startswith(o + "/") for o in covers) and c != "/"}
    for cover in sorted(covers):
        _cover(libc, cover, [p for p in needed if p.startswith(cover + "/")])
    libc.mount(workdir, workdir, None, _MS_BIND, None)
    for path in unix_sockets:
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                libc.mount("/dev/null", path, None, _MS_BIND, None)
    for target, options, fstype in _read_mounts():
        if fstype in _PSEUDO_FS or target == workdir or target.startswith("/proc/"):
            continue
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID
        flags |= sum(_MOUNT_OPTION_FLAGS.get(opt, 0) for opt in set(options))
        try:
            libc.mount(None, target, None, flags, None)
        except OSError as exc:
            if target == "/":
                raise _SetupError(f"cannot make the root filesystem read-only: {exc}") from exc
    # A /proc of our own: only the sandbox's processes are visible (best effort).
    with contextlib.suppress(OSError):
        libc.mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)


def _listening_unix_sockets() -> list[str]:
    """Filesystem paths of the unix sockets bound in the current network namespace."""
    paths = []
    with contextlib.suppress(OSError), open("/proc/self/net/unix") as handle:
        for line in handle.read().splitlines()[1:]:
            fields = line.split(None, 7)
            if len(fields) == 8 and fields[7].startswith("/"):
                paths.append(fields[7])
    return paths


def _read_mounts() -> list[tuple[str, list[str], str]]:
    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields = left.split()
            target = fields[4].encode().decode("unicode_escape")
            mounts.append((target, fields[5].split(","), right.split()[0]))
    return mounts


def _traversable(path: str, uid: int, gid: int) -> bool:
    info = os.stat(path)
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _blocking_ancestors(paths: list[str], uid: int, gid: int) -> set[str]:
    """Highest ancestor of each path that ``uid`` cannot traverse (e.g. /root, mode 0700)."""
    blockers = set()
    for path in paths:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:depth])
            if not _traversable(ancestor, uid, gid):
                blockers.add(ancestor)
                break
    return blockers


def _cover(libc: _Libc, directory: str, keep: list[str]) -> None:
    """Cover ``directory`` with an empty root-owned tmpfs and bind-mount ``keep`` back into it."""
    keep = [p for p in keep if not any(p.startswith(q + "/") for q in keep)]
    handles = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in keep}
    try:
        libc.mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64k")
        for path, fd in handles.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            libc.mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
    finally:
        for fd in handles.values():
            os.close(fd)


def _setup_limits(limits: dict[str, Any]) -> None:
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (_NOFILE, _NOFILE))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"], limits["max_processes"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))


def _drop_privileges(libc: _Libc, config: dict[str, Any]) -> None:
    if config["userns"]:
        libc.drop_capabilities()
    else:
        uid, gid = config["uid"], config["gid"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise _SetupError("could not drop privileges")
    # The parent-death signal is reset by credential changes: set it (again) now.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1)


# ---------------------------------------------------------------------------------------------
# stage B: guards (defence in depth; the kernel-level isolation above is the real barrier)


def _install_guards(workdir: str) -> None:
    realpath: Callable[[str], str] = os.path.realpath
    abspath: Callable[[str], str] = os.path.abspath
    fsdecode = os.fsdecode
    fspath = os.fspath
    allowed_roots = (realpath(workdir),)
    blocked_modules = dict(_BLOCKED_MODULES)
    write_events = dict(_WRITE_EVENTS)
    process_events = _PROCESS_EVENTS
    write_flags = _WRITE_FLAGS
    network_prefixes = _NETWORK_EVENT_PREFIXES
    violation = SandboxViolation
    import_error = SandboxImportError

    def check_write(path: Any) -> None:
        if isinstance(path, int) or path is None:
            return
        try:
            text = fsdecode(fspath(path))
        except TypeError:
            return
        resolved = realpath(abspath(text))
        if resolved == "/dev/null":
            return
        for root in allowed_roots:
            if resolved == root or resolved.startswith(root + "/"):
                return
        raise violation(f"writing outside the sandbox directory is not allowed: {text}", "filesystem")

    def check_import(name: Any) -> None:
        if isinstance(name, str):
            kind = blocked_modules.get(name.partition(".")[0])
            if kind is not None:
                raise import_error(name.partition(".")[0], kind)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            writing = (
                any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & write_flags)
            )
            if writing:
                check_write(path)
        elif event == "import":
            check_import(args[0] if args else None)
        elif event in write_events:
            for index in write_events[event]:
                if index < len(args):
                    check_write(args[index])
        elif event in process_events:
            raise violation(f"{event} is blocked in the sandbox (no child processes or programs)", "blocked")
        elif event.startswith(network_prefixes):
            raise violation("network access is not available in the sandbox", "network")
        elif event.startswith("ctypes."):
            raise violation("ctypes is blocked in the sandbox", "blocked")

    class _Blocker:
        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> None:
            check_import(name)

        @staticmethod
        def find_module(name: str, path: object = None) -> None:
            check_import(name)

    for name in list(sys.modules):
        if name.partition(".")[0] in blocked_modules:
            del sys.modules[name]
    sys.meta_path.insert(0, _Blocker())  # type: ignore[arg-type]
    sys.addaudithook(hook)


# ---------------------------------------------------------------------------------------------
# stage B: bridge and user code


class _Bridge:
    """Blocking JSON request/reply channel to the parent, used by the ``kb`` object."""

    def __init__(self, ctl_w: int, rep_r: int, max_bytes: int) -> None:
        self._ctl_w = ctl_w
        self._rep_r = rep_r
        self._max = max_bytes
        self._lock = threading.Lock()
        self._next_id = 0
        self._owner = os.getpid()

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if os.getpid() != self._owner:
            raise RuntimeError("kb is only available in the main sandbox process")
        with self._lock:
            self._next_id += 1
            request = {"t": "call", "id": self._next_id, "name": name, "args": list(args), "kwargs": kwargs}
            try:
                data = json.dumps(request, allow_nan=False).encode()
            except (TypeError, ValueError) as exc:
                raise TypeError(f"kb.{name}(): arguments must be JSON-serialisable ({exc})") from None
            if len(data) > self._max:
                raise ValueError(f"kb.{name}(): request too large ({len(data)} bytes, limit {self._max})")
            _write_all(self._ctl_w, len(data).to_bytes(4, "big") + data)
            header = _read_exact(self._rep_r, 4)
            size = int.from_bytes(header, "big") if header else 0
            body = _read_exact(self._rep_r, size) if header and size <= self._max else None
            if body is None:
                raise RuntimeError(f"kb.{name}(): the bridge to the host is closed")
            reply = json.loads(body)
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error") or f"kb.{name}() failed"))
        return reply.get("value")


class _KB:
    """The ``kb`` object: one method per bridge function of the parent."""

    def __init__(self, bridge: _Bridge, names: list[str]) -> None:
        object.__setattr__(self, "_names", tuple(names))
        for name in names:
            object.__setattr__(self, name, self._method(bridge, name))

    @staticmethod
    def _method(bridge: _Bridge, name: str) -> Callable[..., Any]:
        def method(*args: Any, **kwargs: Any) -> Any:
            return bridge.call(name, args, kwargs)

        method.__name__ = method.__qualname__ = name
        return method

    def __getattr__(self, name: str) -> Any:
        available = ", ".join(self._names) or "none"
        raise AttributeError(f"kb has no method {name!r} (available: {available})")

    def __dir__(self) -> list[str]:
        return list(self._names)

    def __repr__(self) -> str:
        return f"<kb methods: {', '.join(self._names) or 'none'}>"


def _json_default(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return tolist()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class _Runner:
    def __init__(self, config: dict[str, Any], ctl_w: int, rep_r: int) -> None:
        self.config = config
        self.limits = config["limits"]
        self.ctl_w = ctl_w
        self.max_bytes = int(self.limits["message_bytes"])
        self.bridge = _Bridge(ctl_w, rep_r, self.max_bytes)
        self.pid = os.getpid()

    def run(self) -> None:
        code: str = self.config["code"]
        namespace: dict[str, Any] = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "kb": _KB(self.bridge, self.config["bridge"]),
        }
        linecache.cache[_USER_FILENAME] = (len(code), None, code.splitlines(True), _USER_FILENAME)
        os.chdir(self.config["workdir"])
        signal.signal(signal.SIGXCPU, self._on_sigxcpu)
        error: str | None = None
        kind: str | None = None
        try:
            if self.config["python_guards"]:
                _install_guards(self.config["workdir"])
            exec(compile(code, _USER_FILENAME, "exec"), namespace)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error, kind = f"SystemExit: {exc.code}", "exception"
        except BaseException as exc:
            error, kind = self._describe(exc)
        if error is not None and len(error) > _MAX_ERROR_CHARS:
            error = error[:_MAX_ERROR_CHARS] + " [...]"
        self._finish(namespace, error, kind)

    def _on_sigxcpu(self, signum: int, frame: object) -> None:
        raise CpuLimitExceeded

    def _finish(self, namespace: dict[str, Any], error: str | None, kind: str | None) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        if os.getpid() != self.pid:  # a forked copy of the user code: only the main process reports
            os._exit(1 if error else 0)
        message: dict[str, Any] = {"t": "done", "error": error, "kind": kind, "has_value": False}
        if "result" in namespace:
            value = namespace.pop("result")
            namespace.clear()
            message["has_value"] = True
            try:
                message["value"] = json.loads(json.dumps(value, default=_json_default))
            except Exception:
                message["value"] = repr(value)[: self.max_bytes]
        try:
            data = json.dumps(message).encode()
        except Exception:
            message["value"] = repr(message.get("value"))[: self.max_bytes]
            data = json.dumps(message).encode()
        if len(data) > self.max_bytes:
            size = len(data)
            message["value"] = None
            if error is None:
                message["error"] = (
                    f"the `result` value is too large to return ({size} bytes, limit {self.max_bytes})"
                )
                message["kind"] = "exception"
            data = json.dumps(message).encode()
        _write_all(self.ctl_w, len(data).to_bytes(4, "big") + data)
        os._exit(0)

    def _describe(self, exc: BaseException) -> tuple[str, str]:
        limits = self.limits
        trace = _user_traceback(exc)
        if isinstance(exc, CpuLimitExceeded):
            return f"CPU time limit of {limits['cpu_seconds']}s exceeded{trace}", "cpu"
        if isinstance(exc, MemoryError):
            return f"memory limit ({limits['memory_bytes'] // (1 << 20)} MiB) exceeded{trace}", "memory"
        cause: BaseException | None = exc
        for _ in range(5):
            if cause is None:
                break
            kind = getattr(cause, "sandbox_kind", None)
            if kind is not None:
                return f"{cause}{trace}", kind
            cause = cause.__cause__ or cause.__context__
        summary = _exception_summary(exc)
        if isinstance(exc, OSError):
            if exc.errno in _NETWORK_ERRNOS or type(exc).__name__ == "gaierror":
                return f"network access is not available in the sandbox ({summary}){trace}", "network"
            if exc.errno == errno.EAGAIN and isinstance(exc, BlockingIOError):
                return f"process limit ({limits['max_processes']}) reached ({summary}){trace}", "process"
            if exc.errno == errno.EROFS:
                where = exc.filename or "?"
                message = f"writing outside the sandbox directory is not allowed: {where}"
                return f"{message} ({summary}){trace}", "filesystem"
        if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
            return f"process limit ({limits['max_processes']}) reached ({summary}){trace}", "process"
        return f"{summary}{trace}", "exception"


def _exception_summary(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


def _user_traceback(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == _USER_FILENAME]
    if not frames:
        return ""
    lines = ["", "Traceback (sandbox code only, most recent call last):"]
    for frame in frames[-_MAX_TB_FRAMES:]:
        lines.append(f"  line {frame.lineno}, in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()[:200]}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
