#!/usr/bin/env bash
# Create .venv and install ragstream into it (idempotent). Usage: scripts/setup.sh [extra...]
# e.g. `scripts/setup.sh test` installs the test extra too.
# The installer is uv (from PyPI, into .venv itself): it downloads and links the dependencies in
# parallel, several times faster than pip; if uv cannot be had, pip does the job. The install is
# skipped while pyproject.toml is unchanged since it last succeeded for these extras.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
stamp=".venv/.ragstream-installed${extras:+-$extras}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv>=0.5,<1" ||
    echo "setup: uv not available, installing with pip (slower)" >&2
fi
if [ -x .venv/bin/uv ]; then
  .venv/bin/uv pip install --quiet --python .venv/bin/python -e "$spec"
else
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e "$spec"
fi
echo "$want" >"$stamp"
