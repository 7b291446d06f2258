#!/usr/bin/env bash
# Builds kube-apiserver and kube-controller-manager 1.20.2 from Debian's
# `kubernetes` source package (with Go 1.15 from bullseye: newer Go makes this
# apiserver crash, see shared/LOCAL_CLUSTER.md) and installs etcd from Debian.
# The two binaries are cached in $MINING_CLUSTER_CACHE/bin, once per machine.
set -euo pipefail

CACHE="${MINING_CLUSTER_CACHE:-/var/cache/mining-operator}"
BIN="$CACHE/bin"
log() { printf '[control-plane] %s\n' "$*" >&2; }

if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && command -v etcd >/dev/null; then
  log "cached binaries found in $BIN"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

sources=/etc/apt/sources.list.d/mining-operator-k8s.sources
if [ ! -f "$sources" ]; then
  log "adding apt sources (bookworm deb-src, bullseye for golang-1.15)"
  $SUDO tee "$sources" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: bullseye
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
log "apt-get update"
# Unrelated third-party sources on this image may be unreachable; that must not stop us.
$SUDO apt-get update -qq || log "apt-get update reported errors (continuing)"
log "installing etcd-server, golang-1.15-go, rsync, openssl, dpkg-dev"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server golang-1.15-go rsync openssl dpkg-dev >/dev/null
# Debian starts an etcd service on install; ours runs on its own data dir and ports.
$SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
pkill -x etcd 2>/dev/null || true

if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ]; then
  exit 0
fi

SRCDIR="$CACHE/src"
mkdir -p "$SRCDIR" "$BIN"
cd "$SRCDIR"
if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
  log "downloading Debian's kubernetes source package"
  apt-get source --download-only kubernetes >/dev/null
fi
tarball=$(ls kubernetes_*.orig.tar.gz | head -n1)
rm -rf tree && mkdir tree
log "unpacking $tarball"
tar -xzf "$tarball" -C tree --strip-components=1
cd tree
log "building kube-apiserver and kube-controller-manager (about 7 minutes on 2 cores)"
PATH=/usr/lib/go-1.15/bin:$PATH make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" 2>&1 \
  | while IFS= read -r line; do printf '[control-plane] make: %s\n' "$line" >&2; done
install -m 0755 _output/bin/kube-apiserver _output/bin/kube-controller-manager "$BIN/"
cd "$SRCDIR" && rm -rf tree
log "built into $BIN"
