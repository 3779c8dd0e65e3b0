"""Both packages are built in layers that talk down only, one folder on one floor, with no loops.

Read from the source (every ``import``, including ones under ``TYPE_CHECKING``), so a new module
that breaks the architecture fails here, naming the import. Three rules, for ``ragstream`` (the
``server/`` folder) and for ``rag_tools`` alike:

- a module imports only its own layer or lower ones;
- a folder stands on one floor: all of its modules are in the same layer, so reading the tree by
  folder tells the layering;
- the folders (and the package's top-level modules) import each other without a loop.

And two boundaries: the run engine knows nothing of AG-UI, pydantic-ai or HTTP, and ``rag_tools``
never imports the server. The server's folder is never imported by its name (``server``): one module
under two names would be two modules in one process. And the wheel lists every folder as a package.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest

from tests.snippets import snippet

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A module may import its own layer or lower ones, never a higher one.
SERVER_LAYERS: list[tuple[str, ...]] = [
    ("ragstream.observe",),  # traces, metrics, JSON logs: every layer above reports through it
    ("ragstream.runs",),  # the protocol-neutral run engine
    # the rules every layer above shares (access and its domain errors, input checks, settings,
    # limits per principal), and the tool locks shared through the run-lock backend
    (
        "ragstream.access",
        "ragstream.validation",
        "ragstream.config",
        "ragstream.tool_locks",
        "ragstream.quotas",
    ),
    ("ragstream.agui",),  # the AG-UI binding: run factory, execution, adapter, encoding, history
    ("ragstream.jobs",),  # background ingestion: job records, queues, workers
    ("ragstream.services",),  # the composition root: backends, engine, binding
    ("ragstream.threads",),  # thread operations
    # the web layer: the error table, auth, middleware, the routes (the AG-UI route and SSE included)
    (
        "ragstream.errors",
        "ragstream.auth",
        "ragstream.oidc",
        "ragstream.middleware",
        "ragstream.routes",
        "ragstream.mcp",
    ),
    ("ragstream.app",),
    ("ragstream.commands", "ragstream.cli"),
]

RAG_TOOLS_LAYERS: list[tuple[str, ...]] = [
    (  # foundations: state, embeddings, settings, the sandbox, the offline model's parts
        "rag_tools.arguments",
        "rag_tools.allocator",
        "rag_tools.state",
        "rag_tools.sandbox",
        "rag_tools.minilm_onnx",
        "rag_tools.embeddings",
        "rag_tools.extras",
        "rag_tools.config",
        "rag_tools.extractive",
        "rag_tools.follow_ups",
        "rag_tools.offline_model",
        "rag_tools.prompt",
        "rag_tools.models",
        "rag_tools.context",
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
    ("rag_tools.evaluation",),  # labelled questions against a knowledge base and the chat agent
]

PACKAGES = {"ragstream": SERVER_LAYERS, "rag_tools": RAG_TOOLS_LAYERS}
#: Each import package's folder (pyproject's package-dir: ``server/`` installs as ``ragstream``).
FOLDERS = {"ragstream": "server", "rag_tools": "rag_tools"}
_IMPORT_NAMES = {folder: package for package, folder in FOLDERS.items()}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = _IMPORT_NAMES.get(parts[0], parts[0])
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
    return sorted((ROOT / FOLDERS[package]).rglob("*.py"))


def _unit(module: str, package: str) -> str | None:
    """The folder (``server/agui/``) or top-level module (``ragstream.app``) a module belongs to."""
    parts = module.split(".")
    if parts[0] != package or len(parts) == 1:
        return None  # the package's own __init__ re-exports; it is not a unit of the layout
    folder = FOLDERS[package]
    return f"{folder}/{parts[1]}/" if (ROOT / folder / parts[1]).is_dir() else f"{package}.{parts[1]}"


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


def _straddling(package: str, layers: list[tuple[str, ...]]) -> dict[str, list[int]]:
    """The folders whose modules the declaration puts on more than one floor."""
    floors: dict[str, set[int]] = {}
    for path in _modules(package):
        module = _module(path)
        unit, own = _unit(module, package), _layer(module, layers)
        if unit is not None and unit.endswith("/") and own is not None:
            floors.setdefault(unit, set()).add(own)
    return {unit: sorted(found) for unit, found in floors.items() if len(found) > 1}


def _unit_imports(package: str) -> dict[str, set[str]]:
    """Which folders and top-level modules each one imports."""
    edges: dict[str, set[str]] = {}
    for path in _modules(package):
        source = _unit(_module(path), package)
        for name in _imports(path):
            target = _unit(name, package)
            if source is not None and target is not None and target != source:
                edges.setdefault(source, set()).add(target)
    return edges


def _loops(edges: dict[str, set[str]]) -> list[list[str]]:
    loops: list[list[str]] = []
    done: set[str] = set()

    def visit(unit: str, trail: list[str]) -> None:
        for target in sorted(edges.get(unit, ())):
            if target in trail:
                loops.append([*trail[trail.index(target) :], target])
            elif target not in done:
                visit(target, [*trail, target])
        done.add(unit)

    for unit in sorted(edges):
        if unit not in done:
            visit(unit, [unit])
    return loops


@pytest.mark.parametrize("package", PACKAGES)
def test_every_folder_stands_on_one_floor(package: str) -> None:
    assert _straddling(package, PACKAGES[package]) == {}


def test_the_floor_check_finds_a_folder_split_across_floors() -> None:
    """What issue 29.3 found: the AG-UI route and its SSE declared on the web floor while their
    folder (then ``server/agui/``) stood below it. Declared that way again, the check says so."""
    routes = next(i for i, floor in enumerate(SERVER_LAYERS) if "ragstream.routes" in floor)
    split = [("ragstream.routes.sse",), *SERVER_LAYERS]
    assert _straddling("ragstream", split) == {"server/routes/": [0, routes + 1]}


@pytest.mark.parametrize("package", PACKAGES)
def test_folders_import_each_other_without_a_loop(package: str) -> None:
    assert _loops(_unit_imports(package)) == []


def test_the_loop_check_finds_a_loop_of_folders() -> None:
    """The loop of issue 29.3 (``agui/`` to ``routes/``, ``routes/`` to ``errors``, ``errors`` to
    ``threads``, ``threads`` back to ``agui/``), given as edges, is found."""
    edges = {
        "server/agui/": {"server/routes/", "server/runs/"},
        "server/routes/": {"ragstream.errors"},
        "ragstream.errors": {"ragstream.threads"},
        "ragstream.threads": {"server/agui/"},
    }
    assert _loops(edges) == [
        ["ragstream.errors", "ragstream.threads", "server/agui/", "server/routes/", "ragstream.errors"]
    ]
    assert _loops({**edges, "ragstream.threads": {"server/runs/"}}) == []


def _docs_tree(package: str) -> list[str]:
    """The folders and modules the architecture tree (docs/architecture.md) names for ``package``'s
    folder, in its order (only the left column: the descriptions name files inside folders too)."""
    block = snippet("architecture tree")
    named: list[str] = []
    inside = False
    for line in block.splitlines():
        if line and not line.startswith(" "):
            inside = line.startswith(f"{FOLDERS[package]}/")
            continue
        if inside:
            named += re.findall(r"[a-z_]+\.py|[a-z_]+/", line[:25])
    return named


@pytest.mark.parametrize("package", PACKAGES)
def test_the_docs_tree_names_every_folder_and_module_highest_floor_first(package: str) -> None:
    layers = PACKAGES[package]
    units = {_unit(_module(p), package) for p in _modules(package)} - {None}
    named = _docs_tree(package)
    as_units = [
        f"{FOLDERS[package]}/{name}" if name.endswith("/") else f"{package}.{name.removesuffix('.py')}"
        for name in named
    ]
    assert sorted(as_units) == sorted(units)  # each once, none missing, none that is not there

    def floor(unit: str) -> int | None:
        return _layer(_module(ROOT / unit.rstrip("/")) if unit.endswith("/") else unit, layers)

    floors = [floor(unit) for unit in as_units]
    assert floors == sorted(floors, key=lambda f: -1 if f is None else f, reverse=True), list(
        zip(named, floors, strict=True)
    )


def test_the_run_engine_imports_neither_ag_ui_nor_pydantic_ai_nor_http() -> None:
    forbidden = ("ag_ui", "pydantic_ai", "ragstream.errors", "starlette", "sse_starlette", "ragstream.agui")
    found = [
        f"{_module(path)} imports {name}"
        for path in sorted((ROOT / "server" / "runs").rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[0] in forbidden or any(name.startswith(f + ".") or name == f for f in forbidden)
    ]
    assert found == []


def _names(name: str, *packages: str) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in packages)


def test_rag_tools_never_imports_the_server() -> None:
    found = [
        f"{_module(path)} imports {name}"
        for path in _modules("rag_tools")
        for name in _imports(path)
        if _names(name, "ragstream", "server")
    ]
    assert found == []


#: Where Python of this repository lives (``tests/fuzzing/server.py`` is ``tests.fuzzing.server``).
_PYTHON_FOLDERS = ("server", "rag_tools", "tests", "bench", "examples", "scripts")
#: The old name in the docs' code and commands: an import, a ``module:attribute`` string, ``-m``.
_OLD_NAME = re.compile(r"^\s*(from server(\.| import)|import server\b)|\bserver\.\w+:\w+|-m server\b", re.M)


def test_nothing_imports_the_server_by_its_folder_name() -> None:
    """``server`` is a folder, not an import name: ``import server`` from the repository root would
    load every module a second time beside ``ragstream``'s (two ``Principal`` classes, two
    settings), and a user's own ``server.py`` takes that name (tests/test_shadowing.py)."""
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in _PYTHON_FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not {"node_modules", "static"} & set(path.parts)
        for name in _imports(path)
        if _names(name, "server")
    ]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        found += [
            f"{page.relative_to(ROOT)}: {m.group(0).strip()}" for m in _OLD_NAME.finditer(page.read_text())
        ]
    assert found == []


def test_the_wheel_lists_every_folder_as_a_package() -> None:
    """pyproject lists the packages (``find`` names a package by its folder, and cannot install
    ``server/`` as ``ragstream``): a folder left out would be missing from the wheel only."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"ragstream": "server"}
    folders = [
        path
        for folder in FOLDERS.values()
        for path in [ROOT / folder, *(ROOT / folder).rglob("*")]
        if path.is_dir() and not {"__pycache__", "static"} & set(path.relative_to(ROOT).parts)
    ]
    assert sorted(setuptools["packages"]) == sorted(_module(path / "__init__.py") for path in folders)
