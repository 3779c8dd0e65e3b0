"""Compose your own pydantic-ai agent from the RAG toolkit, offline, over the sample corpus.

    python examples/custom_agent.py "How long are nightly backups kept?"

The knowledge base lives in $RAGSTREAM_DATA_DIR (default .ragstream/data); the sample corpus is
ingested first (skipped when already there). With $RAGSTREAM_MODEL unset the offline extractive
model answers; set it (e.g. openai:gpt-4o-mini) to use a real one.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from pydantic_ai import Agent

from rag_tools import AgentDeps, KnowledgeBase, RagConfig, build_toolkit, create_extractive_model

CORPUS = Path(__file__).resolve().parent / "corpus"


async def main(question: str) -> None:
    config = RagConfig(
        data_dir=Path(os.environ.get("RAGSTREAM_DATA_DIR", ".ragstream/data")),
        model=os.environ.get("RAGSTREAM_MODEL") or None,
    )
    async with KnowledgeBase.from_config(config) as kb:
        await kb.ingest_paths([CORPUS])
        toolkit = build_toolkit(config, features=["search", "documents", "qa"])
        agent = Agent(
            config.model or create_extractive_model(kb.embedding_model),
            deps_type=AgentDeps,
            toolsets=toolkit.toolsets,
            capabilities=toolkit.capabilities,
            instructions=toolkit.prompt,
        )
        deps = AgentDeps(client=kb, tool_context=toolkit.create_context())
        result = await agent.run(question, deps=deps)

    print(result.output)
    state = deps.state
    print("\nCitations:")
    for index, card in sorted(state["citations"].items(), key=lambda item: int(item[0])):
        where = " > ".join(card["headings"]) or (f"page {card['page']}" if card["page"] else "")
        print(f"  [{index}] {card['title']} ({where}) {card['uri']}")
    print("\nState keys:", json.dumps(sorted(state)))
    print("Searches:", json.dumps([s["query"] for s in state["searches"].values()]))


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "How long are nightly database backups retained?"))
