"""Per-thread state: ``ToolContext``, the RAG namespaces, the delta engine, stores and the cache."""

from .cache import CacheEntry, ToolContextCache, Transaction
from .context import StateCollisionError, StateModel, ToolContext
from .delta import StateTracker, StateUpdate, encoded_size, make_patch
from .models import (
    FEATURE_NAMESPACES,
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    Citation,
    QAEntry,
    QASessionState,
    SearchHitSummary,
    SearchRecord,
    SearchState,
    SessionContext,
    SessionState,
    prepare_context,
)
from .store import (
    ListPosition,
    MemoryThreadStore,
    SQLiteThreadStore,
    StoreError,
    ThreadInfo,
    ThreadRecord,
    ThreadStore,
    VersionConflictError,
)

__all__ = [
    "FEATURE_NAMESPACES",
    "QA_NAMESPACE",
    "SEARCH_NAMESPACE",
    "SESSION_NAMESPACE",
    "CacheEntry",
    "Citation",
    "ListPosition",
    "MemoryThreadStore",
    "QAEntry",
    "QASessionState",
    "SQLiteThreadStore",
    "SearchHitSummary",
    "SearchRecord",
    "SearchState",
    "SessionContext",
    "SessionState",
    "StateCollisionError",
    "StateModel",
    "StateTracker",
    "StateUpdate",
    "StoreError",
    "ThreadInfo",
    "ThreadRecord",
    "ThreadStore",
    "ToolContext",
    "ToolContextCache",
    "Transaction",
    "VersionConflictError",
    "encoded_size",
    "make_patch",
    "prepare_context",
]
