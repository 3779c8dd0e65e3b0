"""Tool names: the scoped name a subtool is registered under and the name the model calls it.

A subtool joins its parent's prefixed group: registered as ``parent.child`` (pygents' shape, how
the registry finds it), called ``parent_child`` by the model (a dot is not valid in a model tool
name). Everything that takes a tool name from a person (approval patterns, per-tool hooks) goes
through ``model_name``, so either spelling names the same tool.
"""

from __future__ import annotations

__all__ = ["model_name"]


def model_name(name: str) -> str:
    """The name the model calls the tool registered as ``name``; patterns too (``users.*`` ->
    ``users_*``). A model tool name never holds a dot, so a dotted name can only mean a scoped one."""
    return name.replace(".", "_")
