"""``ToolRegistry``: tools and toolsets selected by name, resolved per agent with a duplicate preflight.

Tools and toolsets live in separate namespaces (a tool and a toolset may share a name). A tool
entry is a pydantic-ai ``Tool`` or a plain callable; a toolset entry is an ``AbstractToolset`` or a
factory (sync or async, with or without the run context) that builds one per run through
pydantic-ai's ``DynamicToolset``. ``resolve`` turns a selection into the toolsets to give an agent:
entries that declare themselves unavailable are left out (and logged), and a tool name that two
sources would both provide is an error naming both origins, before any run starts. Names that
only a factory knows are checked at run time by pydantic-ai, with the same origins as labels.

The registry's tools come inside an ``OptionsToolset`` (``running.py``): their options (lock,
retries, required approval, call times) hold wherever the resolved toolsets run, with or without
the tool system's capability.

A factory runs once per run by default; ``per_run_step=True`` rebuilds its toolset before every
model request (tools that depend on what the run did so far). Instructions, of tools and of
toolsets, may be text or a function of the run context, resolved before each model request by
pydantic-ai itself.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic_ai import RunContext, Tool
from pydantic_ai.toolsets import AbstractToolset, DynamicToolset, FunctionToolset, WrapperToolset

from ..arguments import as_list
from .fixed import bind_fixed, fixed_values
from .locks import LocalToolLocks, ToolLocks
from .names import model_name
from .options import Instructions, ToolOptions, Unavailable, options_of
from .running import OptionsToolset
from .streaming import is_streaming, streaming

__all__ = [
    "DuplicateToolError",
    "ToolRegistry",
    "ToolSpec",
    "ToolsetSpec",
    "static_tool_names",
    "toolset_options",
]

logger = logging.getLogger("ragstream.tools")

ToolsetFactory = Callable[..., Any]

_TOOLSET_ATTRIBUTE = "__ragstream_toolset_options__"
_MODEL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def toolset_options(
    *,
    per_run_step: bool = False,
    instructions: Instructions | None = None,
    unavailable: Unavailable | None = None,
) -> Callable[[ToolsetFactory], ToolsetFactory]:
    """Declare how a toolset factory is used (read by ``add_toolset`` and the loader's ``TOOLSETS``).

    ``per_run_step`` rebuilds the toolset before every model request instead of once per run.
    """

    def attach(factory: ToolsetFactory) -> ToolsetFactory:
        setattr(factory, _TOOLSET_ATTRIBUTE, (per_run_step, instructions, unavailable))
        return factory

    return attach


class DuplicateToolError(ValueError):
    """Two sources would give the agent tools with the same name."""


@dataclass
class ToolSpec:
    """A registered tool: the pydantic-ai ``Tool``, where it came from and how to run it.

    ``@registry.tool`` returns it, and it stays callable like the function it wraps (fixed
    arguments included), so ``@parent.subtool()`` can hang tools under it (pygents' shape).
    """

    tool: Tool[Any]
    origin: str
    options: ToolOptions = field(default_factory=ToolOptions)
    scoped_name: str = ""
    """``parent.child`` for a subtool (the registry finds it by this name too); else the name."""
    short_name: str = ""
    """The name it was declared with (``child``), which ``doc_tree()`` shows."""
    fixed: Mapping[str, Any] = field(default_factory=dict)
    subtools: list[ToolSpec] = field(default_factory=list, repr=False, compare=False)
    source: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    _registry: ToolRegistry | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.scoped_name = self.scoped_name or self.tool.name
        self.short_name = self.short_name or self.tool.name

    @property
    def name(self) -> str:
        """The name the model calls it by (``parent_child`` for a subtool)."""
        return self.tool.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, with its fixed arguments (given ones win)."""
        function = self.source or self.tool.function
        return function(*args, **{**fixed_values(self.fixed), **kwargs})

    @overload
    def subtool(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        lock: bool = False,
        tags: Iterable[str] = (),
        **fixed: Any,
    ) -> ToolSpec: ...

    @overload
    def subtool(
        self,
        func: None = None,
        *,
        name: str | None = None,
        lock: bool = False,
        tags: Iterable[str] = (),
        **fixed: Any,
    ) -> Callable[[Callable[..., Any]], ToolSpec]: ...

    def subtool(
        self,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        lock: bool = False,
        tags: Iterable[str] = (),
        **fixed: Any,
    ) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
        """Register ``func`` as a subtool of this tool: ``@parent.subtool()``, ``@parent.subtool(lock=True)``.

        The child joins the parent's prefixed group: the model calls it ``parent_child`` (a dot is
        not a valid model tool name), the registry finds it as ``parent.child`` too, and selecting
        the parent selects it. ``lock`` and ``tags`` are ``ToolOptions`` (others come from
        ``@tool_options`` on ``func``); every other keyword is a fixed argument (see ``fixed.py``).
        Returns the child's ``ToolSpec``, so subtools nest.
        """
        if self._registry is None:
            raise TypeError(f"tool {self.scoped_name!r} is not registered; register it before its subtools")
        registry = self._registry

        def register(f: Callable[..., Any]) -> ToolSpec:
            short = name or f.__name__
            options: dict[str, Any] = {"tags": tags}
            if lock is not False:  # else the function's own ``@tool_options(lock=...)`` stands
                options["lock"] = lock
            scoped = f"{self.scoped_name}.{short}"
            child = registry._add(f, model_name(scoped), self.origin, fixed, (scoped, short), options)
            self.subtools.append(child)
            return child

        return register(func) if func is not None else register

    def doc_tree(self) -> dict[str, Any]:
        """``{"name", "description", "subtools": [...]}``, recursively (pygents' shape)."""
        return {
            "name": self.short_name,
            "description": self.tool.description,
            "subtools": [child.doc_tree() for child in self.subtools],
        }


class _ToolsView(Mapping[str, ToolSpec]):
    """The registered tools by the names the model calls them; subtools are found by their scoped
    names (``parent.child``) too."""

    def __init__(self, tools: dict[str, ToolSpec]) -> None:
        self._tools = tools
        self._scoped = {spec.scoped_name: spec for spec in tools.values() if spec.scoped_name != spec.name}

    def __getitem__(self, name: str) -> ToolSpec:
        found = self._tools.get(name) or self._scoped.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._tools or name in self._scoped

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


@dataclass
class ToolsetSpec:
    """A registered toolset, or the factory that builds one per run."""

    name: str
    source: AbstractToolset[Any] | ToolsetFactory
    origin: str
    instructions: Instructions | None = None
    unavailable: Unavailable | None = None
    per_run_step: bool = False


class _Labelled(WrapperToolset[Any]):
    """A toolset shown under its origin in pydantic-ai's conflict errors, with optional instructions.

    The instructions (text or functions of the run context) are resolved by an empty pydantic-ai
    ``FunctionToolset`` holding them, so they behave exactly like pydantic-ai's own.
    """

    def __init__(
        self,
        wrapped: AbstractToolset[Any],
        label: str,
        instructions: Instructions | list[Instructions] | None = None,
    ) -> None:
        super().__init__(wrapped)
        self._label = label
        self._instructions = instructions
        self._instruction_source: FunctionToolset[Any] | None = (
            FunctionToolset(instructions=instructions) if instructions else None
        )

    @property
    def label(self) -> str:
        return self._label

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, Any]:
        # Claim the tools (as PrefixedToolset does) so conflict errors name this origin.
        return {
            name: dataclasses.replace(tool, toolset=self)
            for name, tool in (await super().get_tools(ctx)).items()
        }

    async def get_instructions(self, ctx: RunContext[Any]) -> Any:
        inherited = await super().get_instructions(ctx)
        own = await self._instruction_source.get_instructions(ctx) if self._instruction_source else None
        if not own:
            return inherited
        return [*own, *(inherited if isinstance(inherited, list) else [inherited] if inherited else [])]

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return _Labelled(self.wrapped.visit_and_replace(visitor), self._label, self._instructions)

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        wrapped = await self.wrapped.for_run(ctx)
        return self if wrapped is self.wrapped else _Labelled(wrapped, self._label, self._instructions)

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        wrapped = await self.wrapped.for_run_step(ctx)
        return self if wrapped is self.wrapped else _Labelled(wrapped, self._label, self._instructions)


def _checked_factory(name: str, factory: ToolsetFactory) -> Callable[[RunContext[Any]], Any]:
    takes_ctx = len(inspect.signature(factory).parameters) > 0

    async def build(ctx: RunContext[Any]) -> AbstractToolset[Any]:
        made = factory(ctx) if takes_ctx else factory()
        if inspect.isawaitable(made):
            made = await made
        if not isinstance(made, AbstractToolset):
            raise TypeError(
                f"toolset factory {name!r} returned {type(made).__name__}, not a pydantic-ai toolset"
            )
        return made

    return build


def static_tool_names(toolset: AbstractToolset[Any]) -> list[str] | None:
    """Tool names a toolset provides without a run context, or ``None`` when only a run knows."""
    if isinstance(toolset, FunctionToolset):
        return list(toolset.tools)
    if isinstance(toolset, WrapperToolset) and type(toolset) in (_Labelled, OptionsToolset):
        return static_tool_names(toolset.wrapped)
    declared = getattr(toolset, "tool_names", None)  # a dynamic toolset that says what it may offer
    return list(declared) if declared is not None else None


def _unavailable_reason(check: Unavailable | None) -> str | None:
    if check is None:
        return None
    try:
        return check()
    except Exception as exc:  # a failing availability check means: not available
        return f"availability check failed: {exc}"


class ToolRegistry:
    """Named tools and toolsets to compose agents from."""

    def __init__(self, *, locks: ToolLocks | None = None) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._toolsets: dict[str, ToolsetSpec] = {}
        self.locks: ToolLocks = locks or LocalToolLocks()
        """Held by calls of ``lock=True`` tools (read at call time: replacing it applies at once)."""

    # -- registration ------------------------------------------------------------------------

    def add_tool(
        self,
        tool: Tool[Any] | Callable[..., Any],
        *,
        name: str | None = None,
        origin: str = "registry",
        fixed: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> ToolSpec:
        """Register a tool (a ``Tool`` or a plain function, which may be an async generator: see
        ``streaming``); ``options`` are ``ToolOptions`` fields and win over ``@tool_options``;
        ``fixed`` arguments of a function are passed on every call and hidden from the model.
        """
        return self._add(tool, name, origin, fixed or {}, None, options)

    def _add(
        self,
        tool: Tool[Any] | Callable[..., Any],
        name: str | None,
        origin: str,
        fixed: Mapping[str, Any],
        scope: tuple[str, str] | None,
        options: dict[str, Any],
    ) -> ToolSpec:
        """``add_tool``, for a subtool with its ``scope``: (scoped name, declared name)."""
        if not callable(tool) and not isinstance(tool, Tool):
            raise TypeError(f"tool {name or tool!r} from {origin} is not callable")
        if fixed and isinstance(tool, Tool):
            raise TypeError(f"tool {tool.name!r} from {origin}: fixed arguments need a plain function")
        function = tool.function if isinstance(tool, Tool) else tool
        resolved = (options_of(function) or ToolOptions()).updated(**options)
        metadata: dict[str, Any] = {"tags": sorted(resolved.tags), "origin": origin}
        if resolved.approval is not None:
            metadata["approval"] = {**resolved.approval.metadata(), "required": resolved.approval.required}
        if isinstance(tool, Tool):
            made = dataclasses.replace(
                tool,
                name=name or tool.name,
                metadata={**(tool.metadata or {}), **metadata},
                timeout=resolved.timeout if resolved.timeout is not None else tool.timeout,
                sequential=resolved.sequential or tool.sequential,
            )
            if is_streaming(tool.function):  # the same tool, running the generator to its end
                run = streaming(tool.function)
                schema = Tool(
                    run,
                    name=made.name,
                    docstring_format=made.docstring_format,
                    require_parameter_descriptions=made.require_parameter_descriptions,
                ).function_schema
                made = dataclasses.replace(made, function=run, function_schema=schema)
        else:
            made = Tool(
                bind_fixed(streaming(tool) if is_streaming(tool) else tool, fixed),
                name=name,
                metadata=metadata,
                timeout=resolved.timeout,
                sequential=resolved.sequential,
            )
        if not _MODEL_NAME.fullmatch(made.name):
            what = f"subtool {scope[0]!r}" if scope is not None else "tool"
            raise ValueError(
                f"{what} from {origin} would reach the model as {made.name!r}: "
                "model tool names have at most 64 letters, digits, '_' or '-'"
            )
        if made.name in self._tools:
            existing = self._tools[made.name]
            raise DuplicateToolError(
                f"tool {made.name!r} from {origin} is already registered from {existing.origin}"
            )
        scoped, short = scope or (made.name, made.name)
        if scoped in self.tools:
            raise DuplicateToolError(f"tool {scoped!r} from {origin} is already registered")
        spec = ToolSpec(
            made,
            origin,
            resolved,
            scoped_name=scoped,
            short_name=short,
            fixed=dict(fixed),
            source=None if isinstance(tool, Tool) else tool,
            _registry=self,
        )
        self._tools[made.name] = spec
        return spec

    @overload
    def tool(self, func: Callable[..., Any], **options: Any) -> ToolSpec: ...

    @overload
    def tool(self, func: None = None, **options: Any) -> Callable[[Callable[..., Any]], ToolSpec]: ...

    def tool(
        self, func: Callable[..., Any] | None = None, **options: Any
    ) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
        """Decorator form of ``add_tool``: ``@registry.tool`` or ``@registry.tool(tags=...)``.

        Gives the ``ToolSpec``, which calls like the function and takes ``@spec.subtool()``.
        """

        def register(f: Callable[..., Any]) -> ToolSpec:
            return self.add_tool(f, **options)

        return register(func) if func is not None else register

    def doc_tree(self) -> list[dict[str, Any]]:
        """``ToolSpec.doc_tree()`` of every tool that is not a subtool, in registration order."""
        children = {id(child) for spec in self._tools.values() for child in spec.subtools}
        return [spec.doc_tree() for spec in self._tools.values() if id(spec) not in children]

    def add_toolset(
        self,
        name: str,
        toolset: AbstractToolset[Any] | ToolsetFactory,
        *,
        origin: str = "registry",
        instructions: Instructions | None = None,
        unavailable: Unavailable | None = None,
        per_run_step: bool = False,
    ) -> ToolsetSpec:
        """Register a toolset, or a factory called fresh for every run (every step with ``per_run_step``)."""
        if name in self._toolsets:
            raise DuplicateToolError(
                f"toolset {name!r} from {origin} is already registered from {self._toolsets[name].origin}"
            )
        if not isinstance(toolset, AbstractToolset) and not callable(toolset):
            raise TypeError(f"toolset {name!r} from {origin} is neither a toolset nor a factory")
        declared = getattr(toolset, _TOOLSET_ATTRIBUTE, None)
        if declared is not None:
            per_run_step = per_run_step or declared[0]
            instructions = instructions or declared[1]
            unavailable = unavailable or declared[2]
        if per_run_step and isinstance(toolset, AbstractToolset):
            raise TypeError(
                f"toolset {name!r} from {origin}: per_run_step applies to factories, not toolsets"
            )
        spec = ToolsetSpec(name, toolset, origin, instructions, unavailable, per_run_step)
        self._toolsets[name] = spec
        return spec

    @property
    def tools(self) -> Mapping[str, ToolSpec]:
        """The tools by the names the model calls them; a subtool is found by ``parent.child`` too."""
        return _ToolsView(dict(self._tools))

    @property
    def toolsets(self) -> Mapping[str, ToolsetSpec]:
        return dict(self._toolsets)

    # -- resolution --------------------------------------------------------------------------

    def resolve(
        self,
        tools: Iterable[str] | None = None,
        toolsets: Iterable[str] | None = None,
        *,
        extra: Mapping[str, AbstractToolset[Any]] | None = None,
    ) -> list[AbstractToolset[Any]]:
        """The toolsets for an agent: the selected tools (all when ``None``), the selected toolsets,
        and ``extra`` ones (by origin label), after the duplicate preflight.
        """
        chosen_tools = self._with_subtools(self._select(self.tools, tools, "tool"))
        chosen_sets = self._select(self._toolsets, toolsets, "toolset")
        result: list[AbstractToolset[Any]] = []
        origins: dict[str, str] = {}

        def claim(names: Iterable[str], origin: str) -> None:
            for tool_name in names:
                if tool_name in origins:
                    raise DuplicateToolError(
                        f"tool name {tool_name!r} is provided by both {origins[tool_name]} and {origin}"
                    )
                origins[tool_name] = origin

        for label, toolset in (extra or {}).items():
            claim(static_tool_names(toolset) or [], label)
            result.append(_Labelled(toolset, label))
        available_tools = []
        for spec in chosen_tools:
            reason = _unavailable_reason(spec.options.unavailable)
            if reason:
                logger.info("tool %r (%s) is left out of the run: %s", spec.name, spec.origin, reason)
                continue
            claim([spec.name], f"tool {spec.name!r} from {spec.origin}")
            available_tools.append(spec)
        if available_tools:
            instructions = [s.options.instructions for s in available_tools if s.options.instructions]
            applied = OptionsToolset(
                FunctionToolset([s.tool for s in available_tools], id="registry-tools"),
                options={s.name: s.options for s in available_tools},
                locks=lambda: self.locks,
            )
            result.append(_Labelled(applied, "registered tools", instructions or None))
        for toolset_spec in chosen_sets:
            reason = _unavailable_reason(toolset_spec.unavailable)
            if reason:
                logger.info(
                    "toolset %r (%s) is left out of the run: %s",
                    toolset_spec.name,
                    toolset_spec.origin,
                    reason,
                )
                continue
            label = f"toolset {toolset_spec.name!r} from {toolset_spec.origin}"
            source = toolset_spec.source
            if isinstance(source, AbstractToolset):
                claim(static_tool_names(source) or [], label)
                built: AbstractToolset[Any] = source
            else:
                built = DynamicToolset(
                    _checked_factory(toolset_spec.name, source), per_run_step=toolset_spec.per_run_step
                )
            result.append(_Labelled(built, label, toolset_spec.instructions))
        return result

    @staticmethod
    def _with_subtools(chosen: list[ToolSpec]) -> list[ToolSpec]:
        """The chosen tools, each followed by its subtools (as pygents' agents given a root tool)."""
        seen: dict[str, ToolSpec] = {}

        def add(spec: ToolSpec) -> None:
            if spec.name not in seen:
                seen[spec.name] = spec
                for child in spec.subtools:
                    add(child)

        for spec in chosen:
            add(spec)
        return list(seen.values())

    @staticmethod
    def _select(entries: Mapping[str, Any], names: Iterable[str] | None, kind: str) -> list[Any]:
        if names is None:
            return list(entries.values())
        chosen = []
        for name in as_list(names, f"{kind}s"):
            if name not in entries:
                known = ", ".join(sorted(entries)) or "none"
                raise KeyError(f"no {kind} named {name!r} is registered (known: {known})")
            chosen.append(entries[name])
        return chosen
