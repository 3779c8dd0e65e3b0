"""Property-based fuzzing of every HTTP route over real HTTP on loopback.

Malformed, truncated, oversized, deeply nested, wrongly typed and unicode-hostile bodies, headers,
query strings and path parameters go to every route of one real uvicorn server (per module, in a
background thread), and every answer is held to the invariants of ``tests/fuzzing/harness.py``:
no 5xx, no hang, a 4xx is a JSON error without a traceback, a run's stream is well formed, the
server logs no error, and a rejected request changes no thread (the two seed threads are among
the ids the strategies draw, so rejected requests do hit them) and no document.

The suite runs a bounded number of examples per test (``RAGSTREAM_FUZZ_EXAMPLES``, default 100,
derandomized so that every run of the suite tries the same inputs). A longer, randomized run:

    RAGSTREAM_FUZZ_EXAMPLES=2000 RAGSTREAM_FUZZ_RANDOM=1 .venv/bin/python -m pytest tests/test_fuzz.py --timeout 3600

Failing examples are replayed from ``.hypothesis/`` on the next run and printed by hypothesis as
a ready-to-paste reproduction.
"""

from __future__ import annotations

import base64
import gc
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing.harness import FuzzTarget, assert_json_error
from tests.fuzzing.rawhttp import raw_request
from tests.fuzzing.server import ServerLog, serve_in_thread
from tests.fuzzing.strategies import (
    BODY_LIMIT,
    SEED_THREADS,
    SERVER_ONLY,
    agui_bodies,
    auth_headers,
    content_types,
    encode,
    fresh_ids,
    hostile_text,
    json_values,
    last_event_ids,
    mutated_office_files,
    path_segments,
    query_strings,
    run_ids,
    state_proposals,
    thread_ids,
    valid_body,
)
from tests.protocol import CHAT_STATE_KEYS, CLIENT_OWNED, check_stream, parse_sse

EXAMPLES = int(os.environ.get("RAGSTREAM_FUZZ_EXAMPLES", "100"))
RANDOM = os.environ.get("RAGSTREAM_FUZZ_RANDOM") == "1"

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
    print_blob=True,
)

JSON = (b"Content-Type", b"application/json")


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory, corpus_kb_template: Path) -> Iterator[FuzzTarget]:
    """One server for the module, with two seed threads, and the invariants to hold it to."""
    from ragstream.config import AppConfig
    from tests.conftest import scenario_app

    data = tmp_path_factory.mktemp("fuzz") / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    config = AppConfig(
        data_dir=data,
        keepalive_seconds=5,
        run_timeout=10,
        max_upload_bytes=200_000,
    )
    log = ServerLog()
    with (
        log.attached(),
        serve_in_thread(scenario_app(config)) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        target = FuzzTarget(url=url, log=log, client=client)
        target.seed()
        assert log.take() == []
        yield target
        # after everything: still healthy, still able to run
        assert client.get("/health").json()["status"] == "ok"
        response = client.post("/agui", json=valid_body("fz-final", "fz-final-r1"))
        events = [e for _, e in parse_sse(response.text)]
        check_stream(events, {})
        assert events[-1]["type"] == "RUN_FINISHED"
        assert log.take() == []


@pytest.fixture(autouse=True)
def _settle(fuzz: FuzzTarget) -> None:
    """Each test starts from a fresh snapshot (the previous test may have changed the seeds)."""
    fuzz.snapshot()


def _headers(draw: st.DrawFn, *, content_type: bool = True) -> list[tuple[bytes, bytes]]:
    headers = []
    if content_type:
        ct = draw(content_types())
        if ct is not None:
            headers.append((b"Content-Type", ct))
    auth = draw(auth_headers())
    if auth is not None:
        headers.append((b"Authorization", auth))
    last = draw(last_event_ids())
    if last is not None:
        headers.append((b"Last-Event-ID", last))
    for name, value in draw(
        st.lists(
            st.tuples(
                st.sampled_from(
                    [b"Origin", b"Accept", b"Accept-Encoding", b"X-Forwarded-For", b"Cookie", b"X-Thread-Id"]
                ),
                st.sampled_from(
                    [b"null", b"*/*", b"gzip, br", b"127.0.0.1, \xff", b"a=" + b"b" * 5000, b"\x00", b""]
                ),
            ),
            max_size=2,
        )
    ):
        headers.append((name, value))
    return headers


def _client_state(body: bytes) -> Any:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    state = parsed.get("state") if isinstance(parsed, dict) else None
    return state if isinstance(state, dict) else {}


# -- POST /agui ---------------------------------------------------------------------------------


@FUZZ
@given(made=agui_bodies(), data=st.data())
def test_agui_bodies(fuzz: FuzzTarget, made: tuple[bytes, str], data: st.DataObject) -> None:
    body, kind = made
    headers = [JSON] if data.draw(st.integers(0, 4)) else _headers(data.draw)
    response = fuzz.send(
        b"POST", b"/agui", headers, body, what=f"POST /agui ({kind})", client_state=_client_state(body)
    )
    if len(body) > BODY_LIMIT and headers == [JSON]:
        assert response.status == 413, response.body[:300]


@FUZZ
@given(made=agui_bodies(), data=st.data())
def test_agui_hostile_headers(fuzz: FuzzTarget, made: tuple[bytes, str], data: st.DataObject) -> None:
    body, kind = made
    fuzz.send(
        b"POST",
        b"/agui",
        _headers(data.draw),
        body,
        what=f"POST /agui ({kind}, hostile headers)",
        client_state=_client_state(body),
    )


# -- every other route ------------------------------------------------------------------------

ROUTES = [
    ("GET", "/threads"),
    ("GET", "/threads/{t}"),
    ("DELETE", "/threads/{t}"),
    ("PUT", "/threads/{t}/approval-policy"),
    ("POST", "/threads/{t}/runs/{r}/stop"),
    ("POST", "/threads/{t}/runs/{r}/answers"),
    ("GET", "/threads/{t}/runs/{r}/events"),
    ("GET", "/documents"),
    ("POST", "/documents"),
    ("GET", "/health"),
    ("GET", "/ready"),
    ("GET", "/capabilities"),
    ("GET", "/"),
    ("HEAD", "/"),
    ("GET", "/index.html"),
    ("GET", "/assets/{t}"),
    ("GET", "/{t}"),
    ("POST", "/agui"),
]
WRONG_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "HEAD"]


def _policy_bodies() -> st.SearchStrategy[bytes]:
    names = st.lists(st.one_of(hostile_text(10, raw=False), st.just("archive_*"), st.just("")), max_size=4)
    return st.one_of(
        st.builds(lambda n: encode({"needUserApproveTools": n}), names),
        st.builds(
            lambda n, extra: encode({"needUserApproveTools": n, **extra}),
            names,
            st.dictionaries(hostile_text(6), json_values(3), max_size=2),
        ),
        st.builds(lambda v: encode({"needUserApproveTools": v}), json_values(6)),
        st.builds(lambda v: encode(v), json_values(6)),
        st.just(b'{"needUserApproveTools": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        st.just(encode({"needUserApproveTools": ["x" * 200] * 201})),
        st.just(encode({"needUserApproveTools": ["x" * 70_000]})),
        st.binary(max_size=200),
    )


def _answer_bodies() -> st.SearchStrategy[bytes]:
    texts = st.one_of(hostile_text(10, raw=False), st.just(""), st.just("x" * 20_001))
    fields = st.fixed_dictionaries(
        {},
        optional={
            "questionId": st.one_of(texts, json_values(2)),
            "answer": st.one_of(texts, json_values(2)),
            "declined": st.one_of(st.booleans(), json_values(1)),
            "reason": st.one_of(texts, json_values(1)),
        },
    )
    return st.one_of(st.builds(encode, fields), st.builds(encode, json_values(6)), st.binary(max_size=200))


@FUZZ
@given(data=st.data())
def test_every_route(fuzz: FuzzTarget, data: st.DataObject) -> None:
    method, template = data.draw(st.sampled_from(ROUTES))
    if data.draw(st.integers(0, 5)) == 0:
        method = data.draw(st.sampled_from(WRONG_METHODS))
    path = template.encode()
    if b"{t}" in path:
        path = path.replace(b"{t}", data.draw(path_segments(thread_ids())))
    if b"{r}" in path:
        path = path.replace(b"{r}", data.draw(path_segments(run_ids())))
    path += data.draw(query_strings())
    body = b""
    if template.endswith("approval-policy"):
        body = data.draw(_policy_bodies())
    elif template.endswith("answers"):
        body = data.draw(_answer_bodies())
    elif template == "/agui":
        body, _ = data.draw(agui_bodies())
    elif method in ("POST", "PUT", "PATCH"):
        body = data.draw(st.one_of(st.binary(max_size=300), st.builds(encode, json_values(6))))
    headers = _headers(data.draw)
    fuzz.send(method.encode(), path, headers, body, client_state=_client_state(body))


@FUZZ
@given(
    pair=st.sampled_from([("seed-a", "seed-a-r1"), ("seed-b", "seed-b-r1"), ("seed-a", "seed-b-r1")]),
    query=query_strings(),
    last_event_id=last_event_ids(),
    authorization=auth_headers(),
)
def test_run_event_cursors(
    fuzz: FuzzTarget,
    pair: tuple[str, str],
    query: bytes,
    last_event_id: bytes | None,
    authorization: bytes | None,
) -> None:
    """Re-reading a real run's events from a hostile cursor (``?after=``, ``Last-Event-ID``)."""
    thread, run = pair
    headers = [(b"Last-Event-ID", last_event_id)] if last_event_id is not None else []
    if authorization is not None:
        headers.append((b"Authorization", authorization))
    path = f"/threads/{thread}/runs/{run}/events".encode() + query
    response = fuzz.send(b"GET", path, headers)
    if response.status == 200:
        assert thread == run[: len(thread)], "a run was served under another thread"


# -- uploads ------------------------------------------------------------------------------------


@st.composite
def multipart_bodies(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(content type, body) of a hostile multipart upload."""
    boundary = draw(st.sampled_from([b"xYz", b"-", b"a" * 80, b"\xff", b"x y", b'b"q']))
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from([b"file", b"file", b"other", b"", b"fi\x00le"]))
        name = draw(
            st.one_of(
                st.sampled_from(
                    [
                        "notes.md",
                        "../../etc/passwd.md",
                        "..\\..\\boot.ini.txt",
                        "' OR 1=1 --.md",
                        '"; DROP TABLE documents; --.txt',
                        "%_.md",
                        "nul\x00.md",
                        ".md",
                        "noext",
                        "x.pdf",
                        "x.exe",
                        "\u202egpj.md",
                        "a" * 300 + ".md",
                    ]
                ),
                st.builds(
                    lambda t, ext: t + ext,
                    hostile_text(10, raw=False),
                    st.sampled_from([".md", ".txt", ".html", ""]),
                ),
            )
        )
        disposition = b'Content-Disposition: form-data; name="' + field + b'"'
        how = draw(st.sampled_from(["plain", "plain", "star", "none", "raw"]))
        if how == "plain":
            disposition += b'; filename="' + name.replace('"', "%22").encode("utf-8", "surrogatepass") + b'"'
        elif how == "star":
            disposition += b"; filename*=UTF-8''" + quote(name).encode()
        elif how == "raw":
            disposition += b"; filename=" + name.encode("utf-8", "surrogatepass")
        ctype = draw(st.sampled_from([b"text/markdown", b"text/plain", b"application/pdf", b"\xff", b""]))
        content = draw(
            st.one_of(
                st.sampled_from(
                    [
                        b"",
                        b"# Fuzz\n\nA fuzz document.",
                        b"%PDF-1.4 garbage",
                        b"<html><script>x</script>",
                        b"\xff\xfe\x00",
                    ]
                ),
                hostile_text(20).map(lambda t: t.replace("\ue000", "").encode("utf-8", "surrogatepass")),
            )
        )
        parts.append(
            b"--"
            + boundary
            + b"\r\n"
            + disposition
            + b"\r\nContent-Type: "
            + ctype
            + b"\r\n\r\n"
            + content
            + b"\r\n"
        )
    ending = draw(st.sampled_from([b"--" + boundary + b"--\r\n", b"", b"--" + boundary + b"\r\n"]))
    body = b"".join(parts) + ending
    content_type = draw(
        st.sampled_from(
            [
                b"multipart/form-data; boundary=" + boundary,
                b'multipart/form-data; boundary="' + boundary + b'"',
                b"multipart/form-data",
                b"multipart/form-data; boundary=other",
                b"Multipart/Form-Data; boundary=" + boundary,
            ]
        )
    )
    return content_type, body


@FUZZ
@given(upload=multipart_bodies(), data=st.data())
def test_document_uploads(fuzz: FuzzTarget, upload: tuple[bytes, bytes], data: st.DataObject) -> None:
    content_type, body = upload
    headers = [(b"Content-Type", content_type), *_headers(data.draw, content_type=False)]
    response = fuzz.send(b"POST", b"/documents", headers, body, what="POST /documents (multipart)")
    if response.status == 202:
        accepted = json.loads(response.body)
        for outcome in accepted["job"]["files"]:
            assert "/" not in outcome["name"] and "\\" not in outcome["name"], outcome


# -- mutated office files ----------------------------------------------------------------------


@FUZZ
@given(file=mutated_office_files())
def test_mutated_office_files_parse_or_fail_with_one_line(file: tuple[str, bytes]) -> None:
    """The readers on their own: a document, or a ``ValueError`` of one line; never another error."""
    from rag_tools.kb.readers import parse_document

    name, data = file
    try:
        parse_document(data, name=name)
    except ValueError as exc:
        reason = str(exc)
    else:
        return
    assert reason and "\n" not in reason, reason


@settings(FUZZ, max_examples=max(1, EXAMPLES // 4))
@given(files=st.lists(mutated_office_files(), min_size=1, max_size=3))
def test_mutated_office_uploads_fail_alone_and_leave_nothing(
    fuzz: FuzzTarget, files: list[tuple[str, bytes]]
) -> None:
    """Uploaded through the job system: each file is added or fails with one line, and a file that
    fails leaves no document; the server logs no error and keeps answering (the module's checks)."""
    request = httpx.Request("POST", f"{fuzz.url}/documents", files=[("file", f) for f in files])
    body = request.read()
    headers = [(b"Content-Type", request.headers["content-type"].encode())]
    response = fuzz.send(b"POST", b"/documents", headers, body, what="POST /documents (office files)")
    assert response.status == 202, response.body[:300]
    job = fuzz.client.get(f"/documents/jobs/{json.loads(response.body)['jobId']}").json()
    assert job["state"] == "done", job
    listed = {d["uri"] for d in fuzz.client.get("/documents", params={"page_size": 500}).json()["documents"]}
    for outcome in job["files"]:
        assert outcome["status"] in ("added", "error"), outcome
        if outcome["status"] == "error":
            assert outcome["error"] and "\n" not in outcome["error"], outcome
            assert outcome["name"] not in listed, outcome
        else:
            assert outcome["name"] in listed, outcome


# -- state proposals ------------------------------------------------------------------------


NEW_THREAD_STATE = {
    "document_filter": [],
    "citations": {},
    "searches": {},
    "qa_history": [],
    "session_context": None,
    "archived": [],
    "need_user_approve_tools": [],
    "truncated_outputs": {},
    "tool_attachments": {},
}


@FUZZ
@given(
    proposal=st.one_of(state_proposals(), state_proposals(), json_values(6)),
    thread=st.one_of(st.sampled_from(SEED_THREADS), fresh_ids()),
    run=run_ids(unique=True),
    with_message=st.integers(0, 3),
)
def test_state_proposals(fuzz: FuzzTarget, proposal: Any, thread: str, run: str, with_message: int) -> None:
    """Random client state: a clean 4xx, or a run that ends where GET says, with server fields intact."""
    before = fuzz.client.get(f"/threads/{thread}")
    previous = before.json()["state"] if before.status_code == 200 else dict(NEW_THREAD_STATE)
    text = "q nightly backups" if with_message == 0 else None
    body = encode(valid_body(thread, run, text, state=proposal))
    response = fuzz.send(
        b"POST", b"/agui", [JSON], body, what="POST /agui (state proposal)", client_state=_client_state(body)
    )
    if response.status != 200:
        assert response.status == 422, response.body[:300]
        return
    assert proposal is None or isinstance(proposal, dict), f"state {proposal!r} was accepted"
    proposal = proposal or {}
    events = [e for _, e in parse_sse(response.body.decode())]
    final = check_stream(events, json.loads(body)["state"] or {})
    view = fuzz.client.get(f"/threads/{thread}")
    if events[-1]["type"] == "RUN_ERROR":
        return  # the harness checked nothing changed
    assert view.status_code == 200, view.text
    state = view.json()["state"]
    assert final == state, "the stream's final state differs from the thread's"
    assert set(state) == CHAT_STATE_KEYS, f"unexpected keys in the state: {set(state) ^ CHAT_STATE_KEYS}"
    assert not set(SERVER_ONLY) & set(state)
    if "document_filter" in proposal:
        assert state["document_filter"] == proposal["document_filter"]
    else:
        assert state["document_filter"] == previous["document_filter"]
    # a run without a message changes nothing the server owns; a search only its own fields
    untouched = CHAT_STATE_KEYS - CLIENT_OWNED - ({"citations", "searches"} if text else set())
    for key in untouched:
        assert state[key] == previous[key], f"{key} was taken from the client's state"
    for key, card in state["citations"].items():
        assert key.isdigit() and card["index"] == int(key), card
    for key, record in state["searches"].items():
        assert record["id"] == key and key == f"s{record['seq']}", record


# -- lies about the body length ---------------------------------------------------------------


@settings(FUZZ, max_examples=max(5, EXAMPLES // 6))
@given(
    route=st.sampled_from(["/agui", "/documents", "/threads/seed-a/approval-policy"]),
    shortfall=st.integers(1, 5000),
)
def test_content_length_longer_than_the_body(fuzz: FuzzTarget, route: str, shortfall: int) -> None:
    """A client that declares more than it sends, then gives up: no error logged, nothing changed."""
    method = b"PUT" if route.endswith("policy") else b"POST"
    body = encode(valid_body("seed-a", "fz-cl-run")) if route == "/agui" else b'{"needUserApproveTools": []}'
    ctype = b"multipart/form-data; boundary=x" if route == "/documents" else b"application/json"
    headers = [(b"Content-Type", ctype), (b"Content-Length", str(len(body) + shortfall).encode())]
    response = raw_request(fuzz.url, method, route.encode(), headers, body, timeout=10, half_close=True)
    assert not response.timed_out, "the server kept the connection of a client that left"
    if response.status is not None:  # the server may answer before it notices the client left
        assert response.status < 500
    errors = fuzz.log.take()
    assert errors == [], f"a client that left mid-body ended in an unhandled error: {errors}"
    fuzz.assert_unchanged(f"{method.decode()} {route} with a short body")


# -- regressions found by the fuzzer (deterministic) ------------------------------------------


@pytest.mark.parametrize("value", [b"\xb2", b"9" * 5000], ids=["superscript-two", "5000-digits"])
def test_last_event_id_that_int_cannot_parse_is_422(fuzz: FuzzTarget, value: bytes) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises; so does a 5000-digit number (server/routes/threads.py run_events)."""
    response = raw_request(
        fuzz.url, b"GET", b"/threads/seed-a/runs/seed-a-r1/events", [(b"Last-Event-ID", value)]
    )
    errors = fuzz.log.take()
    assert response.status == 422, (response.status, response.body[:200], errors)
    assert_json_error(response.status, response.content_type, response.body)
    assert errors == []


@pytest.mark.parametrize("suffix", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_ids_with_a_trailing_newline_are_refused(fuzz: FuzzTarget, suffix: str) -> None:
    """``check_id`` uses ``re.match`` with ``$``, which also matches before a final newline."""
    thread = "fz-newline" + suffix
    response = fuzz.client.post("/agui", json=valid_body(thread, "fz-newline-r1" + suffix))
    assert response.status_code == 422, f"threadId {thread!r} was accepted: {response.text[:200]}"
    path = quote("seed-a" + suffix, safe="")
    assert fuzz.client.get(f"/threads/{path}").status_code == 422
    fuzz.assert_unchanged("runs with newline ids")


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image", "source": {"type": "data", "value": "a", "mimeType": "image/png"}},
        {
            "type": "image",
            "source": {"type": "url", "value": "https://example.com/x.png"},
            "metadata": {"vendor_metadata": 5},
        },
    ],
    ids=["bad-base64", "vendor-metadata-not-an-object"],
)
def test_invalid_multimodal_input_is_a_client_error(fuzz: FuzzTarget, part: dict[str, Any]) -> None:
    """Input the adapter cannot convert is the client's error: 422 (or at least not an internal error)."""
    messages = [{"id": "m1", "role": "user", "content": [{"type": "text", "text": "q backups"}, part]}]
    body = valid_body("seed-a", "fz-mm-" + part["source"]["type"], messages=messages)
    response = fuzz.client.post("/agui", json=body)
    errors = fuzz.log.take()
    if response.status_code != 200:
        assert_json_error(response.status_code, response.headers["content-type"], response.content)
    else:
        events = [e for _, e in parse_sse(response.text)]
        check_stream(events, {})
        assert events[-1].get("code") != "internal_error", (
            f"client input reported as an internal error: {events[-1]}"
        )
    assert errors == [], f"client input logged as a server error: {errors}"
    fuzz.assert_unchanged("an invalid multimodal run")


def test_uploads_close_their_temporary_files(fuzz: FuzzTarget) -> None:
    """Every upload's parsed form (its spooled temporary files) is closed, accepted or not.

    ``upload_documents`` (server/routes/documents.py) parses the replayed body with a second
    ``Request`` whose form nobody closes, so each file is only reclaimed by its finalizer.
    """
    uploads = [
        {"file": ("leak-check.md", b"# Leak check\n\nA small document.", "text/markdown")},
        {"file": ("leak-check.exe", b"MZ", "application/octet-stream")},
        {"other": ("leak-check.md", b"# x", "text/markdown")},
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for files in uploads:
            response = fuzz.client.post("/documents", files=files)
            assert response.status_code in (202, 422), response.text
            if response.status_code == 202:
                fuzz.wait_for_job(response.json()["jobId"])
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == [], f"uploads left files to the garbage collector: {unclosed}"


def test_fuzz_helpers_encode_raw_fragments() -> None:
    """The splice of raw bytes works (a broken helper would make every other test vacuous)."""
    body = encode({"a": "x\ue000y"}, [b"\xc0\xaf"])
    assert body == b'{"a": "x\xc0\xafy"}'
    assert encode({"a": "\ue000"}, [b"\\ud800"]) == b'{"a": "\\ud800"}'


# -- bearer JWTs against OpenID Connect sign-in ------------------------------------------------


@pytest.fixture(scope="module")
def oidc_fuzz(tmp_path_factory: pytest.TempPathFactory, corpus_kb_template: Path) -> Iterator[Any]:
    """A server signing users in with a real identity provider (both on loopback), and the provider."""
    from ragstream.config import AppConfig
    from tests.conftest import scenario_app
    from tests.oidc_provider import AUDIENCE, IdentityProvider

    data = tmp_path_factory.mktemp("fuzz-oidc") / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    provider = IdentityProvider()
    log = ServerLog()
    with log.attached(), serve_in_thread(provider.app()) as issuer:
        provider.issuer = issuer
        config = AppConfig(
            data_dir=data, run_timeout=10, oidc_audience=AUDIENCE, oidc_issuer=issuer, oidc_leeway_seconds=30
        )
        with serve_in_thread(scenario_app(config)) as url, httpx.Client(base_url=url, timeout=60) as client:
            good = {"Authorization": f"Bearer {provider.token('fuzz-user')}"}
            assert client.get("/threads", headers=good).status_code == 200  # the control: sign-in works
            yield url, provider, log, client
            assert client.get("/threads", headers=good).status_code == 200
            assert log.take() == []


def _jwt_segment(value: Any) -> str:
    from tests.oidc_provider import b64url

    return b64url(json.dumps(value).encode() if not isinstance(value, bytes) else value)


@st.composite
def fuzzed_jwts(draw: st.DrawFn, provider: Any) -> bytes:
    """A bearer JWT no valid sign-in may come from: random headers, claims, signatures and sizes,
    including tokens signed with the provider's real key whose claims are each broken somehow."""
    from tests.oidc_provider import SigningKey, forged

    rsa, ec = provider.key("RS256"), provider.key("ES256")
    kid = draw(
        st.one_of(
            st.sampled_from([rsa.kid, ec.kid, "", "../../etc/passwd"]), hostile_text(12), json_values(2)
        )
    )
    header = {
        "alg": draw(
            st.one_of(
                st.sampled_from(["RS256", "ES256", "HS256", "none", "None", "PS256", "RS512", "EdDSA", ""]),
                json_values(2),
            )
        ),
        "kid": kid,
        **draw(
            st.dictionaries(
                st.sampled_from(["typ", "crit", "jku", "x5u", "jwk", "b64", "cty", "zip"]),
                st.one_of(json_values(3), st.just("http://127.0.0.1:1/jwks"), st.just(rsa.public_jwk())),
                max_size=3,
            )
        ),
    }
    now = int(time.time())
    claims = provider.claims(draw(st.one_of(st.just("mallory"), hostile_text(10), json_values(2))))
    for name in draw(
        st.lists(st.sampled_from(["iss", "aud", "exp", "nbf", "iat", "sub", "groups"]), max_size=4)
    ):
        claims[name] = draw(
            st.one_of(
                json_values(2),
                st.integers(-(2**70), 2**70),
                st.just(now - 3600),
                st.just(now + 3600),
                st.just("https://evil.example"),
                st.just([claims["aud"], "other"]),
            )
        )
    how = draw(st.sampled_from(["garbage", "resigned", "forged", "real-key-broken-claims", "segments"]))
    if how == "garbage":
        signature = draw(st.binary(max_size=600))
        return f"{_jwt_segment(header)}.{_jwt_segment(claims)}.{_jwt_segment(signature)}".encode()
    if how == "resigned":  # a real signature by a key the provider never published
        key = SigningKey.new(draw(st.sampled_from(["RS256", "ES256"])))
        return provider.token(key=key, kid=draw(st.sampled_from([rsa.kid, ec.kid]))).encode()
    if how == "forged":  # HMAC keyed with public material, or unsigned
        secret = draw(
            st.sampled_from([rsa.public_pem(), ec.public_pem(), None, json.dumps(rsa.public_jwk()).encode()])
        )
        return forged(header, claims, secret).encode()
    if how == "real-key-broken-claims":  # the provider's own signature over claims that must not pass
        broken = draw(
            st.sampled_from(
                [
                    {"exp": now - 120},
                    {"nbf": now + 600},
                    {"aud": "https://another.api"},
                    {"iss": "https://evil.example"},
                    {"exp": None},
                    {"sub": None},
                    {"sub": ""},
                    {"sub": 42},
                    {"aud": None},
                ]
            )
        )
        extra = {k: v for k, v in claims.items() if k in ("groups",)}
        return provider.token("mallory", key=draw(st.sampled_from([rsa, ec])), **{**extra, **broken}).encode()
    parts = draw(st.lists(st.binary(max_size=1200), min_size=1, max_size=6))  # up to ~10 KB
    return b".".join(base64.urlsafe_b64encode(p).rstrip(b"=") for p in parts)


@settings(FUZZ, max_examples=max(EXAMPLES, 200))
@given(data=st.data())
def test_fuzzed_jwts_never_pass_and_never_fail_the_server(oidc_fuzz: Any, data: st.DataObject) -> None:
    url, provider, log, _ = oidc_fuzz
    token = data.draw(fuzzed_jwts(provider))
    method, target, body = data.draw(
        st.sampled_from(
            [
                (b"GET", b"/threads", b""),
                (b"GET", b"/threads/seed-a", b""),
                (b"POST", b"/agui", json.dumps(valid_body("fz-jwt", "fz-jwt-r1")).encode()),
                (b"GET", b"/health", b""),
            ]
        )
    )
    headers = [(b"Authorization", b"Bearer " + token), JSON]
    response = raw_request(url, method, target, headers, body, timeout=30)
    assert not response.timed_out
    assert log.take() == []
    if target == b"/health":  # public: the caller is anonymous, never signed in
        assert response.status == 200 and json.loads(response.body) == {"status": "ok"}
        return
    assert response.status == 401, (response.status, response.body[:300], token[:200])
    assert_json_error(response.status, response.content_type, response.body)
    assert response.headers["www-authenticate"].startswith("Bearer")
