#!/usr/bin/env bash
# The Debian packages the tests drive beyond a Rust toolchain, Python and
# Node: curl (the chart's `helm test` runs the host's), make (`make demo`,
# `make images`), iproute2 (Pod IPs on `lo`), podman and runc (the images,
# held for the node agent), nginx-light (the reverse proxy the frontend's
# connection bounds are tested behind), openssl and ca-certificates,
# python3-yaml (a YAML 1.1 reader of crds/, as Python clients read them),
# docker-registry and apache2-utils (the local cluster's private registry
# and its htpasswd).
# tests/run.sh calls it, so a fresh machine needs nothing typed first.
# Installs only what is missing; as non-root it stops with the command to run.
set -euo pipefail
log() { printf '[packages] %s\n' "$*" >&2; }

packages=(python3 python3-yaml openssl ca-certificates curl make iproute2 podman runc musl-tools nginx-light docker-registry apache2-utils)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ "${#missing[@]}" = 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  log "missing: ${missing[*]}; run 'sudo apt-get install -y ${missing[*]}', then this again"
  exit 1
fi
log "installing ${missing[*]} (apt)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || log "apt-get update reported errors (continuing)"
apt-get install -y -qq "${missing[@]}" >/dev/null
