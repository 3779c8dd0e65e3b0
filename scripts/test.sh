#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it: `bash scripts/test.sh`.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k kb`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# the real @ag-ui/client for the end-to-end tests (pinned by tests/js/package-lock.json)
(cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
exec .venv/bin/python -m pytest -q "$@"
