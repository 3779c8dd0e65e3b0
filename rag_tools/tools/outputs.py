"""Large tool results: cut for the model, kept whole, readable by reference.

A result whose text is longer than the limit reaches the model as its first ``limit`` characters
and a note naming a reference; ``read_tool_output(ref, offset)`` pages through the rest. The full
text is kept in the thread's ``ToolOutputs`` namespace (server-only, the newest
``MAX_STORED_OUTPUTS`` kept), and each truncation is recorded there (tool, original size, kept
size, reference) in the emitted state, so the client can show that a result was cut.

The reader is offered to the model only while the thread keeps a full output (checked at every
step, so it appears in the same run as the truncation). Most threads never truncate anything, and
a tool the model cannot use costs its schema in every model request and a toolset in every run.

A cut result no longer shows which knowledge-base documents it came from, so what the whole named
(``rag_tools.readable.DocumentNames``) goes with it: in the result's metadata under
``TRUNCATED_KEY`` (where a thread's check for readers finds it, as it finds the names in whole
results); ``read_tool_output`` reads the same names from the kept full text and gives it back only
to a reader of all of those documents.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import RunContext, ToolReturn
from pydantic_ai.toolsets import DynamicToolset, FunctionToolset
from pydantic_core import to_json

from ..kb import KnowledgeBase
from ..readable import DocumentNames, drop_unreadable
from ..state import StateModel, ToolContext
from .timing import with_metadata

__all__ = [
    "MAX_STORED_OUTPUTS",
    "OUTPUTS_NAMESPACE",
    "READER_TOOL",
    "TRUNCATED_KEY",
    "OutputReaderToolset",
    "StoredOutput",
    "ToolOutputs",
    "output_toolset",
    "text_of",
    "truncate",
]

OUTPUTS_NAMESPACE = "tools.outputs"
MAX_STORED_OUTPUTS = 20
READER_TOOL = "read_tool_output"
TRUNCATED_KEY = "truncated_output"
"""The metadata key of a cut result naming documents: its output's ``ref`` and what the whole named."""


class StoredOutput(BaseModel):
    """The record of one truncated result (its full text stays on the server)."""

    model_config = ConfigDict(frozen=True)

    ref: str
    tool: str
    tool_call_id: str
    size: int = Field(description="Characters in the full output.")
    kept: int = Field(description="Characters the model was shown.")
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class ToolOutputs(StateModel):
    """Truncated tool results of a thread: records emitted, full texts kept server-side."""

    server_only_fields: ClassVar[frozenset[str]] = frozenset({"full_outputs", "next_ref"})

    truncated_outputs: dict[str, StoredOutput] = Field(default_factory=dict)
    full_outputs: dict[str, str] = Field(default_factory=dict)
    next_ref: int = 1

    def keep(self, tool: str, tool_call_id: str, text: str, kept: int) -> StoredOutput:
        ref = f"out-{self.next_ref}"
        self.next_ref += 1
        record = StoredOutput(ref=ref, tool=tool, tool_call_id=tool_call_id, size=len(text), kept=kept)
        self.truncated_outputs[ref] = record
        self.full_outputs[ref] = text
        while len(self.full_outputs) > MAX_STORED_OUTPUTS:
            oldest = next(iter(self.full_outputs))
            del self.full_outputs[oldest]
            self.truncated_outputs.pop(oldest, None)
        return record


def text_of(value: Any) -> str:
    """The text a result makes for the model (JSON for anything but a string)."""
    return value if isinstance(value, str) else to_json(value).decode()


def cut_output(
    context: ToolContext, tool: str, tool_call_id: str, output: Any, limit: int
) -> tuple[str, dict[str, Any]] | None:
    """``output`` cut for the model and what its result's metadata keeps (``{}``, or what the whole
    named under ``TRUNCATED_KEY``); ``None`` when it is short enough to go whole."""
    text = text_of(output)
    if len(text) <= limit:
        return None
    names = DocumentNames.of(output)
    outputs = context.get_or_create(OUTPUTS_NAMESPACE, ToolOutputs)
    record = outputs.keep(tool, tool_call_id, text, limit)
    context.mark_changed(OUTPUTS_NAMESPACE)
    cut = (
        f"{text[:limit]}\n[output truncated: {record.size} characters, the first {limit} shown. The full output "
        f"is kept as {record.ref!r}: call read_tool_output(ref={record.ref!r}, offset={limit}) to read on.]"
    )
    stamp = {TRUNCATED_KEY: {"ref": record.ref, "documents": names.references()}} if names else {}
    return cut, stamp


def truncate(context: ToolContext, tool: str, tool_call_id: str, result: Any, limit: int) -> Any:
    """``result`` as the model should see it: whole when short, else cut with a reference note."""
    content = result.return_value if isinstance(result, ToolReturn) else result
    done = cut_output(context, tool, tool_call_id, content, limit)
    if done is None:
        return result
    cut, stamp = done
    if isinstance(result, ToolReturn):
        cut = ToolReturn(return_value=cut, content=result.content, metadata=result.metadata)
    return with_metadata(cut, stamp) if stamp else cut


class OutputReaderToolset(DynamicToolset[Any]):
    """``read_tool_output``, present in a run step only when the thread keeps a truncated output.

    ``tool_names`` declares what it can provide, for the duplicate-name preflight, which runs
    without a run context.
    """

    tool_names: ClassVar[tuple[str, ...]] = (READER_TOOL,)

    def __init__(self, limit: int) -> None:
        reader = _reader_toolset(limit)

        def offer(ctx: RunContext[Any]) -> FunctionToolset[Any] | None:
            outputs = _outputs_of(ctx)
            return reader if outputs is not None and outputs.full_outputs else None

        super().__init__(offer, per_run_step=True, id="tool-outputs")


def output_toolset(limit: int) -> OutputReaderToolset:
    """The ``read_tool_output`` tool, for reading the rest of a truncated result."""
    return OutputReaderToolset(limit)


def _outputs_of(ctx: RunContext[Any]) -> ToolOutputs | None:
    context = getattr(ctx.deps, "tool_context", None)
    return context.get(OUTPUTS_NAMESPACE, ToolOutputs) if isinstance(context, ToolContext) else None


async def _withheld_from_reader(ctx: RunContext[Any], full: str) -> bool:
    """Whether the kept output ``full`` names a document the run's reader may not read."""
    kb, context = getattr(ctx.deps, "client", None), getattr(ctx.deps, "tool_context", None)
    if not isinstance(kb, KnowledgeBase) or kb.reader.reads_all:
        return False
    names = DocumentNames.in_text(full)
    if not names:
        return False
    scratch = context.view() if isinstance(context, ToolContext) else ToolContext()
    return bool(await drop_unreadable(scratch, kb, names))


def _reader_toolset(limit: int) -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset(id="tool-outputs-reader")

    @toolset.tool
    async def read_tool_output(ctx: RunContext[Any], ref: str, offset: int = 0) -> str:
        """Read part of a tool output that was too long to show whole.

        Args:
            ref: The reference given in the truncation note, like "out-3".
            offset: Where to start reading, in characters.
        """
        outputs = _outputs_of(ctx)
        full = outputs.full_outputs.get(ref) if outputs is not None else None
        if outputs is None or full is None:
            return f"No stored output {ref!r} (only the newest {MAX_STORED_OUTPUTS} outputs are kept)."
        if await _withheld_from_reader(ctx, full):
            return f"Output {ref!r} is withheld: it came from a document you may no longer read."
        start = max(0, offset)
        part = full[start : start + limit]
        end = start + len(part)
        more = f" {len(full) - end} characters remain; continue at offset {end}." if end < len(full) else ""
        return f"[{ref}: characters {start}-{end} of {len(full)}.{more}]\n{part}"

    return toolset
