#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run it: `bash scripts/test.sh`.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k kb`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: Chromium for the browser tests, redis-server and postgresql for the scale-out
# tests (they use the Redis on 127.0.0.1:6379 and the PostgreSQL on 127.0.0.1:5432 when those run,
# and start their own otherwise), prometheus (and its promtool) for the metrics tests, and the
# Python and PostgreSQL manuals as HTML.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# OCR of scans (the ocr extra drives it): tesseract 5 and its English model
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr)
[ -f /usr/share/tesseract-ocr/5/tessdata/eng.traineddata ] || missing+=(tesseract-ocr-eng)
# real manuals nobody here wrote, for the HTML reader's tests (tests/test_html.py)
[ -f /usr/share/doc/python3.11/html/library/functions.html ] || missing+=(python3.11-doc)
[ -f /usr/share/doc/postgresql-doc-15/html/sql-vacuum.html ] || missing+=(postgresql-doc-15)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash scripts/setup.sh test
# the real @ag-ui/client for the end-to-end tests (pinned by tests/js/package-lock.json)
(cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
# the chat page the browser tests load
bash scripts/build-frontend.sh
# the CopilotKit example (examples/copilotkit) its Node and browser tests run
bash scripts/build-copilotkit-example.sh
exec .venv/bin/python -m pytest -q "$@"
