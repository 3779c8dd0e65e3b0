"""A sign-in hook for tests (``RAGSTREAM_AUTH=tests.auth_hook:api_keys``): API keys in a header.

What a deployment would write for keys kept in its own database: the request's headers in, the
principal and its groups out, ``None`` when the request carries no key, ``Refused`` for a bad one.
"""

from __future__ import annotations

from starlette.datastructures import Headers

from ragstream.auth import Principal, Refused

KEYS = {"key-alice": Principal("alice", ["kb-editors"]), "key-bob": Principal("bob")}
REVOKED = {"revoked"}


def api_keys(headers: Headers) -> Principal | None:
    key = headers.get("x-api-key")
    if key is None:
        return None
    if key in REVOKED:
        raise Refused("this API key was revoked")
    if key == "key-broken":  # the hook's own database is down: no exception a hook is meant to raise
        raise RuntimeError("database connection lost")
    if key == "key-nonsense":
        return 42  # type: ignore[return-value]
    principal = KEYS.get(key)
    if principal is None:
        raise Refused("unknown API key")
    return principal


async def api_keys_async(headers: Headers) -> Principal | None:
    return api_keys(headers)
