"""Sign-in with OpenID Connect: bearer JWTs from the configured issuer, verified with PyJWT.

``OIDCScheme`` is a sign-in scheme (``ragstream.auth``): a bearer token shaped like a JWT is verified
(signature RS256 or ES256 with the issuer's published key, ``exp``/``nbf``/``iat`` with a small
leeway, ``iss``, ``aud``) and names the principal (``sub`` by default) and its groups (the
``groups`` claim by default). Anything else in the header (``alg: none``, an HMAC algorithm, whose
"secret" would be the public key everyone can read, a key meant for another algorithm) is refused
before any key is used.

``KeySet`` keeps the issuer's keys: discovery (``{issuer}/.well-known/openid-configuration``) names
the ``jwks_uri``, the keys are fetched from it with an async HTTP client (never blocking the event
loop) and kept by key id. A token with an unknown key id (the issuer rotated its keys) fetches the
set again, at most once per ``refetch_floor`` seconds, so a flood of made-up key ids costs the
issuer one request per floor. The set is also refreshed when older than ``max_age``; while the
issuer is unreachable the keys already held keep working, and a token that needs a fetch is
answered 503 (``SignInUnavailable``), never let through.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx
import jwt
from jwt import PyJWK
from starlette.datastructures import Headers

from .auth import Principal, Refused, SignInUnavailable, bearer_token
from .config import AppConfig

__all__ = ["ALGORITHMS", "KeySet", "OIDCScheme"]

logger = logging.getLogger("ragstream.auth")

#: The signature algorithms accepted: asymmetric only, so a public key can never act as a secret.
ALGORITHMS = ("RS256", "ES256")

#: Seconds after which the key set is fetched again even if every key id is known.
KEYS_MAX_AGE = 600.0

#: Verified tokens remembered (by their text), and for how long at most (never beyond ``exp``).
VERIFIED_CACHE_SIZE = 4096
VERIFIED_CACHE_SECONDS = 60.0

#: Seconds an HTTP request to the issuer may take.
FETCH_TIMEOUT = 5.0

#: Seconds after a failed fetch during which requests needing one are answered 503 at once
#: (bounded by the refetch floor), so an outage is not hammered or waited on by every request.
FAILURE_BACKOFF = 5.0


UNKNOWN_KEY = "the token's signing key is not one of the issuer's keys"


class _IssuerUnreachable(Exception):
    """Discovery or the key set could not be fetched or read; ``public`` says which for a client."""

    def __init__(self, detail: str, public: str = "the identity provider is unreachable") -> None:
        super().__init__(detail)
        self.public = public


class KeySet:
    """The issuer's signing keys by key id, fetched on demand and cached."""

    def __init__(
        self,
        issuer: str,
        *,
        refetch_floor: float = 60.0,
        max_age: float = KEYS_MAX_AGE,
        timeout: float = FETCH_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.refetch_floor = refetch_floor
        self.max_age = max_age
        self.timeout = timeout
        self.clock = clock
        self.fetches = 0  # key-set fetches made (successful or not)
        self._keys: dict[str, PyJWK] = {}
        self._jwks_uri: str | None = None
        self._fetched_at = -math.inf
        self._refetched_at = -math.inf  # the last fetch caused by an unknown key id
        self._failed_at = -math.inf
        self._problem = "the identity provider is unreachable"  # what the last failed fetch says
        self._generation = 0
        self._lock: asyncio.Lock | None = None

    async def ready(self) -> None:
        """Return when the keys are held or can be fetched now; ``SignInUnavailable`` otherwise (for
        ``/ready``: a server that can check no token cannot serve a signed-in caller)."""
        if not self._keys:
            await self._refresh(self._generation, keep_stale=False)
        if not self._keys:
            raise SignInUnavailable("the identity provider publishes no key this server verifies with")

    def _unavailable(self) -> SignInUnavailable:
        return SignInUnavailable(f"sign-in cannot be checked: {self._problem}; retry shortly")

    async def get(self, kid: str) -> PyJWK:
        """The key ``kid``; ``Refused`` when the issuer does not publish it, ``SignInUnavailable``
        when the issuer could not be asked."""
        if self.clock() - self._fetched_at > self.max_age:
            await self._refresh(self._generation, keep_stale=bool(self._keys))
        key = self._keys.get(kid)
        if key is not None:
            return key
        seen = self._generation
        lock = self._the_lock()
        if lock.locked():  # a fetch is under way: its keys answer this request too
            waited_from = self.clock()
            async with lock:
                pass
            if self._generation != seen:
                return self._known(kid)
            if self._failed_at >= waited_from:
                raise self._unavailable()
        now = self.clock()
        if now - self._refetched_at < self.refetch_floor:
            if self._failed_at < self._refetched_at:  # the issuer answered, without this key
                raise Refused(UNKNOWN_KEY)
            if now - self._failed_at < FAILURE_BACKOFF:  # it did not answer: nothing is known yet
                raise self._unavailable()
        self._refetched_at = now
        await self._refresh(seen, keep_stale=False)
        return self._known(kid)

    def _known(self, kid: str) -> PyJWK:
        key = self._keys.get(kid)
        if key is None:
            raise Refused(UNKNOWN_KEY)
        return key

    def _the_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _refresh(self, seen: int, *, keep_stale: bool) -> None:
        """Fetch the key set, unless another request did since this one saw generation ``seen``."""
        async with self._the_lock():
            if self._generation != seen:
                return
            if keep_stale and self.clock() - self._fetched_at <= self.max_age:
                return  # a request ahead of this one refreshed (or tried, and keeps the keys held)
            if self.clock() - self._failed_at < min(FAILURE_BACKOFF, self.refetch_floor) and not keep_stale:
                raise self._unavailable()
            self.fetches += 1
            try:
                keys = await self._fetch()
            except _IssuerUnreachable as exc:
                self._failed_at = self.clock()
                self._problem = exc.public
                self._jwks_uri = None  # discover again next time
                if keep_stale:
                    logger.warning("keeping the keys held: %s", exc)
                    self._fetched_at = self.clock() - self.max_age + FAILURE_BACKOFF
                    return
                logger.warning("sign-in cannot be checked: %s", exc)
                raise self._unavailable() from None
            self._keys = keys
            self._fetched_at = self.clock()
            self._generation += 1

    async def _fetch(self) -> dict[str, PyJWK]:
        async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=True) as http:
            if self._jwks_uri is None:
                discovery = await _get_json(
                    http, f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
                )
                if discovery.get("issuer") != self.issuer:
                    raise _IssuerUnreachable(
                        f"the discovery document names issuer {discovery.get('issuer')!r}, not {self.issuer!r}",
                        "the identity provider names another issuer than the one configured",
                    )
                jwks_uri = discovery.get("jwks_uri")
                if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
                    raise _IssuerUnreachable(
                        "the discovery document has no jwks_uri", "the identity provider publishes no key set"
                    )
                self._jwks_uri = jwks_uri
            document = await _get_json(http, self._jwks_uri)
        listed = document.get("keys")
        if not isinstance(listed, list):
            raise _IssuerUnreachable(
                "the key set has no keys list", "the identity provider publishes no key set"
            )
        keys: dict[str, PyJWK] = {}
        for data in listed:
            if not isinstance(data, dict) or not isinstance(data.get("kid"), str):
                continue
            if data.get("use", "sig") != "sig":
                continue
            try:
                key = PyJWK(data)
            except jwt.PyJWTError:
                continue  # a key type or curve this server does not verify with
            if key.algorithm_name in ALGORITHMS:
                keys[data["kid"]] = key
        return keys


async def _get_json(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    try:
        response = await http.get(url, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise _IssuerUnreachable(f"{url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise _IssuerUnreachable(f"{url} answered {response.status_code}")
    try:
        document = response.json()
    except ValueError as exc:
        raise _IssuerUnreachable(f"{url} did not answer JSON") from exc
    if not isinstance(document, dict):
        raise _IssuerUnreachable(f"{url} did not answer a JSON object")
    return document


class OIDCScheme:
    """Bearer JWTs of one OpenID Connect issuer, for one audience (a ``ragstream.auth`` scheme)."""

    def __init__(
        self,
        issuer: str,
        audience: str,
        *,
        principal_claim: str = "sub",
        groups_claim: str = "groups",
        leeway: float = 30.0,
        keys: KeySet | None = None,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.principal_claim = principal_claim
        self.groups_claim = groups_claim
        self.leeway = leeway
        self.keys = keys or KeySet(issuer)
        self._verified: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    @classmethod
    def from_config(cls, config: AppConfig) -> OIDCScheme:
        assert config.oidc_issuer and config.oidc_audience, "validated by AppConfig"
        return cls(
            config.oidc_issuer,
            config.oidc_audience,
            principal_claim=config.oidc_principal_claim,
            groups_claim=config.oidc_groups_claim,
            leeway=config.oidc_leeway_seconds,
            keys=KeySet(config.oidc_issuer, refetch_floor=config.oidc_jwks_refetch_seconds),
        )

    async def __call__(self, headers: Headers) -> Principal | None:
        token = bearer_token(headers)
        if token is None or token.count(".") != 2:
            return None  # not a JWT: another scheme's credential, or none
        return await self.verify(token)

    async def verify(self, token: str) -> Principal:
        """The principal a JWT signs in; ``Refused`` saying why not, or ``SignInUnavailable``.

        A token verified in the last minute (and not expired since) is answered from memory: a
        page sends the same token with every request, and PyJWT's parsing costs about half a
        millisecond per pass.
        """
        remembered = self._verified.get(token)
        if remembered is not None:
            principal, until = remembered
            if time.time() < until:
                self._verified.move_to_end(token)
                return principal
            del self._verified[token]
        principal, expires = await self._verify(token)
        self._verified[token] = (principal, min(expires, time.time() + VERIFIED_CACHE_SECONDS))
        if len(self._verified) > VERIFIED_CACHE_SIZE:
            self._verified.popitem(last=False)
        return principal

    async def _verify(self, token: str) -> tuple[Principal, float]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused("the bearer token is not a readable JWT") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise Refused(f"the token's algorithm is not accepted (only {', '.join(ALGORITHMS)})")
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise Refused("the token names no signing key (kid)")
        key = await self.keys.get(kid)
        if key.algorithm_name != algorithm:
            raise Refused("the token's algorithm is not its signing key's")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise Refused("the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise Refused("the token is not meant for this API (aud)") from None
        except jwt.InvalidIssuerError:
            raise Refused("the token is not from the configured issuer (iss)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Refused(f"the token has no {exc.claim} claim") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            raise Refused("invalid bearer token") from None
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name:
            raise Refused(f"the token has no {self.principal_claim} claim naming the principal")
        return Principal(name, _groups(claims.get(self.groups_claim))), float(claims["exp"])


def _groups(value: object) -> list[str]:
    """A groups claim: a list of names (other entries ignored), or one name."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [group for group in value if isinstance(group, str)]
    return []
