#!/usr/bin/env bash
# What `make images BINARIES=prebuilt` needs beyond a Rust toolchain: the images
# hold static (musl) binaries, so the Rust musl target and musl-gcc (ring's C
# is compiled for that target). A fresh Debian machine has neither; `make demo`
# and tests/run.sh both call this. Installs only what is missing; as non-root
# without them it stops at once with the command to run.
set -euo pipefail
log() { printf '[musl] %s\n' "$*" >&2; }

target="$(uname -m)-unknown-linux-musl"
if ! rustup target list --installed | grep -qx "$target"; then
  log "adding the Rust target $target"
  rustup target add "$target"
fi
if ! command -v musl-gcc >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    log "musl-gcc is missing: run 'sudo apt-get install -y musl-tools', then this again"
    exit 1
  fi
  log "installing musl-tools (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools >/dev/null
fi
