"""Input the server refuses before doing anything: one error type, one rule for ids.

``InvalidRequest`` is answered with 422 and its field errors (``ragstream.errors``); routes, the
AG-UI binding and the thread operations all raise it, so a bad request reads the same everywhere.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

__all__ = ["InvalidRequest", "check_id", "field_errors"]

_ID = re.compile(r"[\w.:@~+=-]{1,200}")


class InvalidRequest(ValueError):
    """The request cannot be used; ``str(error)`` says why, ``details`` lists field errors."""

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.details = details


def field_errors(error: ValidationError, prefix: tuple[str | int, ...] = ()) -> list[dict[str, Any]]:
    """Field errors without echoing the input back: where, what kind, and the message."""
    return [
        {"loc": [*prefix, *e["loc"]], "type": e["type"], "message": e["msg"]}
        for e in error.errors(include_url=False, include_input=False, include_context=False)
    ]


def check_id(value: str, what: str) -> str:
    """``value`` if it is a usable thread or run id (no ``/``); ``InvalidRequest`` otherwise."""
    if not _ID.fullmatch(value):
        raise InvalidRequest(
            f"{what} must be 1-200 letters, digits or . : @ ~ + = - _ characters", [{"loc": [what]}]
        )
    return value
