#!/usr/bin/env bash
# Build the chat page (frontend/) into server/static, which the server serves at "/".
# Idempotent: `npm ci` installs exactly what frontend/package-lock.json pins, then Vite rebuilds.
# Without Node it says so and exits 0: the server runs without the page (it shows how to build it).
set -euo pipefail
cd "$(dirname "$0")/../frontend"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "build-frontend: node and npm not found; skipping the chat page build (needs Node.js >= 20.19)" >&2
  exit 0
fi
npm ci --no-audit --no-fund
npm run build
