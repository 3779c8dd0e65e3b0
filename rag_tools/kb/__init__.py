"""The knowledge base: LanceDB storage, ingestion, search and structured filters."""

import os

# LanceDB's Rust logger reads this once, at import: without it every hybrid query prints a warning.
os.environ.setdefault("LANCEDB_LOG", "error")


from .filters import AllOf, DocumentFilter, Filter, combine_filters, sql_literal
from .knowledge_base import (
    EmbedderMismatchError,
    KnowledgeBase,
    KnowledgeBaseError,
    KnowledgeBaseUnavailable,
    document_id_for,
)
from .models import Document, DocumentPage, IngestOutcome, IngestReport, SearchHit
from .readers import SUPPORTED_SUFFIXES, UnsupportedFormatError

__all__ = [
    "SUPPORTED_SUFFIXES",
    "AllOf",
    "Document",
    "DocumentFilter",
    "DocumentPage",
    "EmbedderMismatchError",
    "Filter",
    "IngestOutcome",
    "IngestReport",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "KnowledgeBaseUnavailable",
    "SearchHit",
    "UnsupportedFormatError",
    "combine_filters",
    "document_id_for",
    "sql_literal",
]
