"""The README's code blocks, for tests that run them as they stand."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def readme_snippet(marker: str) -> str:
    """The README's one ```python block whose first line is the comment ``# <marker> ...``."""
    found = [b for b in _BLOCK.findall(README.read_text()) if b.startswith(f"# {marker}")]
    assert len(found) == 1, f"expected one README python block starting with '# {marker}', got {len(found)}"
    return found[0]


_JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.DOTALL | re.MULTILINE)


def readme_mcp_servers() -> list[dict[str, Any]]:
    """The ``ragstream`` entries of the README's MCP client configurations (``mcpServers`` blocks)."""
    blocks = [json.loads(b) for b in _JSON_BLOCK.findall(README.read_text()) if '"mcpServers"' in b]
    return [block["mcpServers"]["ragstream"] for block in blocks]
