"""How much of the stream is state: this server's deltas against a snapshot after every change.

    python -m bench.state_bytes [--turns 10]

A scripted 10-turn research session (an operator planning a deployment, following up on the
answers) runs through the real server over HTTP: each turn the
model calls ``search`` and ``ask`` in parallel, then streams, word by word, the answer ``ask``
produced followed by one cited line per top-3 source (what a research assistant writes). Every SSE byte is counted. The comparison strategy is computed from the same stream: each
state event is replaced by a STATE_SNAPSHOT of the whole state at that point (what a server that
does not diff would send). Every run opens with a STATE_SNAPSHOT of its baseline (issue 18: a
consumer that folds one run from ``{}``, like CopilotKit's runtime, must reach the server's state;
the bench folds each run that way and checks it), so the emitted state is bounded (only the latest
citations, searches and QA entries); the same session without the bound shows what it saves.
Target (issue 18): state events at most 15% of the streamed bytes, and state bytes per run that
stop growing once the bound is reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
from ag_ui.core import StateSnapshotEvent
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from rag_tools import ChatDeps, build_chat_toolkit
from ragstream.agui.encoding import encode_event
from ragstream.app import create_app
from ragstream.config import AppConfig
from ragstream.routes.sse import sse_frame
from tests.protocol import parse_sse
from tests.servers import serve

from ._util import table
from .rag_eval import build_corpus_kb

# One research session, as a user would run it: an operator planning a ragstream deployment,
# following up on what the previous answers said.
RESEARCH = [
    "How do I deploy ragstream for a team?",
    "How long should backups of the data directory be kept?",
    "How long does the hosted operations handbook keep nightly backups?",
    "What happens to the state when a client reconnects after a dropped stream?",
    "How are state changes sent to the browser?",
    "What does a client do when a state patch cannot be applied?",
    "Which tools need approval before they run?",
    "How does the client approve or deny a tool call?",
    "Can several workers serve the same threads?",
    "How do I set up nginx so answers stream?",
]


async def _research(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = (
        [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    )
    if not returns:
        question = next(
            p.content
            for m in reversed(messages)
            if isinstance(m, ModelRequest)
            for p in m.parts
            if p.part_kind == "user-prompt"
        )
        yield {
            0: DeltaToolCall(name="search", json_args=json.dumps({"query": question})),
            1: DeltaToolCall(name="ask", json_args=json.dumps({"question": question})),
        }
        return
    answer = next(p.content for p in returns if p.tool_name == "ask")
    found = next(p.content for p in returns if p.tool_name == "search")
    answer, found = _plain(answer), _plain(found)
    # A research answer: the direct answer, then what each of the top sources adds.
    parts = [answer["answer"], "\n\nWhat the sources say:"]
    for result in found["results"][:3]:
        first = result["text"].replace("\n", " ").split(". ")[0][:200]
        parts.append(f"\n- {result['title']}: {first}. [{result['citation']}]")
    for word in " ".join(parts).split(" "):
        yield word + " "


def _plain(content: Any) -> dict[str, Any]:
    return content.model_dump() if hasattr(content, "model_dump") else content


async def _session(config: AppConfig, questions: list[str]) -> list[dict[str, Any]]:
    """Run the research session through the real server; per turn: bytes, state bytes, baseline bytes.

    Each run's events are folded from ``{}`` with ``jsonpatch`` (what CopilotKit's runtime does at
    the end of every run): the fold must reach the server's state, or the bench stops.
    """
    toolkit = build_chat_toolkit(config)
    agent = Agent(
        FunctionModel(stream_function=_research, model_name="research"),
        deps_type=ChatDeps,
        output_type=[str, DeferredToolRequests],
        toolsets=toolkit.toolsets,
        capabilities=toolkit.capabilities,
    )
    turns = []
    client_state: Any = {}
    async with (
        serve(create_app(config, agent=agent, toolkit=toolkit)) as url,
        httpx.AsyncClient(base_url=url, timeout=120) as http,
    ):
        for turn, question in enumerate(questions, 1):
            body = {
                "threadId": "research",
                "runId": f"r{turn}",
                "state": client_state,
                "tools": [],
                "context": [],
                "forwardedProps": {},
                "protocolVersion": "1.0",
                "messages": [{"id": f"u{turn}", "role": "user", "content": question}],
            }
            response = await http.post("/agui", json=body)
            row = {"bytes": len(response.content), "state": 0, "baseline": 0, "alt": 0}
            folded: Any = {}  # this run alone, from nothing
            for block in response.text.split("\n\n"):
                frames = parse_sse(block + "\n\n") if block.strip() else []
                if not frames:
                    continue
                seq, event = frames[0]
                size = len(block.encode()) + 2
                if event["type"] == "STATE_DELTA":
                    folded = jsonpatch.apply_patch(folded, event["delta"])
                elif event["type"] == "STATE_SNAPSHOT":
                    folded = event["snapshot"]
                    row["baseline"] = row["baseline"] or size
                else:
                    continue
                row["state"] += size
                row["alt"] += len(sse_frame(seq or 0, encode_event(StateSnapshotEvent(snapshot=folded))))
            client_state = folded
            server = (await http.get("/threads/research")).json()["state"]
            assert folded == server, (
                f"turn {turn}: folding the run from {{}} did not reach the server's state"
            )
            turns.append(row)
    return turns


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=len(RESEARCH))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragstream-state-bytes-"))
    try:
        (await build_corpus_kb(work / "data" / "kb")).close()
        questions = RESEARCH[: args.turns]
        bounded = await _session(AppConfig(data_dir=work / "data"), questions)
        unbounded_config = AppConfig(
            data_dir=work / "unbounded",
            citations_emitted=10**6,
            searches_emitted=10**6,
            qa_history_emitted=10**6,
        )
        shutil.copytree(work / "data" / "kb", work / "unbounded" / "kb")
        unbounded = await _session(unbounded_config, questions)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def share(state: int, total: int) -> str:
        return f"{state / total:.1%}"

    rows = []
    for turn, (b, u) in enumerate(zip(bounded, unbounded, strict=True), 1):
        alt_total = b["bytes"] - b["state"] + b["alt"]
        rows.append(
            (
                turn,
                b["bytes"],
                b["baseline"],
                b["state"],
                share(b["state"], b["bytes"]),
                u["state"],
                share(u["state"], u["bytes"]),
                share(b["alt"], alt_total),
            )
        )
    total = {k: sum(r[k] for r in bounded) for k in ("bytes", "state", "baseline", "alt")}
    u_total = {k: sum(r[k] for r in unbounded) for k in ("bytes", "state")}
    alt_total = total["bytes"] - total["state"] + total["alt"]
    rows.append(
        (
            "all",
            total["bytes"],
            total["baseline"],
            total["state"],
            share(total["state"], total["bytes"]),
            u_total["state"],
            share(u_total["state"], u_total["bytes"]),
            share(total["alt"], alt_total),
        )
    )
    print(f"{len(questions)} turns; every run opens with a STATE_SNAPSHOT (its baseline), deltas follow\n")
    print(
        table(
            [
                "turn",
                "bytes",
                "baseline snapshot B",
                "state B per run",
                "state share",
                "state B per run, no bound",
                "state share, no bound",
                "state share, snapshot per change",
            ],
            rows,
        )
    )
    print(
        f"\nState events: {share(total['state'], total['bytes'])} of the streamed bytes (target: at most 15%); "
        f"without the emit bound {share(u_total['state'], u_total['bytes'])}; "
        f"a snapshot per change {share(total['alt'], alt_total)}."
    )


if __name__ == "__main__":
    asyncio.run(main())
