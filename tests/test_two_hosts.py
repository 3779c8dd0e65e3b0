"""Two hosts behind a load balancer: two ``ragstream serve`` processes on separate ports, sharing the
knowledge base on S3 (moto's server), threads in PostgreSQL and run locks, event logs and the job
queue in Redis, exactly as docs/deployment.md configures them.

One conversation alternates between the hosts through the real ``@ag-ui/client``; an editor's upload
on one host is ingested by whichever host takes the job and searchable from the other; a reader may
not upload; and after Redis is emptied and both hosts restart on fresh local disks, the thread is
still whole on both and goes on.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from tests.agui_client import drive
from tests.s3_helpers import S3Location
from tests.servers import served
from tests.snippets import snippet_env

pytestmark = pytest.mark.timeout(900)

TOKENS = {"alice": "alice-token", "bob": "bob-token"}
ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}
FACTS = (
    "# Zephyr release train\n\n"
    "The Zephyr release train freezes every Thursday at 14:00 UTC.\n\n"
    "## Approvals\n\n"
    "Production database changes on Zephyr are approved by the data platform lead, Priya Raman.\n"
)


def deployment_env(s3: S3Location, database_url: str, redis_url: str, prefix: str) -> dict[str, str]:
    """The settings of docs/deployment.md's "several hosts" block, for these test services."""
    env = {
        **s3.env,  # RAGSTREAM_KB_URI=s3://..., AWS_ENDPOINT_URL, AWS_* credentials, AWS_ALLOW_HTTP
        "RAGSTREAM_DATABASE_URL": database_url,
        "RAGSTREAM_REDIS_URL": redis_url,
        "RAGSTREAM_REDIS_PREFIX": prefix,
        "RAGSTREAM_TOKENS": json.dumps(TOKENS),
        "RAGSTREAM_EDITORS": json.dumps(["alice"]),
    }
    assert set(snippet_env("several hosts")) <= set(env)  # every variable the block sets, set here
    return env


async def finished_job(http: httpx.AsyncClient, url: str, job_id: str) -> dict[str, Any]:
    for _ in range(900):
        response = await http.get(f"{url}/documents/jobs/{job_id}", headers=ALICE)
        assert response.status_code == 200, response.text
        job = response.json()
        if job["state"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")


async def turn(tmp_path: Path, url: str, thread: str, question: str) -> dict[str, Any]:
    """One turn on ``url``: a client built from the thread as that host serves it, then a run."""
    report = await drive(
        tmp_path,
        url,
        thread,
        [{"op": "hydrate"}, {"op": "user", "text": question}, {"op": "run"}],
        token=TOKENS["alice"],
    )
    hydrate, run = report["steps"][0], report["steps"][2]
    assert hydrate["status"] in (200, 404), hydrate
    assert run["finished"] is not None and run["failed"] is None and run["runError"] is None, run
    return run


async def thread_view(http: httpx.AsyncClient, url: str, thread: str) -> dict[str, Any]:
    response = await http.get(f"{url}/threads/{thread}", headers=ALICE)
    assert response.status_code == 200, response.text
    return response.json()


def answer_of(run: dict[str, Any]) -> str:
    return "".join(e["delta"] for e in run["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")


def conversation(view: dict[str, Any]) -> list[tuple[str, str]]:
    """The questions and the answers' text (tool calls and results left out)."""
    return [
        (m["role"], m["content"])
        for m in view["messages"]
        if m["role"] == "user" or (m["role"] == "assistant" and m.get("content"))
    ]


async def empty_redis(redis_url: str, prefix: str) -> int:
    """Delete every key of this deployment (all keys under its prefix); how many there were."""
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
        return len(keys)
    finally:
        await client.aclose()


async def test_two_hosts_share_one_deployment(
    s3_location: S3Location, postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    env = deployment_env(s3_location, postgres_url, redis_url, redis_prefix)
    thread = "two-hosts"
    async with (
        served(env, tmp_path / "host-a") as host_a,
        served(env, tmp_path / "host-b") as host_b,
        httpx.AsyncClient(timeout=60) as http,
    ):
        # an editor uploads on host A; the job is visible from host B and ends done
        upload = await http.post(
            f"{host_a}/documents",
            files=[("file", ("zephyr.md", FACTS.encode(), "text/markdown"))],
            headers=ALICE,
        )
        assert upload.status_code == 202, upload.text
        job = await finished_job(http, host_b, upload.json()["jobId"])
        assert job["state"] == "done" and [(f["name"], f["status"]) for f in job["files"]] == [
            ("zephyr.md", "added")
        ], job
        # a reader may not change the knowledge base, on either host, but reads it
        refused = await http.post(
            f"{host_b}/documents", files=[("file", ("x.md", b"# x\n\ny", "text/markdown"))], headers=BOB
        )
        assert refused.status_code == 403 and "RAGSTREAM_EDITORS" in refused.text
        for url in (host_a, host_b):
            listing = await http.get(f"{url}/documents", headers=BOB)
            assert "zephyr.md" in {d["uri"] for d in listing.json()["documents"]}

        # one conversation, alternating between the hosts
        first = await turn(tmp_path, host_b, thread, "When does the Zephyr release train freeze?")
        assert "Thursday" in answer_of(first)
        second = await turn(tmp_path, host_a, thread, "Who approves production database changes on Zephyr?")
        assert "Priya Raman" in answer_of(second)
        third = await turn(tmp_path, host_b, thread, "And at what time does it freeze?")
        assert "14:00" in answer_of(third)

        views = [await thread_view(http, url, thread) for url in (host_a, host_b)]
        assert views[0]["messages"] == views[1]["messages"]
        assert views[0]["state"] == views[1]["state"]
        before = conversation(views[0])
        assert [role for role, _ in before] == ["user", "assistant"] * 3
        assert views[0]["state"]["citations"], "the answers' citation cards are in the thread's state"
        assert {c["uri"] for c in views[0]["state"]["citations"].values()} == {"zephyr.md"}
        # another principal cannot see the thread on either host
        for url in (host_a, host_b):
            assert (await http.get(f"{url}/threads/{thread}", headers=BOB)).status_code == 404

    # Redis emptied and both hosts restarted on fresh local disks: PostgreSQL and S3 keep everything
    assert await empty_redis(redis_url, redis_prefix) > 0
    async with (
        served(env, tmp_path / "host-a-again") as host_a,
        served(env, tmp_path / "host-b-again") as host_b,
        httpx.AsyncClient(timeout=60) as http,
    ):
        for url in (host_a, host_b):
            view = await thread_view(http, url, thread)
            assert conversation(view) == before
            assert view["state"] == views[0]["state"]
        fourth = await turn(tmp_path, host_a, thread, "Who approves production database changes on Zephyr?")
        assert "Priya Raman" in answer_of(fourth)
        after = conversation(await thread_view(http, host_b, thread))
        assert after[: len(before)] == before and len(after) == len(before) + 2

        # a branch made on one host is shown, and continued, on the other
        edit = await drive(
            tmp_path,
            host_a,
            thread,
            [
                {"op": "hydrate"},
                {"op": "edit", "nth": 1, "text": "When does the Zephyr release train freeze?"},
                {"op": "run"},
            ],
            token=TOKENS["alice"],
        )
        edited = edit["steps"][1]
        assert "Thursday" in answer_of(edit["steps"][2])
        view_b = await thread_view(http, host_b, thread)
        assert [m["id"] for m in view_b["messages"]] == [m["id"] for m in edit["steps"][2]["messages"]]
        assert view_b["branches"][edited["id"]] == {"ids": [edited["replaced"], edited["id"]], "index": 1}
        onward = await turn(tmp_path, host_b, thread, "Who approves production database changes on Zephyr?")
        assert "Priya Raman" in answer_of(onward)
        questions = [
            text for role, text in conversation(await thread_view(http, host_a, thread)) if role == "user"
        ]
        assert questions == [
            "When does the Zephyr release train freeze?",
            "When does the Zephyr release train freeze?",
            "Who approves production database changes on Zephyr?",
        ]
        switched = await http.post(
            f"{host_b}/threads/{thread}/switch", json={"messageId": edited["replaced"]}, headers=ALICE
        )
        assert switched.status_code == 200, switched.text
        view_a = await thread_view(http, host_a, thread)
        assert conversation(view_a) == after and view_a["state"] == switched.json()["state"]
