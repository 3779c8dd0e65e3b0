"""The tool system through the AG-UI server: user tools from a directory, the approval policy
across a restart, and progress events reaching @ag-ui/client before a tool's result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.agui_client import drive
from tests.conftest import ROOT, scenario_app
from tests.servers import serve

CUSTOM_TOOLS = ROOT / "examples" / "custom_tools"


async def test_user_tools_from_a_directory_work_and_ask_for_approval(
    scenario_config: Any, tmp_path: Path
) -> None:
    scenario_config.tool_dirs = [CUSTOM_TOOLS]
    async with serve(scenario_app(scenario_config)) as url:
        report = await drive(
            tmp_path,
            url,
            "custom-tools",
            [
                {"op": "user", "text": "convert 3 km mi"},
                {"op": "run"},
                {"op": "user", "text": "note ship the release on Friday"},
                {"op": "run"},
                {"op": "approve", "approved": True, "editedArgs": {"text": "ship the release on Monday"}},
            ],
        )
    converted, asked, approved = [s for s in report["steps"] if s["op"] in ("run", "approve")]
    for step in (converted, asked, approved):
        assert step["warnings"] == []
        assert step["errors"] == []
    assert converted["messages"][-1]["content"] == "convert_units: 3 km = 1.864 mi"
    assert asked["finished"]["outcome"] == "interrupt"
    interrupt = asked["finished"]["interrupts"][0]
    assert interrupt["metadata"] == {
        "reason": "writes to the team's notes file",
        "risk": "medium",
        "policy": "required by the tool",
        "tool": "save_note",
    }
    assert approved["finished"]["outcome"] == "success"
    notes = Path(scenario_config.data_dir) / "notes.txt"
    assert notes.read_text() == "ship the release on Monday\n"  # the edited arguments were used


async def test_approval_policy_is_per_thread_and_survives_a_restart(
    scenario_config: Any, tmp_path: Path
) -> None:
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as http:
        first = await drive(
            tmp_path, url, "guarded", [{"op": "user", "text": "nightly backups"}, {"op": "run"}]
        )
        assert first["steps"][-1]["finished"]["outcome"] == "success"
        response = await http.put(
            "/threads/guarded/approval-policy", json={"needUserApproveTools": ["sear*"]}
        )
        assert response.status_code == 200, response.text
        assert (await http.put("/threads/guarded/approval-policy", json={"tools": []})).status_code == 422
        assert (
            await http.put("/threads/unknown/approval-policy", json={"needUserApproveTools": []})
        ).status_code == 404
        other = await drive(
            tmp_path, url, "unguarded", [{"op": "user", "text": "nightly backups"}, {"op": "run"}]
        )
        assert other["steps"][-1]["finished"]["outcome"] == "success"  # another thread is not affected

    async with (
        serve(scenario_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):  # a restart
        view = (await http.get("/threads/guarded")).json()
        assert view["state"]["need_user_approve_tools"] == ["sear*"]
        report = await drive(
            tmp_path,
            url,
            "guarded",
            [{"op": "hydrate"}, {"op": "user", "text": "opening hours"}, {"op": "run"}],
        )
        run = report["steps"][-1]
        assert run["finished"]["outcome"] == "interrupt"
        assert run["finished"]["interrupts"][0]["metadata"]["policy"] == "sear*"
        assert run["warnings"] == []


async def test_search_progress_reaches_the_client_before_the_result(
    scenario_server: str, tmp_path: Path
) -> None:
    report = await drive(
        tmp_path, scenario_server, "progress", [{"op": "user", "text": "nightly backups"}, {"op": "run"}]
    )
    events = report["steps"][-1]["events"]
    start = next(
        i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_START" and e["toolCallName"] == "search"
    )
    call_id = events[start]["toolCallId"]
    result = next(
        i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call_id
    )
    progress = [
        (i, e["value"])
        for i, e in enumerate(events)
        if e["type"] == "CUSTOM" and e["name"] == "ragstream.progress"
    ]
    assert [v["message"] for _, v in progress] == ["Searching for “nightly backups”", "Found 5 passages"]
    assert all(start < i < result for i, _ in progress)
    assert all(v["toolCallId"] == call_id and v["tool"] == "search" for _, v in progress)
