"""``build_tools_prompt``: when to use which tool, written for the model."""

from __future__ import annotations

from collections.abc import Iterable

from .arguments import as_list

__all__ = ["build_tools_prompt"]

_SECTIONS = {
    "search": (
        "- `search(query, limit?, filter?)`: find passages in the documents. Use it before answering any "
        "question about their content. Each result has a `citation` number: cite the passages you use as "
        "[n] right after the sentence they support. To look only in certain documents, pass their names "
        'as `filter`, e.g. `search(query="backup retention", filter="handbook")`.'
    ),
    "documents": (
        "- `list_documents(page?)`: what documents exist (50 per page). `get_document(query)`: read one "
        "document, found by uri or part of its title. `summarize_document(query)`: a summary of one "
        "document. Use these when the user asks about documents as a whole."
    ),
    "qa": (
        "- `ask(question, document_name?)`: a complete answer with citations for a self-contained question; "
        "earlier answers in this conversation are reused when the same question comes back. Pass "
        '`document_name` (part of a title or uri, e.g. "deployment guide") to answer from one document.'
    ),
    "analysis": (
        "- `analyze(task, document_name?)`: for counting, comparing or computing over document text; a "
        "program is written and run in a sandbox. Not for questions a search answers."
    ),
}


def build_tools_prompt(features: Iterable[str]) -> str:
    """Instructions describing the tools of ``features`` (unknown features are an error)."""
    features = list(dict.fromkeys(as_list(features, "features")))
    unknown = [f for f in features if f not in _SECTIONS]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; known: {', '.join(_SECTIONS)}")
    lines = [
        "You answer questions about a collection of documents using these tools:",
        *(_SECTIONS[f] for f in features),
        "Answer only from what the tools return. If they return nothing relevant, say so plainly; "
        "never invent sources. A user may limit the documents in the interface: the tools already "
        "respect that choice.",
    ]
    return "\n".join(lines)
