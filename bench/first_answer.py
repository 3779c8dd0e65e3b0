"""Time from ``bash scripts/run.sh`` on a fresh clone to the first streamed answer.

    python3 bench/first_answer.py                 # warm installer caches (whatever this machine has)
    python3 bench/first_answer.py --cold          # uv, pip and npm caches pointed at empty directories
    python3 bench/first_answer.py --repo /work/main --ref main   # another checkout or branch

Clones the repository into a new directory (no ``.venv``, no ``node_modules``, no built page, no
knowledge base), runs ``bash scripts/run.sh --port P`` there, and once ``/health`` answers POSTs a
question to ``/agui`` without any API key, stopping the clock at the first ``TEXT_MESSAGE_CONTENT``
event of the offline model. Prints when each phase ended, measured from the start of ``run.sh``:
the Python install and the chat page build (``run.sh`` runs them side by side and says when each
is done), the sample-corpus ingest (``ragstream serve`` prints ``serving on`` after it), server
ready, first answer (and, when the page lands later, when it did); and the load average before and after, since the machine may be shared.
Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

QUESTION = "How long are nightly database backups retained?"
# run.sh's own progress lines, then the server's; the first line matching each marks that phase's end
# (not anchored: run.sh's line may land behind the ingest's progress bar, which ends in no newline)
PHASES = (
    ("install", re.compile(r"run\.sh: python environment ready")),
    ("page build", re.compile(r"run\.sh: chat page ready")),
    ("ingest", re.compile(r"ragstream serving on")),
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _first_text(port: int, timeout: float) -> str:
    """POST one question to /agui; return the first TEXT_MESSAGE_CONTENT delta."""
    body = {
        "threadId": "first-answer",
        "runId": "run-1",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "protocolVersion": "1.0",
        "messages": [{"id": "m1", "role": "user", "content": QUESTION}],
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/agui",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event.get("type") == "TEXT_MESSAGE_CONTENT":
                return str(event.get("delta", ""))
            if event.get("type") == "RUN_ERROR":
                raise RuntimeError(f"run failed: {event}")
    raise RuntimeError("the stream ended without TEXT_MESSAGE_CONTENT")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--ref", default=None, help="branch to clone (default: the repo's HEAD)")
    parser.add_argument("--dest", default=None, help="clone here (default: a new /tmp/fa-* directory)")
    parser.add_argument("--cold", action="store_true", help="empty uv, pip and npm caches")
    parser.add_argument("--keep", action="store_true", help="keep the clone (and its caches)")
    parser.add_argument("--rerun", action="store_true", help="then run run.sh again in the same clone")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    dest = Path(args.dest or tempfile.mkdtemp(prefix="fa-", dir="/tmp"))
    if dest.exists():
        shutil.rmtree(dest)
    clone = ["git", "clone", "--quiet", *(["--branch", args.ref] if args.ref else []), args.repo, str(dest)]
    subprocess.run(clone, check=True)
    env = dict(os.environ)
    cache_root = None
    if args.cold:
        cache_root = Path(tempfile.mkdtemp(prefix="fa-cache-", dir="/tmp"))
        env |= {
            "UV_CACHE_DIR": str(cache_root / "uv"),
            "PIP_CACHE_DIR": str(cache_root / "pip"),
            "npm_config_cache": str(cache_root / "npm"),
        }
    print(f"clone: {dest} ({'cold' if args.cold else 'warm'} caches); load before: {_load()}")
    runs = [run_once(dest, env, args.timeout)]
    if args.rerun:
        runs.append(run_once(dest, env, args.timeout))
    print(f"load after: {_load()}")
    if not args.keep:
        shutil.rmtree(dest, ignore_errors=True)
        if cache_root is not None:
            shutil.rmtree(cache_root, ignore_errors=True)
    return 0 if all(runs) else 1


def run_once(dest: Path, env: dict[str, str], timeout: float) -> bool:
    """One ``run.sh`` from start to first answer; prints the phases and returns whether it answered."""
    port = _free_port()
    marks: dict[str, float] = {}
    log = dest / ".first-answer.log"
    start = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "scripts/run.sh", "--port", str(port)],
        cwd=dest,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
        errors="replace",
    )

    def read() -> None:
        assert proc.stdout is not None
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                for name, pattern in PHASES:
                    if name not in marks and pattern.search(line):
                        marks[name] = time.monotonic() - start

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ok = False
    try:
        while not _health(port):
            if proc.poll() is not None:
                raise RuntimeError(f"run.sh exited with {proc.returncode}; see {log}")
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"no /health within {timeout:.0f} s; see {log}")
            time.sleep(0.2)
        marks["server ready"] = time.monotonic() - start
        delta = _first_text(port, timeout)
        marks["first answer"] = time.monotonic() - start
        ok = True
        print(f"first text: {delta!r}")
        while "install" in marks and "page build" not in marks and time.monotonic() - start < timeout:
            if proc.poll() is not None:
                break
            time.sleep(0.2)  # the page may land after the first answer (a run.sh that says so)
    except Exception as exc:
        print(f"failed: {exc}", file=sys.stderr)
        print(log.read_text()[-3000:], file=sys.stderr)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(5)
    print("phase ends, seconds after `bash scripts/run.sh` started:")
    for name in ("install", "page build", "ingest", "server ready", "first answer"):
        print(f"  {name:<13} {marks[name]:6.1f}" if name in marks else f"  {name:<13}    n/a")
    if ok:
        print(f"TOTAL first answer: {marks['first answer']:.1f} s")
        if "page build" in marks:
            print(f"page and answer both ready: {max(marks['page build'], marks['first answer']):.1f} s")
    return ok


if __name__ == "__main__":
    sys.exit(main())
