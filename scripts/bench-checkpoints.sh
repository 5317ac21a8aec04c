#!/usr/bin/env bash
# How long `zonemount checkpoint` takes with 10 and with 10,000 files
# changed since the last checkpoint, and `zonemount rewind` over 10,000
# changed files: the median of REPS runs of each, wall time of the
# command (the CLI's start and its control-socket round trip included).
# Not a test: it prints figures.
#
# With --layers, instead (needs root: it drops the kernel's dentry and inode
# caches before each timed run): a tree in the backing dir (100 dirs of
# 100 files) read cold (`find -ls`, and `stat` of every file) through two
# staged zones that show the same view: one whose changes (a new file in
# every dir, 50 times) are in its upper dir alone, and one that took a
# checkpoint after each of the 50 rounds of changes (every dir in every
# layer: the overlay's worst case for a name that lives in the backing
# dir). The two take turns, REPS runs each; medians and their ratio.
#
#   bash scripts/bench-checkpoints.sh [--reps N] [--bin PATH] [--dir DIR] [--layers]
#
# --bin defaults to target/release/zonemount (built when missing); the
# backing dir and the stage go in a scratch dir under --dir (default
# /var/tmp), removed after.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=5
bin=target/release/zonemount
base=/var/tmp
layers=0
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    --layers) layers=1; shift ;;
    *) echo "usage: bench-checkpoints.sh [--reps N] [--bin PATH] [--dir DIR] [--layers]" >&2; exit 2 ;;
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
now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.1f", m/1e6}'; }

if [ "$layers" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "bench-checkpoints.sh --layers: needs root (drop_caches)" >&2; exit 1; }
  mnt2=$scratch/mnt2
  cleanup() {
    "$bin" unmount "$mnt" >/dev/null 2>&1 || true
    "$bin" unmount "$mnt2" >/dev/null 2>&1 || true
    rm -rf "$scratch"
  }
  mkdir -p "$scratch/back0" "$mnt" "$mnt2"
  python3 - "$scratch/back0" <<'PY'
import os, sys
for d in range(100):
    p = os.path.join(sys.argv[1], f"d{d}")
    os.makedirs(p)
    for f in range(100):
        with open(os.path.join(p, f"f{f}"), "w") as fh:
            fh.write(f"{d}/{f}\n")
PY
  cp -a "$scratch/back0" "$scratch/back1"
  ck() { "$bin" checkpoint "$1" >"$scratch/ck.out" 2>&1 || { cat "$scratch/ck.out" >&2; exit 1; }; }
  # plain: the changes in the upper dir alone; ckpt50: a checkpoint after
  # each round of them.
  "$bin" mount -q --max-checkpoints 1000 --zone "w=$scratch/back0:staged" --stage-dir "$scratch/stage0" "$mnt"
  "$bin" mount -q --max-checkpoints 1000 --zone "w=$scratch/back1:staged" --stage-dir "$scratch/stage1" "$mnt2"
  for i in $(seq 1 50); do
    for m in "$mnt" "$mnt2"; do
      sh -c 'for d in "$1"/w/d*; do echo "$2" > "$d/new$2"; done' sh "$m" "$i"
    done
    ck "$mnt2"
  done
  # A flattened lower is built after a checkpoint and taken over at the
  # next one: a last checkpoint of no change, once it had time.
  sleep 2
  ck "$mnt2"
  n=$("$bin" checkpoints --json "$mnt2" | python3 -c 'import json, sys; print(sum(len(z["checkpoints"]) for z in json.load(sys.stdin)["zones"]))')
  [ "$n" = 51 ] || { echo "bench-checkpoints.sh: the zone keeps $n checkpoints, not 51" >&2; exit 1; }
  # How deep the live overlay is: the layers above the flat, and the flat.
  python3 - "$scratch/stage1/stage.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))["zones"]["w"]
ids = [c["id"] for c in z.get("checkpoints", [])]
flat = z.get("flat")
above = [i for i in ids if flat is None or i > flat]
print(f"live overlay of the 51-checkpoint zone: upper, {len(above)} layers"
      + (f", the flat of checkpoints 1-{flat}" if flat else ", no flat") + ", the backing dir")
PY
  declare -A lt
  for r in $(seq 1 "$reps"); do
    for m in "$mnt" "$mnt2"; do
      sync; echo 2 > /proc/sys/vm/drop_caches
      t0=$(now_ns); find "$m/w" -ls > /dev/null; t1=$(now_ns)
      lt[find$m]+="$((t1 - t0))"$'\n'
      sync; echo 2 > /proc/sys/vm/drop_caches
      t0=$(now_ns); find "$m/w" -type f -exec stat -c %s {} + > /dev/null; t1=$(now_ns)
      lt[stat$m]+="$((t1 - t0))"$'\n'
    done
  done
  for what in find stat; do
    a=$(printf '%s' "${lt[$what$mnt]}" | median)
    b=$(printf '%s' "${lt[$what$mnt2]}" | median)
    label=$([ $what = find ] && echo 'find -ls' || echo 'stat   ')
    printf '%s, 15,100 entries, cold: no checkpoint %s ms, 51 checkpoints %s ms: %sx (median of %s)\n' \
      "$label" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b/a}')" "$reps"
  done
  exit 0
fi

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
declare -A times
# The two sizes take turns, so that each run of either finds about as
# many layers (and as much flattening going on behind) as the other.
for r in $(seq 1 "$reps"); do
  for n in 10 10000; do
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
