"""The RAG toolsets over the knowledge base (search, documents, QA, analysis); each factory returns
a pydantic-ai ``FunctionToolset``. The machinery that registers, hooks and guards tools is
``rag_tools.tools`` (the tool system)."""

from ._common import SearchResult
from .analysis import AnalysisResult, create_analysis_toolset
from .documents import DocumentContent, DocumentInfo, DocumentList, create_document_toolset
from .qa import QACitation, QAResult, create_qa_toolset, run_qa_core
from .search import SearchResults, create_search_toolset

__all__ = [
    "AnalysisResult",
    "DocumentContent",
    "DocumentInfo",
    "DocumentList",
    "QACitation",
    "QAResult",
    "SearchResult",
    "SearchResults",
    "create_analysis_toolset",
    "create_document_toolset",
    "create_qa_toolset",
    "create_search_toolset",
    "run_qa_core",
]
