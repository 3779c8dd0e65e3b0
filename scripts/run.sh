#!/usr/bin/env bash
# Set up ragstream, build the chat page, ingest the sample corpus and serve it offline:
#   bash scripts/run.sh            then open http://127.0.0.1:8000/
# Extra arguments go to `ragstream serve` (e.g. `bash scripts/run.sh --port 9000`).
# The chat page builds in the background (at a lower priority: the first answer does not wait for
# it) while Python installs and the corpus is ingested; the server picks the page up when it lands.
# The install, the page build and the ingest of files already in the knowledge base (.ragstream/)
# are each skipped when up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
mkdir -p .ragstream
page_log=.ragstream/build-frontend.log
(
  if nice -n 10 bash scripts/build-frontend.sh --no-typecheck >"$page_log" 2>&1 && [ -f server/static/index.html ]; then
    echo "run.sh: chat page ready after $((SECONDS - start)) s"
  else
    cat "$page_log" >&2
    echo "run.sh: no chat page (above); the server and its API run without it" >&2
  fi
) &
bash scripts/setup.sh office  # the sample corpus has Word, PowerPoint, Excel and EPUB files
echo "run.sh: python environment ready after $((SECONDS - start)) s"
exec .venv/bin/ragstream serve --ingest examples/corpus "$@"
