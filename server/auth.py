"""Bearer-token authentication: who is calling.

With no tokens configured every caller is the single local principal ``local`` (a one-user
install). Otherwise ``Authorization: Bearer <token>`` must match one configured token, compared in
constant time, and the matching entry's name is the principal that owns the threads it creates.
"""

from __future__ import annotations

import hmac

from pydantic import SecretStr
from starlette.requests import HTTPConnection

from .errors import ApiError

__all__ = ["LOCAL_PRINCIPAL", "authenticate"]

LOCAL_PRINCIPAL = "local"


def authenticate(connection: HTTPConnection, tokens: dict[str, SecretStr]) -> str:
    """The principal behind this request; ``ApiError(401)`` when it proves no identity."""
    if not tokens:
        return LOCAL_PRINCIPAL
    header = connection.headers.get("authorization", "")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise ApiError(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    offered = credential.strip().encode()
    principal = None
    for name, secret in tokens.items():
        if hmac.compare_digest(offered, secret.get_secret_value().encode()):
            principal = name
    if principal is None:
        raise ApiError(
            401, "invalid bearer token", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
        )
    return principal
