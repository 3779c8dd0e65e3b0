"""What branches cost: a thread of 200 turns with 50 branches against a linear thread of 200 turns.

``python -m bench.branches [--turns 200] [--branches 50] [--trials 30] [--restricted]``

Both threads are built through a real ``ragstream serve`` (the offline extractive model over the
sample corpus, so every turn searches and cites) by a client that sends the conversation it shows,
as ``@ag-ui/client`` does. The branched thread edits its latest question every ``turns/branches``
turns, so its shown path has the same number of turns as the linear one and every edit leaves a
branch. Then, in turn between the two threads (so drift on a noisy machine hits both alike):

- ``GET /threads/{id}`` (what a reload does): p50;
- time to ``RUN_STARTED`` of a new turn sent with the whole shown history: p50;
- stored bytes of each thread record (state and conversation), and per branch.

Prints the figures side by side and the branched/linear ratios (target: within 1.2x).

``--restricted`` compares instead two linear threads: one of a principal who reads every document
(an administrator) and one of a principal restricted to its groups, whose thread is checked
against the documents it may read whenever it is served (``rag_tools/readable.py``: cached
results dropped, tool results of unreadable documents withheld). The sample corpus is everyone's,
so both threads hold the same conversation and nothing is withheld: the ratio is the check's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench._util import median, table
from bench.rag_eval import QUESTIONS, build_corpus_kb
from tests.protocol import fold_messages, parse_sse
from tests.servers import served

_ids = itertools.count()


def _questions() -> list[str]:
    return [q["question"] for q in json.loads(QUESTIONS.read_text())]


def _body(thread: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": f"run-{next(_ids)}",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "protocolVersion": "1.0",
        "messages": messages,
    }


def _user(text: str) -> dict[str, Any]:
    return {"id": f"user-{next(_ids)}", "role": "user", "content": text}


async def _run(http: httpx.AsyncClient, thread: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = await http.post("/agui", json=_body(thread, messages))
    response.raise_for_status()
    events = [e for _, e in parse_sse(response.text)]
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return fold_messages(messages, events)


async def _build(http: httpx.AsyncClient, thread: str, turns: int, branches: int) -> list[dict[str, Any]]:
    questions = _questions()
    every = turns // branches if branches else 0
    messages: list[dict[str, Any]] = []
    edits = 0
    for turn in range(turns):
        messages = await _run(http, thread, [*messages, _user(questions[turn % len(questions)])])
        if every and (turn + 1) % every == 0 and edits < branches:  # edit the question just asked
            last = max(i for i, m in enumerate(messages) if m["role"] == "user")
            edited = _user(questions[(turn + 7) % len(questions)])
            messages = await _run(http, thread, [*messages[:last], edited])
            edits += 1
    return messages


async def _time_to_run_started(
    http: httpx.AsyncClient, thread: str, messages: list[dict[str, Any]]
) -> tuple[float, list[dict[str, Any]]]:
    sent = [*messages, _user("How long are nightly database backups retained?")]
    started = time.perf_counter()
    first: float | None = None
    text = ""
    async with http.stream("POST", "/agui", json=_body(thread, sent)) as response:
        async for chunk in response.aiter_text():
            if first is None and '"RUN_STARTED"' in chunk:
                first = time.perf_counter() - started
            text += chunk
    assert first is not None
    return first * 1000, fold_messages(sent, [e for _, e in parse_sse(text)])


def _stored_bytes(data: Path, thread: str) -> int:
    with sqlite3.connect(data / "threads.sqlite3") as db:
        row = db.execute(
            "SELECT length(state) + length(extras) FROM threads WHERE thread_id = ?", (thread,)
        ).fetchone()
    return int(row[0])


#: The principals of ``--restricted``: an administrator, and a reader of its groups' documents.
_TOKENS = {"admin": "t-admin", "reader": {"token": "t-reader", "groups": ["staff"]}}


async def main(turns: int, branches: int, trials: int, restricted: bool = False) -> None:
    # (label, thread, whose token, branches): the baseline first
    if restricted:
        kinds = [("every document", "admin", "t-admin", 0), ("restricted reader", "reader", "t-reader", 0)]
    else:
        kinds = [("linear", "linear", None, 0), (f"{branches} branches", "branched", None, branches)]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        kb = await build_corpus_kb(data / "kb")
        kb.close()
        env = {"RAGSTREAM_MAX_BODY_BYTES": str(64 * 1024 * 1024), "RAGSTREAM_RUN_TIMEOUT": "600"}
        if restricted:
            env |= {"RAGSTREAM_TOKENS": json.dumps(_TOKENS), "RAGSTREAM_EDITORS": json.dumps(["admin"])}
        async with served(env, data) as url:
            clients = {
                label: httpx.AsyncClient(
                    base_url=url, timeout=600, headers={"Authorization": f"Bearer {token}"} if token else {}
                )
                for label, _, token, _ in kinds
            }
            started = time.perf_counter()
            shown = {label: await _build(clients[label], thread, turns, n) for label, thread, _, n in kinds}
            built = time.perf_counter() - started
            for label, thread, _, n in kinds:
                view = (await clients[label].get(f"/threads/{thread}")).json()
                assert len(view["branches"]) == n, len(view["branches"])
                assert sum(m["role"] == "user" for m in view["messages"]) == turns
            size = {label: _stored_bytes(data, thread) for label, thread, _, _ in kinds}
            gets: dict[str, list[float]] = {label: [] for label in shown}
            starts: dict[str, list[float]] = {label: [] for label in shown}
            for _ in range(trials):
                for label, thread, _, _ in kinds:
                    t0 = time.perf_counter()
                    (await clients[label].get(f"/threads/{thread}")).raise_for_status()
                    gets[label].append((time.perf_counter() - t0) * 1000)
            for _ in range(trials):
                for label, thread, _, _ in kinds:
                    ms, shown[label] = await _time_to_run_started(clients[label], thread, shown[label])
                    starts[label].append(ms)
            for client in clients.values():
                await client.aclose()
    base, other = (label for label, _, _, _ in kinds)
    rows = [
        ["GET /threads/{id} p50 (ms)", median(gets[base]), median(gets[other])],
        ["time to RUN_STARTED p50 (ms)", median(starts[base]), median(starts[other])],
        ["stored bytes", size[base], size[other]],
    ]
    what = "restricted reader against every document" if restricted else f"{branches} branches"
    print(f"{turns} turns, {what}, {trials} trials each ({built:.0f} s to build both threads)\n")
    print(table(["", base, other, "ratio"], [[*r, r[2] / r[1]] for r in rows]))
    if not restricted:
        per_branch = (size[other] - size[base]) / branches if branches else 0
        print(
            f"\nstored bytes per branch: {per_branch:,.0f} (the replaced turn's messages and state checkpoints)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--branches", type=int, default=50)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument(
        "--restricted", action="store_true", help="a restricted reader's thread against an administrator's"
    )
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.branches, args.trials, args.restricted))
