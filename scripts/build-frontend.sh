#!/usr/bin/env bash
# Build the chat page (frontend/) into server/static, which the server serves at "/".
# Idempotent and cheap when nothing changed: `npm ci` (exactly what frontend/package-lock.json pins)
# is skipped while node_modules was made from the same lock file, the type check and Vite build
# while server/static/index.html is newer than every source file.
# Without Node it says so and exits 0: the server runs without the page (it shows how to build it).
set -euo pipefail
cd "$(dirname "$0")/../frontend"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "build-frontend: node and npm not found; skipping the chat page build (needs Node.js >= 20.19)" >&2
  exit 0
fi

stamp=node_modules/.ragstream-lock.sha256
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_hash" >"$stamp"
fi

built=../server/static/index.html
sources=(index.html vite.config.ts tsconfig.json package.json package-lock.json src)
if [ ! -f "$built" ] || [ -n "$(find "${sources[@]}" -newer "$built" -print -quit)" ]; then
  npm run build --silent -- --logLevel warn
fi
