"""Office conversion: speed per format on the sample files, and what bad files cost to refuse.

    python -m bench.office [--repeat 20]

1. Each office file of the sample corpus (``examples/corpus``) is read into sections and chunked,
   ``--repeat`` times after one warm-up; the median time per file is printed with the chunks it
   gives, and the import time of each format's reader library (a cold first file pays it once).
2. When markitdown is importable (it is not a dependency: ``pip install 'markitdown[docx,pptx,xlsx]'``
   beside ragstream to compare), the same files go through ``MarkItDown().convert_stream`` in the
   same run, side by side, with its import and set-up time.
3. Each bad file of ``tests/office_files.py`` (corrupt, password-protected, zip bomb, sparse sheet,
   picture-only deck) is read in a fresh subprocess, its libraries imported first: the time to fail,
   how far reading it raised the process's peak memory, and the reason. With markitdown the same files are converted in subprocesses limited to
   ``--markitdown-timeout`` seconds and 4 GiB of address space.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rag_tools.kb.chunking import chunk_document
from rag_tools.kb.readers import parse_document
from tests.office_files import BAD_FILES, CORPUS, OFFICE_SAMPLES

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = {".docx": "docx", ".pptx": "pptx", ".xlsx": "openpyxl", ".csv": "csv", ".epub": "ebooklib"}

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
data = open(sys.argv[1], "rb").read()
name = sys.argv[2]
if sys.argv[3] == "markitdown":
    import io
    from markitdown import MarkItDown, StreamInfo
    converter = MarkItDown()
    def read():
        info = StreamInfo(extension="." + name.rsplit(".", 1)[-1])
        return f"converted ({{len(converter.convert_stream(io.BytesIO(data), stream_info=info).markdown):,}} characters)"
else:
    from rag_tools.kb.readers import parse_document
    import docx, pptx, openpyxl, ebooklib  # imported up front: the figures are the file's cost alone
    def read():
        return f"parsed ({{len(parse_document(data, name=name).sections)}} sections)"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
try:
    outcome = read()
except Exception as exc:
    outcome = f"{{type(exc).__name__}}: {{' '.join(str(exc).split())[:110]}}"
print(json.dumps({{"seconds": time.perf_counter() - start, "outcome": outcome,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before}}))
"""


def _median_ms(fn: Any, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _import_ms(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out) * 1000


def _markitdown() -> Any:
    if importlib.util.find_spec("markitdown") is None:
        return None
    start = time.perf_counter()
    from markitdown import MarkItDown

    converter = MarkItDown()
    print(f"markitdown import and set-up: {time.perf_counter() - start:.2f} s (in this process)")
    return converter


def speed(repeat: int) -> None:
    converter = _markitdown()
    print(
        "\n| file | bytes | ragstream reader (ms) | chunks | reader import (ms) | markitdown (ms) | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in OFFICE_SAMPLES:
        data = (CORPUS / name).read_bytes()
        suffix = Path(name).suffix

        def ours(data: bytes = data, name: str = name) -> int:
            return len(chunk_document(parse_document(data, name=name), max_chars=1200))

        ours_ms = _median_ms(ours, repeat)
        chunks = ours()
        theirs = "-"
        ratio = "-"
        if converter is not None:
            from markitdown import StreamInfo

            def convert(data: bytes = data, suffix: str = suffix) -> None:
                converter.convert_stream(io.BytesIO(data), stream_info=StreamInfo(extension=suffix))

            theirs_ms = _median_ms(convert, repeat)
            theirs, ratio = f"{theirs_ms:.1f}", f"{theirs_ms / ours_ms:.1f}x"
        library = LIBRARIES[suffix]
        print(
            f"| {name} | {len(data):,} | {ours_ms:.1f} | {chunks} | {library} {_import_ms(library):.0f} | "
            f"{theirs} | {ratio} |"
        )


def bad_files(markitdown_timeout: float) -> None:
    import tempfile

    with_markitdown = importlib.util.find_spec("markitdown") is not None
    print("\n| bad file | bytes | ragstream: time (s) | peak memory added (MiB) | reason |")
    print("|---|---|---|---|---|")
    rows: list[tuple[str, Path]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (build, _reason) in BAD_FILES.items():
            path = Path(tmp) / name
            path.write_bytes(build())
            rows.append((name, path))
            result = _child(path, name, "ragstream", None)
            print(
                f"| {name} | {path.stat().st_size:,} | {result['seconds']:.2f} | {result['rss_mib']:.0f} | "
                f"{result['outcome']} |"
            )
        if not with_markitdown:
            return
        print(
            f"\nmarkitdown on the same files (subprocess, {markitdown_timeout:.0f} s and 4 GiB address space):\n"
        )
        print("| bad file | markitdown: time (s) | peak memory added (MiB) | outcome |")
        print("|---|---|---|---|")
        for name, path in rows:
            result = _child(path, name, "markitdown", markitdown_timeout)
            print(f"| {name} | {result['seconds']:.2f} | {result['rss_mib']:.0f} | {result['outcome']} |")


def _child(path: Path, name: str, reader: str, timeout: float | None) -> dict[str, Any]:
    code = _CHILD.format(root=str(ROOT))
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", (limit if timeout else "") + code, str(path), name, reader],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {
            "seconds": time.perf_counter() - start,
            "rss_mib": float("nan"),
            "outcome": "killed at the time limit",
        }
    if done.returncode != 0 or not done.stdout.strip():
        tail = " ".join(done.stderr.split())[-110:]
        return {
            "seconds": time.perf_counter() - start,
            "rss_mib": float("nan"),
            "outcome": f"crashed: {tail}",
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--markitdown-timeout", type=float, default=120.0)
    args = parser.parse_args()
    speed(args.repeat)
    bad_files(args.markitdown_timeout)


if __name__ == "__main__":
    main()
