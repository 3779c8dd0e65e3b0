"""The server's layers talk down only, and the run engine knows nothing of AG-UI, pydantic-ai or HTTP.

Read from the source (every ``import``, including ones under ``TYPE_CHECKING``), so a new module
that breaks the architecture fails here, naming the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A module may import its own layer or lower ones, never a higher one.
LAYERS: list[tuple[str, ...]] = [
    ("server.runs",),  # the protocol-neutral run engine
    # the rules every layer above shares, and the tool locks shared through the run-lock backend
    ("server.access", "server.validation", "server.config", "server.tool_locks"),
    ("server.agui",),  # the AG-UI binding: run factory, execution, adapter, encoding, history
    ("server.jobs",),  # background ingestion: job records, queues, workers
    ("server.services",),  # the composition root: backends, engine, binding
    ("server.threads",),  # thread operations
    (  # the web layer: errors, auth, middleware, routes (the AG-UI route and its SSE included)
        "server.errors",
        "server.auth",
        "server.middleware",
        "server.routes",
        "server.agui.route",
        "server.agui.sse",
    ),
    ("server.app",),
    ("server.commands", "server.cli"),
]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append(name)
            found += [f"{name}.{alias.name}" for alias in node.names]
    return found


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer): the most specific prefix wins
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _server_modules() -> list[Path]:
    return sorted((ROOT / "server").rglob("*.py"))


def test_every_server_module_has_a_layer() -> None:
    assert [_module(p) for p in _server_modules() if _layer(_module(p)) is None] in ([], ["server"])


def test_no_server_module_imports_a_higher_layer() -> None:
    upward = []
    for path in _server_modules():
        module = _module(path)
        own = _layer(module)
        if own is None:
            continue
        for name in _imports(path):
            target = _layer(name)
            if target is not None and target > own:
                upward.append(f"{module} imports {name}")
    assert upward == []


def test_the_run_engine_imports_neither_ag_ui_nor_pydantic_ai_nor_http() -> None:
    forbidden = ("ag_ui", "pydantic_ai", "server.errors", "starlette", "sse_starlette", "server.agui")
    found = [
        f"{_module(path)} imports {name}"
        for path in sorted((ROOT / "server" / "runs").rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[0] in forbidden or any(name.startswith(f + ".") or name == f for f in forbidden)
    ]
    assert found == []


def test_rag_tools_never_imports_server() -> None:
    found = [
        f"{_module(path)} imports {name}"
        for path in sorted((ROOT / "rag_tools").rglob("*.py"))
        for name in _imports(path)
        if name == "server" or name.startswith("server.")
    ]
    assert found == []
