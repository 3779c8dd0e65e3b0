"""The reranking stage: one setting names the reranker, every choice is a LanceDB ``Reranker``, the
chat model ranks listwise and its tokens count in the run that searched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lancedb.rerankers import Reranker
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools import AgentDeps, RagConfig, build_toolkit
from rag_tools.kb import KnowledgeBase
from rag_tools.kb.fusion import Fusion
from rag_tools.kb.reranking import ModelReranker, RerankerError, resolve_reranker
from tests.embedders import HashingEmbeddingModel

FRUIT = {
    "apples.md": "# Apples\n\nApples keep for months in a cool cellar.",
    "pears.md": "# Pears\n\nPears ripen off the tree and keep for weeks.",
    "plums.md": "# Plums\n\nPlums keep for days and bruise easily.",
}


@pytest.fixture
async def fruit_kb(tmp_path: Path) -> Any:
    for name, text in FRUIT.items():
        (tmp_path / name).write_text(text)
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        await kb.ingest_paths([tmp_path / n for n in FRUIT])
        yield kb


def _ranking_model(order: list[str], seen: list[str]) -> FunctionModel:
    """A chat model that ranks the numbered passages by ``order`` (titles, best first)."""

    def rank(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        seen.append(prompt)
        numbered = {
            line.split("] ", 1)[1].split("\n")[0].split()[0]: int(line[1 : line.index("]")])
            for line in prompt.split("\n\n")
            if line.startswith("[")
        }
        ranking = [numbered[t] for t in order if t in numbered]
        tool = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(tool, {"ranking": ranking})])

    return FunctionModel(rank, model_name="ranker")


def test_the_setting_names_a_reranker_or_says_what_is_wrong() -> None:
    assert (
        resolve_reranker("none") is None and resolve_reranker(None) is None and resolve_reranker("") is None
    )
    with pytest.raises(RerankerError, match="unknown reranker 'bm42'"):
        resolve_reranker("bm42")
    with pytest.raises(RerankerError, match="none is configured"):
        resolve_reranker("model")
    with pytest.raises(RerankerError, match="name the model: cohere:<model>"):
        resolve_reranker("cohere")
    assert isinstance(resolve_reranker("model", chat_model="openai:gpt-4o-mini"), ModelReranker)
    assert isinstance(resolve_reranker("model:anthropic:claude-sonnet-4-5"), ModelReranker)
    with pytest.raises(ValueError, match="reranker"):
        RagConfig(reranker=3)  # type: ignore[arg-type]


async def test_a_reranker_reorders_the_candidates_and_the_limit_applies_after(
    fruit_kb: KnowledgeBase,
) -> None:
    fused = [h.title for h in await fruit_kb.search("which fruit keeps longest", limit=3)]
    seen: list[str] = []
    order = list(reversed(fused))
    fruit_kb.reranker = ModelReranker(_ranking_model(order, seen))
    reranked = await fruit_kb.search("which fruit keeps longest", limit=2)
    assert [h.title for h in reranked] == order[:2]  # ranked among all candidates, then cut to 2
    assert reranked[0].score > reranked[1].score
    assert len(seen) == 1 and "Question: which fruit keeps longest" in seen[0]
    assert all(f"[{n}]" in seen[0] for n in (1, 2, 3))  # every candidate was shown, numbered
    for mode in ("vector", "text"):  # the stage follows every search mode
        hits = await fruit_kb.search("which fruit keeps longest", limit=3, mode=mode)  # type: ignore[arg-type]
        assert [h.title for h in hits] == [t for t in order if t in {h.title for h in hits}]


async def test_any_lancedb_reranker_plugs_in(fruit_kb: KnowledgeBase) -> None:
    class Alphabetical(Reranker):
        """A user's own reranker: by passage text, alphabetically."""

        def rerank_vector(self, query: str, vector_results: pa.Table) -> pa.Table:
            table = vector_results.sort_by([("text", "ascending")])
            return table.append_column("_relevance_score", pa.array([1.0] * len(table), type=pa.float32()))

        def rerank_hybrid(self, query: str, vector_results: pa.Table, fts_results: pa.Table) -> pa.Table:
            raise AssertionError("the stage reranks one list of candidates")

    fruit_kb.reranker = resolve_reranker(Alphabetical())
    assert [h.title for h in await fruit_kb.search("fruit keeps", limit=3)] == ["Apples", "Pears", "Plums"]


async def test_the_ranking_model_counts_in_the_run_that_searched(fruit_kb: KnowledgeBase) -> None:
    """Its requests and tokens are the run's: a usage limit and the day's budget see them."""
    ranker_calls: list[str] = []
    fruit_kb.reranker = ModelReranker(_ranking_model(["Plums", "Pears", "Apples"], ranker_calls))
    toolkit = build_toolkit(RagConfig(), features=["search"])

    def chat(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("search", {"query": "which fruit keeps", "limit": 2})])
        titles = [r["title"] for r in json.loads(returned[-1].model_response_str())["results"]]
        return ModelResponse(parts=[TextPart(", ".join(titles))])

    agent = Agent(FunctionModel(chat, model_name="chat"), toolsets=toolkit.toolsets, deps_type=AgentDeps)
    result = await agent.run("keep", deps=AgentDeps(client=fruit_kb, tool_context=toolkit.create_context()))
    assert result.output == "Plums, Pears"
    assert len(ranker_calls) == 1
    assert result.usage.requests == 3  # two of the chat model's and the ranking model's one


async def test_each_fusion_method_finds_what_one_half_alone_finds_and_bad_settings_are_named(
    tmp_path: Path,
) -> None:
    """A passage only the full-text half ranks first (the one naming "quince"): score fusion (the
    default) and rank fusion both keep it among the hits, the text half's weight alone puts it
    first; a bad method or weight is a clear error."""
    docs = {
        f"note{n}.md": f"# Note {n}\n\nFruit keeps well in a cool, dark room number {n}." for n in range(8)
    }
    docs["quince.md"] = "# Quince\n\nA quince is hard and sour raw."
    for name, text in docs.items():
        (tmp_path / name).write_text(text)
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        await kb.ingest_paths([tmp_path / n for n in docs])
        text_first = (await kb.search("quince fruit keeps cool room", limit=1, mode="text"))[0].title
        assert text_first == "Quince"
        for fusion in (Fusion(), Fusion(method="rank"), Fusion(vector_weight=0.0, text_weight=1.0)):
            kb.fusion = fusion
            titles = [h.title for h in await kb.search("quince fruit keeps cool room", limit=9)]
            assert "Quince" in titles, fusion
        kb.fusion = Fusion(vector_weight=0.0, text_weight=1.0)
        assert (await kb.search("quince fruit keeps cool room", limit=1))[0].title == "Quince"
    with pytest.raises(ValueError, match="unknown fusion method 'sum'; use score or rank"):
        Fusion(method="sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be negative"):
        Fusion(vector_weight=-1)
