"""Who is calling: bearer tokens, checked for every request by Starlette's authentication middleware.

With no tokens configured every caller is the single local principal ``local`` (a one-user
install). Otherwise ``Authorization: Bearer <token>`` must match one configured token, compared in
constant time, and the matching entry's name is the principal that owns the threads it creates;
the entry's groups are the principal's groups.

Every route needs a principal unless the app declares it public (``TokenBackend(public=...)``), so
a new route is protected by default. On a public route a caller without a valid token is
anonymous (``principal_of`` gives ``None``) and the route shows only its public part.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping, Sequence

from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from .access import LOCAL_PRINCIPAL
from .config import StaticToken
from .errors import error_response

__all__ = ["LOCAL_PRINCIPAL", "Principal", "TokenBackend", "groups_of", "principal_of", "unauthorized"]

_CHALLENGE = {"missing bearer token": "Bearer", "invalid bearer token": 'Bearer error="invalid_token"'}


class Principal(BaseUser):
    """An authenticated caller, named by its token's entry (or ``local`` without tokens), with its groups."""

    def __init__(self, name: str, groups: Iterable[str] = ()) -> None:
        self.name = name
        self.groups = frozenset(groups)

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        return self.name


class TokenBackend(AuthenticationBackend):
    """Bearer tokens by principal; routes in ``public`` may also be called without one."""

    def __init__(self, tokens: Mapping[str, StaticToken], public: Sequence[BaseRoute] = ()) -> None:
        self.tokens = {name: entry.token.get_secret_value().encode() for name, entry in tokens.items()}
        self.groups = {name: entry.groups for name, entry in tokens.items()}
        self.public = list(public)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        if not self.tokens:
            return AuthCredentials(["authenticated"]), Principal(LOCAL_PRINCIPAL)
        scheme, _, credential = conn.headers.get("authorization", "").partition(" ")
        problem = None
        principal = None
        if scheme.lower() != "bearer" or not credential.strip():
            problem = "missing bearer token"
        else:
            offered = credential.strip().encode()
            for name, secret in self.tokens.items():
                if hmac.compare_digest(offered, secret):
                    principal = name
            if principal is None:
                problem = "invalid bearer token"
        if principal is not None:
            return AuthCredentials(["authenticated"]), Principal(principal, self.groups[principal])
        if self._is_public(conn):
            return None  # anonymous: the route shows its public part
        raise AuthenticationError(problem)

    def _is_public(self, conn: HTTPConnection) -> bool:
        return any(route.matches(conn.scope)[0] == Match.FULL for route in self.public)


def unauthorized(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    """The 401 answer (``on_error`` of the authentication middleware)."""
    message = str(exc)
    return error_response(401, message, headers={"WWW-Authenticate": _CHALLENGE.get(message, "Bearer")})


def principal_of(conn: HTTPConnection) -> str | None:
    """The caller's principal; ``None`` for an anonymous caller of a public route."""
    user = conn.scope.get("user")
    return user.identity if isinstance(user, Principal) else None


def groups_of(conn: HTTPConnection) -> frozenset[str]:
    """The caller's groups (empty for an anonymous caller or a principal without groups)."""
    user = conn.scope.get("user")
    return user.groups if isinstance(user, Principal) else frozenset()
