"""``ToolResult``: a tool's answer for the model plus what the person using the client should see.

A tool (or a streaming tool's last ``yield``) returns ``ToolResult(output, title=..., metadata=...,
attachments=[ToolAttachment(name, content, mime_type)], is_error=...)``. The tool system's
capability (``ToolSystem.capability()``) then:

- gives the post-hooks the ``ToolResult`` itself (``ToolOutcome.is_error`` is true for it);
- cuts ``output`` to the output limit like any result and records that in ``was_truncated`` and
  ``original_bytes`` (UTF-8 bytes of the full text);
- keeps each attachment in the thread (namespace ``tools.attachments``: the records are in the
  emitted state as ``tool_attachments``, the bytes stay on the server and are saved with the
  thread: the newest ``MAX_STORED_ATTACHMENTS`` kept, within ``MAX_STORED_ATTACHMENT_BYTES``
  (base64) together, one attachment at most ``attachment_limit`` bytes; a larger one is recorded
  as omitted), with what the result (output and metadata) named, so that a reader who may not
  read those documents gets neither record nor bytes. The server serves them at
  ``GET /threads/{id}/attachments/{ref}``;
- sends the client a CUSTOM event ``ragstream.tool_result`` (``toolCallId``, ``tool``, ``title``,
  ``metadata``, ``attachments`` records, ``isError``, ``wasTruncated``, ``originalBytes``) just
  before the call's TOOL_CALL_RESULT;
- gives the model ``output`` only, as a failed tool result (pydantic-ai ``ToolFailed``) when
  ``is_error``, else as a ``ToolReturn`` whose metadata (not shown to the model) holds the rest.
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from ag_ui.core import CustomEvent as AGUICustomEvent
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import RunContext, ToolFailed, ToolReturn
from pydantic_core import to_jsonable_python

from ..deps import AGUIEvent
from ..readable import DocumentNames, NamesDocuments
from ..state import StateModel, ToolContext
from .outputs import cut_output, text_of

__all__ = [
    "ATTACHMENTS_NAMESPACE",
    "DEFAULT_ATTACHMENT_LIMIT",
    "MAX_STORED_ATTACHMENTS",
    "MAX_STORED_ATTACHMENT_BYTES",
    "RESULT_EVENT",
    "AttachmentRecord",
    "ToolAttachment",
    "ToolAttachments",
    "ToolResult",
    "deliver",
]

logger = logging.getLogger("ragstream.tools")

ATTACHMENTS_NAMESPACE = "tools.attachments"
MAX_STORED_ATTACHMENTS = 20
MAX_STORED_ATTACHMENT_BYTES = 8_000_000
RESULT_EVENT = "ragstream.tool_result"
DEFAULT_ATTACHMENT_LIMIT = 1_000_000


@dataclass
class ToolAttachment:
    """A file a tool hands the person (not the model): a report, an export, an image."""

    name: str
    content: bytes | str
    mime_type: str = "application/octet-stream"

    @property
    def data(self) -> bytes:
        return self.content.encode() if isinstance(self.content, str) else self.content


@dataclass
class ToolResult:
    """What a tool returns when the client should see more than the model (see the module doc)."""

    output: Any
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    attachments: list[ToolAttachment] = field(default_factory=list)
    is_error: bool = False
    was_truncated: bool = False
    original_bytes: int | None = None


class AttachmentRecord(BaseModel):
    """An attachment as the client sees it; its bytes are fetched by ``ref``."""

    model_config = ConfigDict(frozen=True)

    ref: str
    name: str
    mime_type: str
    size: int
    tool: str
    tool_call_id: str
    omitted: str | None = Field(default=None, description="Why the bytes were not kept, if they were not.")
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class ToolAttachments(StateModel, NamesDocuments):
    """A thread's tool attachments: records emitted, bytes (base64) kept server-side.

    Each keeps what its tool's result named (``DocumentNames`` as JSON, server-side): an export of
    a document's passages is that document's, so a reader who may not read it (any more) gets
    neither the record nor the bytes. Such a record moves to ``withheld_attachments`` (server-side)
    with its bytes kept, and back when its documents are readable again
    (``rag_tools.readable.NamesDocuments``).
    """

    server_only_fields: ClassVar[frozenset[str]] = frozenset(
        {"attachment_bytes", "attachment_documents", "withheld_attachments"}
    )

    tool_attachments: dict[str, AttachmentRecord] = Field(default_factory=dict)
    attachment_bytes: dict[str, str] = Field(default_factory=dict)
    attachment_documents: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)
    withheld_attachments: dict[str, AttachmentRecord] = Field(default_factory=dict)

    def keep(
        self,
        attachment: ToolAttachment,
        tool: str,
        tool_call_id: str,
        limit: int,
        names: DocumentNames | None = None,
    ) -> AttachmentRecord:
        data = attachment.data
        ref = f"att-{uuid.uuid4().hex[:16]}"
        omitted = f"larger than the {limit} bytes an attachment may have" if len(data) > limit else None
        record = AttachmentRecord(
            ref=ref,
            name=attachment.name,
            mime_type=attachment.mime_type,
            size=len(data),
            tool=tool,
            tool_call_id=tool_call_id,
            omitted=omitted,
        )
        self.tool_attachments[ref] = record
        if names:
            self.attachment_documents[ref] = names.to_json()
        if omitted is None:
            self.attachment_bytes[ref] = base64.b64encode(data).decode()
        else:
            logger.warning("attachment %r of %s not kept: %s", attachment.name, tool, omitted)
        while len(self.tool_attachments) + len(self.withheld_attachments) > MAX_STORED_ATTACHMENTS or (
            len(self.attachment_bytes) > 1 and self.stored_bytes() > MAX_STORED_ATTACHMENT_BYTES
        ):
            oldest = min((*self.tool_attachments.values(), *self.withheld_attachments.values()), key=_at)
            self.tool_attachments.pop(oldest.ref, None)
            self.withheld_attachments.pop(oldest.ref, None)
            self.attachment_bytes.pop(oldest.ref, None)
            self.attachment_documents.pop(oldest.ref, None)
        return record

    def document_names(self) -> DocumentNames:
        """What the kept attachments' results named, all together."""
        return DocumentNames.from_json_many(self.attachment_documents.values())

    def show_readable(self, unreadable: DocumentNames) -> bool:
        """Show the attachments whose result named none of ``unreadable``, withhold the others."""
        if not unreadable and not self.withheld_attachments:
            return False

        records = sorted((*self.tool_attachments.values(), *self.withheld_attachments.values()), key=_at)
        shown = {
            a.ref
            for a in records
            if not (names := self.attachment_documents.get(a.ref))
            or not unreadable.meets(DocumentNames.from_json_many([names]))
        }
        if shown == self.tool_attachments.keys():
            return False
        self.tool_attachments = {a.ref: a for a in records if a.ref in shown}
        self.withheld_attachments = {a.ref: a for a in records if a.ref not in shown}
        return True

    def hides_any(self) -> bool:
        return bool(self.withheld_attachments)

    def stored_bytes(self) -> int:
        """Bytes the thread keeps for its attachments (as stored: base64)."""
        return sum(len(encoded) for encoded in self.attachment_bytes.values())

    def content(self, ref: str) -> tuple[AttachmentRecord, bytes] | None:
        """The record and bytes of ``ref``, or ``None`` when the thread does not keep them."""
        record = self.tool_attachments.get(ref)
        encoded = self.attachment_bytes.get(ref)
        if record is None or encoded is None:
            return None
        return record, base64.b64decode(encoded)


def _at(record: AttachmentRecord) -> datetime:
    return record.at


async def deliver(
    ctx: RunContext[Any],
    tool: str,
    tool_call_id: str,
    result: ToolResult,
    *,
    output_limit: int | None,
    attachment_limit: int,
) -> ToolReturn[Any]:
    """Keep the attachments, tell the client, and give the model the output (see the module doc)."""
    context = getattr(ctx.deps, "tool_context", None)
    context = context if isinstance(context, ToolContext) else None
    output = result.output
    named: dict[str, Any] = {}  # what the cut whole named, for the history's readers (not the client)
    if output_limit and context is not None:
        done = cut_output(context, tool, tool_call_id, output, output_limit)
        if done is not None:
            result.was_truncated = True
            result.original_bytes = len(text_of(output).encode())
            output, named = done
    metadata = to_jsonable_python(result.metadata, fallback=str)
    records: list[dict[str, Any]] = []
    if result.attachments and context is not None:
        kept = context.get_or_create(ATTACHMENTS_NAMESPACE, ToolAttachments)
        names = DocumentNames.of([result.output, metadata])
        for attachment in result.attachments:
            record = kept.keep(attachment, tool, tool_call_id, attachment_limit, names)
            records.append(record.model_dump(mode="json"))
        context.mark_changed(ATTACHMENTS_NAMESPACE)
    elif result.attachments:
        logger.warning(
            "tool %s returned %d attachments, but its run has no ToolContext (deps.tool_context) to keep"
            " them in: they are dropped",
            tool,
            len(result.attachments),
        )
    shown = {
        "title": result.title,
        "metadata": metadata,
        "attachments": records,
        "isError": result.is_error,
        "wasTruncated": result.was_truncated,
        "originalBytes": result.original_bytes,
    }
    await ctx.emit(
        AGUIEvent(
            event=AGUICustomEvent(
                name=RESULT_EVENT, value={"toolCallId": tool_call_id, "tool": tool, **shown}
            )
        )
    )
    if result.is_error:
        raise ToolFailed(text_of(output))
    return ToolReturn(return_value=output, metadata={**shown, **named})
