"""``POST /agui``: validate the AG-UI run request, start the run, stream its events."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.requests import Request
from starlette.responses import Response

from ..errors import ApiError, validation_details
from ..runs.execution import RunExecution, prepare_run
from ..threads import check_thread_access
from ._common import check_id, principal_of, read_body, services_of, sse_response

__all__ = ["agui"]


async def agui(request: Request) -> Response:
    services = services_of(request)
    principal = principal_of(request)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ApiError(415, f"Content-Type must be application/json, got {content_type or 'nothing'!r}")
    body = await read_body(request, services.config.max_body_bytes)
    try:
        run_input = AGUIAdapter.build_run_input(body)
    except ValidationError as exc:
        raise ApiError(
            422, "the body is not a valid AG-UI RunAgentInput", details=validation_details(exc)
        ) from exc
    check_id(run_input.thread_id, "threadId")
    check_id(run_input.run_id, "runId")
    if run_input.state is not None and not isinstance(run_input.state, dict):
        raise ApiError(422, "state must be a JSON object", details=[{"loc": ["state"], "type": "dict_type"}])

    async def prepare() -> RunExecution:
        txn = await services.cache.begin(run_input.thread_id)
        try:
            return await prepare_run(
                run_input=run_input,
                principal=principal,
                txn=txn,
                agent=services.agent,
                kb=services.kb,
                config=services.config,
                prepare=services.toolkit.prepare,
                run_timeout=services.config.run_timeout,
                toolsets=services.run_toolsets,
                capabilities=services.run_capabilities,
            )
        except BaseException:
            txn.rollback()
            txn.close()
            raise

    # prepare_run checks ownership under the lock; a busy thread of someone else's must still be a 404
    active = await services.runs.start(
        run_input,
        principal,
        prepare,
        on_busy=lambda: check_thread_access(services, run_input.thread_id, principal),
    )
    return sse_response(services.runs.subscribe(active.run_id), services.config.keepalive_seconds)
