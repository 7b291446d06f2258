#!/usr/bin/env bash
# Installs s3s-fs, an S3 API server over a directory (crates.io, Apache-2.0),
# for the tests of tool outputs kept in an S3-compatible store: a real
# server of the S3 protocol that installs offline from the registry. Prints
# the path of the binary. Cheap when already installed. Target: $S3S_DIR
# (default tests/.tools). 0.14.1 is the newest that builds with Rust 1.95.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dir="${S3S_DIR:-$here/.tools/s3s}"
version=0.14.1
binary="$dir/bin/s3s-fs"
if [ ! -x "$binary" ] || ! grep -qx "$version" "$dir/VERSION" 2>/dev/null; then
  printf '[s3s] cargo install s3s-fs@%s\n' "$version" >&2
  # Its own target dir: the workspace's profile settings do not apply to it.
  CARGO_TARGET_DIR="$dir/target" cargo install --quiet --locked "s3s-fs@$version" --features binary --root "$dir" >&2
  rm -rf "$dir/target"
  echo "$version" > "$dir/VERSION"
fi
echo "$binary"
