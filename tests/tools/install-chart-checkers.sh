#!/usr/bin/env bash
# Installs the third-party checkers the chart tests run on its renders:
# kubernetes-validate (JSON schemas of Kubernetes 1.25–1.37, strict mode)
# and checkov (the Kubernetes policy scanner), from PyPI into one target
# directory. Prints that directory (for PYTHONPATH; checkov's script is
# bin/checkov in it). Cheap when already installed. Target: $CHECKERS_DIR
# (default tests/.tools/chart-checkers).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
KUBERNETES_VALIDATE_VERSION=1.37.0
CHECKOV_VERSION=3.3.30
dir="${CHECKERS_DIR:-$here/.tools/chart-checkers}"
stamp="$dir/.kubernetes-validate-$KUBERNETES_VALIDATE_VERSION-checkov-$CHECKOV_VERSION"
if [ ! -f "$stamp" ]; then
  printf '[chart-checkers] pip install kubernetes-validate==%s checkov==%s\n' \
    "$KUBERNETES_VALIDATE_VERSION" "$CHECKOV_VERSION" >&2
  # Tests run in parallel: each installs into its own directory, then one
  # rename puts it in place (a loser finds it there and uses it).
  partial="$dir.$$.tmp"
  rm -rf "$partial"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --target "$partial" \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "checkov==$CHECKOV_VERSION" >&2
  touch "$partial/$(basename "$stamp")"
  mkdir -p "$(dirname "$dir")"
  if ! mv -T "$partial" "$dir" 2>/dev/null; then
    rm -rf "$partial"
    [ -f "$stamp" ] || { rm -rf "$dir"; exec "$0"; }
  fi
fi
printf '%s\n' "$dir"
