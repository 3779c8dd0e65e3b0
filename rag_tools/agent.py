"""The chat agent: the RAG toolkit, the configured model or the offline extractive one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset

from .config import RagConfig
from .context import ContextBudget
from .deps import ChatDeps
from .embeddings import resolve_embedding_model
from .models import ModelGuard
from .offline_model import create_extractive_model
from .state import ToolContext
from .toolkit import Toolkit, build_toolkit

__all__ = [
    "AGUI_STATE_KEY",
    "CHAT_INSTRUCTIONS",
    "ChatAgent",
    "build_chat_toolkit",
    "create_chat_agent",
    "prepare_chat_context",
    "resolve_chat_model",
]

AGUI_STATE_KEY = "ragstream"
"""The key to put the whole AG-UI state under when the frontend's state is shared with other agents.

ragstream emits a flat state by default; ``RagConfig.state_key`` (``RAGSTREAM_STATE_KEY``,
``--state-key``) moves it under a key, and this is the conventional one (the seed's chat app uses
``"haiku.rag.chat"`` the same way). Client proposals are read back from the same key.
"""

CHAT_INSTRUCTIONS = (
    "You are the assistant of a document collection. Be concise and precise, and cite the passages "
    "you rely on as [n]."
)

ChatAgent = Agent[ChatDeps, str | DeferredToolRequests]


def build_chat_toolkit(config: RagConfig) -> Toolkit:
    """The chat agent's toolkit: search, documents and QA; analysis too when a model can write code."""
    features = ["search", "documents", "qa"]
    if config.model:
        features.append("analysis")
    return build_toolkit(config, features)


def prepare_chat_context(
    context: ToolContext, config: RagConfig | None = None, *, state_key: str | None = None
) -> ToolContext:
    """Register the chat agent's state namespaces on ``context`` (idempotent), as its toolkit does.

    ``state_key`` (e.g. ``AGUI_STATE_KEY``; default ``config.state_key``) puts the emitted state
    under one key. Existing namespaces and their data are kept.
    """
    return build_chat_toolkit(config or RagConfig()).prepare(context, state_key)


def resolve_chat_model(config: RagConfig) -> Model | str:
    """``config.model``, or the offline extractive model over the configured embedder."""
    return config.model or create_extractive_model(resolve_embedding_model(config.embedder))


def create_chat_agent(
    config: RagConfig,
    toolkit: Toolkit | None = None,
    *,
    model: Model | str | None = None,
    toolsets: Sequence[AbstractToolset[Any]] = (),
    capabilities: Sequence[AbstractCapability[Any]] = (),
) -> ChatAgent:
    """The chat agent; its output is text, or the tool calls that wait for a human or the browser.

    ``toolsets`` and ``capabilities`` are added to the toolkit's (user tools, the tool system). A
    provider's model is sent ``config``'s request settings, retried and checked by a ``ModelGuard``
    (``rag_tools.models``); the history it is sent is bounded by a ``ContextBudget``
    (``rag_tools.context``).
    """
    toolkit = toolkit or build_chat_toolkit(config)
    return Agent(
        model if model is not None else resolve_chat_model(config),
        deps_type=ChatDeps,
        output_type=[str, DeferredToolRequests],
        toolsets=[*toolkit.toolsets, *toolsets],
        capabilities=[
            *toolkit.capabilities,
            ModelGuard.from_config(config),
            ContextBudget.from_config(config),
            *capabilities,
        ],
        instructions=[CHAT_INSTRUCTIONS, toolkit.prompt],
        name="ragstream",
    )
