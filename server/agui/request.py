"""Reading an AG-UI ``RunAgentInput``; everything wrong with it is an ``InvalidRequest``.

Bad input never reaches the agent. The route reads the body (content type and size are checked by
the web layer); ``parse_run_input`` validates it; the run factory checks the rest against the
thread (the client's state proposal, messages the adapter could not convert mid-stream).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_ai.ui.ag_ui import AGUIAdapter

from ..validation import InvalidRequest, check_id, field_errors

__all__ = ["RagstreamProps", "parse_run_input"]


class RagstreamProps(BaseModel):
    """What a client may tell ragstream in ``forwardedProps.ragstream`` (the rest of
    ``forwardedProps`` is the client's own business). Checked strictly: a misspelt or mistyped
    option would otherwise be ignored without a word, and the client get other behaviour than it
    asked for."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    live_questions: bool = Field(False, alias="liveQuestions")
    """The client answers tools' questions while the run goes on (``agui.questions``)."""


def parse_run_input(body: bytes) -> RunAgentInput:
    """The validated run input of a request body."""
    try:
        run_input = RunAgentInput.model_validate_json(body)
    except ValidationError:
        run_input = _adapted_run_input(body)
    check_id(run_input.thread_id, "threadId")
    check_id(run_input.run_id, "runId")
    if run_input.state is not None and not isinstance(run_input.state, dict):
        raise InvalidRequest("state must be a JSON object", [{"loc": ["state"], "type": "dict_type"}])
    _check_message_ids(run_input)
    _check_ragstream_props(run_input.forwarded_props)
    return run_input


def _adapted_run_input(body: bytes) -> RunAgentInput:
    """A body the installed AG-UI models do not take as it is, as pydantic-ai's adapter reads it.

    The adapter converts what older clients send (``binary`` input parts), and skips, with a
    warning, what a newer protocol added (a message role, a content type). A skipped message or
    part would be missing from the thread while the client shows it, and the model would answer
    without it: such a body is refused, naming the message and what could not be read.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run_input = AGUIAdapter.build_run_input(body)
        except ValidationError as exc:
            raise InvalidRequest("the body is not a valid AG-UI RunAgentInput", field_errors(exc)) from exc
    if any("was skipped" in str(w.message) for w in caught):
        _refuse_skipped(json.loads(body).get("messages") or [], run_input)
    return run_input


def _refuse_skipped(sent: list[Any], run_input: RunAgentInput) -> None:
    """``InvalidRequest`` for the first message of ``sent`` (the body's) that the adapter dropped or
    took only part of."""
    read = {message.id: message for message in run_input.messages}
    for index, raw in enumerate(sent):
        message = read.get(raw.get("id")) if isinstance(raw, dict) else None
        if message is None:
            role = raw.get("role") if isinstance(raw, dict) else None
            raise InvalidRequest(
                f"messages[{index}] has role {role!r}, which this server does not know",
                [{"loc": ["messages", index, "role"], "type": "unsupported_role"}],
            )
        content = raw.get("content")
        kept = message.content if isinstance(getattr(message, "content", None), list) else None
        if isinstance(content, list) and kept is not None and len(kept) < len(content):
            known = {getattr(part, "type", None) for part in kept}
            types = ", ".join(
                sorted(
                    {
                        repr(p.get("type"))
                        for p in content
                        if isinstance(p, dict) and p.get("type") not in known
                    }
                )
            )
            what = "no content this server can read" if not kept else "content this server cannot read"
            raise InvalidRequest(
                f"messages[{index}] has {what} (type {types})",
                [{"loc": ["messages", index, "content"], "type": "unsupported_content"}],
            )


def _check_ragstream_props(props: object) -> None:
    if not isinstance(props, dict) or "ragstream" not in props:
        return
    try:
        RagstreamProps.model_validate(props["ragstream"])
    except ValidationError as exc:
        raise InvalidRequest(
            "forwardedProps.ragstream is invalid", field_errors(exc, ("forwardedProps", "ragstream"))
        ) from exc


def _check_message_ids(run_input: RunAgentInput) -> None:
    """Every message has its own non-empty id: the thread's tree names messages by id, so a repeated
    one would make the history the client sent ambiguous (an edit of which message?)."""
    first: dict[str, int] = {}
    for index, message in enumerate(run_input.messages):
        loc = [{"loc": ["messages", index, "id"]}]
        if not message.id:
            raise InvalidRequest(f"messages[{index}].id must not be empty", loc)
        if (earlier := first.setdefault(message.id, index)) != index:
            raise InvalidRequest(f"messages[{index}].id repeats the id of messages[{earlier}]", loc)
