"""Which sandbox worker processes of this test process are alive (a run must leave none behind)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def sandbox_workers() -> list[int]:
    """Pids of the Monty workers (``monty subprocess``) whose parent is this process."""
    pids = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        state = stat.rsplit(")", 1)[1].split()[0]
        if parent == me and state != "Z" and args[0].endswith(b"monty") and args[1:2] == [b"subprocess"]:
            pids.append(int(entry))
    return pids


def wait_for_no_sandbox_workers(timeout: float = 10.0) -> list[int]:
    """The workers still alive after waiting up to ``timeout`` s for them to exit (empty when all did)."""
    deadline = time.monotonic() + timeout
    while (alive := sandbox_workers()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive
