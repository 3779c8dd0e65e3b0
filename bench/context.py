"""Input tokens per turn over a 20-turn conversation on the sample corpus, old context against new.

The server answers through a provider's model class (``openai-chat:``, the real SDK and HTTP)
against the loopback Chat Completions server of the tests (``tests/wire_models.py``), whose scripted
model searches each question and answers citing two passages, as a chat model does. Each turn's
input tokens are the sum over its model requests (the search call, then the answer) of what the
request carried (instructions, tool schemas, messages), estimated as characters / 4 (the rule
``rag_tools.context`` documents). ``old`` sends every earlier turn whole (``RAGSTREAM_HISTORY_TOKENS
=none``, the behaviour before issue 46); ``new`` is the default.

    .venv/bin/python -m bench.context [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench._util import table
from bench.rag_eval import build_corpus_kb
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.protocol import parse_sse, run_body
from tests.servers import serve
from tests.wire_models import Call, Reply, Text, WireModel, WireRequest

ROOT = Path(__file__).resolve().parent.parent
ANSWER = (
    "According to the documents, {topic} is described in the passages found: the first gives the rule "
    "[1] and the second adds the detail that applies [2]. Ask again if you need the exact wording."
)


def script(request: WireRequest) -> Reply:
    """Search the question, then answer citing passages 1 and 2 of what came back."""
    if not request.ends_with_tool_result:
        return [Call("search", {"query": request.user_texts[-1]})]
    return [Text(ANSWER.format(topic=request.user_texts[-1].rstrip("?").lower()))]


async def conversation(kb: Path, questions: list[str], history_tokens: int | None) -> list[int]:
    """Input tokens of each turn of ``questions`` asked in one thread."""
    wire = WireModel(script)
    async with serve(wire.app) as model_url:
        os.environ.update(OPENAI_BASE_URL=f"{model_url}/v1", OPENAI_API_KEY="bench")
        with tempfile.TemporaryDirectory() as data:
            config = AppConfig(
                data_dir=Path(data), kb_uri=str(kb), model="openai-chat:bench", history_tokens=history_tokens
            )
            per_turn: list[int] = []
            async with serve(create_app(config)) as url, httpx.AsyncClient(base_url=url, timeout=120) as http:
                for n, question in enumerate(questions, 1):
                    before = len(wire.requests)
                    response = await http.post("/agui", json=run_body("bench", f"r{n}", question))
                    last = parse_sse(response.text)[-1][1]
                    assert last["type"] == "RUN_FINISHED", last
                    per_turn.append(sum(r.size for r in wire.requests[before:]))
    return per_turn


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    questions = [q["question"] for q in json.loads((ROOT / "bench" / "rag_questions.json").read_text())]
    questions = questions[: args.turns]
    with tempfile.TemporaryDirectory() as work:
        kb = await build_corpus_kb(Path(work) / "kb")
        kb.close()
        old = await conversation(Path(work) / "kb", questions, None)
        new = await conversation(
            Path(work) / "kb", questions, AppConfig.model_fields["history_tokens"].default
        )
    rows: list[list[Any]] = [[n, o, w] for n, (o, w) in enumerate(zip(old, new, strict=True), 1)]
    print(table(["turn", "old input tokens", "new input tokens"], rows))
    print()
    print(
        f"turn {args.turns} / turn 1: old {old[-1] / old[0]:.2f}x ({old[0]:,} -> {old[-1]:,}), "
        f"new {new[-1] / new[0]:.2f}x ({new[0]:,} -> {new[-1]:,}); "
        f"whole conversation: old {sum(old):,}, new {sum(new):,} tokens ({sum(new) / sum(old):.2f}x)"
    )


if __name__ == "__main__":
    asyncio.run(main())
