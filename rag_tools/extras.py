"""Optional parts of ragstream and the one error a missing one raises.

The default install (``pip install ragstream``) serves, ingests text, Markdown, HTML and PDF, and
answers offline. Everything else is an extra (``pip install 'ragstream[postgres]'``), and code that
needs one imports it through ``require_extra`` or ``extra_imports``, so a missing extra is one line
naming the extra to install, never an ``ImportError`` traceback::

    with extra_imports("redis"):
        import redis.asyncio as redis

    docx = require_extra("office", "docx")
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtra", "extra_imports", "require_extra"]

#: The extras of the ``ragstream`` distribution (pyproject.toml) and what each one brings.
EXTRAS: dict[str, str] = {
    "postgres": "PostgreSQL (RAGSTREAM_DATABASE_URL: threads and the ingestion queue)",
    "redis": "Redis (RAGSTREAM_REDIS_URL: several workers, shared runs, the ingestion queue)",
    "s3": "syncing an S3 prefix (ragstream sync s3://..., RAGSTREAM_SYNC)",
    "otel": "OpenTelemetry traces (OTEL_* variables)",
    "office": "reading office files (.docx, .pptx, .xlsx, .epub)",
    "openai": "OpenAI and OpenAI-compatible models (openai:, openai-chat:, ...)",
    "anthropic": "Anthropic models (anthropic:...)",
    "google": "Google models (google:... for the Gemini API, google-cloud:... for Vertex AI)",
    "wordllama": "the wordllama embedder (local:wordllama)",
    "mcp": "the knowledge base as an MCP server (ragstream mcp, RAGSTREAM_MCP)",
    "ocr": "reading scans by OCR (PDF pages without text, PNG/JPEG/TIFF)",
    "docs": "building the docs site (mkdocs.yml)",
    "eval": "ragstream eval (recall, MRR and nDCG by ir-measures)",
}


class MissingExtra(ImportError):
    """An optional part is used without its extra installed; the message is one line naming it."""

    def __init__(self, extra: str, module: str | None = None) -> None:
        if extra not in EXTRAS:
            raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
        self.extra = extra
        missing = f" (module {module!r} is not installed)" if module else ""
        super().__init__(
            f"{EXTRAS[extra]} needs the {extra!r} extra: pip install 'ragstream[{extra}]'{missing}",
            name=module,
        )


def require_extra(extra: str, module: str) -> ModuleType:
    """Import ``module``, which the ``extra`` extra installs; ``MissingExtra`` when it is not there."""
    with extra_imports(extra):
        return importlib.import_module(module)


@contextmanager
def extra_imports(extra: str) -> Iterator[None]:
    """Imports in the block come from the ``extra`` extra: one that is missing raises ``MissingExtra``."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtra(extra, exc.name) from None
