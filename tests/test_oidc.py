"""Sign-in with OpenID Connect and the auth hook, against a real identity provider on loopback.

The provider (``tests/oidc_provider.py``) serves discovery and JWKS over HTTP with keys made by
``cryptography``; ragstream runs as a real uvicorn server with ``RAGSTREAM_OIDC_ISSUER`` pointing at
it. Every refusal is checked as a client sees it: 401 with a ``WWW-Authenticate`` challenge, or
503 when the provider cannot be asked, and never a pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from ragstream.auth import SignInUnavailable
from ragstream.oidc import KeySet
from tests.conftest import scenario_app
from tests.oidc_provider import AUDIENCE, IdentityProvider, SigningKey, forged
from tests.protocol import parse_sse, run_body
from tests.servers import free_port, serve
from tests.snippets import settings

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def idp() -> AsyncIterator[IdentityProvider]:
    provider = IdentityProvider()
    async with serve(provider.app()) as issuer:
        provider.issuer = issuer
        yield provider


@asynccontextmanager
async def ragstream(config: Any, issuer: str, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """ragstream signing users in with ``issuer`` (plus ``settings``), and a client for it."""
    config.oidc_audience = AUDIENCE
    config.oidc_issuer = issuer
    for name, value in settings.items():
        setattr(config, name, value)
    async with serve(scenario_app(config)) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_refused(response: httpx.Response, fragment: str) -> None:
    """A 401 in the API's error shape, with an RFC 6750 challenge naming the problem."""
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "unauthorized"
    assert fragment in error["message"], error
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token"'), challenge
    assert fragment in challenge


async def run_as(client: httpx.AsyncClient, token: str, thread: str) -> list[str]:
    response = await client.post("/agui", json=run_body(thread, f"{thread}-r1"), headers=bearer(token))
    assert response.status_code == 200, response.text
    return [event["type"] for _, event in parse_sse(response.text)]


async def test_rs256_and_es256_tokens_sign_their_subject_in(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    async with ragstream(scenario_config, idp.issuer) as client:
        alice = idp.token("alice")
        bob = idp.token("bob", key=idp.key("ES256"))
        assert (await run_as(client, alice, "oidc-a"))[-1] == "RUN_FINISHED"
        assert (await run_as(client, bob, "oidc-b"))[-1] == "RUN_FINISHED"
        # each thread belongs to the token's subject: the other principal does not see it
        assert (await client.get("/threads/oidc-a", headers=bearer(alice))).status_code == 200
        assert (await client.get("/threads/oidc-a", headers=bearer(bob))).status_code == 404
        assert [
            t["threadId"] for t in (await client.get("/threads", headers=bearer(bob))).json()["threads"]
        ] == ["oidc-b"]
        # without a token: 401 with a bare challenge
        missing = await client.get("/threads")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        # the health check stays public and anonymous
        assert (await client.get("/health")).json() == {"status": "ok"}
    assert (idp.discovery_hits, idp.jwks_hits) == (1, 1)  # fetched once, then cached


async def test_the_principal_claim_can_be_another_claim(scenario_config: Any, idp: IdentityProvider) -> None:
    async with ragstream(scenario_config, idp.issuer, oidc_principal_claim="email") as client:
        token = idp.token("0f3a-opaque-id", email="alice@example.com")
        assert (await run_as(client, token, "oidc-email"))[-1] == "RUN_FINISHED"
        detail = (await client.get("/health", headers=bearer(token))).json()
        assert detail["status"] == "ok"
        assert_refused(await client.get("/threads", headers=bearer(idp.token("x"))), "email claim")


async def test_rotated_keys_are_picked_up_and_unknown_keys_fetch_at_most_once_per_floor(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    async with ragstream(scenario_config, idp.issuer, oidc_jwks_refetch_seconds=60) as client:
        assert (await client.get("/threads", headers=bearer(idp.token()))).status_code == 200
        assert idp.jwks_hits == 1
        new = idp.rotate("RS256", drop_old=True)
        # a token signed with the new key: its kid is unknown, so the set is fetched again
        assert (await client.get("/threads", headers=bearer(idp.token(key=new)))).status_code == 200
        assert idp.jwks_hits == 2
        # made-up key ids within the floor: refused without asking the provider
        for _ in range(5):
            stranger = SigningKey.new("RS256")
            response = await client.get("/threads", headers=bearer(idp.token(key=stranger)))
            assert_refused(response, "signing key is not one of the issuer's keys")
        assert idp.jwks_hits == 2
        # the withdrawn key's tokens are refused (the set held now no longer has it)
        old_kid_token = idp.token(key=SigningKey("rs256-gone", "RS256", new.private), kid="gone")
        assert_refused(await client.get("/threads", headers=bearer(old_kid_token)), "signing key")


async def test_time_claims_are_checked_with_a_small_leeway(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    now = int(time.time())
    async with ragstream(scenario_config, idp.issuer, oidc_leeway_seconds=30) as client:
        expired = idp.token(exp=now - 120, iat=now - 600, nbf=now - 600)
        assert_refused(await client.get("/threads", headers=bearer(expired)), "expired")
        early = idp.token(nbf=now + 600)
        assert_refused(await client.get("/threads", headers=bearer(early)), "not valid yet")
        # within the leeway: a clock a few seconds apart is not a reason to refuse
        skewed = idp.token(exp=now - 10, nbf=now + 10, iat=now)
        assert (await client.get("/threads", headers=bearer(skewed))).status_code == 200
        assert_refused(await client.get("/threads", headers=bearer(idp.token(exp=None))), "exp claim")


async def test_a_token_remembered_as_verified_still_expires(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    """Verified tokens are answered from memory, never beyond their ``exp``."""
    async with ragstream(scenario_config, idp.issuer, oidc_leeway_seconds=0) as client:
        short = idp.token(exp=int(time.time()) + 2)
        for _ in range(3):
            assert (await client.get("/threads", headers=bearer(short))).status_code == 200
        await asyncio.sleep(3)
        assert_refused(await client.get("/threads", headers=bearer(short)), "expired")


async def test_wrong_audience_and_issuer_are_refused(scenario_config: Any, idp: IdentityProvider) -> None:
    async with ragstream(scenario_config, idp.issuer) as client:
        other_api = idp.token(aud="https://another.api")
        assert_refused(await client.get("/threads", headers=bearer(other_api)), "aud")
        other_issuer = idp.token(iss="https://evil.example")
        assert_refused(await client.get("/threads", headers=bearer(other_issuer)), "iss")
        assert_refused(await client.get("/threads", headers=bearer(idp.token(aud=None))), "aud claim")


async def test_unsigned_and_algorithm_confusion_tokens_are_refused(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    rsa, ec = idp.key("RS256"), idp.key("ES256")
    claims = idp.claims("mallory")
    async with ragstream(scenario_config, idp.issuer) as client:
        assert (await client.get("/threads", headers=bearer(idp.token("warm-up")))).status_code == 200
        attacks = {
            "alg none": forged({"alg": "none", "kid": rsa.kid, "typ": "JWT"}, claims),
            "alg None": forged({"alg": "None", "kid": rsa.kid}, claims),
            "HS256 keyed with the public PEM": forged(
                {"alg": "HS256", "kid": rsa.kid}, claims, rsa.public_pem()
            ),
            "HS256 keyed with the EC PEM": forged({"alg": "HS256", "kid": ec.kid}, claims, ec.public_pem()),
            "HS256 keyed with the JWK": forged(
                {"alg": "HS256", "kid": rsa.kid}, claims, str(rsa.public_jwk()).encode()
            ),
        }
        for what, token in attacks.items():
            response = await client.get("/threads", headers=bearer(token))
            assert response.status_code == 401, what
            assert "algorithm is not accepted" in response.json()["error"]["message"], what
        # an accepted algorithm with a key made for the other one
        swapped = idp.token("mallory", key=SigningKey(ec.kid, "RS256", rsa.private))
        assert_refused(
            await client.get("/threads", headers=bearer(swapped)), "algorithm is not its signing key's"
        )
        # a real signature over other claims
        good = idp.token("alice").split(".")
        tampered = ".".join([good[0], forged({}, claims).split(".")[1], good[2]])
        assert_refused(await client.get("/threads", headers=bearer(tampered)), "invalid bearer token")
    assert idp.jwks_hits == 1  # no attack made the server fetch keys


async def test_an_unreachable_provider_answers_503_never_a_pass(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    idp.down = True
    async with ragstream(scenario_config, idp.issuer, oidc_jwks_refetch_seconds=0) as client:
        token = idp.token("alice")
        for _ in range(2):
            response = await client.get("/threads", headers=bearer(token))
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "sign_in_unavailable"
            assert "identity provider is unreachable" in response.json()["error"]["message"]
            assert response.headers["retry-after"] == "5"
        posted = await client.post("/agui", json=run_body("down-t", "down-r"), headers=bearer(token))
        assert posted.status_code == 503
        # public routes answer as for anyone
        assert (await client.get("/health", headers=bearer(token))).json() == {"status": "ok"}
        idp.down = False
        assert (await client.get("/threads", headers=bearer(token))).status_code == 200
        # down again: the keys held keep working; a token needing a new key cannot be checked
        idp.down = True
        assert (await client.get("/threads", headers=bearer(token))).status_code == 200
        rotated = idp.rotate("ES256")
        response = await client.get("/threads", headers=bearer(idp.token(key=rotated)))
        assert response.status_code == 503


async def test_a_provider_that_does_not_listen_answers_503(scenario_config: Any) -> None:
    issuer = f"http://127.0.0.1:{free_port()}"
    provider = IdentityProvider(issuer=issuer)
    async with ragstream(scenario_config, issuer) as client:
        response = await client.get("/threads", headers=bearer(provider.token()))
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "sign_in_unavailable"


async def test_readiness_asks_the_identity_provider_and_a_wrong_issuer_is_named(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    """The issuer configured with a trailing slash the provider does not write: every signed-in
    request is 503 saying that the provider names another issuer (not that it is unreachable), and
    /ready is 503 naming the identity provider; configured right, /ready asks it and is 200."""
    async with ragstream(scenario_config, idp.issuer + "/", oidc_jwks_refetch_seconds=0) as client:
        response = await client.get("/threads", headers=bearer(idp.token("alice")))
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "sign_in_unavailable"
        assert "names another issuer than the one configured" in error["message"], error
        ready = await client.get("/ready")
        assert ready.status_code == 503, ready.text
        assert ready.json()["error"]["code"] == "sign_in_unavailable"
        assert ready.json()["error"]["details"]["checks"]["identityProvider"] == "down"
        assert "the identity provider" in ready.json()["error"]["message"]
    async with ragstream(scenario_config, idp.issuer) as client:
        ready = await client.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["identityProvider"] == "ok"
        idp.down = True  # the keys are held: tokens it signed are still checked, so still ready
        assert (await client.get("/ready")).status_code == 200


def test_an_issuer_that_is_not_a_url_stops_serve(tmp_path: Any) -> None:
    from ragstream.config import AppConfig

    with pytest.raises(ValueError, match="oidc_issuer"):
        AppConfig(data_dir=tmp_path, oidc_issuer="not-a-url", oidc_audience=AUDIENCE)


async def test_editor_groups_come_from_the_groups_claim(scenario_config: Any, idp: IdentityProvider) -> None:
    upload = {"file": ("note.md", b"# Note\n\nGroups decide who edits.\n", "text/markdown")}
    async with ragstream(
        scenario_config,
        idp.issuer,
        editor_groups=["kb-editors"],
        editors=["carol"],
        oidc_groups_claim="roles",
    ) as client:
        editor = idp.token("alice", roles=["staff", "kb-editors"])
        reader = idp.token("bob", roles=["staff"], groups=["kb-editors"])  # the wrong claim
        named = idp.token("carol")
        refused = await client.post("/documents", files=upload, headers=bearer(reader))
        assert refused.status_code == 403, refused.text
        assert "RAGSTREAM_EDITOR_GROUPS" in refused.json()["error"]["message"]
        for token in (editor, named):
            accepted = await client.post("/documents", files=upload, headers=bearer(token))
            assert accepted.status_code == 202, accepted.text
        assert (await client.get("/documents", headers=bearer(reader))).status_code == 200


async def test_the_documented_settings_sign_users_in_and_name_editors_by_group(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    """docs/operating.md's OpenID Connect block, with the test's issuer and audience."""
    given = settings("oidc settings", RAGSTREAM_OIDC_ISSUER=idp.issuer, RAGSTREAM_OIDC_AUDIENCE=AUDIENCE)
    upload = {"file": ("note.md", b"# Note\n\nGroups decide who edits.\n", "text/markdown")}
    async with ragstream(scenario_config, idp.issuer, **given) as client:
        editor = idp.token("alice", groups=["staff", "kb-editors"])
        reader = idp.token("bob", groups=["staff"])
        assert (await client.post("/documents", files=upload, headers=bearer(editor))).status_code == 202
        assert (await client.post("/documents", files=upload, headers=bearer(reader))).status_code == 403
        assert (await client.get("/threads", headers=bearer(reader))).status_code == 200


async def test_a_token_with_fewer_groups_is_shown_only_what_they_read(
    scenario_config: Any, idp: IdentityProvider
) -> None:
    """Documents are read by the groups of the token in hand: alice's next token, without the
    ``hr`` group, no longer gets the HR document, the thread's cached results of it, nor the
    replay of the run that found it; a token with ``hr`` again gets them back."""
    from tests.test_document_access import HR_DOC, QUESTION
    from tests.test_documents_api import finished_job

    async with ragstream(scenario_config, idp.issuer, editors=["root"]) as client:
        client.headers.update(bearer(idp.token("root")))
        upload = {"file": ("travel-hr.md", HR_DOC, "text/markdown")}
        accepted = await client.post("/documents", files=upload, data={"groups": "hr"})
        job = await finished_job(client, accepted.json()["jobId"])
        del client.headers["Authorization"]
        hr_id = job["files"][0]["documentId"]
        member = bearer(idp.token("alice", groups=["hr", "staff"]))
        run = await client.post("/agui", json=run_body("held", "r1", QUESTION), headers=member)
        assert run.status_code == 200 and "HRQUOKKA" in run.text
        for token in (idp.token("alice", groups=["staff"]), idp.token("alice", groups="finance")):
            fewer = bearer(token)
            view = await client.get("/threads/held", headers=fewer)
            assert view.status_code == 200 and "HRQUOKKA" not in view.text
            assert (await client.get(f"/documents/{hr_id}", headers=fewer)).status_code == 404
            replay = await client.get("/threads/held/runs/r1/events?after=0", headers=fewer)
            events = [event for _, event in parse_sse(replay.text)]
            assert events[-1]["code"] == "withheld" and "HRQUOKKA" not in replay.text
        assert "HRQUOKKA" in (await client.get("/threads/held", headers=member)).text


async def test_static_tokens_and_oidc_together(scenario_config: Any, idp: IdentityProvider) -> None:
    async with ragstream(scenario_config, idp.issuer, tokens={"ci": "ci-secret"}) as client:
        assert (await client.get("/threads", headers=bearer("ci-secret"))).status_code == 200
        assert (await client.get("/threads", headers=bearer(idp.token()))).status_code == 200
        wrong = await client.get("/threads", headers=bearer("not-a-secret"))
        assert wrong.status_code == 401
        assert wrong.json()["error"]["message"] == "invalid bearer token"


# -- the auth hook ------------------------------------------------------------------------------


@pytest.mark.parametrize("hook", ["tests.auth_hook:api_keys", "tests.auth_hook:api_keys_async"])
async def test_the_auth_hook_signs_in_refuses_and_passes(scenario_config: Any, hook: str) -> None:
    scenario_config.auth = hook
    scenario_config.editor_groups = ["kb-editors"]
    upload = {"file": ("hook.md", b"# Hook\n\nA hook names editors.\n", "text/markdown")}
    async with (
        serve(scenario_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        alice, bob = {"X-Api-Key": "key-alice"}, {"X-Api-Key": "key-bob"}
        response = await client.post("/agui", json=run_body("hook-t", "hook-r"), headers=alice)
        assert [e["type"] for _, e in parse_sse(response.text)][-1] == "RUN_FINISHED"
        assert (await client.get("/threads/hook-t", headers=alice)).status_code == 200
        assert (await client.get("/threads/hook-t", headers=bob)).status_code == 404
        assert (await client.post("/documents", files=upload, headers=alice)).status_code == 202
        assert (await client.post("/documents", files=upload, headers=bob)).status_code == 403
        refused = await client.get("/threads", headers={"X-Api-Key": "revoked"})
        assert refused.status_code == 401
        assert refused.json()["error"]["message"] == "this API key was revoked"
        assert 'error_description="this API key was revoked"' in refused.headers["www-authenticate"]
        nothing = await client.get("/threads")
        assert (nothing.status_code, nothing.json()["error"]["message"]) == (401, "missing bearer token")
        assert (await client.get("/capabilities", headers={"X-Api-Key": "revoked"})).status_code == 200
        # a hook that breaks cannot decide: 503 where sign-in is needed, anonymous where it is not
        for key in ("key-broken", "key-nonsense"):
            broken = await client.get("/threads", headers={"X-Api-Key": key})
            assert broken.status_code == 503 and broken.json()["error"]["code"] == "sign_in_unavailable"
            assert broken.headers["retry-after"] == "5" and "database" not in broken.text
            assert (await client.get("/health", headers={"X-Api-Key": key})).json() == {"status": "ok"}
            assert (await client.get("/capabilities", headers={"X-Api-Key": key})).status_code == 200


def test_a_hook_that_cannot_be_loaded_stops_serve(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.servers import ROOT

    result = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "serve", "--data-dir", str(tmp_path), "--port", "0"],
        env={"PATH": "/usr/bin:/bin", "RAGSTREAM_AUTH": "tests.auth_hook:missing", "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert (
        "RAGSTREAM_AUTH='tests.auth_hook:missing': tests.auth_hook has no function 'missing'" in result.stderr
    )


# -- the key set alone, on a clock the test moves ----------------------------------------------------


async def test_the_refetch_floor_and_concurrent_fetches(idp: IdentityProvider) -> None:
    now = [1000.0]
    keys = KeySet(idp.issuer, refetch_floor=60, clock=lambda: now[0])
    first = idp.key("RS256")
    assert (await keys.get(first.kid)).key_id == first.kid
    assert keys.fetches == 1
    # fifty requests with one new key id at once: one fetch
    new = idp.rotate("ES256")
    found = await asyncio.gather(*(keys.get(new.kid) for _ in range(50)))
    assert {key.key_id for key in found} == {new.kid}
    assert keys.fetches == 2
    # an unknown id within the floor: no fetch; after it: one more
    with pytest.raises(Exception, match="signing key"):
        await keys.get("made-up")
    assert keys.fetches == 2
    now[0] += 61
    with pytest.raises(Exception, match="signing key"):
        await keys.get("made-up")
    assert keys.fetches == 3
    # the set is refreshed when it is old, even when every id is known
    now[0] += 601
    await keys.get(new.kid)
    assert keys.fetches == 4
    # an outage while old keys are held: they keep working, and the provider is asked again later
    idp.down = True
    now[0] += 601
    assert (await keys.get(new.kid)).key_id == new.kid
    assert keys.fetches == 5
    assert (await keys.get(new.kid)).key_id == new.kid
    assert keys.fetches == 5  # not again right away


async def test_an_outage_is_never_answered_as_an_unknown_key(idp: IdentityProvider) -> None:
    """A refetch for a new key id that failed (the provider was down) does not use up the refetch
    floor: once the provider answers again the key is found, not refused as unknown for a minute."""
    now = [1000.0]
    keys = KeySet(idp.issuer, refetch_floor=60, clock=lambda: now[0])
    await keys.get(idp.key("RS256").kid)
    rotated = idp.rotate("ES256")
    idp.down = True
    with pytest.raises(SignInUnavailable):
        await keys.get(rotated.kid)
    now[0] += 1
    with pytest.raises(SignInUnavailable):  # still down as far as anyone knows: not "unknown key"
        await keys.get(rotated.kid)
    idp.down = False
    now[0] += 5  # the 503's Retry-After
    assert (await keys.get(rotated.kid)).key_id == rotated.kid


async def test_requests_waiting_on_a_failed_refresh_keep_the_keys_held(idp: IdentityProvider) -> None:
    """Keys too old to trust without asking again, and the provider down: one request asks, the ones
    queued behind it use the keys held instead of each waiting for a fetch of their own."""
    now = [1000.0]
    keys = KeySet(idp.issuer, refetch_floor=60, clock=lambda: now[0])
    held = idp.key("RS256")
    await keys.get(held.kid)
    before = keys.fetches
    idp.down = True
    now[0] += 601
    found = await asyncio.gather(*(keys.get(held.kid) for _ in range(5)))
    assert {key.key_id for key in found} == {held.kid}
    assert keys.fetches == before + 1
