"""How much of the stream is state: this server's deltas against a snapshot after every change.

    python -m bench.state_bytes [--turns 10]

A scripted 10-turn research session (an operator planning a deployment, following up on the
answers) runs through the real server over HTTP: each turn the
model calls ``search`` and ``ask`` in parallel, then streams, word by word, the answer ``ask``
produced followed by one cited line per top-3 source (what a research assistant writes). Every SSE byte is counted. The comparison strategy is computed from the same stream: each
state event is replaced by a STATE_SNAPSHOT of the whole state at that point (what a server that
does not diff would send). Target (issue 5): state events under 10% of the streamed bytes.
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
from server.app import create_app
from server.config import AppConfig
from server.runs.encoding import encode_event, sse_frame
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


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=len(RESEARCH))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragstream-state-bytes-"))
    try:
        (await build_corpus_kb(work / "data" / "kb")).close()
        config = AppConfig(data_dir=work / "data")
        toolkit = build_chat_toolkit(config)
        agent = Agent(
            FunctionModel(stream_function=_research, model_name="research"),
            deps_type=ChatDeps,
            output_type=[str, DeferredToolRequests],
            toolsets=toolkit.toolsets,
            capabilities=toolkit.capabilities,
        )
        questions = RESEARCH[: args.turns]
        rows = []
        total = state = alt_state = 0
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
                turn_total = len(response.content)
                turn_state = turn_alt = 0
                for block in response.text.split("\n\n"):
                    if not block.strip():
                        continue
                    frames = parse_sse(block + "\n\n")
                    if not frames:
                        continue
                    seq, event = frames[0]
                    size = len(block.encode()) + 2
                    if event["type"] == "STATE_DELTA":
                        client_state = jsonpatch.apply_patch(client_state, event["delta"])
                    elif event["type"] == "STATE_SNAPSHOT":
                        client_state = event["snapshot"]
                    else:
                        continue
                    turn_state += size
                    turn_alt += len(
                        sse_frame(seq or 0, encode_event(StateSnapshotEvent(snapshot=client_state)))
                    )
                total, state, alt_state = total + turn_total, state + turn_state, alt_state + turn_alt
                alt_total = turn_total - turn_state + turn_alt
                rows.append(
                    (
                        turn,
                        turn_total,
                        turn_state,
                        f"{turn_state / turn_total:.1%}",
                        alt_total,
                        f"{turn_alt / alt_total:.1%}",
                    )
                )
            view = (await http.get("/threads/research")).json()
        assert view["state"] == client_state, "the client's copy diverged from the server"
        alt_total = total - state + alt_state
        rows.append(("all", total, state, f"{state / total:.1%}", alt_total, f"{alt_state / alt_total:.1%}"))
        print(f"{len(questions)} turns, final state {len(json.dumps(client_state))} bytes\n")
        print(
            table(
                [
                    "turn",
                    "bytes (deltas)",
                    "state bytes",
                    "state share",
                    "bytes (snapshot per change)",
                    "state share",
                ],
                rows,
            )
        )
        print(f"\nSnapshot-per-change would send {alt_total / total:.2f}x the bytes of this server.")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
