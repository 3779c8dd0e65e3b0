"""ragstream: the AG-UI chat server (this folder, ``server/``, installs as the package ``ragstream``).

The names an embedding app or a sign-in hook imports: ``create_app``, ``Principal``, ``Refused``,
``SignInUnavailable`` and ``__version__``. They load on first use, so ``ragstream --help`` does not
import the whole app.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .auth import Principal, Refused, SignInUnavailable

__all__ = ["Principal", "Refused", "SignInUnavailable", "__version__", "create_app"]

_WHERE = {"create_app": ".app", "Principal": ".auth", "Refused": ".auth", "SignInUnavailable": ".auth"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from .config import installed_version

        return installed_version()
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
