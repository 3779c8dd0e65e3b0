"""Fixed arguments: values a tool always gets, which the model neither sees nor can override.

``bind_fixed(func, {"api_key": lambda: settings.key, "region": "eu"})`` is ``func`` without those
parameters in its signature (so not in the tool's schema), passing them on every call. A callable
value is called at each invocation and its result passed (fresh tokens, settings read late), as
pygents does with a tool's fixed keyword arguments. A name that is not a parameter of ``func`` (and
``func`` takes no ``**kwargs``) is a ``TypeError`` at registration.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["bind_fixed", "fixed_values"]


def fixed_values(fixed: Mapping[str, Any]) -> dict[str, Any]:
    """The values to pass now: callables are called."""
    return {name: value() if callable(value) else value for name, value in fixed.items()}


def bind_fixed(func: Callable[..., Any], fixed: Mapping[str, Any]) -> Callable[..., Any]:
    """``func`` with the ``fixed`` arguments bound and removed from its signature (see the module doc)."""
    if not fixed:
        return func
    signature = inspect.signature(func)
    parameters = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = sorted(name for name in fixed if name not in parameters and not takes_any)
    if unknown:
        raise TypeError(
            f"fixed arguments {unknown} are not parameters of {getattr(func, '__name__', func)!r}"
        )
    positional = [
        name
        for name in fixed
        if name in parameters and parameters[name].kind is inspect.Parameter.POSITIONAL_ONLY
    ]
    if positional:
        raise TypeError(f"fixed arguments must be keyword arguments; {positional} are positional-only")

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def bound(*args: Any, **kwargs: Any) -> Any:
            return await func(*args, **kwargs, **fixed_values(fixed))

    else:

        @functools.wraps(func)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs, **fixed_values(fixed))

    bound.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for name, p in parameters.items() if name not in fixed]
    )
    bound.__annotations__ = {k: v for k, v in getattr(func, "__annotations__", {}).items() if k not in fixed}
    return bound
