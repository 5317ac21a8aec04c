#!/usr/bin/env bash
# Mount the embedded default (rw zones `cache` and `workspace` under
# ./.sandbox of the current directory), show it, write a file through it,
# and unmount — the unmount runs even if a step fails.
set -euo pipefail
here=$(pwd)
cd "$(dirname "$0")/.."
# Root mounts by itself; an ordinary user needs the setuid fusermount3.
if [ "$(id -u)" -ne 0 ] && ! command -v fusermount3 >/dev/null; then
  echo "demo: installing fuse3 (fusermount3)"
  sudo apt-get update -qq && sudo apt-get install -y -qq fuse3 >/dev/null
fi
echo "demo: building zonemount (release; the first build takes a few minutes)"
cargo build --release
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
