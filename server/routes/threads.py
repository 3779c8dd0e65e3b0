"""Thread routes: list, hydrate, delete, stop a run, re-read a run's events."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..errors import ApiError, validation_details
from ..threads import delete_thread, list_threads, set_approval_policy, thread_view
from ._common import check_id, principal_of, read_body, services_of, sse_response

__all__ = ["get_thread", "list_all", "put_approval_policy", "remove_thread", "run_events", "stop_run"]


_SEQUENCE = re.compile(r"[0-9]{1,12}")


def _int_param(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(422, f"{name} must be an integer", details=[{"loc": ["query", name]}]) from None
    if not low <= value <= high:
        raise ApiError(422, f"{name} must be between {low} and {high}", details=[{"loc": ["query", name]}])
    return value


async def list_all(request: Request) -> Response:
    principal = principal_of(request)
    limit = _int_param(request, "limit", 100, low=1, high=1000)
    return JSONResponse({"threads": await list_threads(services_of(request), principal, limit)})


async def get_thread(request: Request) -> Response:
    principal = principal_of(request)
    thread_id = check_id(request.path_params["thread_id"], "threadId")
    return JSONResponse(await thread_view(services_of(request), thread_id, principal))


async def remove_thread(request: Request) -> Response:
    principal = principal_of(request)
    thread_id = check_id(request.path_params["thread_id"], "threadId")
    await delete_thread(services_of(request), thread_id, principal)
    return Response(status_code=204)


async def stop_run(request: Request) -> Response:
    principal = principal_of(request)
    thread_id = check_id(request.path_params["thread_id"], "threadId")
    run_id = check_id(request.path_params["run_id"], "runId")
    info = await services_of(request).runs.stop(thread_id, run_id, principal)
    return JSONResponse(
        {"threadId": thread_id, "runId": run_id, "stopping": info.status == "running"}, status_code=202
    )


async def run_events(request: Request) -> Response:
    """The run's events after ``?after=`` (or ``Last-Event-ID``), then its live tail."""
    principal = principal_of(request)
    services = services_of(request)
    thread_id = check_id(request.path_params["thread_id"], "threadId")
    run_id = check_id(request.path_params["run_id"], "runId")
    info = await services.runs.logs.info(run_id)
    if info is None or info.thread_id != thread_id or info.owner != principal:
        raise ApiError(404, f"run {run_id!r} not found in thread {thread_id!r}")
    after = _int_param(request, "after", 0, low=0, high=10**9)
    last_event_id = request.headers.get("last-event-id")
    if "after" not in request.query_params and last_event_id:
        if not _SEQUENCE.fullmatch(last_event_id):
            raise ApiError(422, "Last-Event-ID must be an event sequence number")
        after = int(last_event_id)
    return sse_response(services.runs.subscribe(run_id, after), services.config.keepalive_seconds)


class _PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    need_user_approve_tools: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        max_length=200
    )


async def put_approval_policy(request: Request) -> Response:
    """Set which tools need approval in this thread: ``{"needUserApproveTools": ["delete_*", ...]}``."""
    principal = principal_of(request)
    thread_id = check_id(request.path_params["thread_id"], "threadId")
    services = services_of(request)
    body = await read_body(request, 64 * 1024)
    try:
        policy = _PolicyBody.model_validate_json(body)
    except ValidationError as exc:
        raise ApiError(
            422,
            'the body must be {"needUserApproveTools": [names or patterns]}',
            details=validation_details(exc),
        ) from exc
    saved = await set_approval_policy(services, thread_id, principal, policy.need_user_approve_tools)
    return JSONResponse({"threadId": thread_id, "needUserApproveTools": saved})
