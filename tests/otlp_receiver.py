"""An OTLP/HTTP trace receiver on 127.0.0.1 for tests: what a collector would get from ragstream.

It decodes each ``POST /v1/traces`` body (protobuf ``ExportTraceServiceRequest``, gzip or not) with
``opentelemetry-proto`` and keeps every span, flattened, for the test to read.
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return (
        getattr(value, kind)
        if kind in ("string_value", "bool_value", "int_value", "double_value")
        else str(value)
    )


class OTLPReceiver:
    """``with OTLPReceiver() as receiver:`` then point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``receiver.url``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            service=str(resource.get("service.name", "")),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(found)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, predicate: Any, timeout: float = 60.0) -> list[ReceivedSpan]:
        """Spans received so far once ``predicate(spans)`` holds; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans never matched; received: {sorted({s.name for s in spans})}")
            time.sleep(0.1)

    def __enter__(self) -> OTLPReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
