"""ragstream's build backend: setuptools, with the chat page built into every wheel and sdist.

``pyproject.toml`` names this module (``backend-path = ["scripts"]``). Building a wheel or an
sdist from a checkout first runs ``scripts/build-frontend.sh`` (``npm ci`` pinned by
``frontend/package-lock.json``, the type check, the Vite build into the package's ``static``
folder, each skipped when up to date), so the page is in the distribution as package data. An
sdist carries the built page, so a wheel built from it (``pip install`` of the sdist, ``uv build``)
needs no Node. Editable installs (``scripts/setup.sh``) do not build it: the repository's scripts
do, in the background (``scripts/run.sh``). Why a hook and not a committed build: server/NOTES.md,
"The wheel is the product".
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook is setuptools' own

ROOT = Path(__file__).resolve().parent.parent
#: The page the Vite build writes (``frontend/vite.config.ts``) and the package data ships.
PAGE = ROOT / "server" / "static" / "index.html"


def _build_page() -> None:
    """Build the chat page, or check that the sdist being built from carries it."""
    if (ROOT / "PKG-INFO").is_file():  # an unpacked sdist: the page was built into it
        if not PAGE.is_file():
            raise RuntimeError(f"this source archive has no chat page ({PAGE.relative_to(ROOT)})")
        return
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise RuntimeError(
            "building ragstream needs Node.js >= 20.19 and npm: the chat page (frontend/) is built "
            "into the wheel and the sdist"
        )
    subprocess.run(["bash", str(ROOT / "scripts" / "build-frontend.sh")], check=True)
    if not PAGE.is_file():
        raise RuntimeError(f"the chat page build wrote no {PAGE.relative_to(ROOT)}")


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """setuptools' wheel, with the chat page built first."""
    _build_page()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """setuptools' sdist, with the chat page built first (so a wheel built from it needs no Node)."""
    _build_page()
    return _setuptools.build_sdist(sdist_directory, config_settings)
