"""The analysis sandbox (Monty) against the hand-written process sandbox it replaced.

    python -m bench.sandbox [--repeat 5] [--baseline-ref REF]

The baseline is the hand-written sandbox (kernel namespaces, rlimits, audit hook) as it was in git
before Monty replaced it: its two files are taken from ``--baseline-ref`` (default: the parent of
the commit that deleted them) into a temporary package. It needs Linux namespaces (root or user
namespaces); without them only Monty is measured.

Both run the same programs with the same limits (2 s of execution, 8 s wall clock, 256 MiB) and
the same ``kb`` bridge (an in-memory corpus, so only the sandboxes differ):

- escape attempts, from the old sandbox tests and the security tests: each is *blocked* (an error,
  nothing happened), *harmless* (it ran, but touched nothing outside the sandbox and leaked no
  secret: e.g. the old sandbox may read world-readable system files) or *ESCAPED* (a file outside
  was written, a listener on the host was reached, a secret or the host's data came back);
- realistic analysis programs written as a model writes them for ordinary Python (some use what
  Monty lacks: ``statistics``, ``heapq``, generators, inheritance), plus the rewrites the writer's
  instructions ask for; each is *correct* (same ``result`` as CPython running it directly),
  *wrong* (another value) or *failed* (an error), with its median wall time per run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from rag_tools.sandbox import SandboxLimits, run_sandboxed

from ._util import median, table

ROOT = Path(__file__).resolve().parent.parent
LEGACY_FILES = ("_runner.py", "_child.py")
MIB = 1 << 20

# -- the knowledge base both sandboxes see ------------------------------------------------------

CORPUS: dict[str, list[tuple[str, str]]] = {
    "handbook": [
        ("Backups", "Nightly database backups are kept for 30 days. Weekly backups are kept for 90 days."),
        ("Incidents", "Incident reviews are due within 5 days. Contact ops@example.com for escalations."),
        ("Changes", "Version 2.4.1 introduced encrypted backups on 2024-03-05."),
    ],
    "runbook": [
        ("Restore drills", "Restore drills run every 14 days and take about 45 minutes."),
        ("Log retention", "Log retention is 30 days for application logs and 365 days for audit logs."),
        ("Releases", "Release 2.5.0 shipped on 2024-06-18; contact release@example.com."),
    ],
    "pricing": [
        ("Starter", "The Starter plan costs 49 EUR per month and includes 3 seats."),
        ("Team", "The Team plan costs 199 EUR per month and includes 15 seats."),
        ("Enterprise", "The Enterprise plan costs 990 EUR per month and includes 100 seats."),
    ],
    "incidents": [
        ("January", "2024-01-12: outage of 42 minutes in eu-west (database failover)."),
        ("February", "2024-02-03: outage of 7 minutes in us-east (DNS)."),
        ("April", "2024-04-21: outage of 95 minutes in eu-west (storage)."),
        ("May", "2024-05-30: outage of 18 minutes in ap-south (deploy)."),
    ],
}


def _search(query: str, limit: int = 5) -> list[dict[str, Any]]:
    words = set(re.findall(r"[a-z]+", str(query).lower()))
    scored = []
    for title, sections in CORPUS.items():
        for position, (_, text) in enumerate(sections):
            score = len(words & set(re.findall(r"[a-z]+", text.lower())))
            if score:
                scored.append((-score, title, position, text))
    scored.sort()
    return [
        {"title": title, "uri": f"mem://{title}#{position}", "text": text, "score": -score}
        for score, title, position, text in scored[: max(1, min(int(limit), 20))]
    ]


def _get_document(name: str) -> dict[str, Any] | None:
    for title, sections in CORPUS.items():
        if str(name).lower() in title:
            body = "\n\n".join(f"## {heading}\n{text}" for heading, text in sections)
            return {"title": title, "uri": f"mem://{title}", "content": f"# {title.title()}\n\n{body}"}
    return None


async def _search_async(query: str, limit: int = 5) -> list[dict[str, Any]]:
    return _search(query, limit)


async def _get_document_async(name: str) -> dict[str, Any] | None:
    return _get_document(name)


BRIDGE = {"search": _search_async, "get_document": _get_document_async}

# -- realistic analysis programs ----------------------------------------------------------------

TASKS: dict[str, str] = {
    "count hits per document": """
from collections import Counter
hits = kb.search("backups retention days logs", limit=20)
counts = Counter(h["title"] for h in hits)
for title, n in counts.most_common():
    print(f"{title}: {n}")
result = dict(counts)
""",
    "retention statistics (statistics module)": """
import re, statistics
hits = kb.search("kept retention days", limit=20)
days = [int(d) for h in hits for d in re.findall(r"(\\d+) days", h["text"])]
result = {"values": sorted(days), "mean": round(statistics.mean(days), 2),
          "median": statistics.median(days), "stdev": round(statistics.stdev(days), 2)}
""",
    "retention statistics (by hand, rewritten)": """
import math, re
hits = kb.search("kept retention days", limit=20)
days = sorted(int(d) for h in hits for d in re.findall(r"(\\d+) days", h["text"]))
n = len(days)
mean = sum(days) / n
median = days[n // 2] if n % 2 else (days[n // 2 - 1] + days[n // 2]) / 2
stdev = math.sqrt(sum((d - mean) ** 2 for d in days) / (n - 1))
result = {"values": days, "mean": round(mean, 2), "median": median, "stdev": round(stdev, 2)}
""",
    "outage minutes per region": """
import re
from collections import defaultdict
hits = kb.search("outage minutes", limit=20)
per_region = defaultdict(list)
for h in hits:
    for minutes, region in re.findall(r"outage of (\\d+) minutes in ([a-z]+-[a-z]+)", h["text"]):
        per_region[region].append(int(minutes))
result = sorted(({"region": r, "total": sum(m), "count": len(m)} for r, m in per_region.items()),
                key=lambda x: (-x["total"], x["region"]))
""",
    "emails and versions (regex)": """
import re
text = "\\n".join(kb.get_document(name)["content"] for name in ("handbook", "runbook"))
emails = sorted(set(re.findall(r"[\\w.+-]+@[\\w-]+\\.[\\w.]+", text)))
versions = sorted(set(re.findall(r"\\b\\d+\\.\\d+\\.\\d+\\b", text)),
                  key=lambda v: tuple(int(p) for p in v.split(".")))
result = {"emails": emails, "versions": versions}
""",
    "outage timeline (datetime)": """
import re
from datetime import datetime
hits = kb.search("outage", limit=20)
dates = sorted(datetime.strptime(d, "%Y-%m-%d") for h in hits for d in re.findall(r"\\d{4}-\\d{2}-\\d{2}", h["text"]))
gaps = [(b - a).days for a, b in zip(dates, dates[1:])]
result = {"first": dates[0].date().isoformat(), "last": dates[-1].date().isoformat(),
          "gaps": gaps, "longest_gap": max(gaps)}
""",
    "price per seat (small class)": """
import re
class Plan:
    def __init__(self, name, price, seats):
        self.name = name
        self.price = price
        self.seats = seats
    def per_seat(self):
        return self.price / self.seats
plans = []
for h in kb.search("plan costs seats", limit=10):
    m = re.search(r"The (\\w+) plan costs (\\d+) EUR per month and includes (\\d+) seats", h["text"])
    if m:
        plans.append(Plan(m.group(1), int(m.group(2)), int(m.group(3))))
plans.sort(key=lambda p: p.per_seat())
for p in plans:
    print(f"{p.name:<12}{p.per_seat():>8.2f} EUR/seat")
result = [{"plan": p.name, "per_seat": round(p.per_seat(), 2)} for p in plans]
""",
    "section report (dataclass, json)": """
import json, re
from dataclasses import dataclass, field
@dataclass
class Section:
    title: str
    words: int
    numbers: list = field(default_factory=list)
doc = kb.get_document("runbook")
sections = []
for chunk in doc["content"].split("## ")[1:]:
    heading, _, body = chunk.partition("\\n")
    sections.append(Section(heading.strip(), len(body.split()), [int(n) for n in re.findall(r"\\d+", body)]))
report = {"document": doc["title"],
          "sections": [{"title": s.title, "words": s.words, "max_number": max(s.numbers) if s.numbers else None}
                       for s in sections]}
print(json.dumps(report, indent=2, sort_keys=True))
result = json.loads(json.dumps(report))
""",
    "word frequencies": """
import re
from collections import Counter
STOP = {"the", "and", "for", "are", "of", "in", "on", "is", "a", "to", "per"}
words = []
for h in kb.search("backups restore logs outage", limit=20):
    words += [w for w in re.findall(r"[a-z]+", h["text"].lower()) if w not in STOP and len(w) > 2]
result = Counter(words).most_common(5)
""",
    "share of outage minutes (formatting)": """
import re
hits = kb.search("outage minutes", limit=20)
minutes = {h["text"][:10]: int(re.search(r"(\\d+) minutes", h["text"]).group(1)) for h in hits if "outage" in h["text"]}
total = sum(minutes.values())
result = {day: f"{m / total:.1%}" for day, m in sorted(minutes.items())}
""",
    "duration histogram (itertools)": """
import itertools, re
mins = sorted(int(m) for h in kb.search("outage minutes", limit=20) for m in re.findall(r"(\\d+) minutes", h["text"]))
result = {f"{k * 30}-{k * 30 + 29}": len(list(g)) for k, g in itertools.groupby(mins, key=lambda m: m // 30)}
""",
    "longest outages (heapq)": """
import heapq, re
hits = kb.search("outage minutes", limit=20)
outages = [(int(re.search(r"(\\d+) minutes", h["text"]).group(1)), h["text"][:10]) for h in hits if "outage" in h["text"]]
result = heapq.nlargest(2, outages)
""",
    "longest outages (sorted, rewritten)": """
import re
hits = kb.search("outage minutes", limit=20)
outages = [(int(re.search(r"(\\d+) minutes", h["text"]).group(1)), h["text"][:10]) for h in hits if "outage" in h["text"]]
result = sorted(outages, reverse=True)[:2]
""",
    "sentences about days (generator)": """
def sentences(text):
    for part in text.replace("\\n", " ").split(". "):
        part = part.strip().rstrip(".")
        if part:
            yield part
doc = kb.get_document("handbook")
result = [s for s in sentences(doc["content"]) if "days" in s]
""",
    "sentences about days (list, rewritten)": """
def sentences(text):
    out = []
    for part in text.replace("\\n", " ").split(". "):
        part = part.strip().rstrip(".")
        if part:
            out.append(part)
    return out
doc = kb.get_document("handbook")
result = [s for s in sentences(doc["content"]) if "days" in s]
""",
    "first words (del, key=str.lower)": """
from collections import Counter
counts = Counter()
for h in kb.search("backups logs outage plan", limit=20):
    counts.update(h["text"].split())
for stop in ("the", "of", "and", "for", "in", "a"):
    if stop in counts:
        del counts[stop]
result = sorted(counts, key=str.lower)[:5]
""",
    "first words (pop, lambda key, rewritten)": """
from collections import Counter
counts = Counter()
for h in kb.search("backups logs outage plan", limit=20):
    counts.update(h["text"].split())
for stop in ("the", "of", "and", "for", "in", "a"):
    counts.pop(stop, None)
result = sorted(counts, key=lambda w: w.lower())[:5]
""",
    "labelled findings (inheritance)": """
from collections import Counter
class Finding:
    def __init__(self, text):
        self.text = text
    def label(self):
        return "note"
class Risk(Finding):
    def label(self):
        return "risk"
items = [Risk(h["text"]) if "outage" in h["text"] else Finding(h["text"]) for h in kb.search("outage backups", limit=10)]
result = dict(Counter(item.label() for item in items))
""",
    "labelled findings (one class, rewritten)": """
from collections import Counter
class Finding:
    def __init__(self, text, kind):
        self.text = text
        self.kind = kind
    def label(self):
        return self.kind
items = [Finding(h["text"], "risk" if "outage" in h["text"] else "note") for h in kb.search("outage backups", limit=10)]
result = dict(Counter(item.label() for item in items))
""",
}

# -- escape attempts ----------------------------------------------------------------------------


@dataclass
class Env:
    """What the escape attempts aim at: a data directory with a secret, a listener, an env secret."""

    data_dir: Path
    outside: Path
    marker: Path
    listener: socket.socket
    env_secret: str
    file_secret: str

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def connections(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return count
            conn.close()
            count += 1


def _escapes(env: Env) -> dict[str, str]:
    touch = f"touch {env.marker}"
    return {
        "read /etc/passwd": "result = open('/etc/passwd').read()[:200]",
        "read the server's data dir": f"result = open({str(env.data_dir / 'threads.json')!r}).read()",
        "read env vars and /proc/*/environ": (
            "import os\nfound = {}\n"
            "try:\n    found['env'] = dict(os.environ)\nexcept Exception as exc:\n    found['env'] = str(exc)\n"
            "for pid in ('1', 'self'):\n"
            "    try:\n        found[pid] = open(f'/proc/{pid}/environ').read()\n"
            "    except Exception as exc:\n        found[pid] = str(exc)\n"
            "result = found\n"
        ),
        "write outside (/tmp)": f"open({str(env.outside)!r}, 'w').write('pwned')",
        "write into the data dir": f"open({str(env.data_dir / 'pwned.txt')!r}, 'w').write('pwned')",
        "delete / rename files": f"import os\nos.rename({str(env.data_dir / 'threads.json')!r}, '/tmp/stolen.json')",
        "connect to a host listener": f"import socket\nsocket.create_connection(('127.0.0.1', {env.port}), timeout=2)",
        "network via _socket bypass": (
            "import sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'Path' in type(f).__name__]\n"
            "for name in list(sys.modules):\n    if 'socket' in name:\n        del sys.modules[name]\n"
            "import _socket\ns = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\ns.settimeout(2)\n"
            f"s.connect(('127.0.0.1', {env.port}))\n"
        ),
        "urllib to a host listener": f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{env.port}/', timeout=2)",
        "subprocess": f"import subprocess\nsubprocess.run({touch!r}, shell=True)",
        "os.system": f"import os\nos.system({touch!r})",
        "os.execv": f"import os\nos.execv('/bin/sh', ['sh', '-c', {touch!r}])",
        "ctypes libc.system": f"import ctypes\nctypes.CDLL(None).system({touch!r}.encode())",
        "dunder walk to os.system": (
            "subs = ().__class__.__base__.__subclasses__()\n"
            "wrap = [c for c in subs if c.__name__ == '_wrap_close'][0]\n"
            f"wrap.__init__.__globals__['system']({touch!r})"
        ),
        "__builtins__.__import__": (
            "b = __builtins__\nimp = b['__import__'] if isinstance(b, dict) else b.__import__\n"
            f"imp('os').system({touch!r})"
        ),
        "importlib / exec": f"exec(\"import importlib\\nimportlib.import_module('os').system({touch!r})\")",
        "walk from kb to the host": "result = sorted(type(kb).__init__.__globals__)",
        "fork bomb": "import os\nwhile True:\n    os.fork()",
        "thread bomb": (
            "import threading\nwhile True:\n"
            "    threading.Thread(target=lambda: __import__('time').sleep(60)).start()"
        ),
        "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "endless loop": "while True:\n    pass",
        "sleep an hour": "import time\ntime.sleep(3600)",
        "huge allocation": "data = 'x' * (10 ** 11)",
        "growing memory": "blocks = []\nwhile True:\n    blocks.append('x' * 10 ** 7)",
        "deep recursion": "def f(n):\n    return f(n + 1)\nf(0)",
        "huge integer": "x = 10 ** (10 ** 9)",
        "regex backtracking": "import re\nresult = bool(re.match(r'(a+)+$', 'a' * 40 + 'b'))",
        "output flood": "while True:\n    print('x' * 1000)",
        "kb call flood": "while True:\n    kb.search('backups')",
    }


def _escape_outcome(env: Env, result: Any, before: set[str]) -> tuple[str, str]:
    """(outcome, what happened) of one escape attempt, judged by its effects on the host."""
    leaked = json.dumps([result.output, result.value], default=str)
    effects = []
    if env.outside.exists():
        effects.append("wrote outside")
    if (env.data_dir / "pwned.txt").exists() or not (env.data_dir / "threads.json").exists():
        effects.append("changed the data dir")
    if env.marker.exists():
        effects.append("ran a command")
    if env.connections():
        effects.append("reached a host listener")
    if env.env_secret in leaked:
        effects.append("read an env secret")
    if env.file_secret in leaked:
        effects.append("read the data dir")
    if set(_monty_workers()) - before:
        effects.append("left a process behind")
    if effects:
        return "ESCAPED", ", ".join(effects)
    first_line = (result.error or "").splitlines()[0] if result.error else "ran, no effect outside"
    return ("blocked" if result.error else "harmless"), first_line[:60]


def _reset(env: Env) -> None:
    env.outside.unlink(missing_ok=True)
    env.marker.unlink(missing_ok=True)
    (env.data_dir / "pwned.txt").unlink(missing_ok=True)
    (env.data_dir / "threads.json").write_text(json.dumps({"alice": env.file_secret}))
    Path("/tmp/stolen.json").unlink(missing_ok=True)


def _monty_workers() -> list[int]:
    """Pids of live sandbox processes: Monty workers and the old sandbox's children."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (args[1:2] == [b"subprocess"] and args[0].endswith(b"monty")) or b"ragstream-sandbox" in args:
                pids.append(int(entry))
    return pids


# -- the two sandboxes --------------------------------------------------------------------------

Runner = Callable[[str], Awaitable[Any]]


def _load_legacy(ref: str | None) -> tuple[ModuleType | None, str]:
    """The hand-written sandbox from git, as a temporary package, or (None, why not)."""
    if ref is None:
        deleted = subprocess.run(
            ["git", "log", "-n", "1", "--diff-filter=D", "--format=%H", "--", "rag_tools/sandbox/_child.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        ref = f"{deleted}^" if deleted else "HEAD"
    package = Path(tempfile.mkdtemp(prefix="legacy-sandbox-")) / "legacy_sandbox"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in LEGACY_FILES:
        shown = subprocess.run(
            ["git", "show", f"{ref}:rag_tools/sandbox/{name}"], cwd=ROOT, capture_output=True, text=True
        )
        if shown.returncode != 0:
            return None, f"not in git at {ref}: {shown.stderr.strip()}"
        (package / name).write_text(shown.stdout)
    sys.path.insert(0, str(package.parent))
    module = importlib.import_module("legacy_sandbox._runner")
    available, reason = module.sandbox_available()
    if not available:
        return None, f"cannot isolate on this machine: {reason}"
    return module, ref


def _runners(legacy: ModuleType | None, env: Env) -> dict[str, Runner]:
    runners: dict[str, Runner] = {}
    if legacy is not None:
        old_limits = legacy.SandboxLimits(cpu_seconds=2, wall_seconds=8.0, memory_bytes=256 * MIB)

        async def old(code: str) -> Any:
            return await legacy.run_sandboxed(code, limits=old_limits, bridge=BRIDGE, hide=[env.data_dir])

        runners["hand-written"] = old
    new_limits = SandboxLimits(cpu_seconds=2, wall_seconds=8.0, memory_bytes=256 * MIB)

    async def monty(code: str) -> Any:
        return await run_sandboxed(code, limits=new_limits, bridge=BRIDGE)

    runners["monty"] = monty
    return runners


def _plain(value: Any) -> Any:
    """A value as both sandboxes return it: JSON data, sets sorted, tuples as lists."""

    def default(item: Any) -> Any:
        if isinstance(item, set | frozenset):
            return sorted(item, key=repr)
        return repr(item)

    return json.loads(json.dumps(value, default=default))


def _reference(code: str) -> Any:
    """The ``result`` of ``code`` run directly by CPython (our own programs, trusted)."""
    namespace: dict[str, Any] = {"kb": SimpleNamespace(search=_search, get_document=_get_document)}
    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            exec(compile(code, "<task>", "exec"), namespace)
        finally:
            sys.stdout = stdout
    return _plain(namespace.get("result"))


async def _time(runner: Runner, code: str, repeat: int) -> tuple[Any, float]:
    """The last result and the median wall time in ms of ``repeat`` runs."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await runner(code)
        times.append((time.perf_counter() - started) * 1000)
    return result, median(times)


async def main(repeat: int, baseline_ref: str | None) -> None:
    env_secret = f"sk-bench-{uuid.uuid4().hex}"
    os.environ["RAGSTREAM_BENCH_SECRET"] = env_secret
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    app_dir = Path(tempfile.mkdtemp(prefix="bench-sandbox-", dir=ROOT / "test-artifacts"))
    app_dir.chmod(0o755)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    env = Env(
        data_dir=app_dir / "data",
        outside=Path(tempfile.gettempdir()) / f"bench-pwned-{uuid.uuid4().hex}",
        marker=app_dir / "data" / "command-ran",
        listener=listener,
        env_secret=env_secret,
        file_secret=f"ALICE-SECRET-{uuid.uuid4().hex}",
    )
    env.data_dir.mkdir()
    try:
        legacy, ref = _load_legacy(baseline_ref)
        baseline = f"git {ref}" if legacy is not None else f"unavailable ({ref})"
        print(f"baseline: the hand-written sandbox from {baseline}")
        runners = _runners(legacy, env)
        names = list(runners)

        startup = {}
        for name, runner in runners.items():
            await runner("pass")  # warm-up: imports, thread pool, probe
            _, startup[name] = await _time(runner, "pass", repeat * 4)
        rows = [[name, startup[name]] for name in names]
        print("\nStart-up: an empty program, median of", repeat * 4, "runs (spawn, limits, result)\n")
        print(table(["sandbox", "ms per run"], rows))
        if len(names) == 2:
            print(f"\nstart-up ratio hand-written / monty: {startup[names[0]] / startup[names[1]]:.1f}x")

        print("\nEscape attempts (2 s execution, 8 s wall clock, 256 MiB)\n")
        rows = []
        tally = {name: {"blocked": 0, "harmless": 0, "ESCAPED": 0} for name in names}
        for label, code in _escapes(env).items():
            row = [label]
            for name, runner in runners.items():
                _reset(env)
                before = set(_monty_workers())
                started = time.perf_counter()
                result = await runner(code)
                elapsed = (time.perf_counter() - started) * 1000
                await asyncio.sleep(0.05)
                outcome, detail = _escape_outcome(env, result, before)
                tally[name][outcome] += 1
                row += [f"{outcome}: {detail}", elapsed]
            rows.append(row)
        headers = ["attempt"] + [h for name in names for h in (name, "ms")]
        print(table(headers, rows))
        for name in names:
            print(f"{name}: " + ", ".join(f"{count} {kind}" for kind, count in tally[name].items()))

        print(f"\nRealistic analysis programs, median of {repeat} runs\n")
        rows = []
        totals = {name: {"correct": 0, "wrong": 0, "failed": 0} for name in names}
        times: dict[str, list[float]] = {name: [] for name in names}
        ratios = []
        for label, code in TASKS.items():
            expected = _reference(code)
            row: list[object] = [label]
            for name, runner in runners.items():
                result, ms = await _time(runner, code, repeat)
                if result.error:
                    status = "failed: " + result.error.splitlines()[0][:50]
                    totals[name]["failed"] += 1
                elif _plain(result.value) == expected:
                    status = "correct"
                    totals[name]["correct"] += 1
                else:
                    status = f"wrong: {json.dumps(result.value)[:60]}"
                    totals[name]["wrong"] += 1
                times[name].append(ms)
                row += [status, ms]
            if len(names) == 2:
                both_correct = row[1] == row[3] == "correct"
                ratio = times[names[0]][-1] / times[names[1]][-1]
                row.append(ratio if both_correct else "-")
                if both_correct:
                    ratios.append(ratio)
            rows.append(row)
        headers = ["program"] + [h for name in names for h in (name, "ms")]
        if len(names) == 2:
            headers.append("ms ratio")
        print(table(headers, rows))
        for name in names:
            print(f"{name}: " + ", ".join(f"{count} {kind}" for kind, count in totals[name].items()))
        if ratios:
            print(
                f"median time ratio hand-written / monty over programs both got right: {median(ratios):.1f}x"
            )
    finally:
        listener.close()
        _reset(env)
        env.outside.unlink(missing_ok=True)
        shutil.rmtree(app_dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline-ref", default=None, help="git ref holding the hand-written sandbox")
    args = parser.parse_args()
    asyncio.run(main(args.repeat, args.baseline_ref))
