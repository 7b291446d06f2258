#!/usr/bin/env bash
# Builds Kubernetes 1.36's standalone CRD server (k8s.io/apiextensions-apiserver,
# the code every kube-apiserver serves CustomResourceDefinitions with) from
# Debian sid's Go source packages, with sid's Go 1.27, and prints its path.
#
# Why: the local control plane is 1.20 (the newest kube-apiserver Debian
# builds), which drops the CRDs' CEL rules and knows nothing of the formats
# and bounds newer servers check. tests/cluster-tests/tests/crd_server.rs
# serves crds/ with this binary. Nothing is installed into the system: the
# packages are fetched with `apt-get download` through a private apt
# configuration and unpacked with `dpkg-deb -x`; the binary is cached in
# $MINING_CLUSTER_CACHE/crd-server-$VERSION, once per machine (5 minutes of CPU
# the first time, ~320 MB of packages).
set -euo pipefail

VERSION=0.36.4
CACHE="${MINING_CLUSTER_CACHE:-/var/cache/mining-operator}"
OUT="$CACHE/crd-server-$VERSION"
BINARY="$OUT/apiextensions-apiserver"
log() { printf '[crd-server] %s\n' "$*" >&2; }

if [ -x "$BINARY" ]; then
  echo "$BINARY"
  exit 0
fi

WORK="$OUT.build"
rm -rf "$WORK"
mkdir -p "$WORK"/{lists/partial,cache/archives/partial,debs,root,gopath}
cat >"$WORK/sources.list" <<'SRC'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
SRC
apt_options=(
  -o "Dir::Etc::SourceList=$WORK/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/cache" -o Dir::State::status=/dev/null
  -o APT::Sandbox::User=root
)
log "reading Debian sid's package lists (a private apt configuration)"
apt-get "${apt_options[@]}" update -qq
package="golang-k8s-apiextensions-apiserver-dev"
available=$(apt-cache "${apt_options[@]}" show "$package" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
case "$available" in
  "$VERSION"-*) ;;
  *) log "sid has $package ${available:-nowhere}, not $VERSION (update VERSION here and in the test)"; exit 1 ;;
esac
# The Go sources it needs: every golang-*-dev package in its dependency closure.
apt-cache "${apt_options[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$package" 2>/dev/null \
  | grep -E '^golang-[^ ]*-dev$' | sort -u >"$WORK/sources.txt"
log "downloading Go 1.27 and $(wc -l <"$WORK/sources.txt") Go source packages"
(cd "$WORK/debs" && apt-get "${apt_options[@]}" download -qq golang-1.27-go golang-1.27-src $(cat "$WORK/sources.txt"))
for deb in "$WORK"/debs/golang-1.27-*.deb; do dpkg-deb -x "$deb" "$WORK/root"; done
for deb in "$WORK"/debs/golang-*-dev_*.deb; do dpkg-deb -x "$deb" "$WORK/gopath"; done

log "building k8s.io/apiextensions-apiserver $VERSION (GOPATH mode, as Debian builds Go packages)"
export GOROOT="$WORK/root/usr/lib/go-1.27" GOPATH="$WORK/gopath/usr/share/gocode" GOCACHE="$WORK/gocache"
export GO111MODULE=off CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=local
mkdir -p "$OUT"
"$GOROOT/bin/go" build -o "$BINARY.tmp" k8s.io/apiextensions-apiserver
mv "$BINARY.tmp" "$BINARY"
rm -rf "$WORK"
log "built $BINARY"
echo "$BINARY"
