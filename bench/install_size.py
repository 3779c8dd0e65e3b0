"""What installing ragstream costs: packages and disk of the default install against ``[all]``.

Builds the wheel from this checkout (as a release does: ``uv build --wheel``, which builds the chat
page into it), installs it into two new virtualenvs, the default install and ``ragstream[all]``,
and prints the package count and the size of each virtualenv side by side, with their ratios.
Sizes are ``du`` of the virtualenv (apparent sizes, so hard links from uv's cache count in full).

    .venv/bin/python -m bench.install_size [--wheel dist/ragstream-0.1.0-py3-none-any.whl]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._util import table

ROOT = Path(__file__).resolve().parent.parent
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"


def _run(*args: str | Path) -> str:
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True).stdout


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            file = Path(folder) / name
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def _install(work: Path, name: str, requirement: str) -> tuple[int, int]:
    venv = work / name
    _run(UV, "venv", "--quiet", "--python", sys.executable, venv)
    _run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", requirement)
    listed = _run(UV, "pip", "list", "--python", venv / "bin" / "python", "--format", "freeze").splitlines()
    packages = [line for line in listed if line and not line.startswith(("pip==", "setuptools=="))]
    return len(packages), _size(venv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="a built wheel (default: build one from this checkout)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragstream-install-") as tmp:
        work = Path(tmp)
        wheel = args.wheel
        if wheel is None:
            _run(UV, "build", "--wheel", "--quiet", "--out-dir", work / "dist", ROOT)
            (wheel,) = (work / "dist").glob("ragstream-*.whl")
        wheel = wheel.resolve()
        default = _install(work, "default", str(wheel))
        everything = _install(work, "all", f"{wheel}[all]")
    mb = 1024 * 1024
    print(
        table(
            ["install", "packages", "size (MB)"],
            [
                ["ragstream", default[0], default[1] / mb],
                ["ragstream[all]", everything[0], everything[1] / mb],
                [
                    "default / [all]",
                    f"{default[0] / everything[0]:.2f}x",
                    f"{default[1] / everything[1]:.2f}x",
                ],
            ],
        )
    )


if __name__ == "__main__":
    main()
