"""Both packages are built in layers that talk down only, one folder on one floor, with no loops.

Read from the source (every ``import``, including ones under ``TYPE_CHECKING``), so a new module
that breaks the architecture fails here, naming the import. Three rules, for ``server`` and for
``rag_tools`` alike:

- a module imports only its own layer or lower ones;
- a folder stands on one floor: all of its modules are in the same layer, so reading the tree by
  folder tells the layering;
- the folders (and the package's top-level modules) import each other without a loop.

And two boundaries: the run engine knows nothing of AG-UI, pydantic-ai or HTTP, and ``rag_tools``
never imports ``server``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A module may import its own layer or lower ones, never a higher one.
SERVER_LAYERS: list[tuple[str, ...]] = [
    ("server.observe",),  # traces, metrics, JSON logs: every layer above reports through it
    ("server.runs",),  # the protocol-neutral run engine
    # the rules every layer above shares (access and its domain errors, input checks, settings,
    # limits per principal), and the tool locks shared through the run-lock backend
    ("server.access", "server.validation", "server.config", "server.tool_locks", "server.quotas"),
    ("server.agui",),  # the AG-UI binding: run factory, execution, adapter, encoding, history
    ("server.jobs",),  # background ingestion: job records, queues, workers
    ("server.services",),  # the composition root: backends, engine, binding
    ("server.threads",),  # thread operations
    # the web layer: the error table, auth, middleware, the routes (the AG-UI route and SSE included)
    ("server.errors", "server.auth", "server.oidc", "server.middleware", "server.routes"),
    ("server.app",),
    ("server.commands", "server.cli"),
]

RAG_TOOLS_LAYERS: list[tuple[str, ...]] = [
    (  # foundations: state, embeddings, settings, the sandbox, the offline model's parts
        "rag_tools.arguments",
        "rag_tools.state",
        "rag_tools.sandbox",
        "rag_tools.minilm_onnx",
        "rag_tools.embeddings",
        "rag_tools.config",
        "rag_tools.extractive",
        "rag_tools.follow_ups",
        "rag_tools.offline_model",
        "rag_tools.prompt",
    ),
    ("rag_tools.kb",),  # the knowledge base (LanceDB)
    # what a tool call runs with
    (
        "rag_tools.deps",
        "rag_tools.filters",
        "rag_tools.progress",
        "rag_tools.questions",
        "rag_tools.readable",
    ),
    ("rag_tools.tools", "rag_tools.kb_toolsets"),  # the tool system; the RAG toolsets
    ("rag_tools.toolkit", "rag_tools.agent"),  # assembly
]

PACKAGES = {"server": SERVER_LAYERS, "rag_tools": RAG_TOOLS_LAYERS}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
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


def _layer(module: str, layers: list[tuple[str, ...]]) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer): the most specific prefix wins
    for index, prefixes in enumerate(layers):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _unit(module: str, package: str) -> str | None:
    """The folder (``server/agui/``) or top-level module (``server.app``) a module belongs to."""
    parts = module.split(".")
    if parts[0] != package or len(parts) == 1:
        return None  # the package's own __init__ re-exports; it is not a unit of the layout
    return f"{package}/{parts[1]}/" if (ROOT / package / parts[1]).is_dir() else f"{package}.{parts[1]}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_has_a_layer(package: str) -> None:
    layers = PACKAGES[package]
    assert [_module(p) for p in _modules(package) if _layer(_module(p), layers) is None] in ([], [package])


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_a_higher_layer(package: str) -> None:
    layers = PACKAGES[package]
    upward = []
    for path in _modules(package):
        module = _module(path)
        own = _layer(module, layers)
        if own is None:
            continue
        for name in _imports(path):
            target = _layer(name, layers)
            if target is not None and target > own:
                upward.append(f"{module} imports {name}")
    assert upward == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_folder_stands_on_one_floor(package: str) -> None:
    layers = PACKAGES[package]
    floors: dict[str, set[int]] = {}
    for path in _modules(package):
        module = _module(path)
        unit, own = _unit(module, package), _layer(module, layers)
        if unit is not None and unit.endswith("/") and own is not None:
            floors.setdefault(unit, set()).add(own)
    straddling = {unit: sorted(found) for unit, found in floors.items() if len(found) > 1}
    assert straddling == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_folders_import_each_other_without_a_loop(package: str) -> None:
    edges: dict[str, set[str]] = {}
    for path in _modules(package):
        source = _unit(_module(path), package)
        for name in _imports(path):
            target = _unit(name, package)
            if source is not None and target is not None and target != source:
                edges.setdefault(source, set()).add(target)
    loops: list[list[str]] = []

    def visit(unit: str, trail: list[str]) -> None:
        for target in sorted(edges.get(unit, ())):
            if target in trail:
                loops.append([*trail[trail.index(target) :], target])
            elif target not in done:
                visit(target, [*trail, target])
        done.add(unit)

    done: set[str] = set()
    for unit in sorted(edges):
        if unit not in done:
            visit(unit, [unit])
    assert loops == []


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
        for path in _modules("rag_tools")
        for name in _imports(path)
        if name == "server" or name.startswith("server.")
    ]
    assert found == []
