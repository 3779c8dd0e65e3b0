#!/usr/bin/env bash
# Set up ragstream, build the chat page, ingest the sample corpus and serve it offline:
#   bash scripts/run.sh            then open http://127.0.0.1:8000/
# Extra arguments go to `ragstream serve` (e.g. `bash scripts/run.sh --port 9000`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build-frontend.sh
exec .venv/bin/ragstream serve --ingest examples/corpus "$@"
