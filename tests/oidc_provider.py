"""A real OpenID Connect identity provider for tests: discovery and JWKS over HTTP, keys from cryptography.

``IdentityProvider`` holds signing keys (RSA for RS256, P-256 for ES256) made with ``cryptography``,
serves ``/.well-known/openid-configuration`` and ``/jwks`` as a Starlette app (run it with
``tests.servers.serve`` or ``tests.fuzzing.server.serve_in_thread``), counts the requests it gets,
can rotate its keys and can go down (503 on every request). ``token`` signs JWTs with PyJWT the
way an IdP would; ``forged`` builds tokens no IdP signs (``alg: none``, HMAC keyed with the public
key) by hand.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

AUDIENCE = "https://ragstream.test/api"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    kid: str
    algorithm: str
    private: Any

    @classmethod
    def new(cls, algorithm: str = "RS256") -> SigningKey:
        if algorithm == "RS256":
            private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif algorithm == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        else:
            raise ValueError(algorithm)
        return cls(f"{algorithm.lower()}-{uuid.uuid4().hex[:8]}", algorithm, private)

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.algorithms.RSAAlgorithm if self.algorithm == "RS256" else jwt.algorithms.ECAlgorithm
        jwk = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.algorithm}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass
class IdentityProvider:
    """Discovery + JWKS endpoints and the keys behind them."""

    keys: list[SigningKey] = field(default_factory=lambda: [SigningKey.new("RS256"), SigningKey.new("ES256")])
    issuer: str = ""  # set once served: the base URL
    down: bool = False
    discovery_hits: int = 0
    jwks_hits: int = 0

    def app(self) -> Starlette:
        async def discovery(request: Request) -> Response:
            self.discovery_hits += 1
            if self.down:
                return JSONResponse({"error": "maintenance"}, status_code=503)
            base = str(request.base_url).rstrip("/")
            return JSONResponse(
                {
                    "issuer": base,
                    "jwks_uri": f"{base}/jwks",
                    "authorization_endpoint": f"{base}/authorize",
                    "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                }
            )

        async def jwks(request: Request) -> Response:
            self.jwks_hits += 1
            if self.down:
                return JSONResponse({"error": "maintenance"}, status_code=503)
            return JSONResponse({"keys": [key.public_jwk() for key in self.keys]})

        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", discovery),
                Route("/jwks", jwks),
            ]
        )

    def key(self, algorithm: str = "RS256") -> SigningKey:
        return next(key for key in self.keys if key.algorithm == algorithm)

    def rotate(self, algorithm: str = "RS256", *, drop_old: bool = False) -> SigningKey:
        """Publish a new key (and optionally withdraw the old ones of that algorithm)."""
        new = SigningKey.new(algorithm)
        if drop_old:
            self.keys = [key for key in self.keys if key.algorithm != algorithm]
        self.keys.insert(0, new)
        return new

    def claims(self, sub: Any = "alice", /, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.issuer, "aud": AUDIENCE, "sub": sub, "iat": now, "nbf": now, "exp": now + 300}
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(
        self, sub: str = "alice", /, *, key: SigningKey | None = None, kid: str | None = None, **claims: Any
    ) -> str:
        """A JWT the provider signs (RS256 by default); ``None`` for a claim leaves it out."""
        key = key or self.key("RS256")
        return jwt.encode(
            self.claims(sub, **claims), key.private, algorithm=key.algorithm, headers={"kid": kid or key.kid}
        )


def forged(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None = None) -> str:
    """A JWT built by hand: HS256-signed with ``secret``, or unsigned (``alg: none``) without one."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    if secret is None:
        return f"{signing_input}."
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"
