"""Who is calling: sign-in schemes behind one hook interface, asked once per request.

A scheme is a function (or an async function) that takes the request's headers and answers with
the caller, as a ``Principal`` (a name and its groups) or just a name; ``None`` when the headers
carry nothing it recognises (another scheme may); or it raises ``Refused`` (bad credentials: 401)
or ``SignInUnavailable`` (it cannot decide now, e.g. its identity provider is down: 503). That is
the hook ``RAGSTREAM_AUTH=module:function`` plugs in, and the built-in schemes are written against
it: static tokens (``StaticTokens``) and OpenID Connect bearer JWTs (``ragstream.oidc.OIDCScheme``).
``AuthBackend`` asks the configured schemes in order (static tokens, OIDC, the hook) and the first
answer wins. With no scheme configured every caller is the single local principal ``local`` (a
one-user install).

Every route needs a principal unless the app declares it public (``AuthBackend(public=...)``), so
a new route is protected by default. On a public route a caller whose credentials are missing,
refused or cannot be checked is anonymous (``principal_of`` gives ``None``) and the route shows
only its public part. A scheme that fails in any other way (an exception, an answer that is no
principal) cannot decide either: 503 on the other routes, logged once, never a 500.
"""

from __future__ import annotations

import hmac
import importlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from .access import LOCAL_PRINCIPAL
from .config import StaticToken
from .errors import SIGN_IN_UNAVAILABLE, UNAVAILABLE_RETRY_SECONDS, error_response

__all__ = [
    "LOCAL_PRINCIPAL",
    "AuthBackend",
    "Principal",
    "Refused",
    "Scheme",
    "SignInUnavailable",
    "StaticTokens",
    "auth_error",
    "bearer_token",
    "groups_of",
    "load_scheme",
    "principal_of",
    "sign_in",
]

logger = logging.getLogger("ragstream.auth")


class Principal(BaseUser):
    """An authenticated caller: its name (``local`` without sign-in) and its groups."""

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


class Refused(AuthenticationError):
    """The credentials are not accepted: 401, with ``message`` as the RFC 6750 error description."""

    def __init__(self, message: str, *, error: str | None = "invalid_token") -> None:
        super().__init__(message)
        self.message = message
        self.error = error

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value of the 401."""
        if self.error is None:
            return "Bearer"
        description = "".join(c for c in self.message if c.isprintable() and c not in '"\\')[:200]
        return f'Bearer error="{self.error}", error_description="{description}"'


class SignInUnavailable(AuthenticationError):
    """The credentials cannot be checked now (the identity provider is unreachable): 503, never a pass."""


SignIn = Principal | str | None
#: The hook interface: the request's headers in, the caller (or ``None``) out, or ``Refused``.
Scheme = Callable[[Headers], SignIn | Awaitable[SignIn]]


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credential of an ``Authorization: Bearer <token>`` header, if there is one."""
    scheme, _, credential = headers.get("authorization", "").partition(" ")
    credential = credential.strip()
    return credential if scheme.lower() == "bearer" and credential else None


class StaticTokens:
    """The static-token scheme: ``RAGSTREAM_TOKENS``, compared in constant time."""

    def __init__(self, tokens: Mapping[str, StaticToken]) -> None:
        self.tokens = [
            (entry.token.get_secret_value().encode(), Principal(name, entry.groups))
            for name, entry in tokens.items()
        ]

    def __call__(self, headers: Headers) -> Principal | None:
        offered = bearer_token(headers)
        if offered is None:
            return None
        found = None
        encoded = offered.encode()
        for secret, principal in self.tokens:  # every entry is compared: no early exit to time
            if hmac.compare_digest(encoded, secret):
                found = principal
        return found


def load_scheme(spec: str) -> Scheme:
    """The function named by ``module:function`` (``RAGSTREAM_AUTH``); ``ValueError`` saying why not."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(
            f"RAGSTREAM_AUTH={spec!r}: module {module_name!r} cannot be imported ({exc})"
        ) from exc
    scheme = getattr(module, name, None)
    if not callable(scheme):
        raise ValueError(f"RAGSTREAM_AUTH={spec!r}: {module_name} has no function {name!r}")
    return scheme  # type: ignore[no-any-return]


def _as_principal(found: object) -> Principal:
    if isinstance(found, Principal):
        return found
    if isinstance(found, str) and found:
        return Principal(found)
    raise TypeError(f"a sign-in scheme returned {found!r}: expected a Principal, a non-empty name or None")


async def sign_in(schemes: Sequence[Scheme], headers: Mapping[str, str]) -> Principal:
    """The caller ``headers`` sign in, asking ``schemes`` in order (the first answer wins; with none,
    the local principal): ``Refused`` when none accepts them, ``SignInUnavailable`` when one cannot
    decide now or fails."""
    if not schemes:
        return Principal(LOCAL_PRINCIPAL)
    given = headers if isinstance(headers, Headers) else Headers(headers=dict(headers))
    try:
        for scheme in schemes:
            found = scheme(given)
            if inspect.isawaitable(found):
                found = await found
            if found is not None:
                return _as_principal(found)
    except AuthenticationError:  # Refused, SignInUnavailable, or Starlette's own from a hook
        raise
    except Exception as exc:  # a hook that broke (its database is down, it returned nonsense): undecided
        logger.exception("a sign-in scheme failed; the caller is answered 503")
        raise SignInUnavailable("sign-in cannot be checked just now; retry shortly") from exc
    if "authorization" in given:
        raise Refused("invalid bearer token")
    raise Refused("missing bearer token", error=None)


class AuthBackend(AuthenticationBackend):
    """Asks ``schemes`` in order; routes in ``public`` may also be called without signing in."""

    def __init__(self, schemes: Sequence[Scheme], public: Sequence[BaseRoute] = ()) -> None:
        self.schemes = list(schemes)
        self.public = list(public)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        try:
            return AuthCredentials(["authenticated"]), await sign_in(self.schemes, conn.headers)
        except AuthenticationError:
            if self._is_public(conn):
                return None  # anonymous: the route shows its public part
            raise

    def _is_public(self, conn: HTTPConnection) -> bool:
        return any(route.matches(conn.scope)[0] == Match.FULL for route in self.public)


def auth_error(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    """The answer to a request that did not sign in (``on_error`` of the authentication middleware):
    401 with a ``WWW-Authenticate`` challenge, or 503 when the credentials cannot be checked now."""
    if isinstance(exc, SignInUnavailable):
        return error_response(
            503, str(exc), code=SIGN_IN_UNAVAILABLE, headers={"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)}
        )
    challenge = exc.challenge if isinstance(exc, Refused) else "Bearer"
    return error_response(401, str(exc) or "not signed in", headers={"WWW-Authenticate": challenge})


def principal_of(conn: HTTPConnection) -> str | None:
    """The caller's principal; ``None`` for an anonymous caller of a public route."""
    user = conn.scope.get("user")
    return user.identity if isinstance(user, Principal) else None


def groups_of(conn: HTTPConnection) -> frozenset[str]:
    """The caller's groups (empty for an anonymous caller or a principal without groups)."""
    user = conn.scope.get("user")
    return user.groups if isinstance(user, Principal) else frozenset()
