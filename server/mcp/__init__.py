"""The knowledge base as an MCP server (``ragstream mcp``, and ``/mcp`` in ``ragstream serve``).

``tools`` holds the tools (search, documents, read, ask; ingest and delete with writes allowed) and
who may call them; ``endpoint`` the server on the official ``mcp`` SDK over stdio and streamable
HTTP. Both need the optional ``mcp`` extra, so nothing here imports them: ``mcp_problem`` says,
before anything starts, when the extra is missing.
"""

from __future__ import annotations

__all__ = ["MISSING_EXTRA", "mcp_problem"]

#: The one line a command or the app says when the SDK is not installed.
MISSING_EXTRA = "the MCP server needs the mcp extra: pip install 'ragstream[mcp]'"


def mcp_problem() -> str | None:
    """``MISSING_EXTRA`` when the ``mcp`` SDK cannot be imported; else ``None``."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        return MISSING_EXTRA
    return None
