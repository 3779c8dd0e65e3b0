"""Loading user tools from Python files, with explicit exports and a diagnostic per problem file.

A tool module says what it offers; nothing is registered by accident:

- ``TOOLS``: a list of tools (pydantic-ai ``Tool`` objects or plain functions), or a dict
  name -> tool; otherwise ``__all__`` names the module's tools;
- ``TOOLSETS``: a dict name -> toolset, or -> factory building one per run.

``load_tool_dirs`` imports every ``*.py`` file (not starting with ``_``) of the given directories,
registers what each exports, and returns one diagnostic per file that could not be used (syntax
error, import error, bad export) instead of stopping at the first.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic_ai import Tool
from pydantic_ai.toolsets import AbstractToolset

from .registry import ToolRegistry

__all__ = ["LoadReport", "ToolDiagnostic", "exported_tools", "load_tool_dirs", "load_tool_module"]

logger = logging.getLogger("ragstream.tools")

DEFAULT_TOOLS_DIR = Path(".ragstream/tools")


@dataclass(frozen=True)
class ToolDiagnostic:
    """Why one file contributed nothing (or only part of what it exports)."""

    path: str
    kind: Literal["syntax", "import", "export"]
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.kind} error: {self.message}"


@dataclass
class LoadReport:
    """What a load registered, and the problems it found."""

    tools: list[str] = field(default_factory=list)
    toolsets: list[str] = field(default_factory=list)
    diagnostics: list[ToolDiagnostic] = field(default_factory=list)


class ExportError(ValueError):
    """A module's exports are not what the loader accepts."""


def exported_tools(module: ModuleType) -> tuple[list[tuple[str | None, Any]], dict[str, Any]]:
    """``([(name or None, tool)], {toolset name: toolset or factory})`` a module exports.

    Raises ``ExportError`` naming every offending entry: non-callables, toolsets among the tools,
    duplicate names, missing ``__all__`` names.
    """
    problems: list[str] = []
    tools: list[tuple[str | None, Any]] = []
    declared = getattr(module, "TOOLS", None)
    if declared is None and hasattr(module, "__all__"):
        names = list(module.__all__)
        missing = [n for n in names if not hasattr(module, n)]
        problems.extend(f"__all__ names {n!r}, which the module does not define" for n in missing)
        declared = {n: getattr(module, n) for n in names if n not in missing and n not in ("TOOLSETS",)}
    if isinstance(declared, dict):
        tools = [(str(k), v) for k, v in declared.items()]
    elif isinstance(declared, list | tuple):
        tools = [(None, v) for v in declared]
    elif declared is not None:
        problems.append(f"TOOLS must be a list or a dict, not {type(declared).__name__}")
    seen: set[str] = set()
    for name, value in tools:
        label = name or getattr(value, "__name__", None) or repr(value)
        if isinstance(value, AbstractToolset):
            problems.append(f"{label!r} is a toolset: export it in TOOLSETS")
        elif not isinstance(value, Tool) and not callable(value):
            problems.append(f"{label!r} is not callable ({type(value).__name__})")
        tool_name = name or (value.name if isinstance(value, Tool) else getattr(value, "__name__", None))
        if tool_name in seen:
            problems.append(f"tool name {tool_name!r} is exported twice")
        seen.add(str(tool_name))
    toolsets = getattr(module, "TOOLSETS", {}) or {}
    if not isinstance(toolsets, dict):
        problems.append(f"TOOLSETS must be a dict name -> toolset or factory, not {type(toolsets).__name__}")
        toolsets = {}
    for name, value in toolsets.items():
        if not isinstance(value, AbstractToolset) and not callable(value):
            problems.append(f"toolset {name!r} is neither a toolset nor a factory ({type(value).__name__})")
    if declared is None and not toolsets:
        problems.append("exports nothing: define TOOLS (a list or dict), TOOLSETS, or __all__")
    if problems:
        raise ExportError("; ".join(problems))
    return tools, dict(toolsets)


def load_tool_module(path: Path) -> ModuleType:
    """Import one tools file under a private module name."""
    name = f"ragstream_user_tools.{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_tool_dirs(registry: ToolRegistry, dirs: Iterable[str | Path]) -> LoadReport:
    """Register the tools of every file in ``dirs``; problems become diagnostics, not exceptions."""
    report = LoadReport()
    for directory in dirs:
        root = Path(directory)
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.glob("*.py") if not p.name.startswith("_")):
            try:
                module = load_tool_module(path)
            except SyntaxError as exc:
                report.diagnostics.append(
                    ToolDiagnostic(str(path), "syntax", f"line {exc.lineno}: {exc.msg}")
                )
                continue
            except (Exception, SystemExit) as exc:  # a file calling sys.exit() is its own problem
                report.diagnostics.append(ToolDiagnostic(str(path), "import", f"{type(exc).__name__}: {exc}"))
                continue
            try:
                tools, toolsets = exported_tools(module)
            except ExportError as exc:
                report.diagnostics.append(ToolDiagnostic(str(path), "export", str(exc)))
                continue
            # Each export on its own: one that cannot be registered (a duplicate, a name no model
            # takes, a signature pydantic-ai cannot describe) is reported, the rest still load.
            for name, tool in tools:
                try:
                    report.tools.append(registry.add_tool(tool, name=name, origin=path.name).name)
                except Exception as exc:
                    report.diagnostics.append(
                        ToolDiagnostic(str(path), "export", _export_problem(name, tool, exc))
                    )
            for name, toolset in toolsets.items():
                try:
                    registry.add_toolset(name, toolset, origin=path.name)
                except Exception as exc:
                    report.diagnostics.append(
                        ToolDiagnostic(str(path), "export", _export_problem(name, toolset, exc))
                    )
                else:
                    report.toolsets.append(name)
    for diagnostic in report.diagnostics:
        logger.warning("tools not loaded: %s", diagnostic)
    return report


def _export_problem(name: str | None, export: Any, exc: Exception) -> str:
    """What went wrong registering one export, naming the export unless the error already does."""
    detail = str(exc) if isinstance(exc, TypeError | ValueError) else f"{type(exc).__name__}: {exc}"
    label = name or getattr(export, "name", None) or getattr(export, "__name__", None) or repr(export)
    return detail if str(label) in detail else f"{label}: {detail}"
