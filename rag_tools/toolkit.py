"""``build_toolkit``: the RAG toolsets, their prompt and their state, bundled for an agent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from .arguments import as_list
from .config import RagConfig
from .deps import citation_hooks
from .kb import FilterLike
from .kb_toolsets import (
    create_analysis_toolset,
    create_document_toolset,
    create_qa_toolset,
    create_search_toolset,
)
from .kb_toolsets.qa import OnQAComplete
from .prompt import build_tools_prompt
from .state import ToolContext, prepare_context

__all__ = ["FEATURES", "Toolkit", "build_toolkit"]

FEATURES = ("search", "documents", "qa", "analysis")


@dataclass
class Toolkit:
    """Toolsets to give an agent, the instructions that explain them, and the state they need."""

    toolsets: list[AbstractToolset[Any]]
    prompt: str
    features: list[str]
    state_key: str | None = field(default=None)
    namespaces: dict[str, type[BaseModel]] = field(default_factory=dict)
    """Extra state namespaces that tools added to the toolkit keep (name to model type)."""
    capabilities: list[AbstractCapability[Any]] = field(default_factory=list)
    """Capabilities to give the agent with the toolsets (citation cards of the final answer)."""
    emit_limits: dict[str, int] = field(default_factory=dict)
    """How many of their latest items growing state fields carry to the client (``ToolContext``)."""

    def create_context(self, state_key: str | None = None) -> ToolContext:
        """A fresh ``ToolContext`` with the namespaces these features use."""
        return self.prepare(ToolContext(), state_key)

    def prepare(self, context: ToolContext, state_key: str | None = None) -> ToolContext:
        """Register the namespaces these features and extra tools use on ``context`` (idempotent)."""
        prepare_context(context, self.features, state_key or self.state_key)
        for namespace, model_type in self.namespaces.items():
            context.get_or_create(namespace, model_type)
        if self.emit_limits and context.emit_limits != self.emit_limits:
            context.set_emit_limits(self.emit_limits)
        return context


def build_toolkit(
    config: RagConfig,
    features: Sequence[str] = ("search", "documents"),
    base_filter: FilterLike | None = None,
    expand_context: bool = True,
    on_qa_complete: OnQAComplete | None = None,
    *,
    model: Model | str | None = None,
    state_key: str | None = None,
    namespaces: Mapping[str, type[BaseModel]] | None = None,
) -> Toolkit:
    """Toolsets for ``features`` (``search``, ``documents``, ``qa``, ``analysis``), sharing one filter.

    ``model`` (default ``config.model``) writes summaries, QA answers and analysis programs; without
    one those are extractive, and analysis borrows the run's model.
    """
    chosen = list(dict.fromkeys(as_list(features, "features")))
    unknown = [f for f in chosen if f not in FEATURES]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; known: {', '.join(FEATURES)}")
    toolsets: list[AbstractToolset[Any]] = []
    for feature in chosen:
        if feature == "search":
            toolsets.append(
                create_search_toolset(config, expand_context=expand_context, base_filter=base_filter)
            )
        elif feature == "documents":
            toolsets.append(create_document_toolset(config, base_filter, model=model))
        elif feature == "qa":
            toolsets.append(
                create_qa_toolset(config, base_filter, on_ask_complete=on_qa_complete, model=model)
            )
        else:
            toolsets.append(create_analysis_toolset(config, base_filter, model=model))
    return Toolkit(
        toolsets=toolsets,
        prompt=build_tools_prompt(chosen),
        features=chosen,
        state_key=state_key if state_key is not None else config.state_key,
        namespaces=dict(namespaces or {}),
        capabilities=[citation_hooks(config.citations_limit)],
        emit_limits=config.emit_limits,
    )
