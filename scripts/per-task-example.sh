#!/usr/bin/env bash
# One task's lifecycle as a supervisor runs it: mount -> launch the worker ->
# collect results -> unmount; then the same in one `zonemount run`.
#
#   scripts/per-task-example.sh
#
# Everything lives in a fresh temp dir that is removed at the end, on every
# path out (the trap unmounts first, so removing the dir never reaches
# through a live mount). The worker here is a shell script; a real
# supervisor starts its agent the same way.
# The binary: $ZONEMOUNT, else `zonemount` on PATH.
set -euo pipefail
zm=${ZONEMOUNT:-zonemount}

task=$(mktemp -d "${TMPDIR:-/tmp}/task.XXXXXX")
mnt=$task/mnt
cleanup() {
  if grep -q " $mnt fuse.zonemount " /proc/mounts; then
    "$zm" unmount "$mnt" || "$zm" unmount --lazy "$mnt" || true
  fi
  rm -rf --one-file-system -- "$task"
}
trap cleanup EXIT

# The task's inputs (read-only to the worker) and an empty output zone.
mkdir -p "$task/input" "$task/output" "$mnt"
printf 'alpha beta gamma\n' >"$task/input/notes.txt"
cat >"$task/project.yaml" <<'YAML'
sandbox:
  mode: direct
  zones:
    input:  { path: ./input,  mode: ro }
    output: { path: ./output, mode: rw }
YAML

# 1. Mount: returns once the mount is live.
"$zm" mount --config "$task/project.yaml" "$mnt"
echo "mounted: $(ls "$mnt" | tr '\n' ' ')"

# 2. Launch the worker with its working directory in the mount.
(
  cd "$mnt/output"
  wc -w <../input/notes.txt >word-count.txt
  if echo tampered 2>/dev/null >../input/notes.txt; then
    echo "worker: wrote the input?!" >&2
    exit 1
  fi
  echo "worker: input is read-only; wrote output/word-count.txt"
)

# 3. Collect results from the backing dir: they outlive the mount.
echo "result: $(cat "$task/output/word-count.txt") words"

# 4. Unmount: waits for the daemon to exit.
"$zm" unmount "$mnt"

# The same task in one command: a fresh temp mountpoint, the worker's cwd in
# the first rw zone, and the mount always gone afterwards, whatever happens
# to the worker. Add --isolate to make the zones its whole world.
"$zm" run --config "$task/project.yaml" -- sh -c 'wc -l <../input/notes.txt >line-count.txt'
echo "result (run): $(cat "$task/output/line-count.txt") line(s)"
