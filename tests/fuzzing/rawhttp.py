"""A minimal HTTP/1.1 client over a raw socket, for requests no well-behaved client would send.

httpx (rightly) refuses NUL in paths, header values it cannot encode, and ``Content-Length`` values
that disagree with the body. The server must survive them all, so these tests write the bytes
themselves: one request per connection, always with a deadline.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["RawResponse", "raw_request"]


@dataclass
class RawResponse:
    status: int | None
    """``None`` when the server closed the connection without answering."""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    timed_out: bool = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


def raw_request(
    base_url: str,
    method: bytes,
    target: bytes,
    headers: list[tuple[bytes, bytes]] = (),  # type: ignore[assignment]
    body: bytes = b"",
    *,
    timeout: float = 10.0,
    half_close: bool = False,
    host_header: bool = True,
    content_length: bool = True,
) -> RawResponse:
    """Send exactly these bytes (plus ``Host``, ``Connection: close`` and, unless ``headers``
    has one or ``content_length`` is false, a true ``Content-Length``); read the answer.

    ``half_close`` shuts the write side after sending, as a client that lied about the body
    length and gave up would (the server then sees a disconnect and cannot answer). Reading stops
    at the deadline (``timed_out``), at EOF, or once a ``Content-Length`` body is complete.
    """
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [method + b" " + target + b" HTTP/1.1"]
    if host_header:
        lines.append(b"Host: " + f"{host}:{port}".encode())
    lines.append(b"Connection: close")
    if content_length and not any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in headers):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    lines += [name + b": " + value for name, value in headers]
    request = b"\r\n".join(lines) + b"\r\n\r\n" + body
    deadline = time.monotonic() + timeout
    response = RawResponse(status=None)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        try:
            sock.sendall(request)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer (413, 400) and close before the body is sent
        data = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                response.timed_out = True
                break
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                response.timed_out = True
                break
            except OSError:
                break
            if not chunk:
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep and method != b"HEAD":
                length = _content_length(head)
                if length is not None and len(rest) >= length:
                    break
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not head:
        return response
    status_line, *header_lines = head.split(b"\r\n")
    try:
        response.status = int(status_line.split(b" ")[1])
    except (IndexError, ValueError):
        return response
    for line in header_lines:
        name, _, value = line.partition(b":")
        response.headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if response.headers.get("transfer-encoding", "").lower() == "chunked":
        rest = _dechunk(rest)
    response.body = rest
    return response


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None
