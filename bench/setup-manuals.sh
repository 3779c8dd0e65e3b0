#!/usr/bin/env bash
# Install the Debian manuals bench/manuals.py evaluates on, when missing (idempotent; needs root or sudo).
# Usage: bench/setup-manuals.sh [package...]  (default: all three)
set -euo pipefail
packages=("$@")
[ ${#packages[@]} -eq 0 ] && packages=(python3.11-doc sqlite3-doc postgresql-doc-15)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
