"""The knowledge base: LanceDB storage, ingestion, search and structured filters."""

import os

# LanceDB's Rust logger reads this once, at import: without it every hybrid query prints a warning.
os.environ.setdefault("LANCEDB_LOG", "error")


from .errors import (
    AmbiguousDocumentError,
    DocumentChanged,
    EmbedderMismatchError,
    KnowledgeBaseDamaged,
    KnowledgeBaseError,
    KnowledgeBaseFormatError,
    KnowledgeBaseUnavailable,
)
from .filters import (
    AllOf,
    DocumentFilter,
    Filter,
    FilterLike,
    SqlFilter,
    as_filter,
    combine_filters,
    sql_literal,
)
from .knowledge_base import KnowledgeBase
from .models import (
    Document,
    DocumentFile,
    DocumentPage,
    IngestOutcome,
    IngestProgress,
    IngestReport,
    SearchHit,
)
from .readers import SUPPORTED_SUFFIXES, BinaryContentError, UnsupportedFormatError, detect_format
from .search import QUERY_CHARS, searchable_query
from .sources import document_id_for, upload_origin
from .sync import SyncPlan, SyncSource, SyncSourceError, open_sync_source

__all__ = [
    "QUERY_CHARS",
    "SUPPORTED_SUFFIXES",
    "AllOf",
    "AmbiguousDocumentError",
    "BinaryContentError",
    "Document",
    "DocumentChanged",
    "DocumentFile",
    "DocumentFilter",
    "DocumentPage",
    "EmbedderMismatchError",
    "Filter",
    "FilterLike",
    "IngestOutcome",
    "IngestProgress",
    "IngestReport",
    "KnowledgeBase",
    "KnowledgeBaseDamaged",
    "KnowledgeBaseError",
    "KnowledgeBaseFormatError",
    "KnowledgeBaseUnavailable",
    "SearchHit",
    "SqlFilter",
    "SyncPlan",
    "SyncSource",
    "SyncSourceError",
    "UnsupportedFormatError",
    "as_filter",
    "combine_filters",
    "detect_format",
    "document_id_for",
    "open_sync_source",
    "searchable_query",
    "sql_literal",
    "upload_origin",
]
