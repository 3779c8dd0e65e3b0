#!/usr/bin/env bash
# Set up ragstream, ingest the sample corpus and search it: `bash scripts/run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ragstream ingest examples/corpus
.venv/bin/ragstream search "How do I resume a dropped stream?" --limit 3
