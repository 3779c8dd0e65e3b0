"""The analysis toolset: model-written programs run in the sandbox (Monty) and call the knowledge base."""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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
from rag_tools.kb_toolsets import AnalysisResult, create_analysis_toolset
from rag_tools.sandbox import SandboxLimits
from rag_tools.state import SESSION_NAMESPACE, SessionState
from tests.agents import Script
from tests.embedders import HashingEmbeddingModel
from tests.sandbox_procs import wait_for_no_sandbox_workers

COUNT_PROGRAM = """
hits = kb.search("backups", limit=10)
titles = sorted({h["title"] for h in hits})
print("documents:", titles)
result = {"documents": len(titles)}
"""

DOCUMENTS = {
    "handbook": "Nightly database backups are kept for 30 days. Weekly backups are kept for 90 days. "
    "Contact ops@example.com for escalations.",
    "runbook": "Restore drills run every 14 days. Log retention is 30 days for application logs and "
    "365 days for audit logs. Release 2.5.0 shipped on 2024-06-18; contact release@example.com.",
    "pricing": "The Starter plan costs 49 EUR per month and includes 3 seats. "
    "The Team plan costs 199 EUR per month and includes 15 seats.",
}


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


@pytest.fixture
async def docs_kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    async with KnowledgeBase(tmp_path / "docs-kb", embedder=HashingEmbeddingModel()) as knowledge_base:
        for name, text in DOCUMENTS.items():
            await knowledge_base.ingest_bytes(text.encode(), name=f"{name}.txt", uri=f"mem://{name}")
        yield knowledge_base


async def analyze(
    kb: KnowledgeBase,
    model: FunctionModel,
    args: dict[str, Any],
    *,
    document_filter: list[str] | None = None,
    limits: SandboxLimits | None = None,
) -> AnalysisResult:
    toolset = create_analysis_toolset(
        RagConfig(), model=model, limits=limits or SandboxLimits(wall_seconds=10, cpu_seconds=5)
    )
    script = Script([[("analyze", args)]])
    deps = AgentDeps(client=kb, tool_context=prepare_context(ToolContext(), ["analysis"]))
    if document_filter:
        deps.tool_context.get(SESSION_NAMESPACE, SessionState).document_filter = document_filter
    await Agent(script.model, deps_type=AgentDeps, toolsets=[toolset]).run("go", deps=deps)
    (returned,) = script.returns["analyze"]
    assert wait_for_no_sandbox_workers() == [], "a sandbox worker outlived the analysis"
    assert isinstance(returned, AnalysisResult)
    return returned


async def test_program_uses_the_knowledge_base(kb: KnowledgeBase) -> None:
    model, _ = writer(COUNT_PROGRAM)
    result = await analyze(kb, model, {"task": "how many documents mention backups"})
    assert result.errors == []
    assert result.value == {"documents": 2}
    assert "documents: ['alpha', 'beta']" in result.output
    assert "kb.search" in result.code
    # the result says which documents the program read
    assert sorted((s.title, s.uri) for s in result.sources) == [
        ("alpha", "mem://alpha"),
        ("beta", "mem://beta"),
    ]
    assert all(s.document_id for s in result.sources)


async def test_session_filter_reaches_the_knowledge_base_calls(kb: KnowledgeBase) -> None:
    model, _ = writer(COUNT_PROGRAM)
    result = await analyze(kb, model, {"task": "count"}, document_filter=["beta"])
    assert result.value == {"documents": 1}
    assert [s.uri for s in result.sources] == ["mem://beta"]


async def test_failing_program_goes_back_to_the_writer(kb: KnowledgeBase) -> None:
    model, feedback = writer("x = kb.search('alpha')\nresult = 1 / 0", "result = 42")
    result = await analyze(kb, model, {"task": "compute"})
    assert result.value == 42
    assert result.errors == []
    assert result.sources == []  # the failed attempt's reads are not the answer's sources
    assert any("ZeroDivisionError" in f for f in feedback), feedback


# -- realistic tasks, as a model writes them ------------------------------------------------------

COUNTS_PER_DOCUMENT = """
import re
from collections import Counter
counts = Counter()
for hit in kb.search("days retention backups", limit=20):
    counts[hit["title"]] += len(re.findall(r"\\d+ days", hit["text"]))
for title, n in counts.most_common():
    print(f"{title}: {n}")
result = {title: n for title, n in sorted(counts.items()) if n}
"""

DAY_STATISTICS = """
import math, re
days = sorted(int(d) for hit in kb.search("days", limit=20) for d in re.findall(r"(\\d+) days", hit["text"]))
n = len(days)
mean = sum(days) / n
median = days[n // 2] if n % 2 else (days[n // 2 - 1] + days[n // 2]) / 2
stdev = math.sqrt(sum((d - mean) ** 2 for d in days) / (n - 1))
result = {"days": days, "mean": mean, "median": median, "stdev": round(stdev, 6)}
"""

EXTRACTION = """
import re
text = " ".join(kb.get_document(name)["content"] for name in ("handbook", "runbook"))
result = {
    "emails": sorted(set(re.findall(r"[\\w.+-]+@[\\w-]+\\.\\w+", text))),
    "versions": re.findall(r"\\b\\d+\\.\\d+\\.\\d+\\b", text),
    "dates": re.findall(r"\\d{4}-\\d{2}-\\d{2}", text),
}
"""

PLANS_REPORT = """
import json, re
class Plan:
    def __init__(self, name, price, seats):
        self.name = name
        self.price = price
        self.seats = seats
    def per_seat(self):
        return round(self.price / self.seats, 2)
doc = kb.get_document("pricing")
plans = [Plan(n, int(p), int(s)) for n, p, s in
         re.findall(r"The (\\w+) plan costs (\\d+) EUR per month and includes (\\d+) seats", doc["content"])]
plans.sort(key=lambda plan: plan.per_seat())
report = {"document": doc["title"], "plans": [{"name": p.name, "per_seat": p.per_seat()} for p in plans]}
print(json.dumps(report, indent=2))
result = json.loads(json.dumps(report))
"""


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        pytest.param(COUNTS_PER_DOCUMENT, {"handbook": 2, "runbook": 3}, id="counts-per-document"),
        pytest.param(
            DAY_STATISTICS,
            {
                "days": [14, 30, 30, 90, 365],
                "mean": statistics.mean([14, 30, 30, 90, 365]),
                "median": 30,
                "stdev": round(statistics.stdev([14, 30, 30, 90, 365]), 6),
            },
            id="statistics-by-hand",
        ),
        pytest.param(
            EXTRACTION,
            {
                "emails": ["ops@example.com", "release@example.com"],
                "versions": ["2.5.0"],
                "dates": ["2024-06-18"],
            },
            id="regex-extraction",
        ),
        pytest.param(
            PLANS_REPORT,
            {
                "document": "pricing",
                "plans": [{"name": "Team", "per_seat": 13.27}, {"name": "Starter", "per_seat": 16.33}],
            },
            id="classes-sorting-json",
        ),
    ],
)
async def test_realistic_analysis_tasks(docs_kb: KnowledgeBase, program: str, expected: Any) -> None:
    model, feedback = writer(program)
    result = await analyze(docs_kb, model, {"task": "analyse the documents"})
    assert result.errors == [], result.errors
    assert feedback == []
    assert result.value == expected


async def test_writer_learns_what_the_sandbox_lacks(docs_kb: KnowledgeBase) -> None:
    """A program written for CPython (``statistics``) fails with a hint; the rewrite succeeds."""
    natural = (
        "import re, statistics\n"
        "days = [int(d) for hit in kb.search('days', limit=20) for d in re.findall(r'(\\d+) days', hit['text'])]\n"
        "result = statistics.median(days)"
    )
    instructions: list[str] = []
    model, feedback = writer(natural, DAY_STATISTICS)

    def capture(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        instructions.append(info.instructions or "")
        return model.function(messages, info)  # type: ignore[misc, return-value]

    result = await analyze(docs_kb, FunctionModel(capture, model_name="writer"), {"task": "median retention"})
    assert "no statistics, numpy or heapq" in instructions[0]
    assert len(feedback) == 1
    assert "No module named 'statistics'" in feedback[0]
    assert "the sandbox can import only" in feedback[0]
    assert result.errors == []
    assert result.value["median"] == 30


async def test_document_name_restricts_the_knowledge_base(docs_kb: KnowledgeBase) -> None:
    program = "result = sorted({hit['title'] for hit in kb.search('days plan', limit=20)})"
    model, _ = writer(program)
    result = await analyze(docs_kb, model, {"task": "which documents", "document_name": "pricing"})
    assert result.value == ["pricing"]
    program = "doc = kb.get_document('pricing')\nresult = len(doc['content'])"
    model, _ = writer(program)
    result = await analyze(docs_kb, model, {"task": "how long"})
    assert [s.uri for s in result.sources] == ["mem://pricing"]


# -- limits and failures end as clear errors for the model ----------------------------------------


@pytest.mark.parametrize(
    ("program", "limits", "message"),
    [
        pytest.param(
            "while True:\n    pass", SandboxLimits(cpu_seconds=1), "time limit of 1s exceeded", id="time"
        ),
        pytest.param(
            "blocks = []\nwhile True:\n    blocks.append('x' * 10**6)",
            SandboxLimits(memory_bytes=32 * 2**20),
            "memory limit (32 MiB) exceeded",
            id="memory",
        ),
        pytest.param(
            "while True:\n    kb.search('backups')",
            SandboxLimits(kb_calls=5),
            "limit of 5 kb calls exceeded",
            id="kb-calls",
        ),
    ],
)
async def test_limits_end_in_a_clear_error(
    kb: KnowledgeBase, program: str, limits: SandboxLimits, message: str
) -> None:
    model, feedback = writer(program)
    result = await analyze(kb, model, {"task": "spin"}, limits=limits)
    assert result.value is None
    assert any(e.startswith(message) for e in result.errors), result.errors
    assert feedback == []  # a hit limit is reported, not retried


async def test_recursion_limit_is_retried_then_reported(kb: KnowledgeBase) -> None:
    program = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nresult = depth(100)"
    model, feedback = writer(program)
    result = await analyze(kb, model, {"task": "recurse"}, limits=SandboxLimits(recursion_depth=50))
    assert result.value is None
    assert len(feedback) == 2 and all("recursion limit (50) exceeded" in f for f in feedback)
    assert any(e.startswith("recursion limit (50) exceeded") for e in result.errors), result.errors


async def test_escape_attempt_is_reported_to_the_model(kb: KnowledgeBase, tmp_path: Path) -> None:
    target = tmp_path / "pwned.txt"
    model, feedback = writer(f"open({str(target)!r}, 'w').write('pwned')")
    result = await analyze(kb, model, {"task": "write a file"})
    assert result.value is None
    assert any("Permission denied" in e and "the sandbox has no files" in e for e in result.errors)
    assert feedback and "Permission denied" in feedback[0]
    assert not target.exists()


async def test_offline_extractive_model_does_not_pretend_to_write_code(kb: KnowledgeBase) -> None:
    offline = create_extractive_model(kb.embedding_model)
    result = await analyze(kb, offline, {"task": "count documents"})
    assert result.errors == ["analysis needs a chat model that can write code"]
    assert result.code == ""
    tools = {name for ts in build_chat_toolkit(RagConfig()).toolsets for name in getattr(ts, "tools", {})}
    assert "analyze" not in tools  # the offline chat agent is not even offered the tool
