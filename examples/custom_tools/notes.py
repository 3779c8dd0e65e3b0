"""A user tool that changes something outside the conversation, so it always asks first.

``ApprovalInfo(required=True)`` makes every call wait for the user's approval: the run ends with
an AG-UI interrupt carrying the reason and risk below, and the note is written only once the user
approves (possibly after editing the text).
"""

from pathlib import Path

from pydantic_ai import RunContext

from rag_tools import ChatDeps
from rag_tools.tools import ApprovalInfo, tool_options


@tool_options(approval=ApprovalInfo("writes to the team's notes file", risk="medium", required=True))
async def save_note(ctx: RunContext[ChatDeps], text: str) -> str:
    """Save a note to the team's notes file.

    Args:
        text: The note, one or two sentences.
    """
    path = Path(ctx.deps.config.data_dir) / "notes.txt"
    with path.open("a", encoding="utf-8") as notes:
        notes.write(text.strip() + "\n")
    return f"Saved the note ({len(text.strip())} characters)."


TOOLS = [save_note]
