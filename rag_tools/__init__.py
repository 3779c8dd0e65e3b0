"""rag_tools: composable pydantic-ai toolsets over a LanceDB knowledge base, with per-thread state.

The names here are the documented toolkit API; the subpackages hold the parts (``kb``, ``state``,
``toolsets``, ``sandbox``).
"""

from .agent import AGUI_STATE_KEY, build_chat_toolkit, create_chat_agent, prepare_chat_context
from .config import RagConfig
from .deps import AgentDeps, ChatDeps, RAGDeps, emit_state_update
from .embeddings import DEFAULT_EMBEDDER, resolve_embedding_model
from .filters import build_document_filter, build_multi_document_filter, combine_filters, get_session_filter
from .kb import DocumentFilter, KnowledgeBase
from .kb_toolsets import (
    AnalysisResult,
    QACitation,
    QAResult,
    create_analysis_toolset,
    create_document_toolset,
    create_qa_toolset,
    create_search_toolset,
    run_qa_core,
)
from .offline_model import create_extractive_model
from .progress import report_progress
from .prompt import build_tools_prompt
from .state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    QASessionState,
    SearchState,
    SessionState,
    ToolContext,
    ToolContextCache,
    prepare_context,
)
from .toolkit import Toolkit, build_toolkit

__all__ = [
    "AGUI_STATE_KEY",
    "DEFAULT_EMBEDDER",
    "QA_NAMESPACE",
    "SEARCH_NAMESPACE",
    "SESSION_NAMESPACE",
    "AgentDeps",
    "AnalysisResult",
    "ChatDeps",
    "DocumentFilter",
    "KnowledgeBase",
    "QACitation",
    "QAResult",
    "QASessionState",
    "RAGDeps",
    "RagConfig",
    "SearchState",
    "SessionState",
    "ToolContext",
    "ToolContextCache",
    "Toolkit",
    "build_chat_toolkit",
    "build_document_filter",
    "build_multi_document_filter",
    "build_toolkit",
    "build_tools_prompt",
    "combine_filters",
    "create_analysis_toolset",
    "create_chat_agent",
    "create_document_toolset",
    "create_extractive_model",
    "create_qa_toolset",
    "create_search_toolset",
    "emit_state_update",
    "get_session_filter",
    "prepare_chat_context",
    "prepare_context",
    "report_progress",
    "resolve_embedding_model",
    "run_qa_core",
]
