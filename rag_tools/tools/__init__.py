"""The tool system: a registry of tools and toolsets, a loader for tool directories, hooks, the
approval policy, retries and truncation of large results, on top of pydantic-ai's toolsets and
``Hooks`` capability (see ``system.py``)."""

from .approval import APPROVAL_NAMESPACE, ApprovalPolicy, approval_hook, matching_pattern
from .hooks import HookContext, PostHook, PreHook, ToolHooks, ToolOutcome
from .loader import DEFAULT_TOOLS_DIR, LoadReport, ToolDiagnostic, exported_tools, load_tool_dirs
from .options import ApprovalInfo, RetryPolicy, ToolOptions, tool_options
from .outputs import OUTPUTS_NAMESPACE, ToolOutputs
from .registry import DuplicateToolError, ToolRegistry, ToolsetSpec, ToolSpec, toolset_options
from .system import ToolSystem

__all__ = [
    "APPROVAL_NAMESPACE",
    "DEFAULT_TOOLS_DIR",
    "OUTPUTS_NAMESPACE",
    "ApprovalInfo",
    "ApprovalPolicy",
    "DuplicateToolError",
    "HookContext",
    "LoadReport",
    "PostHook",
    "PreHook",
    "RetryPolicy",
    "ToolDiagnostic",
    "ToolHooks",
    "ToolOptions",
    "ToolOutcome",
    "ToolOutputs",
    "ToolRegistry",
    "ToolSpec",
    "ToolSystem",
    "ToolsetSpec",
    "approval_hook",
    "exported_tools",
    "load_tool_dirs",
    "matching_pattern",
    "tool_options",
    "toolset_options",
]
