#!/usr/bin/env bash
# Install and build the CopilotKit example (examples/copilotkit) for its tests: `npm ci` exactly
# what its package-lock.json pins, then the Vite build into examples/copilotkit/dist.
# Idempotent and cheap when nothing changed: the install is skipped while node_modules was made
# from the same lock file, the build while dist/ is newer than every source file.
# Without Node it says so and exits 0 (the example's tests then fail with this instruction).
set -euo pipefail
cd "$(dirname "$0")/../examples/copilotkit"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "build-copilotkit-example: node and npm not found; skipping (needs Node.js >= 20)" >&2
  exit 0
fi

stamp=node_modules/.ragstream-lock.sha256
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_hash" >"$stamp"
fi

sources=(index.html vite.config.ts tsconfig.json package-lock.json src)
if [ ! -f dist/index.html ] || [ -n "$(find "${sources[@]}" -newer dist/index.html -print -quit)" ]; then
  npm run build --silent -- --logLevel warn
fi
