#!/usr/bin/env bash
# Build the chat page (frontend/) into server/static, which the server serves at "/".
# Usage: scripts/build-frontend.sh [--no-typecheck]   (run.sh skips the type check: it only serves)
# Idempotent and cheap when nothing changed: `npm ci` (exactly what frontend/package-lock.json pins)
# is skipped while node_modules was made from the same lock file, the type check while no source
# changed since the last one passed, the Vite build while server/static/index.html is newer than
# every source file.
# Without Node it says so and exits 0: the server runs without the page (it shows how to build it).
set -euo pipefail
cd "$(dirname "$0")/../frontend"
typecheck=1
[ "${1:-}" = "--no-typecheck" ] && typecheck=0
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

sources=(index.html vite.config.ts tsconfig.json package.json package-lock.json src)
changed_since() { [ ! -f "$1" ] || [ -n "$(find "${sources[@]}" -newer "$1" -print -quit)" ]; }
checked=node_modules/.ragstream-typechecked
if [ "$typecheck" = 1 ] && changed_since "$checked"; then
  npm exec --no -- tsc --noEmit
  touch "$checked"
fi
if changed_since ../server/static/index.html; then
  npm exec --no -- vite build --logLevel warn
fi
