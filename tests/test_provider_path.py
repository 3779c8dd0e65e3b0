"""The chat agent through a real provider class against an OpenAI-compatible server on loopback."""

from __future__ import annotations

import jsonpatch
from ag_ui.core import EventType, RunAgentInput, UserMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.ui.ag_ui import AGUIAdapter

from rag_tools import ChatDeps, RagConfig, build_chat_toolkit, create_chat_agent
from rag_tools.kb import KnowledgeBase
from rag_tools.state import SESSION_NAMESPACE, SessionState
from tests.fake_openai import create_fake_openai
from tests.servers import serve


async def test_openai_model_streams_tool_call_deltas_and_text(corpus_kb: KnowledgeBase) -> None:
    app, requests = create_fake_openai(
        "nightly backup retention", "Nightly backups are kept for 35 days [1]."
    )
    config = RagConfig(model="openai:fake-model")
    async with serve(app) as url:
        model = OpenAIChatModel(
            "fake-model", provider=OpenAIProvider(base_url=f"{url}/v1", api_key="test-key")
        )
        toolkit = build_chat_toolkit(config)
        agent = create_chat_agent(config, toolkit, model=model)
        deps = ChatDeps(client=corpus_kb, tool_context=toolkit.create_context(), config=config)
        run_input = RunAgentInput(
            thread_id="t",
            run_id="r",
            state={},
            messages=[UserMessage(id="u1", content="How long are backups kept?")],
            tools=[],
            context=[],
            forwarded_props={},
        )
        events = [e async for e in AGUIAdapter(agent=agent, run_input=run_input).run_stream(deps=deps)]

    types = [e.type for e in events]
    assert types[0] == EventType.RUN_STARTED
    assert types[-1] == EventType.RUN_FINISHED
    args = "".join(e.delta for e in events if e.type == EventType.TOOL_CALL_ARGS)
    assert args == '{"query": "nightly backup retention"}'
    assert sum(1 for t in types if t == EventType.TOOL_CALL_ARGS) == 3  # the fragments arrive as they stream
    assert [e.tool_call_name for e in events if e.type == EventType.TOOL_CALL_START] == ["search"]
    text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text.strip() == "Nightly backups are kept for 35 days [1]."

    assert len(requests) == 2
    assert all(r["stream"] for r in requests)
    assert [t["function"]["name"] for t in requests[0]["tools"]][:1] == ["search"]
    tool_message = next(m for m in requests[1]["messages"] if m["role"] == "tool")
    assert "Kiteline Cloud Operations Handbook" in tool_message["content"]

    session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
    assert session.citations["1"].passage
    state: dict = {}
    for event in events:
        wire = event.model_dump(mode="json", by_alias=True)
        if event.type == EventType.STATE_SNAPSHOT:
            state = wire["snapshot"]
        elif event.type == EventType.STATE_DELTA:
            state = jsonpatch.apply_patch(state, wire["delta"])
    assert state == deps.state
    assert "1" in state["citations"]
