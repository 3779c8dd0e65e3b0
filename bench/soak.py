"""Full-size load and soak through the real server on loopback (tests/test_soak.py at issue scale).

    python -m bench.soak                      # 200 threads x 5 runs, 50 in flight (about 6 minutes)
    python -m bench.soak --threads 400 --runs 5 --concurrency 100 --no-trace

One in-process uvicorn server on 127.0.0.1 runs the deterministic soak agent of tests/test_soak.py
(each run tallies a hash-chained ledger and searches the sample corpus, in parallel, then answers
citing a passage). ``threads`` client threads run concurrently, each thread's runs one after
another, carrying the state from the previous run; at most ``concurrency`` runs are in flight over a
bounded httpx pool. Then every thread is replayed strictly one run at a time on a fresh server and
data directory, and the final states and messages must be equal.

Printed: runs/s, p50/p95/max run latency, and tasks, file descriptors, traced Python memory, RSS
and garbage-collected objects before the soak, under load, and after the threads are evicted, with
the same pass/fail checks as the test (exit status 1 when one fails). Memory tracing (tracemalloc)
halves throughput; ``--no-trace`` measures speed alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5, help="runs per thread")
    parser.add_argument("--concurrency", type=int, default=50, help="runs in flight at most")
    parser.add_argument("--cache-max-threads", type=int, default=16, help="thread contexts kept in memory")
    parser.add_argument("--no-trace", action="store_true", help="skip tracemalloc (faster, no memory figure)")
    args = parser.parse_args()

    from bench.rag_eval import build_corpus_kb
    from tests.test_soak import check_report, run_soak

    work = Path(tempfile.mkdtemp(prefix="ragstream-soak-"))
    try:
        started = time.perf_counter()
        kb = await build_corpus_kb(work / "template" / "kb")
        kb.close()
        print(f"sample corpus ingested in {time.perf_counter() - started:.1f} s", flush=True)
        report = await run_soak(
            work,
            work / "template" / "kb",
            threads=args.threads,
            runs=args.runs,
            concurrency=args.concurrency,
            cache_max_threads=args.cache_max_threads,
            trace_memory=not args.no_trace,
        )
        print("\n".join(report.lines()))
        try:
            check_report(report)
        except AssertionError as failure:
            print(f"FAILED: {failure}")
            return 1
        print("OK: every thread equals its one-at-a-time replay; no task, fd or object leak")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
