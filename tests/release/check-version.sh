#!/usr/bin/env bash
# check-version.sh VERSION: refuses a release whose version the workspace,
# the chart and CHANGELOG.md do not all say (one version for all three).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:?usage: check-version.sh VERSION}
workspace=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
chart=$(sed -n 's/^version: *//p' charts/mining-operator/Chart.yaml)
app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/mining-operator/Chart.yaml)
fail() { printf 'release %s: %s\n' "$version" "$*" >&2; exit 1; }
[ "$workspace" = "$version" ] || fail "Cargo.toml's workspace version is $workspace"
[ "$chart" = "$version" ] || fail "Chart.yaml's version is $chart"
[ "$app" = "$version" ] || fail "Chart.yaml's appVersion is $app"
grep -q "^## $version\b" CHANGELOG.md || fail "CHANGELOG.md has no \"## $version\" section"
echo "release $version: the workspace, the chart and CHANGELOG.md agree"
