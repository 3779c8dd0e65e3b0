#!/usr/bin/env bash
# Create .venv and install ragstream into it (idempotent). Usage: scripts/setup.sh [extra...]
# e.g. `scripts/setup.sh test` installs the test extra too.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
.venv/bin/python -m pip install --quiet -e "$spec"
