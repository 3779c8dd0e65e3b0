"""``POST /agui``: one AG-UI run, answered as Server-Sent Events.

Content type and body size are checked here and by the body-limit middleware, the caller by the
authentication middleware; everything else that can refuse the run happens in
``AGUIRunFactory.start`` before the stream opens. After the 200, problems are RUN_ERROR events.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..agui.request import parse_run_input
from ._common import caller, read_json_body, reader, services_of
from .sse import sse_response

__all__ = ["agui"]


async def agui(request: Request) -> Response:
    services = services_of(request)
    run_input = parse_run_input(await read_json_body(request))
    info = await services.agui.start(run_input, caller(request), reader(request))
    return sse_response(
        services.runs.subscribe(info),
        keepalive=services.config.keepalive_seconds,
        stopping=services.stopping,
    )
