"""The tool system: a registry of tools and toolsets, a loader for tool directories, hooks, the
approval policy, retries and truncation of large results, on top of pydantic-ai's toolsets and
``Hooks`` capability (see ``system.py``)."""

from .approval import APPROVAL_NAMESPACE, EDITED_ARGS_KEY, ApprovalPolicy, approval_hook, matching_pattern
from .calls import (
    QUESTION_END_EVENT,
    QUESTION_EVENT,
    QuestionDeclined,
    QuestionTimeout,
    RaceTimeout,
    ask,
    race,
)
from .hooks import HookContext, PostHook, PreHook, ToolHooks, ToolOutcome
from .loader import DEFAULT_TOOLS_DIR, LoadReport, ToolDiagnostic, exported_tools, load_tool_dirs
from .locks import LocalToolLocks, ToolLocks
from .options import ApprovalInfo, RetryPolicy, ToolOptions, tool_options
from .outputs import OUTPUTS_NAMESPACE, ToolOutputs
from .registry import (
    DuplicateToolError,
    ToolRegistry,
    ToolsetSpec,
    ToolSpec,
    static_tool_names,
    toolset_options,
)
from .results import ATTACHMENTS_NAMESPACE, RESULT_EVENT, ToolAttachment, ToolAttachments, ToolResult
from .streaming import STREAM_EVENT, streaming
from .system import ToolSystem

#: Namespaces that belong to a thread as a whole, not to one branch of its conversation: the
#: approval policy is a setting of the thread, and kept tool outputs and attachments are read by
#: reference from whichever branch's messages name them.
THREAD_NAMESPACES = frozenset({APPROVAL_NAMESPACE, ATTACHMENTS_NAMESPACE, OUTPUTS_NAMESPACE})

__all__ = [
    "APPROVAL_NAMESPACE",
    "ATTACHMENTS_NAMESPACE",
    "DEFAULT_TOOLS_DIR",
    "EDITED_ARGS_KEY",
    "OUTPUTS_NAMESPACE",
    "QUESTION_END_EVENT",
    "QUESTION_EVENT",
    "RESULT_EVENT",
    "STREAM_EVENT",
    "THREAD_NAMESPACES",
    "ApprovalInfo",
    "ApprovalPolicy",
    "DuplicateToolError",
    "HookContext",
    "LoadReport",
    "LocalToolLocks",
    "PostHook",
    "PreHook",
    "QuestionDeclined",
    "QuestionTimeout",
    "RaceTimeout",
    "RetryPolicy",
    "ToolAttachment",
    "ToolAttachments",
    "ToolDiagnostic",
    "ToolHooks",
    "ToolLocks",
    "ToolOptions",
    "ToolOutcome",
    "ToolOutputs",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolSystem",
    "ToolsetSpec",
    "approval_hook",
    "ask",
    "exported_tools",
    "load_tool_dirs",
    "matching_pattern",
    "race",
    "static_tool_names",
    "streaming",
    "tool_options",
    "toolset_options",
]
