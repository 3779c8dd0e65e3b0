"""Ingest of the same pages by an older checkout and by this one, interleaved in one run.

    git worktree add /tmp/old 7d81ffd && (cd /tmp/old && bash scripts/setup.sh)
    python -m bench.ingest_compare --old /tmp/old [--corpus postgres|python|small-files:1000]
                                   [--order old,new,old] [--new .]

Each run is a process of its own (``bench/ingest_child.py``, run by the checkout's own
``.venv/bin/python`` with ``PYTHONPATH`` on it), ingesting the corpus into a new temporary
knowledge base with the default embedder, model loaded beforehand. Runs alternate between the
checkouts in ``--order`` so that a machine getting busier or quieter lands on both; the figure is
new pages/s over old pages/s (medians per checkout), also per CPU-second, which shared cores move
less. The first run of each checkout also measures where its time goes (each stage alone: reading
and parsing, chunking, the embedder on the same chunk texts, and everything but the embedder with
those vectors precomputed).

Corpora: ``postgres`` (``/usr/share/doc/postgresql-doc-15/html/**/*.html``, 1,169 pages), ``python``
(``/usr/share/doc/python3.11/html/**/*.html``; ``bash bench/setup-manuals.sh`` installs both), and
``small-files:N``: N generated Markdown files of one to three short sections each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._util import table

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "ingest_child.py"
MANUALS = {
    "postgres": Path("/usr/share/doc/postgresql-doc-15/html"),
    "python": Path("/usr/share/doc/python3.11/html"),
}
_WORDS = (
    "backup restore replica cluster node shard index query latency throughput deploy rollback "
    "incident alert pager runbook schedule window retention policy archive bucket region zone "
    "certificate token secret rotation audit access role permission tenant quota limit budget "
    "the a of to and in is for on with that this be are as by it at from or an will must should"
).split()


def small_files(folder: Path, count: int, seed: int = 7) -> None:
    """``count`` Markdown notes of one to three sections of 200-700 characters each."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for index in range(count):
        sections = []
        for s in range(rng.randint(1, 3)):
            words: list[str] = []
            target = rng.randint(200, 700)
            while sum(len(w) + 1 for w in words) < target:
                words.append(rng.choice(_WORDS))
            sections.append(f"## Part {s}\n\n{' '.join(words).capitalize()}.")
        (folder / f"note-{index:05d}.md").write_text(f"# Note {index}\n\n" + "\n\n".join(sections) + "\n")


def _corpus(spec: str, work: Path) -> tuple[Path, str]:
    """The folder to ingest and the glob under it."""
    if spec.startswith("small-files:"):
        folder = work / "notes"
        small_files(folder, int(spec.split(":", 1)[1]))
        return folder, ""
    folder = MANUALS[spec]
    if not folder.is_dir():
        sys.exit(f"{folder} is missing: bash bench/setup-manuals.sh")
    return folder, "**/*.html"


def _revision(code: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(code), "log", "-1", "--format=%h"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or code.name


def _run(code: Path, corpus: Path, pattern: str, work: Path, stages: bool) -> dict[str, Any]:
    python = code / ".venv" / "bin" / "python"
    if not python.exists():
        sys.exit(f"{python} is missing: (cd {code} && bash scripts/setup.sh)")
    script = work / "ingest_child.py"  # alone in its folder: nothing of this checkout shadows the other
    shutil.copy(CHILD, script)
    command = [str(python), str(script), str(corpus), str(work / "kb")]
    command += ["--pattern", pattern] if pattern else []
    command += ["--stages"] if stages else []
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{code}: exit {done.returncode}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not str(result["code"]).startswith(str(code)):
        sys.exit(f"the run imported rag_tools from {result['code']}, not {code}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, required=True, help="the older checkout, with its .venv")
    parser.add_argument("--new", type=Path, default=ROOT, help="the newer checkout (default: this one)")
    parser.add_argument("--corpus", default="postgres")
    parser.add_argument("--order", default="old,new,old")
    args = parser.parse_args()
    codes = {"old": args.old.resolve(), "new": args.new.resolve()}
    names = {key: f"{key} ({_revision(code)})" for key, code in codes.items()}
    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-compare-"))
    runs: list[tuple[str, dict[str, Any]]] = []
    try:
        corpus, pattern = _corpus(args.corpus, work)
        print(f"corpus {args.corpus}: {corpus}/{pattern}; order {args.order}", flush=True)
        for key in args.order.split(","):
            first = all(k != key for k, _ in runs)
            result = _run(codes[key], corpus, pattern, work, stages=first)
            runs.append((key, result))
            i = result["ingest"]
            print(
                f"{names[key]}: {i['pages']} pages, {i['chunks']} chunks in {i['wall']:.1f} s "
                f"({i['pages'] / i['wall']:.2f} pages/s, CPU {i['cpu']:.0f} s), {i['chunk_commits']} "
                f"chunk commits, peak RSS {result['rss_mb']:.0f} MB, load {result['load'][0]:.1f}"
                + (f"; errors {i['errors']}" if i["errors"] else ""),
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _report(runs, names)


def _report(runs: list[tuple[str, dict[str, Any]]], names: dict[str, str]) -> None:
    rows = []
    for n, (key, r) in enumerate(runs, 1):
        i = r["ingest"]
        rows.append(
            [
                n,
                names[key],
                i["pages"],
                i["chunks"],
                f"{i['wall']:.1f}",
                f"{i['pages'] / i['wall']:.2f}",
                f"{i['chunks'] / i['wall']:.1f}",
                f"{i['cpu'] / i['pages']:.3f}",
                i["chunk_commits"],
                f"{r['rss_mb']:.0f}",
                f"{r['load'][0]:.1f}",
            ]
        )
    print()
    headers = ["run", "code", "pages", "chunks", "ingest s", "pages/s", "chunks/s", "CPU s/page"]
    print(table([*headers, "chunk commits", "peak RSS MB", "load (1 min)"], rows))

    def median(key: str, figure: str) -> float:
        values = [
            r["ingest"]["pages"] / r["ingest"][figure]
            if figure == "wall"
            else r["ingest"][figure] / r["ingest"]["pages"]
            for k, r in runs
            if k == key
        ]
        return statistics.median(values)

    if {k for k, _ in runs} == {"old", "new"}:
        wall = median("new", "wall") / median("old", "wall")
        cpu = median("old", "cpu") / median("new", "cpu")
        print(f"\nnew / old pages/s: {wall:.2f}x wall clock, {cpu:.2f}x per CPU-second (target >= 2)")
    stage_rows = []
    for key, r in runs:
        s = r.get("stages")
        if s is None:
            continue
        ingest = r["ingest"]["wall"]
        stage_rows.append(
            [
                names[key],
                f"{s['parse']:.1f}",
                f"{s['chunk']:.1f}",
                f"{s['embed']:.1f} ({s['texts'] / s['embed']:.1f} chunks/s, {s['tokens'] / s['embed_cpu']:,.0f} tokens/CPU-s)",
                f"{s['tokens']:,}",
                f"{s['rest']:.1f}",
                f"{s['rest'] - s['parse'] - s['chunk']:.1f}",
                f"{s['embed'] + s['rest']:.1f}",
                f"{ingest:.1f}",
            ]
        )
        if s["missed"]:
            print(f"{names[key]}: {s['missed']} chunk texts of the ingest were not among the stages' texts")
    if stage_rows:
        print("\nWhere the time goes (first run of each, every stage alone, seconds):\n")
        print(
            table(
                [
                    "code",
                    "read + parse",
                    "chunk",
                    "embedder alone, same chunk texts",
                    "tokens embedded",
                    "all but the embedder (vectors precomputed)",
                    "of which writing, indexes (the rest)",
                    "embedder, then all but it",
                    "ingest",
                ],
                stage_rows,
            )
        )


if __name__ == "__main__":
    main()
