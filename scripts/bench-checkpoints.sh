#!/usr/bin/env bash
# How long `zonemount checkpoint` takes with 10 and with 10,000 files
# changed since the last checkpoint, and `zonemount rewind` over 10,000
# changed files: the median of REPS runs of each, wall time of the
# command (the CLI's start and its control-socket round trip included).
# Not a test: it prints figures.
#
#   bash scripts/bench-checkpoints.sh [--reps N] [--bin PATH] [--dir DIR]
#
# --bin defaults to target/release/zonemount (built when missing); the
# backing dir and the stage go in a scratch dir under --dir (default
# /var/tmp), removed after.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=5
bin=target/release/zonemount
base=/var/tmp
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    *) echo "usage: bench-checkpoints.sh [--reps N] [--bin PATH] [--dir DIR]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || cargo build --release --locked
command -v python3 >/dev/null || { echo "bench-checkpoints.sh: needs python3" >&2; exit 1; }
scratch=$(mktemp -d "$base/zm-ckbench.XXXXXX")
mnt=$scratch/mnt
cleanup() {
  "$bin" unmount "$mnt" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT
mkdir -p "$scratch/back" "$mnt"
for i in $(seq 1 100); do echo "backing $i" > "$scratch/back/b$i"; done
"$bin" mount -q --max-checkpoints 1000 --zone "work=$scratch/back:staged" \
  --stage-dir "$scratch/stage" "$mnt"

# N new files under DIR in the mount (one process, through the mount).
make_files() {
  python3 - "$1" "$2" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for i in range(n):
    with open(os.path.join(d, f"f{i}"), "w") as f:
        f.write(f"{i}\n")
PY
}
now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m/1e6}'; }

declare -A times
for n in 10 10000; do
  for r in $(seq 1 "$reps"); do
    make_files "$mnt/work/c$n-$r" "$n"
    sync
    t0=$(now_ns)
    "$bin" checkpoint "$mnt" >/dev/null
    t1=$(now_ns)
    times[ck$n]+="$((t1 - t0))"$'\n'
  done
done
for r in $(seq 1 "$reps"); do
  id=$("$bin" checkpoint "$mnt" | tail -n 1)
  make_files "$mnt/work/r$r" 10000
  sync
  t0=$(now_ns)
  "$bin" rewind "$mnt" "$id" >/dev/null
  t1=$(now_ns)
  times[rw]+="$((t1 - t0))"$'\n'
  [ ! -e "$mnt/work/r$r" ] || { echo "bench-checkpoints.sh: the rewind left r$r" >&2; exit 1; }
  # What the rewind dropped is removed after its answer: let that finish
  # (bounded) before the next run, so that it is not timed with it.
  for _ in $(seq 1 600); do
    compgen -G "$scratch/stage/work/tmp/gone-*" >/dev/null || break
    sleep 0.1
  done
done
# The command's own cost: a `status` over the same socket.
for r in $(seq 1 "$reps"); do
  t0=$(now_ns)
  "$bin" status "$mnt" >/dev/null
  t1=$(now_ns)
  times[st]+="$((t1 - t0))"$'\n'
done
printf 'checkpoint, 10 changed files:     median %s ms of %s\n' "$(printf '%s' "${times[ck10]}" | median)" "$reps"
printf 'checkpoint, 10,000 changed files: median %s ms of %s\n' "$(printf '%s' "${times[ck10000]}" | median)" "$reps"
printf 'rewind of 10,000 changed files:   median %s ms of %s\n' "$(printf '%s' "${times[rw]}" | median)" "$reps"
printf 'status (the CLI round trip alone): median %s ms of %s\n' "$(printf '%s' "${times[st]}" | median)" "$reps"
