#!/usr/bin/env bash
# Set up ragstream, build the chat page, ingest the sample corpus and serve it offline:
#   bash scripts/run.sh            then open http://127.0.0.1:8000/
# Extra arguments go to `ragstream serve` (e.g. `bash scripts/run.sh --port 9000`).
# The chat page builds in the background while Python installs; both are skipped when up to date,
# and so is the ingest of files already in the knowledge base (.ragstream/).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
mkdir -p .ragstream
{
  bash scripts/build-frontend.sh
  echo "run.sh: chat page build finished after $((SECONDS - start)) s"
} >.ragstream/build-frontend.log 2>&1 &
page=$!
bash scripts/setup.sh
echo "run.sh: python environment ready after $((SECONDS - start)) s"
page_status=0
wait "$page" || page_status=$?
cat .ragstream/build-frontend.log >&2
if [ "$page_status" -eq 0 ]; then
  echo "run.sh: chat page ready after $((SECONDS - start)) s"
else
  echo "run.sh: the chat page build failed (above); the server still runs, without the page" >&2
fi
exec .venv/bin/ragstream serve --ingest examples/corpus "$@"
