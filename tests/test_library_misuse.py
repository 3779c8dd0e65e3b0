"""What a library user gets for misusing the public API: a clear error at the call, nothing lost."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from rag_tools import (
    RagConfig,
    ToolContext,
    build_multi_document_filter,
    build_toolkit,
    build_tools_prompt,
    create_search_toolset,
    prepare_context,
)
from rag_tools.kb import AmbiguousDocumentError, KnowledgeBase
from rag_tools.tools import RetryPolicy, ToolRegistry, tool_options
from tests.embedders import HashingEmbeddingModel


@pytest.fixture
async def kb(tmp_path: Path):
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as knowledge_base:
        yield knowledge_base


async def test_one_path_given_as_a_string_is_refused_and_nothing_is_ingested(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.md").write_text("# Notes\n\nThe notes the user meant.\n")
    (work / "private.md").write_text("# Private\n\nA file nobody asked to ingest.\n")
    monkeypatch.chdir(work)
    # a str is an iterable of one-letter paths, and "." is the whole working folder
    with pytest.raises(TypeError, match=r"paths must be a list, not one str: pass \['notes.md'\]"):
        await kb.ingest_paths("notes.md")  # type: ignore[arg-type]
    assert await kb.count_documents() == 0
    report = await kb.ingest_paths(["notes.md"])
    assert [o.status for o in report.outcomes] == ["added"]


def test_one_name_given_as_a_string_is_refused_where_a_list_is_expected() -> None:
    config = RagConfig()
    with pytest.raises(TypeError, match=r"names must be a list, not one str: pass \['handbook'\]"):
        build_multi_document_filter("handbook")  # would match every title with an "a" in it
    with pytest.raises(TypeError, match=r"features must be a list, not one str: pass \['qa'\]"):
        build_toolkit(config, features="qa")
    with pytest.raises(TypeError, match="features must be a list"):
        build_tools_prompt("qa")
    with pytest.raises(TypeError, match="features must be a list"):
        prepare_context(ToolContext(), "qa")
    registry = ToolRegistry()
    registry.add_tool(lambda: "ok", name="rebuild")
    with pytest.raises(TypeError, match=r"tools must be a list, not one str: pass \['rebuild'\]"):
        registry.resolve(tools="rebuild")
    assert len(registry.resolve(tools=["rebuild"])) == 1


def test_a_bad_base_filter_is_refused_when_the_toolset_is_built() -> None:
    config = RagConfig()
    # before: accepted, then every search call failed ("exceeded max retries" / AttributeError)
    with pytest.raises(ValidationError, match="one expression"):
        build_toolkit(config, features=["search", "documents", "qa", "analysis"], base_filter="a = 1; drop")
    with pytest.raises(TypeError, match=r"a filter is a DocumentFilter.*not dict"):
        create_search_toolset(config, base_filter={"names": ["handbook"]})  # type: ignore[arg-type]
    build_toolkit(config, features=["search", "documents", "qa", "analysis"], base_filter="title LIKE 'K%'")


async def test_search_refuses_bad_arguments_with_their_names(kb: KnowledgeBase) -> None:
    await kb.ingest_bytes(b"# Backups\n\nNightly backups are kept for 35 days.\n", name="ops.md")
    for limit in (0, -1):
        with pytest.raises(ValueError, match=f"limit must be a whole number of at least 1, not {limit}"):
            await kb.search("backups", limit=limit)
    with pytest.raises(TypeError, match="query must be a string, not NoneType"):
        await kb.search(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a filter is a DocumentFilter.*not dict"):
        await kb.search("backups", filter={"names": ["ops"]})  # type: ignore[arg-type]
    assert [h.uri for h in await kb.search("backups", limit=1)] == ["ops.md"]


async def test_deleting_by_a_uri_two_documents_share_deletes_neither(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    for folder, secret in (("team-a", "PINEAPPLE"), ("team-b", "WATERMELON")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.md").write_text(f"# Notes of {folder}\n\nThe code is {secret}.\n")
        await kb.ingest_file(tmp_path / folder / "notes.md")
    documents = (await kb.list_documents()).documents
    assert [d.uri for d in documents] == ["notes.md", "notes.md"]
    with pytest.raises(AmbiguousDocumentError, match=r"'notes\.md' is the uri of 2 documents") as raised:
        await kb.delete_document("notes.md")
    assert all(d.document_id in str(raised.value) for d in documents)
    assert await kb.count_documents() == 2
    assert await kb.delete_document(documents[0].document_id)
    assert [d.title for d in (await kb.list_documents()).documents] == [documents[1].title]
    assert await kb.delete_document("notes.md")  # one left: the uri names it
    assert await kb.count_documents() == 0


def test_the_package_ships_its_type_hints() -> None:
    """Without ``py.typed`` mypy and pyright skip rag_tools ("missing library stubs or py.typed
    marker") and every name a user imports from it is ``Any``."""
    import tomllib

    import rag_tools

    assert (Path(rag_tools.__file__).parent / "py.typed").is_file()
    pyproject = tomllib.loads((Path(rag_tools.__file__).parent.parent / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["rag_tools"]
    # the decorator's result is typed, so ``@spec.subtool()`` and ``spec.doc_tree()`` check
    assert typing.get_type_hints(ToolRegistry.tool)["return"] != typing.Any


async def test_text_given_to_ingest_bytes_is_refused_naming_the_fix(kb: KnowledgeBase) -> None:
    with pytest.raises(TypeError, match=r"must be bytes, not str: encode text first"):
        await kb.ingest_bytes("# Notes\n\nplain text", name="notes.md")  # type: ignore[arg-type]
    outcome = await kb.ingest_bytes(b"# Notes\n\nplain text", name="notes.md")
    assert outcome.status == "added"


def test_bad_tool_options_are_refused_when_declared_not_when_the_model_calls() -> None:
    """Before: ``RetryPolicy(attempts=0)`` ended every call in ``AssertionError: unreachable``,
    ``timeout="5"`` and ``retry=3`` in a ``TypeError``/``AttributeError`` inside the run."""

    def ping() -> str:
        """Ping."""
        return "pong"

    with pytest.raises(ValueError, match=r"attempts counts the first call too: at least 1, not 0"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match=r"backoff is seconds, at least 0, not -1"):
        RetryPolicy(backoff=-1)
    registry = ToolRegistry()
    with pytest.raises(ValueError, match=r"timeout is seconds, more than 0, not '5'"):
        registry.add_tool(ping, timeout="5")
    with pytest.raises(TypeError, match=r"retry must be a RetryPolicy, not int"):
        registry.add_tool(ping, retry=3)
    with pytest.raises(ValueError, match=r"timeout is seconds, more than 0, not 0"):
        tool_options(timeout=0)
    assert not registry.tools  # nothing half-registered
    registry.add_tool(ping, timeout=5, retry=RetryPolicy(attempts=1))
