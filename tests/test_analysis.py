"""The analysis toolset: model-written programs run in the sandbox and reach the knowledge base via the bridge."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools import (
    AgentDeps,
    RagConfig,
    ToolContext,
    build_chat_toolkit,
    create_extractive_model,
    prepare_context,
)
from rag_tools.kb import KnowledgeBase
from rag_tools.sandbox import SandboxLimits, sandbox_available
from rag_tools.state import SESSION_NAMESPACE, SessionState
from rag_tools.toolsets import AnalysisResult, create_analysis_toolset
from tests.agents import Script
from tests.embedders import HashingEmbeddingModel

pytestmark = pytest.mark.skipif(not sandbox_available()[0], reason="this machine cannot isolate the sandbox")

COUNT_PROGRAM = """
hits = kb.search("backups", limit=10)
titles = sorted({h["title"] for h in hits})
print("documents:", titles)
result = {"documents": len(titles)}
"""


def writer(*programs: str) -> tuple[FunctionModel, list[str]]:
    """A code-writing model: returns the programs in turn; records the retry messages it got."""
    feedback: list[str] = []

    def write(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # text-output retries come back as user prompts after the first one
        prompts = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        feedback.extend(str(p.content) for p in prompts[1 + len(feedback) :])
        attempt = sum(1 for m in messages if isinstance(m, ModelResponse))
        return ModelResponse(parts=[TextPart(programs[min(attempt, len(programs) - 1)])])

    return FunctionModel(write, model_name="writer"), feedback


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as knowledge_base:
        await knowledge_base.ingest_bytes(
            b"Alpha backups are kept for 30 days.", name="alpha.txt", uri="mem://alpha"
        )
        await knowledge_base.ingest_bytes(
            b"Beta backups are kept for 90 days.", name="beta.txt", uri="mem://beta"
        )
        yield knowledge_base


async def analyze(
    kb: KnowledgeBase, model: FunctionModel, args: dict, *, document_filter: list[str] | None = None
) -> AnalysisResult:
    toolset = create_analysis_toolset(
        RagConfig(), model=model, limits=SandboxLimits(wall_seconds=10, cpu_seconds=5)
    )
    script = Script([[("analyze", args)]])
    deps = AgentDeps(client=kb, tool_context=prepare_context(ToolContext(), ["analysis"]))
    if document_filter:
        deps.tool_context.get(SESSION_NAMESPACE, SessionState).document_filter = document_filter
    await Agent(script.model, deps_type=AgentDeps, toolsets=[toolset]).run("go", deps=deps)
    return script.returns["analyze"][0]


async def test_program_uses_the_bridged_knowledge_base(kb: KnowledgeBase) -> None:
    model, _ = writer(COUNT_PROGRAM)
    result = await analyze(kb, model, {"task": "how many documents mention backups"})
    assert result.errors == []
    assert result.value == {"documents": 2}
    assert "documents: ['alpha', 'beta']" in result.output
    assert "kb.search" in result.code


async def test_session_filter_reaches_the_bridge(kb: KnowledgeBase) -> None:
    model, _ = writer(COUNT_PROGRAM)
    result = await analyze(kb, model, {"task": "count"}, document_filter=["beta"])
    assert result.value == {"documents": 1}


async def test_failing_program_goes_back_to_the_writer(kb: KnowledgeBase) -> None:
    model, feedback = writer("result = 1 / 0", "result = 42")
    result = await analyze(kb, model, {"task": "compute"})
    assert result.value == 42
    assert result.errors == []
    assert any("ZeroDivisionError" in f for f in feedback), feedback


async def test_sandbox_limits_end_in_a_clear_error(kb: KnowledgeBase) -> None:
    model, _ = writer("while True:\n    pass")
    result = await analyze(kb, model, {"task": "spin"})
    assert result.value is None
    assert any("limit" in e for e in result.errors)


async def test_offline_extractive_model_does_not_pretend_to_write_code(kb: KnowledgeBase) -> None:
    offline = create_extractive_model(kb.embedding_model)
    result = await analyze(kb, offline, {"task": "count documents"})
    assert result.errors == ["analysis needs a chat model that can write code"]
    assert result.code == ""
    tools = {name for ts in build_chat_toolkit(RagConfig()).toolsets for name in getattr(ts, "tools", {})}
    assert "analyze" not in tools  # the offline chat agent is not even offered the tool
