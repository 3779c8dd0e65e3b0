"""Hypothesis strategies for hostile requests: bodies, ids, paths, headers, state proposals, and
mutated office files (the corpus's .docx, .pptx, .xlsx, .csv and .epub, damaged).

Raw bytes that no Python ``str`` can hold (lone surrogates written as JSON escapes, overlong or
otherwise invalid UTF-8) are spliced in after JSON encoding: a strategy puts ``MARKER`` into a
string, and ``encode`` replaces each marker with one of the ``RAW_FRAGMENTS`` it was given.
"""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.office_files import OFFICE_SAMPLES, sample
from tests.protocol import SERVER_OWNED, run_body

__all__ = [
    "BODY_LIMIT",
    "HOSTILE_CHARS",
    "MARKER",
    "RAW_FRAGMENTS",
    "SEED_THREADS",
    "agui_bodies",
    "auth_headers",
    "content_types",
    "encode",
    "hostile_text",
    "json_values",
    "last_event_ids",
    "mutated_office_files",
    "path_segments",
    "query_strings",
    "run_ids",
    "state_proposals",
    "thread_ids",
    "valid_body",
]

BODY_LIMIT = 1_000_000
SEED_THREADS = ("seed-a", "seed-b")
SEED_RUNS = ("seed-a-r1", "seed-b-r1")

MARKER = "\ue000"  # private use: never produced by the other strategies below

HOSTILE_CHARS = [
    "\x00",
    "\x01",
    "\x1b[31m",
    "\n",
    "\r\n",
    "\t",
    "\u202e",  # right-to-left override
    "\u200f",  # right-to-left mark
    "\u200b",  # zero width space
    "\ufeff",  # byte order mark
    "\ufffd",
    "\uffff",
    "\U0010ffff",
    "\U0001f600",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "e\u0301\u0301\u0301",
    "\u2028",
    "\u2029",
    "²",  # isdigit() but not int()
    "٣",  # Arabic-Indic three
    "ſ",  # long s: casefolds to "s"
    "K",  # Kelvin sign
    "İ",  # lower() grows it
    "'",
    '"',
    "\\",
    "%",
    "_",
    "/",
    "..",
    "%00",
    "%2F",
    "' OR 1=1 --",
    '"; DROP TABLE documents; --',
    "<script>alert(1)</script>",
    "${7*7}",
    "{{7*7}}",
    "__proto__",
    "constructor",
    "data: x\n\n",
    "id: 999\n",
]

RAW_FRAGMENTS = [
    b"\\ud800",  # lone high surrogate as a JSON escape
    b"\\udfff",  # lone low surrogate
    b"\\udc00\\ud800",  # reversed pair
    b"\\ud83d",  # half an emoji
    b"\\u0000",
    b"\\x41",  # not a JSON escape
    b"\\u12",  # truncated escape
    b"\xc0\xaf",  # overlong "/"
    b"\xe0\x80\xaf",  # overlong "/", 3 bytes
    b"\xf0\x80\x80\xaf",  # overlong "/", 4 bytes
    b"\xc0\x80",  # overlong NUL (modified UTF-8)
    b"\xed\xa0\x80",  # surrogate encoded in UTF-8
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xff\xfe",
    b"\x80",
    b"\xf8\x88\x80\x80\x80",  # 5-byte sequence
]


def hostile_text(max_size: int = 24, *, raw: bool = True) -> st.SearchStrategy[str]:
    """Short strings mixing ordinary text with the hostile characters (and ``MARKER`` if ``raw``)."""
    pieces = [st.sampled_from(HOSTILE_CHARS), st.text(max_size=6)]
    if raw:
        pieces.append(st.just(MARKER))
    return st.lists(st.one_of(*pieces), max_size=max_size).map("".join)


def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(2**200), max_value=2**200),
        st.floats(allow_nan=True, allow_infinity=True),  # NaN/Infinity encode to invalid JSON
        hostile_text(),
    )


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Arbitrary JSON-like values (some not valid JSON once encoded: NaN, Infinity)."""
    keys = st.one_of(hostile_text(8), st.sampled_from(["__proto__", "constructor", "prototype", "", "$ref"]))
    return st.recursive(
        _scalars(),
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def encode(value: Any, fragments: list[bytes] | None = None) -> bytes:
    """JSON bytes of ``value`` with each ``MARKER`` replaced by the next of ``fragments``."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    if MARKER not in text:
        return text.encode("utf-8", "surrogatepass")
    parts = text.split(MARKER)
    fragments = fragments or [b"\\ud800"]
    out = bytearray(parts[0].encode("utf-8", "surrogatepass"))
    for i, part in enumerate(parts[1:]):
        out += fragments[i % len(fragments)]
        out += part.encode("utf-8", "surrogatepass")
    return bytes(out)


def valid_body(thread: str, run: str, text: str | None = "q nightly backups", **extra: Any) -> dict[str, Any]:
    """A RunAgentInput that the server accepts (``text=None``: no messages, a restating run)."""
    return run_body(thread, run, text, **extra)


# -- ids and paths --------------------------------------------------------------------------

_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:@~+=-_"


def fresh_ids(*, unique: bool = False) -> st.SearchStrategy[str]:
    """Ids the server accepts and no seed uses (``unique``: never drawn twice, for run ids)."""
    ids = st.text(alphabet=_ID_CHARS, min_size=1, max_size=24).map(lambda s: "fz-" + s)
    return ids.map(lambda s: f"{s}-{uuid.uuid4().hex[:8]}") if unique else ids


def hostile_ids() -> st.SearchStrategy[str]:
    """Ids the server should refuse, or treat as unknown, and that resemble the seeds."""
    seed = st.sampled_from(SEED_THREADS)
    return st.one_of(
        st.sampled_from(
            [
                "",
                " ",
                ".",
                "..",
                "../seed-a",
                "seed-a/../seed-b",
                "seed-a\x00",
                "seed-a\n",
                "seed-a\r\n",
                "seed-a ",
                " seed-a",
                "SEED-A",
                "seed‐a",  # Unicode hyphen
                "seed-ａ",  # fullwidth a
                "seed-a%00",
                "seed-a%2F..",
                "*",
                "%",
                "' OR 1=1 --",
                "a" * 201,
                "a" * 5000,
                "ß" * 200,
            ]
        ),
        st.builds(lambda s, h: s + h, seed, hostile_text(6, raw=False)),
        hostile_text(12, raw=False),
    )


def thread_ids() -> st.SearchStrategy[str]:
    """The seed threads (so rejected requests do hit them), fresh ids and hostile ones."""
    return st.one_of(st.sampled_from(SEED_THREADS), fresh_ids(), hostile_ids())


def run_ids(*, unique: bool = False) -> st.SearchStrategy[str]:
    """Run ids for paths (the seed runs among them); ``unique``: only new, valid ids, for new runs."""
    if unique:
        return fresh_ids(unique=True)
    return st.one_of(st.sampled_from(SEED_RUNS), fresh_ids(), hostile_ids())


def path_segments(ids: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """A path segment for an id, as bytes on the wire: encoded, half-encoded, or raw."""

    def render(value: str, how: str) -> bytes:
        if how == "quoted":
            return quote(value, safe="").encode()
        if how == "lenient":
            return quote(value, safe="/.%").encode()
        if how == "double":
            return quote(quote(value, safe=""), safe="").encode()
        return value.encode("utf-8", "surrogatepass")  # raw: the HTTP parser may refuse it

    return st.builds(render, ids, st.sampled_from(["quoted", "quoted", "quoted", "lenient", "double", "raw"]))


def query_strings() -> st.SearchStrategy[bytes]:
    names = st.sampled_from(["limit", "page", "page_size", "after", "filter", "q", "", "limit[]"])
    values = st.one_of(
        st.integers(min_value=-(10**30), max_value=10**30).map(str),
        st.sampled_from(["", "1_0", " 1", "0x10", "1e3", "²", "٣", "NaN", "9" * 5000, "-0", "+5", "1.0"]),
        hostile_text(8, raw=False),
    )
    pair = st.builds(lambda n, v: quote(n) + "=" + quote(v, safe=""), names, values)
    return st.lists(pair, max_size=4).map(lambda ps: ("?" + "&".join(ps)).encode() if ps else b"")


# -- headers ----------------------------------------------------------------------------------


def content_types() -> st.SearchStrategy[bytes | None]:
    return st.one_of(
        st.none(),
        st.sampled_from(
            [
                b"application/json",
                b"application/json",
                b"Application/JSON",
                b"application/json; charset=utf-8",
                b"application/json; charset=utf-16",
                b"application/json;;;",
                b"application/json, text/plain",
                b"application/jsonx",
                b"application/ld+json",
                b"text/plain",
                b"text/event-stream",
                b"multipart/form-data",
                b"multipart/form-data; boundary=",
                b"multipart/form-data; boundary=x",
                b"application/x-www-form-urlencoded",
                b"",
                b" ",
                b"application/json\xff",
                b"\xff\xfe",
                b"*/*",
            ]
        ),
    )


def auth_headers() -> st.SearchStrategy[bytes | None]:
    return st.one_of(
        st.none(),
        st.sampled_from(
            [
                b"Bearer",
                b"Bearer ",
                b"Bearer  ",
                b"bearer x",
                b"Basic YWxpY2U6cw==",
                b"Bearer \xff\xfe",
                b"Bearer " + b"A" * 8000,
                b"Bearer a-token, Bearer b",
                b"Digest username=alice",
                b"\x00",
            ]
        ),
        st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b),
    )


def last_event_ids() -> st.SearchStrategy[bytes | None]:
    return st.one_of(
        st.none(),
        st.integers(min_value=-5, max_value=10**25).map(lambda i: str(i).encode()),
        # digits that str.isdigit() accepts and int() may not
        st.sampled_from([b"\xb2", "٣".encode(), b"9" * 5000, "\u00b3".encode("latin-1")]),
        st.sampled_from([b"", b" 3", b"3 ", b"0x3", b"1e3", b"3;4", b"null", b"-1"]),
    )


# -- /agui bodies -----------------------------------------------------------------------------

_ROLES = ["user", "assistant", "system", "developer", "tool", "activity", "reasoning", "admin", "", None, 7]


def _content_parts() -> st.SearchStrategy[Any]:
    source = st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.just("data"),
                "value": st.sampled_from(["", "AAAA", "a", "!!!", "=" * 9]),
                "mimeType": st.sampled_from(["image/png", "", "\x00", "text/html"]),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("url"),
                "value": st.sampled_from(
                    ["http://127.0.0.1:9/x.png", "file:///etc/passwd", "javascript:alert(1)", "", "data:,x"]
                ),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("file"),
                "value": st.sampled_from(["/etc/passwd", "file-1"]),
                "provider": st.sampled_from([None, "openai", "x"]),
            }
        ),
        json_values(4),
    )
    part = st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": hostile_text()}),
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["image", "audio", "video", "document", "binary", "nope"]),
                "source": source,
            },
            optional={"metadata": json_values(4)},
        ),
        json_values(4),
    )
    return st.lists(part, max_size=3)


def _messages() -> st.SearchStrategy[Any]:
    message = st.fixed_dictionaries(
        {"id": st.one_of(hostile_text(8), json_values(2)), "role": st.sampled_from(_ROLES)},
        optional={
            "content": st.one_of(hostile_text(), _content_parts(), json_values(4)),
            "toolCalls": st.one_of(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "id": hostile_text(6),
                            "type": st.sampled_from(["function", "nope"]),
                            "function": st.fixed_dictionaries(
                                {
                                    "name": st.sampled_from(["search", "archive_note", "rm", ""]),
                                    "arguments": st.sampled_from(["{}", "{not json", '{"query": 1}', ""]),
                                }
                            ),
                        }
                    ),
                    max_size=2,
                ),
                json_values(3),
            ),
            "toolCallId": hostile_text(6),
            "activityType": hostile_text(6),
            "name": hostile_text(6),
        },
    )
    return st.one_of(st.lists(message, max_size=3), json_values(4))


def _deep(depth: int, kind: str) -> bytes:
    """JSON text nested ``depth`` levels deep (spliced in raw: ``json.dumps`` would recurse)."""
    if kind == "list":
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


_DEEP = st.builds(
    _deep, st.sampled_from([100, 150, 250, 1000, 5000, 50_000]), st.sampled_from(["list", "dict"])
)

_FIELDS = [
    "threadId",
    "runId",
    "parentRunId",
    "messages",
    "state",
    "tools",
    "context",
    "forwardedProps",
    "resume",
    "protocolVersion",
]


def _field_value(name: str) -> st.SearchStrategy[Any]:
    special = {
        "threadId": st.one_of(thread_ids(), json_values(3)),
        "runId": st.one_of(run_ids(), json_values(3)),
        "messages": _messages(),
        "state": st.one_of(json_values(), state_proposals()),
        "tools": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.one_of(hostile_text(8), st.sampled_from(["search", "pick_color"])),
                        "description": hostile_text(8),
                    },
                    optional={"parameters": json_values(6)},
                ),
                max_size=3,
            ),
            json_values(4),
        ),
        "context": st.one_of(
            st.lists(
                st.fixed_dictionaries({"description": hostile_text(8), "value": hostile_text(8)}), max_size=3
            ),
            json_values(4),
        ),
        "resume": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "interruptId": st.one_of(hostile_text(8), st.just("int-nope")),
                        "status": st.sampled_from(["resolved", "cancelled", "maybe", ""]),
                    },
                    optional={"payload": json_values(4)},
                ),
                max_size=3,
            ),
            json_values(4),
        ),
        "protocolVersion": st.one_of(st.sampled_from(["1.0", "0.1", "99", ""]), json_values(2)),
    }
    return special.get(name, json_values())


@st.composite
def agui_bodies(draw: st.DrawFn) -> tuple[bytes, str]:
    """(body bytes, how it was made): broken JSON, wrong types, deep nesting, huge or hostile strings."""
    thread = draw(thread_ids())
    run = draw(run_ids(unique=True))
    text = draw(st.one_of(st.none(), hostile_text(raw=False).map(lambda t: "q " + t)))
    base = valid_body(thread, run, text)
    kind = draw(
        st.sampled_from(
            ["binary", "truncated", "field", "fields", "drop", "deep", "huge", "hostile", "top", "valid"]
        )
    )
    fragments = draw(st.lists(st.sampled_from(RAW_FRAGMENTS), min_size=1, max_size=3))
    if kind == "binary":
        return draw(st.binary(max_size=400)), kind
    if kind == "truncated":
        data = encode(base)
        return data[: draw(st.integers(0, max(0, len(data) - 1)))], kind
    if kind in ("field", "fields"):
        names = draw(
            st.lists(
                st.sampled_from([*_FIELDS, "unknownKey", "__proto__"]),
                min_size=1,
                max_size=1 if kind == "field" else 4,
            )
        )
        for name in names:
            base[name] = draw(_field_value(name))
        return encode(base, fragments), kind
    if kind == "drop":
        for name in draw(st.lists(st.sampled_from(_FIELDS), min_size=1, max_size=3)):
            base.pop(name, None)
        return encode(base, fragments), kind
    if kind == "deep":
        name = draw(
            st.sampled_from(["state", "forwardedProps", "messages", "tools", "context", "resume", "threadId"])
        )
        base[name] = MARKER
        return encode(base, [draw(_DEEP)]), kind
    if kind == "huge":
        size = draw(st.sampled_from([10_000, 200_000, BODY_LIMIT - 400, BODY_LIMIT + 1, 3 * BODY_LIMIT]))
        chunk = draw(st.sampled_from(["x", "é", "\U0001f600", "\x00", "\\", '"']))
        name = draw(st.sampled_from(["forwardedProps", "context", "threadId", "runId", "messages", "state"]))
        filler = chunk * (size // len(chunk.encode()) + 1)
        if name == "context":
            base["context"] = [{"description": "d", "value": filler}]
        elif name == "messages" and size >= BODY_LIMIT:
            base["messages"] = [{"id": "m", "role": "user", "content": "q " + filler}]
        elif name == "state":
            base["state"] = {"document_filter": [filler[:5000]] * (size // 5000 + 1)}
        else:
            base[name] = filler
        return encode(base), kind
    if kind == "hostile":
        name = draw(st.sampled_from(["threadId", "runId", "text", "state", "forwardedProps", "toolName"]))
        value = draw(hostile_text())
        if name == "text" and base["messages"]:
            base["messages"][0]["content"] = "q " + value
        elif name == "state":
            base["state"] = {"document_filter": [value], value: value}
        elif name == "toolName":
            base["tools"] = [{"name": value, "description": value, "parameters": {"type": "object"}}]
        else:
            base[name] = value
        return encode(base, fragments), kind
    if kind == "top":
        return encode(draw(json_values()), fragments), kind
    return encode(base), kind


# -- state proposals --------------------------------------------------------------------------

SERVER_ONLY = [
    "citation_registry",
    "next_citation",
    "pending_citations",
    "next_search",
    "question_embeddings",
    "next_qa",
    "full_outputs",
    "attachment_bytes",
]


def document_filters() -> st.SearchStrategy[Any]:
    valid = st.lists(hostile_text(12, raw=False), max_size=5)
    return st.one_of(valid, valid, st.lists(st.just("x"), min_size=51, max_size=52), json_values(4))


@st.composite
def state_proposals(draw: st.DrawFn) -> dict[str, Any]:
    """A client ``state``: prototype-pollution keys, server-owned fields of any type, a filter."""
    state: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(["__proto__", "constructor", "prototype"]), max_size=3)):
        state[key] = draw(st.one_of(st.just({"admin": True, "polluted": True}), json_values(4)))
    for key in draw(st.lists(st.sampled_from(sorted(SERVER_OWNED) + SERVER_ONLY), max_size=4)):
        state[key] = draw(json_values(6))
    if draw(st.booleans()):
        state["document_filter"] = draw(document_filters())
    for key in draw(st.lists(hostile_text(6, raw=False), max_size=2)):
        state[key] = draw(json_values(3))
    return state


def _rezip(members: list[tuple[zipfile.ZipInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info, data in members:
            archive.writestr(info, data)
    return out.getvalue()


@st.composite
def mutated_office_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """``(name, data)``: a sample office file with bytes flipped, cut short, one zip member damaged,
    dropped or emptied, or given another office format's name.

    Damaging a member inside a well-formed zip gets past the container checks into the parsers
    (broken XML, missing relationships, a truncated sheet), where most real-world damage lies.
    """
    name = draw(st.sampled_from(OFFICE_SAMPLES))
    data = sample(name)
    suffix = name[name.rindex(".") :]
    how = draw(st.sampled_from(["flip", "cut", "member", "member", "drop", "empty", "rename"]))
    if how == "flip" or (how.startswith(("member", "drop", "empty")) and suffix == ".csv"):
        mutable = bytearray(data)
        for position in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=8)):
            mutable[position] ^= draw(st.integers(1, 255))
        data = bytes(mutable)
    elif how == "cut":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "rename":
        suffix = draw(
            st.sampled_from([s for s in (".docx", ".pptx", ".xlsx", ".epub", ".csv") if s != suffix])
        )
    else:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [(info, archive.read(info)) for info in archive.infolist()]
        index = draw(st.integers(0, len(members) - 1))
        info, content = members[index]
        if how == "drop":
            del members[index]
        elif how == "empty":
            members[index] = (info, b"")
        else:
            cut = draw(st.integers(0, len(content)))
            insert = draw(
                st.sampled_from(
                    [b"", b"<", b"</w:body>", b"<!DOCTYPE x [<!ENTITY a 'aaaa'>]>", b"\x00", b"&a;"]
                )
            )
            members[index] = (info, content[:cut] + insert + content[cut + draw(st.integers(0, 64)) :])
        data = _rezip(members)
    return f"fuzz-{uuid.uuid4().hex[:8]}-{how}{suffix}", data
