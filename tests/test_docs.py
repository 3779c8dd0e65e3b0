"""The README documents what the code offers: every setting, every RUN_ERROR code, every custom event."""

from __future__ import annotations

from pathlib import Path

from rag_tools.progress import PROGRESS_EVENT
from rag_tools.tools import RESULT_EVENT, STREAM_EVENT
from rag_tools.tools.timing import TOOL_CALL_EVENT
from server.config import AppConfig
from server.runs import FailureCode

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_setting_is_in_the_configuration_reference() -> None:
    missing = [name for name in AppConfig.model_fields if f"`RAGSTREAM_{name.upper()}`" not in README]
    assert missing == []


def test_every_run_error_code_is_documented() -> None:
    assert [code.value for code in FailureCode if f"| `{code.value}` |" not in README] == []


def test_custom_events_are_namespaced_and_documented() -> None:
    for event in (PROGRESS_EVENT, TOOL_CALL_EVENT, STREAM_EVENT, RESULT_EVENT):
        assert event.startswith("ragstream.")
        assert f"`{event}`" in README


def test_every_metric_and_the_trace_id_field_are_documented() -> None:
    from prometheus_client import Counter

    from server.agui.execution import TRACE_ID_KEY
    from server.observe import metrics

    names = [
        f"{m._name}_total" if isinstance(m, Counter) else m._name
        for m in vars(metrics).values()
        if hasattr(m, "_name") and hasattr(m, "_type")
    ]
    assert len(names) == 13
    assert [name for name in names if f"| `{name}` |" not in README] == []
    assert f'"{TRACE_ID_KEY}"' in README
