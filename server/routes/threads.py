"""Thread routes: list, hydrate, delete, switch branches, fork, set the approval policy, stop a run,
answer a run's live question, re-read a run's events, download a tool attachment."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Annotated
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..threads import (
    attachment,
    delete_thread,
    fork_thread,
    list_threads,
    readable_run_events,
    set_approval_policy,
    state_item,
    switch_branch,
    thread_view,
)
from ..validation import InvalidRequest, field_errors
from ._common import caller, int_param, path_id, read_json_body, reader, services_of
from .sse import sse_response

__all__ = [
    "ANSWER_BODY_LIMIT",
    "POLICY_BODY_LIMIT",
    "answer_question",
    "fork",
    "get_attachment",
    "get_state_item",
    "get_thread",
    "list_all",
    "put_approval_policy",
    "remove_thread",
    "run_events",
    "stop_run",
    "switch",
]

POLICY_BODY_LIMIT = 64 * 1024
ANSWER_BODY_LIMIT = 64 * 1024
STOP_WAIT_SECONDS = 5.0
"""How long a stop request waits for the run to end before it answers (``ended: false`` then)."""
_SEQUENCE = re.compile(r"[0-9]{1,12}")


async def list_all(request: Request) -> Response:
    limit = int_param(request, "limit", 100, low=1, high=1000)
    cursor = request.query_params.get("cursor")
    return JSONResponse(await list_threads(services_of(request), caller(request), limit, cursor))


async def get_thread(request: Request) -> Response:
    thread_id = path_id(request, "thread_id", "threadId")
    return JSONResponse(await thread_view(services_of(request), thread_id, caller(request), reader(request)))


async def get_state_item(request: Request) -> Response:
    """``/threads/{id}/state/{field}[/{key}]``: a state field in full, or one item of it."""
    thread_id = path_id(request, "thread_id", "threadId")
    field = path_id(request, "field", "field")
    key = request.path_params.get("key")
    value = await state_item(
        services_of(request),
        thread_id,
        caller(request),
        field,
        None if key is None else path_id(request, "key", "key"),
        reader(request),
    )
    return JSONResponse(
        {"threadId": thread_id, "field": field, **({} if key is None else {"key": key}), "value": value}
    )


async def get_attachment(request: Request) -> Response:
    """``/threads/{id}/attachments/{ref}``: the bytes of a file a tool attached to its result."""
    thread_id = path_id(request, "thread_id", "threadId")
    ref = path_id(request, "ref", "ref")
    record, data = await attachment(services_of(request), thread_id, caller(request), ref, reader(request))
    return Response(
        data,
        media_type=record.mime_type,
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(record.name)}",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox",
        },
    )


async def remove_thread(request: Request) -> Response:
    thread_id = path_id(request, "thread_id", "threadId")
    await delete_thread(services_of(request), thread_id, caller(request))
    return Response(status_code=204)


async def stop_run(request: Request) -> Response:
    runs = services_of(request).runs
    thread_id = path_id(request, "thread_id", "threadId")
    run_id = path_id(request, "run_id", "runId")
    info = await runs.find(thread_id, run_id, caller(request))
    await runs.stop(info)
    # answered once the run has ended, so a run sent right after the answer finds the thread free
    ended = info.status != "running"
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(STOP_WAIT_SECONDS):
            await runs.wait_ended(info)
            ended = True
    return JSONResponse(
        {
            "threadId": thread_id,
            "runId": run_id,
            "stopping": info.status == "running",
            "ended": ended,
        },
        status_code=202,
    )


class _AnswerBody(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    question_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    answer: Annotated[str, StringConstraints(min_length=1, max_length=20_000)] | None = None
    declined: bool = False
    reason: Annotated[str, StringConstraints(max_length=2_000)] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> _AnswerBody:
        if (self.answer is None) == (not self.declined):
            raise ValueError('give either "answer" or "declined": true')
        return self


async def answer_question(request: Request) -> Response:
    """A live answer to a run's question: ``{"questionId", "answer"}`` or ``{"questionId", "declined": true}``."""
    runs = services_of(request).runs
    thread_id = path_id(request, "thread_id", "threadId")
    run_id = path_id(request, "run_id", "runId")
    info = await runs.find(thread_id, run_id, caller(request))  # first: another's run is just missing
    try:
        body = _AnswerBody.model_validate_json(await read_json_body(request))
    except ValidationError as exc:
        raise InvalidRequest(
            'the body must be {"questionId": ..., "answer": "..."} or {"questionId": ..., "declined": true}',
            field_errors(exc),
        ) from exc
    payload = (
        {"answer": body.answer} if body.answer is not None else {"declined": True, "reason": body.reason}
    )
    await runs.answer(info, body.question_id, payload)
    return JSONResponse(
        {"threadId": thread_id, "runId": run_id, "questionId": body.question_id, "delivered": True},
        status_code=202,
    )


async def run_events(request: Request) -> Response:
    """The run's events after ``?after=`` (or ``Last-Event-ID``), then its live tail."""
    services = services_of(request)
    thread_id = path_id(request, "thread_id", "threadId")
    run_id = path_id(request, "run_id", "runId")
    info = await services.runs.find(thread_id, run_id, caller(request))
    after = int_param(request, "after", 0, low=0, high=10**9)
    last_event_id = request.headers.get("last-event-id")
    if "after" not in request.query_params and last_event_id:
        if not _SEQUENCE.fullmatch(last_event_id):
            raise InvalidRequest("Last-Event-ID must be an event sequence number")
        after = int(last_event_id)
    events = readable_run_events(services, info, after, reader(request))
    return sse_response(events, keepalive=services.config.keepalive_seconds, stopping=services.stopping)


class _MessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    #: any id a run may have stored (``/agui`` sets no length on message ids); the body limit bounds it
    message_id: Annotated[str, StringConstraints(min_length=1)]


async def _message_id(request: Request) -> str:
    try:
        return _MessageBody.model_validate_json(await read_json_body(request)).message_id
    except ValidationError as exc:
        raise InvalidRequest(
            'the body must be {"messageId": "<a message id of the thread>"}', field_errors(exc)
        ) from exc


async def switch(request: Request) -> Response:
    """Show another branch: ``{"messageId": ...}`` names a message on it (a sibling of one shown)."""
    thread_id = path_id(request, "thread_id", "threadId")
    message_id = await _message_id(request)
    return JSONResponse(
        await switch_branch(services_of(request), thread_id, caller(request), message_id, reader(request))
    )


async def fork(request: Request) -> Response:
    """A new thread holding the path up to ``{"messageId": ...}``; answers its view (201)."""
    thread_id = path_id(request, "thread_id", "threadId")
    message_id = await _message_id(request)
    view = await fork_thread(services_of(request), thread_id, caller(request), message_id, reader(request))
    return JSONResponse(view, status_code=201)


class _PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    need_user_approve_tools: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        max_length=200
    )


async def put_approval_policy(request: Request) -> Response:
    """Set which tools need approval in this thread: ``{"needUserApproveTools": ["delete_*", ...]}``."""
    thread_id = path_id(request, "thread_id", "threadId")
    try:
        policy = _PolicyBody.model_validate_json(await read_json_body(request))
    except ValidationError as exc:
        raise InvalidRequest(
            'the body must be {"needUserApproveTools": [names or patterns]}', field_errors(exc)
        ) from exc
    saved = await set_approval_policy(
        services_of(request), thread_id, caller(request), policy.need_user_approve_tools
    )
    return JSONResponse({"threadId": thread_id, "needUserApproveTools": saved})
