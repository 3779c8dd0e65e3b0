"""pydantic-ai internals ragstream relies on (``server.agui._upstream``): fail here, loudly, on an upgrade.

Each check names what moved. A failure here means: read the note in ``server/agui/_upstream.py`` on
that item and either follow the rename or replace the use with the public API that ended it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import anyio
from pydantic_ai import ToolCallPart
from pydantic_ai.messages import ModelRequest, UserPromptPart

from server.agui import _upstream


def test_approval_to_interrupt_still_builds_the_interrupt_run_finished_carries() -> None:
    call = ToolCallPart(tool_name="delete_notes", args={"pattern": "*"}, tool_call_id="call-1")
    interrupt = _upstream.approval_to_interrupt(call, {"call-1": {"reason": "deletes data"}})
    assert interrupt.tool_call_id == "call-1"
    assert interrupt.reason == "tool_call"
    assert interrupt.metadata == {"reason": "deletes data"}
    assert "approved" in interrupt.response_schema["properties"]


def test_interrupt_ids_still_map_back_to_the_tool_call() -> None:
    call = ToolCallPart(tool_name="ask_year", args={}, tool_call_id="call-7")
    interrupt = _upstream.approval_to_interrupt(call, {})
    assert _upstream.interrupt_id_to_tool_call_id(interrupt.id) == "call-7"


def test_ui_message_ids_are_still_kept_where_dump_messages_puts_them_back() -> None:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.ui.ag_ui import AGUIAdapter

    message = ModelRequest(parts=[UserPromptPart("hi")])
    assert _upstream.get_ui_message_id(message) is None
    response = ModelResponse(parts=[TextPart("hello")])
    _upstream.set_ui_message_id(response, "streamed-1")
    assert _upstream.get_ui_message_id(response) == "streamed-1"
    assert [m.id for m in AGUIAdapter.dump_messages([response])] == ["streamed-1"]


def test_the_stream_locks_the_patch_replaces_are_still_there() -> None:
    assert _upstream._missing_lock_attributes() == [], (
        "pydantic-ai moved the stream locks install_fast_stream_locks replaces; see server/agui/_upstream.py"
    )


def test_the_patch_makes_new_stream_locks_fast_and_is_idempotent() -> None:
    from pydantic_ai._utils import PeekableAsyncStream

    assert _upstream.install_fast_stream_locks()
    assert _upstream.install_fast_stream_locks()  # a second call changes nothing
    stream = PeekableAsyncStream(_upstream._NoSource())
    assert isinstance(stream._source_lock, anyio.Lock)
    assert stream._source_lock._fast_acquire  # type: ignore[attr-defined]


def test_an_app_created_with_defaults_leaves_pydantic_ai_unpatched() -> None:
    # In a fresh interpreter: other tests in this process may have installed the patch on purpose.
    script = textwrap.dedent(
        """
        from pydantic_ai import _utils, result
        before = (result.AgentStream.__post_init__, _utils.PeekableAsyncStream.__init__)
        from server.app import create_app
        from server.config import AppConfig
        from server.agui._upstream import fast_stream_locks_installed
        create_app(AppConfig(tool_dirs=[]))
        after = (result.AgentStream.__post_init__, _utils.PeekableAsyncStream.__init__)
        assert before == after, "create_app patched pydantic-ai"
        assert not fast_stream_locks_installed()
        create_app(AppConfig(tool_dirs=[]), fast_stream_locks=True)
        assert fast_stream_locks_installed()
        assert result.AgentStream.__post_init__ is not before[0]
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
