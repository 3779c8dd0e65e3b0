"""The docs document what the code offers (every setting, every RUN_ERROR code, every custom event,
every metric), the README stays the front door, and every code block on the pages is run by a test."""

from __future__ import annotations

import re
from pathlib import Path

from rag_tools.progress import PROGRESS_EVENT
from rag_tools.tools import RESULT_EVENT, STREAM_EVENT
from rag_tools.tools.timing import TOOL_CALL_EVENT
from ragstream.config import AppConfig
from ragstream.runs import FailureCode
from tests.snippets import README, blocks, page, snippet

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_in_the_configuration_reference() -> None:
    reference = page("configuration")
    missing = [name for name in AppConfig.model_fields if f"| `RAGSTREAM_{name.upper()}` |" not in reference]
    assert missing == []


def test_every_run_error_code_is_documented() -> None:
    protocol = page("protocol")
    assert [code.value for code in FailureCode if f"| `{code.value}` |" not in protocol] == []


def test_custom_events_are_namespaced_and_documented() -> None:
    protocol = page("protocol")
    for event in (PROGRESS_EVENT, TOOL_CALL_EVENT, STREAM_EVENT, RESULT_EVENT):
        assert event.startswith("ragstream.")
        assert f"`{event}`" in protocol


def test_every_metric_and_the_trace_id_field_are_documented() -> None:
    from prometheus_client import Counter

    from ragstream.agui.execution import TRACE_ID_KEY
    from ragstream.observe import metrics

    operating = page("operating")
    names = [
        f"{m._name}_total" if isinstance(m, Counter) else m._name
        for m in vars(metrics).values()
        if hasattr(m, "_name") and hasattr(m, "_type")
    ]
    assert len(names) == 13
    assert [name for name in names if f"| `{name}` |" not in operating] == []
    assert f'"{TRACE_ID_KEY}"' in operating


def test_the_readme_is_the_front_door_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert snippet("run command") == "bash scripts/run.sh\n"
    assert snippet("test command") == "bash scripts/test.sh\n"
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()  # CI runs the test command
    assert "Both were checked on a fresh clone" in text
    linked = set(re.findall(r"\]\(docs/([\w/-]+\.md)\)", text))
    pages = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert linked == pages - {"index.md"}  # a link to every page, and none to a page not there


#: Blocks no test runs, and why. Nothing else belongs here.
NOT_RUN = {
    "larger reliability runs": "the hour-long fuzz and soak runs; the suite runs their bounded versions",
}


def test_every_code_block_on_the_pages_is_marked_once_and_run_by_a_test() -> None:
    found = blocks()
    unmarked = [f"{b.page.relative_to(ROOT)}:{b.line}" for b in found if b.name is None]
    assert unmarked == []
    names = [b.name for b in found]
    assert sorted({n for n in names if names.count(n) > 1}) == []
    tests = "".join(
        path.read_text() for path in sorted((ROOT / "tests").rglob("*.py")) if path.name != "snippets.py"
    )
    unread = [n for n in names if n not in NOT_RUN and f'"{n}"' not in tests]
    assert unread == []
    assert set(NOT_RUN) <= set(names)
