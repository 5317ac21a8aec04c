#!/usr/bin/env bash
# Mount the embedded default (rw zones `cache` and `workspace` under
# ./.sandbox of the current directory), show it, write a file through it,
# and unmount — the unmount runs even if a step fails.
set -euo pipefail
here=$(pwd)
cd "$(dirname "$0")/.."
command -v fusermount3 >/dev/null || {
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq fuse3 >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq fuse3 >/dev/null; fi
}
cargo build --release --quiet
bin=$(pwd)/target/release/zonemount
cd "$here"
mnt=$(mktemp -d /tmp/zonemount-demo.XXXXXX)
trap '"$bin" unmount "$mnt" || true; rmdir "$mnt"' EXIT
"$bin" mount "$mnt"
echo "== ls $mnt"; ls -l "$mnt"
echo "hello from the demo" > "$mnt/workspace/hello.txt"
echo "== backing store: $here/.sandbox/workspace"; ls -l "$here/.sandbox/workspace"
echo "== mkdir at the mount root (refused):"
mkdir "$mnt/new-zone" 2>&1 || true
