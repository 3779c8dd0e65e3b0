"""The invariants every fuzzed request is held to, and the seed threads they must not disturb.

``FuzzTarget.send`` sends one raw request and checks the answer:

- it arrives before the deadline (no hang) and is never a 5xx;
- a 4xx is ``application/json`` shaped ``{"error": {"status", "code", "message", "details"?}}``
  with ``status`` equal to the HTTP status and no traceback; the one exception is uvicorn's own
  ``400 Invalid HTTP request received.``, sent when the HTTP parser refuses the bytes before the
  app sees them;
- a run's SSE stream passes ``check_stream``, its RUN_ERROR (if any) is not an internal error and
  carries no traceback;
- the server logged nothing at ERROR level while handling it;
- a rejected request (4xx, or a run that ended in RUN_ERROR) changed no seed thread (state,
  messages, version, title, interrupts), created or removed no thread and no document.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import event

from tests.fuzzing.rawhttp import RawResponse, raw_request
from tests.fuzzing.server import ServerLog
from tests.fuzzing.strategies import SEED_THREADS, valid_body
from tests.protocol import check_stream, parse_sse

__all__ = ["PARSER_REJECT", "FuzzTarget", "assert_json_error"]

PARSER_REJECT = b"Invalid HTTP request received."
REQUEST_DEADLINE = 30.0
LEAK_MARKERS = ("Traceback", 'File "', "/work/", "site-packages", "postgres://")
MUTATING = {"POST", "PUT", "DELETE", "PATCH"}


def assert_json_error(status: int | None, content_type: str, body: bytes) -> dict[str, Any]:
    """The error body of a 4xx answer, checked for shape and leaks."""
    assert status is not None and 400 <= status < 500, (status, body[:300])
    assert content_type.startswith("application/json"), (status, content_type, body[:300])
    data = json.loads(body)
    assert set(data) == {"error"}, data
    error = data["error"]
    assert set(error) <= {"status", "code", "message", "details"}, error
    assert error["status"] == status, error
    assert isinstance(error["code"], str) and error["code"], error
    assert isinstance(error["message"], str) and error["message"], error
    text = body.decode("utf-8", "replace")
    for marker in LEAK_MARKERS:
        assert marker not in text, f"{marker!r} leaked into an error body: {text[:500]}"
    return error


def _diff(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    """A short account of what differs between two thread views (they can be large)."""
    keys = sorted(set(expected) | set(actual))
    changed = [k for k in keys if expected.get(k) != actual.get(k)]
    parts = []
    for key in changed:
        old, new = expected.get(key), actual.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            inner = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            parts.append(f"{key}: {inner} ({str(old)[:150]} -> {str(new)[:150]})")
        else:
            parts.append(f"{key}: {str(old)[:150]} -> {str(new)[:150]}")
    return "; ".join(parts)


def _view(view: dict[str, Any]) -> dict[str, Any]:
    """What a rejected request must not change (the active run id is allowed to come and go)."""
    return {k: v for k, v in view.items() if k != "activeRunId"}


@dataclass
class FuzzTarget:
    """One running server under fuzzing, with the seed threads it holds."""

    url: str
    log: ServerLog
    client: httpx.Client
    headers: dict[str, str] = field(default_factory=dict)
    raw_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    seeds: dict[str, dict[str, Any]] = field(default_factory=dict)
    threads: dict[str, int] | None = None
    documents: int = 0
    sent: int = 0
    _reseeds: int = 0

    def __repr__(self) -> str:  # hypothesis prints the fixture with a failing example
        return f"FuzzTarget({self.url})"

    # -- seeds ------------------------------------------------------------------------------

    def seed(self) -> None:
        """Create the seed threads (a finished run each) and snapshot everything."""
        for thread in SEED_THREADS:
            self._create_seed(thread, f"{thread}-r1")
        self.client.put(
            "/threads/seed-b/approval-policy", json={"needUserApproveTools": ["archive_*"]}
        ).raise_for_status()
        self.snapshot()

    def _create_seed(self, thread: str, run: str) -> None:
        state = {"document_filter": ["ragstream"]} if thread == "seed-b" else {}
        response = self.client.post("/agui", json=valid_body(thread, run, "q nightly backups", state=state))
        assert response.status_code == 200, response.text
        events = [e for _, e in parse_sse(response.text)]
        check_stream(events, state)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]

    def snapshot(self) -> None:
        """Record the current seeds, thread list and document count as the expected ones."""
        for thread in SEED_THREADS:
            response = self.client.get(f"/threads/{thread}")
            if response.status_code == 404:  # a fuzzed DELETE that was allowed: seed it again
                self._reseeds += 1
                self._create_seed(thread, f"{thread}-reseed-{self._reseeds}")
                response = self.client.get(f"/threads/{thread}")
            assert response.status_code == 200, response.text
            self.seeds[thread] = _view(response.json())
        self.threads = self._thread_versions()
        self.documents = self.client.get("/documents").json()["total"]

    def _thread_versions(self) -> dict[str, int] | None:
        listed = self.client.get("/threads", params={"limit": 1000}).json()["threads"]
        if len(listed) >= 1000:  # the listing is cut: no longer a complete picture
            return None
        return {t["threadId"]: t["version"] for t in listed}

    def assert_unchanged(self, what: str) -> None:
        for thread, expected in self.seeds.items():
            response = self.client.get(f"/threads/{thread}")
            assert response.status_code == 200, f"{what} removed seed thread {thread}: {response.text}"
            actual = _view(response.json())
            assert actual == expected, f"{what} changed seed thread {thread}: {_diff(expected, actual)}"
        if self.threads is not None:
            assert self._thread_versions() == self.threads, f"{what} created, changed or removed a thread"
        total = self.client.get("/documents").json()["total"]
        assert total == self.documents, f"{what} changed the number of documents"

    def wait_for_job(self, job_id: str) -> None:
        """Wait until an upload's ingestion job is done or failed."""
        for _ in range(1200):
            if self.client.get(f"/documents/jobs/{job_id}").json()["state"] in ("done", "failed"):
                return
            time.sleep(0.05)
        raise AssertionError(f"ingestion job {job_id} did not finish")

    # -- requests ---------------------------------------------------------------------------

    def send(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes = b"",
        *,
        what: str = "",
        client_state: Any = None,
        **options: Any,
    ) -> RawResponse:
        """Send one request and hold its answer to the invariants; returns the answer."""
        self.sent += 1
        label = what or f"{method.decode()} {target[:120]!r}"
        response = raw_request(
            self.url,
            method,
            target,
            [*self.raw_headers, *(headers or [])],
            body,
            timeout=REQUEST_DEADLINE,
            **options,
        )
        assert not response.timed_out, f"{label}: no complete answer within {REQUEST_DEADLINE}s"
        errors = self.log.take()
        assert errors == [], f"{label}: the server logged errors: {errors}"
        assert response.status is not None, f"{label}: the connection closed without an answer"
        assert response.status < 500, f"{label}: {response.status} {response.body[:300]!r}"
        event(f"status {response.status}")
        rejected = False
        if response.status == 400 and response.body == PARSER_REJECT:
            rejected = True  # refused by uvicorn's HTTP parser: the app never saw it
        elif response.status >= 400:
            if method == b"HEAD":  # no body to a HEAD request, but the same type
                assert response.content_type.startswith("application/json"), response.headers
            else:
                assert_json_error(response.status, response.content_type, response.body)
            rejected = True
        elif response.content_type.startswith("text/event-stream") and method != b"HEAD":
            rejected = self._check_stream(response, target, client_state, label)
        if rejected:
            self.assert_unchanged(label)
        elif method.decode() in MUTATING:
            if response.status == 202 and b'"jobId"' in response.body:
                self.wait_for_job(json.loads(response.body)["jobId"])  # an upload lands in the background
            self.snapshot()  # an accepted change: it becomes the new expectation
        return response

    def _check_stream(self, response: RawResponse, target: bytes, client_state: Any, label: str) -> bool:
        """Check a 200 event stream; True when it reports a failed run (nothing may have changed)."""
        text = response.body.decode("utf-8")
        frames = parse_sse(text)
        ids = [i for i, _ in frames]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), f"{label}: event ids out of order: {ids}"
        events = [e for _, e in frames]
        replay_from_start = b"/events" not in target or (ids and ids[0] == 1)
        if not events or not replay_from_start:
            return False  # a re-read from a cursor: ids checked, nothing else to hold it to
        check_stream(events, client_state if client_state is not None else {})
        last = events[-1]
        if last["type"] == "RUN_ERROR":
            assert last.get("code") != "internal_error", f"{label}: internal error: {last}"
            for marker in LEAK_MARKERS:
                assert marker not in json.dumps(last), f"{label}: {marker!r} leaked into RUN_ERROR: {last}"
            return b"/events" not in target
        return False
