#!/usr/bin/env bash
# Conformance: pjdfstest and fsx against a mounted rw zone, against a
# staged rw zone (its changes kept in a stage, the backing dir untouched),
# against a rw zone of a second mount with --no-passthrough, whose file
# data goes through the daemon with the kernel's writeback cache (as for
# every mount an ordinary user makes), and against a rw zone of a third
# mount served over FUSE over io_uring (where the kernel has it: the fuse
# module's enable_uring is switched on for that mount's handshake and set
# back at once); and against a staged rw zone of a fourth mount
# (--max-checkpoints CKPT_KEEP) while a loop takes a checkpoint every
# CKPT_EVERY_MS ms (and lists them every tenth time), so that layers are
# frozen, remounted and merged under pjdfstest and fsx; the figures must be
# the staged zone's.
#
#   bash scripts/conformance.sh [--quick] [--only rw,staged,daemon,uring,checkpoints]
#
# Needs root (pjdfstest switches uids; the mount serves other users with
# --allow-other). Installs pjdfstest 0.2.2 and fsx 0.3.2 with cargo when
# missing, and creates the `tests` user the suite needs. Exit status: 0 when
# every suite passed, 3 when skipped (not root, outside CI), 1 otherwise.
#
# The verdict on pjdfstest is its exit code, with the device-node cases
# (`::block`, `::char`: zonemount refuses device nodes with EPERM by design)
# declared in its own config as expected failures; its Summary counts must
# then equal the figures in scripts/conformance/expected.env. A failing case
# is rerun alone, by its full name, up to three times, and counts as a
# flake only when one rerun reports exactly one test, passed.
#
# Every run of pjdfstest and fsx has a time limit; one that runs out fails
# the suite, naming what ran out. Everything this run makes has a path of
# its own (mktemp), so two runs on one machine never meet; everything
# mounted is unmounted and everything made is removed on every way out
# (exit, error, SIGINT/SIGTERM/SIGHUP), by exact path.
#
# To see it fail on a broken mount (kept reproducible on purpose):
#   ZONEMOUNT_CONFORMANCE_BREAK=kill bash scripts/conformance.sh   # daemon SIGKILLed after mounting: dead mount
#   ZONEMOUNT_CONFORMANCE_BREAK=stop bash scripts/conformance.sh   # daemon SIGSTOPped: every call hangs
# Both must exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
quick=0
only="rw,staged,daemon,uring,checkpoints"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only=${2:-}; shift ;;
    *) echo "conformance: unknown option $1 (--quick, --only ZONES)" >&2; exit 2 ;;
  esac
  shift
done
for z in ${only//,/ }; do
  case "$z" in rw|staged|daemon|uring|checkpoints) ;; *) echo "conformance: --only: unknown zone $z (rw, staged, daemon, uring, checkpoints)" >&2; exit 2 ;; esac
done
# on LABEL: LABEL's runs are wanted (--only).
on() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }
brk=${ZONEMOUNT_CONFORMANCE_BREAK:-}
case "$brk" in ""|kill|stop) ;; *) echo "conformance: ZONEMOUNT_CONFORMANCE_BREAK must be kill or stop" >&2; exit 2 ;; esac

# Time limits, in seconds (a full pjdfstest run takes about a minute here,
# fsx runs a few seconds to a minute each).
LIMIT_PJD=${ZONEMOUNT_LIMIT_PJDFSTEST:-900}
LIMIT_PJD_ONE=${ZONEMOUNT_LIMIT_PJDFSTEST_ONE:-120}
LIMIT_FSX=${ZONEMOUNT_LIMIT_FSX:-600}
# How many fsx units (below) run at once.
FSX_LANES=${ZONEMOUNT_FSX_LANES:-3}
case "$FSX_LANES" in ''|*[!0-9]*|0) echo "conformance: ZONEMOUNT_FSX_LANES must be a positive number" >&2; exit 2 ;; esac
[ "$brk" = stop ] && LIMIT_PJD=${ZONEMOUNT_LIMIT_PJDFSTEST:-60}

if [ "$(id -u)" -ne 0 ]; then
  if [ "${CI:-}" = "true" ]; then echo "conformance: must run as root under CI" >&2; exit 1; fi
  echo "ZONEMOUNT-SKIP: conformance: needs root"; exit 3
fi
export PATH="$HOME/.cargo/bin:$PATH"
export NO_COLOR=1
command -v pjdfstest >/dev/null || cargo install --locked --quiet pjdfstest --version 0.2.2
command -v fsx >/dev/null || cargo install --locked --quiet fsx --version 0.3.2
id tests >/dev/null 2>&1 || useradd --system --user-group --no-create-home tests
cargo build --release --locked --quiet
bin="$repo/target/release/zonemount"
# shellcheck source=conformance/expected.env
. scripts/conformance/expected.env
pjd_config=scripts/conformance/pjdfstest.toml

# bounded NAME LIMIT COMMAND...: COMMAND under `timeout`; when it runs out,
# say so (naming NAME and the limit) and return 124. --foreground keeps
# COMMAND in our process group, so a limit on this whole script (test.sh's)
# reaches it too, and the EXIT trap still unmounts. It runs in the
# background and is waited for, so a SIGINT/SIGTERM/SIGHUP to this script
# is handled at once (bash runs a trap only between commands, but `wait`
# returns when one arrives): cleanup stops it, then unmounts.
running=""
bounded() {
  local name=$1 limit=$2 rc=0
  shift 2
  timeout --foreground --kill-after=10 "$limit" "$@" &
  running=$!
  wait "$running" || rc=$?
  running=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "conformance: TIMEOUT: $name did not finish within ${limit} s" >&2
    return 124
  fi
  return $rc
}

# What this run makes, each unique to it; cleanup (below) removes what
# exists of it, so the trap goes in before the first one is made.
work="" shm="" linkdir="" link="" slink="" dlink="" ulink="" clink="" mnt="" dmnt="" umnt="" cmnt=""
ck_pid=""   # the checkpoint loop running now (ckpt_start), if any
unit_pids=()   # the fsx units running now: unit_pids[PID]=unit (below)
uring_param=/sys/module/fuse/parameters/enable_uring uring_was=""
# The daemon serving $mnt: argv[0] is our zonemount binary and an argument
# is exactly $mnt (the daemon this script started, no other).
daemon_pids() {
  local p args
  [ -n "$mnt" ] || return 0
  for p in /proc/[0-9]*; do
    args=$(tr '\0' '\n' 2>/dev/null < "$p/cmdline") || continue
    [ "$(printf '%s\n' "$args" | head -1)" = "$bin" ] || continue
    printf '%s\n' "$args" | tail -n +2 | grep -qxF -e "$mnt" -e "${cmnt:-$mnt}" && echo "${p#/proc/}"
  done
  return 0
}
mounted() { local m=${1:-$mnt}; [ -n "$m" ] && grep -qF " $m fuse" /proc/mounts; }
cleanup() {
  # A suite still running (we were signalled) goes first: it holds the mount.
  if [ -n "$running" ]; then
    kill -TERM "$running" 2>/dev/null || true
    wait "$running" 2>/dev/null || true
  fi
  if [ -n "$ck_pid" ]; then
    kill -TERM "$ck_pid" 2>/dev/null || true
    wait "$ck_pid" 2>/dev/null || true
  fi
  # fsx units still running: each stops its fsx (and its checkpoint loop).
  for p in "${!unit_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${!unit_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # A stopped daemon (the break hook) can't answer an unmount: end it first.
  if [ "$brk" = stop ]; then
    for p in $(daemon_pids); do kill -KILL "$p" 2>/dev/null || true; done
  fi
  if [ -n "$uring_was" ]; then echo "$uring_was" > "$uring_param"; fi
  for m in "$mnt" "$dmnt" "$umnt" "$cmnt"; do
    if mounted "$m"; then
      timeout 30 "$bin" unmount "$m" >/dev/null 2>&1 || true
      mounted "$m" && umount -l "$m" 2>/dev/null || true
    fi
  done
  if [ -n "$link" ] && [ -L "$link" ]; then rm -f "$link"; fi
  if [ -n "$slink" ] && [ -L "$slink" ]; then rm -f "$slink"; fi
  if [ -n "$dlink" ] && [ -L "$dlink" ]; then rm -f "$dlink"; fi
  if [ -n "$ulink" ] && [ -L "$ulink" ]; then rm -f "$ulink"; fi
  if [ -n "$clink" ] && [ -L "$clink" ]; then rm -f "$clink"; fi
  if [ -n "$linkdir" ]; then rmdir "$linkdir" 2>/dev/null || true; fi
  # Never remove files through a mount that is still there.
  if [ -n "$work" ] && ! mounted "$mnt" && ! mounted "$dmnt" && ! mounted "$umnt" && ! mounted "$cmnt"; then rm -rf "$work"; fi
  if [ -n "$shm" ]; then rm -rf "$shm"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

work=$(mktemp -d /tmp/zmconf.XXXXXX)
chmod 755 "$work"
mnt="$work/mnt"
dmnt="$work/mnt-daemon"
umnt="$work/mnt-uring"
cmnt="$work/mnt-ckpt"
shm=$(mktemp -d /dev/shm/zmconf.XXXXXX)   # fsx reference runs, ours alone
# pjdfstest gets a short path to the zone (its unix-socket names must fit
# in 108 bytes): a symlink in a directory of this run's own, /tmp/zmc.XXXX/z.
linkdir=$(mktemp -d /tmp/zmc.XXXX)
chmod 755 "$linkdir"   # pjdfstest switches to other users, who must pass it
link="$linkdir/z"
slink="$linkdir/s"
dlink="$linkdir/d"
ulink="$linkdir/u"
clink="$linkdir/c"
mkdir -p "$mnt" "$dmnt" "$umnt" "$cmnt" "$work/zone" "$work/szone" "$work/dzone" "$work/uzone" "$work/czone"
chmod 755 "$work/zone" "$work/szone" "$work/dzone" "$work/uzone" "$work/czone"
cat > "$work/project.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    rw: { path: ./zone, mode: rw }
    st: { path: ./szone, mode: rw, staged: true }
YAML

"$bin" mount --allow-other --config "$work/project.yaml" --stage-dir "$work/stage" "$mnt"

ln -s "$mnt/rw" "$link"
ln -s "$mnt/st" "$slink"
# The daemon data path with the writeback cache (--writeback-cache).
"$bin" mount -q --allow-other --no-passthrough --writeback-cache --zone "dp=$work/dzone:rw" "$dmnt"
"$bin" status "$dmnt" | grep -q 'writeback cache' || { echo "conformance: $dmnt does not use the writeback cache" >&2; exit 1; }
ln -s "$dmnt/dp" "$dlink"
# FUSE over io_uring: a kernel without it (before 6.14) can't run it; that
# is the kernel's limit, said and not counted.
if [ -e "$uring_param" ]; then
  uring_was=$(cat "$uring_param")
  "$bin" mount -q --allow-other --io-uring --zone "ur=$work/uzone:rw" "$umnt"
  echo "$uring_was" > "$uring_param"; uring_was=""
  "$bin" status "$umnt" | grep -q '^transport: io_uring' || { echo "conformance: $umnt is not served over io_uring" >&2; exit 1; }
  ln -s "$umnt/ur" "$ulink"
else
  umnt=""
  echo "conformance: this kernel has no FUSE over io_uring ($uring_param): that mount is not made"
fi

# The checkpoints zone: staged, in a mount of its own that keeps at most
# CKPT_KEEP checkpoints (so the loop below makes it merge layers).
"$bin" mount -q --allow-other --max-checkpoints "$CKPT_KEEP" --zone "ck=$work/czone:staged" --stage-dir "$work/cstage" "$cmnt"
ln -s "$cmnt/ck" "$clink"

case "$brk" in
  kill)
    echo "conformance: BREAK=kill: SIGKILL to the daemon (pids $(daemon_pids | xargs)): the mount is dead"
    for p in $(daemon_pids); do kill -KILL "$p"; done
    sleep 1 ;;
  stop)
    echo "conformance: BREAK=stop: SIGSTOP to the daemon (pids $(daemon_pids | xargs)): every call hangs"
    for p in $(daemon_pids); do kill -STOP "$p"; done ;;
esac

# ---- the checkpoint loop ----------------------------------------------
# ckpt_start LABEL: in the background, every CKPT_EVERY_MS ms (at most
# CKPT_MAX_CALLS times, and for at most the longest run's limit), take a
# checkpoint of the checkpoints mount, and every tenth time list them;
# each call has a time limit of its own and is logged. ckpt_stop LABEL ends
# it (a stop file, then SIGTERM to its pid if it has not ended within 40 s),
# says how many checkpoints were taken and merged during the run, and fails
# the run (returns 1) on a failed or hung call, on a listing with more than
# CKPT_KEEP checkpoints, or on fewer merges than CKPT_MIN_MERGES.
ck_kept() { # how many checkpoints the zone keeps now, from `checkpoints --json`
  timeout 30 "$bin" checkpoints --json "$cmnt" |
    python3 -c 'import json, sys; print(sum(len(z["checkpoints"]) for z in json.load(sys.stdin)["zones"]))'
}
ck_loop() { # log stopfile
  local log=$1 stopf=$2 i=0 id rc n end
  local pause
  pause=$(awk -v m="$CKPT_EVERY_MS" 'BEGIN { printf "%.3f", m / 1000 }')
  end=$(( $(date +%s) + (LIMIT_PJD > LIMIT_FSX ? LIMIT_PJD : LIMIT_FSX) ))
  while [ $i -lt "$CKPT_MAX_CALLS" ] && [ "$(date +%s)" -lt $end ]; do
    # The first CKPT_KEEP + CKPT_MIN_MERGES back to back: merging happens
    # early in even a short run (pjdfstest took about a second on a fast
    # machine, where 4 checkpoints 200 ms apart merged none).
    if [ $i -ge $((CKPT_KEEP + CKPT_MIN_MERGES)) ]; then sleep "$pause"; fi
    [ -e "$stopf" ] && break
    i=$((i + 1))
    rc=0
    id=$(timeout 30 "$bin" checkpoint --label "conformance $i" "$cmnt" 2>>"$log.err") || rc=$?
    if [ $rc -eq 0 ] && [[ "$id" =~ ^[0-9]+$ ]]; then echo "checkpoint $id" >> "$log"
    else echo "checkpoint FAILED (exit $rc, output '$id')" >> "$log"; fi
    if [ $((i % 10)) -eq 0 ]; then
      rc=0
      n=$(ck_kept 2>>"$log.err") || rc=$?
      if [ $rc -eq 0 ] && [[ "$n" =~ ^[0-9]+$ ]]; then echo "listed $n" >> "$log"
      else echo "listing FAILED (exit $rc)" >> "$log"; fi
    fi
  done
}
ck_before=0
ckpt_start() { # label
  local log="$work/ckpt-$1.log"
  : > "$log"; : > "$log.err"; rm -f "$work/ckpt.stop"
  ck_before=$(ck_kept 2>>"$log.err") || { echo "listing FAILED (before the run)" >> "$log"; ck_before=0; }
  ck_loop "$log" "$work/ckpt.stop" &
  ck_pid=$!
}
ckpt_stop() { # label
  local label=$1 log="$work/ckpt-$1.log" taken failed listed over after merged i
  touch "$work/ckpt.stop"
  for i in $(seq 1 400); do kill -0 "$ck_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$ck_pid" 2>/dev/null; then
    echo "checkpoints during $label: the loop did not stop within 40 s: killed (pid $ck_pid)"
    kill -TERM "$ck_pid" 2>/dev/null || true
    wait "$ck_pid" 2>/dev/null || true
    ck_pid=""
    return 1
  fi
  wait "$ck_pid" 2>/dev/null || true
  ck_pid=""
  taken=$(grep -c '^checkpoint [0-9]' "$log" || true)
  failed=$(grep -c 'FAILED' "$log" || true)
  listed=$(grep -c '^listed ' "$log" || true)
  over=$(awk -v k="$CKPT_KEEP" '$1 == "listed" && $2 > k' "$log" | wc -l)
  after=$(ck_kept) || { echo "checkpoints during $label: cannot list them after the run"; return 1; }
  merged=$((ck_before + taken - after))
  echo "checkpoints during $label: $taken taken (every ${CKPT_EVERY_MS} ms), $merged merged (kept $after, at most $CKPT_KEEP), $listed listings"
  if [ "$failed" -gt 0 ]; then
    echo "checkpoints during $label: $failed calls FAILED:"; grep FAILED "$log" | head -5 | sed 's/^/  /'; tail -5 "$log.err" | sed 's/^/  /'
    return 1
  fi
  if [ "$over" -gt 0 ] || [ "$after" -gt "$CKPT_KEEP" ]; then
    echo "checkpoints during $label: a listing showed more than $CKPT_KEEP checkpoints (--max-checkpoints)"; return 1
  fi
  if [ "$merged" -lt "$CKPT_MIN_MERGES" ]; then
    echo "checkpoints during $label: $merged merges, fewer than CKPT_MIN_MERGES=$CKPT_MIN_MERGES: the run did not test merging"; return 1
  fi
  return 0
}

status=0
# ---- pjdfstest ---------------------------------------------------------
# summary_of LOG: "F S P X T" from the last Summary line, or nothing.
summary_of() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" |
    sed -nE 's/^Summary: ([0-9]+) failed, ([0-9]+) skipped, ([0-9]+) passed, ([0-9]+) expected failures, ([0-9]+) total$/\1 \2 \3 \4 \5/p' |
    tail -1
}
# run_pjdfstest LABEL LINK: the whole suite on the zone LINK points to;
# its verdict and counts as above. Sets status=1 on a failure.
run_pjdfstest() {
  local label=$1 plink=$2 pstatus=0
  local pjd_log="$work/pjdfstest-$label.log"
  local pjd_rc=0 summary f s p x t flakes bad unexpected_pass still tcase one rc1 want got passed_alone try
  echo "== pjdfstest on a zonemount $label zone (direct mode, --allow-other; limit ${LIMIT_PJD} s)"
  pjd_rc=0
  bounded "pjdfstest" "$LIMIT_PJD" pjdfstest -c "$pjd_config" -p "$plink" -s /dev/shm >"$pjd_log" 2>&1 || pjd_rc=$?
  summary=$(summary_of "$pjd_log")
  if [ -z "$summary" ]; then
    echo "pjdfstest FAILED: exit $pjd_rc and no Summary line; the end of its output:"
    tail -20 "$pjd_log" | sed 's/^/  /'
    pstatus=1
  else
    read -r f s p x t <<<"$summary"
    echo "Summary: $f failed, $s skipped, $p passed, $x expected failures, $t total (exit $pjd_rc)"
    flakes=0
    if [ "$pjd_rc" -ne 0 ]; then
      # The cases that failed, or passed where a failure was expected.
      bad=$(sed 's/\x1b\[[0-9;]*m//g' "$pjd_log" | awk '$NF == "FAILED" || / PASSED UNEXPECTEDLY$/ { print $1 }')
      unexpected_pass=$(sed 's/\x1b\[[0-9;]*m//g' "$pjd_log" | awk '/ PASSED UNEXPECTEDLY$/ { print $1 }')
      if [ -n "$unexpected_pass" ]; then
        echo "pjdfstest: expected to fail (device nodes) but passed:"; printf '  %s\n' $unexpected_pass
        pstatus=1
      fi
      if [ "$(printf '%s\n' "$bad" | grep -c .)" -ne "$f" ]; then
        echo "pjdfstest: $f failed but $(printf '%s\n' "$bad" | grep -c .) FAILED lines; not a run to trust"
        pstatus=1
      fi
      # A flake: the case alone, named in full, passes (exactly 1 passed).
      still=""
      for tcase in $(printf '%s\n' "$bad" | grep -vxF -e "$unexpected_pass" -e '' || true); do
        one="$work/pjdfstest-rerun.log"
        # Alone, up to three times: a case that races its own child (see
        # docs/conformance.md) can lose twice in a row on a busy machine.
        passed_alone=0
        for try in 1 2 3; do
          rc1=0
          bounded "pjdfstest rerun of $tcase" "$LIMIT_PJD_ONE" \
            pjdfstest -c "$pjd_config" -p "$plink" -s /dev/shm -e "pjdfstest::tests::$tcase" >"$one" 2>&1 || rc1=$?
          if [ $rc1 -eq 0 ] && [ "$(summary_of "$one")" = "0 0 1 0 1" ]; then
            passed_alone=$try
            break
          fi
        done
        if [ "$passed_alone" -gt 0 ]; then
          echo "flaky: $tcase failed, then passed alone (rerun $passed_alone of 3: 1 passed)"
          flakes=$((flakes + 1))
        else
          echo "pjdfstest: $tcase FAILED, and again alone three times (last exit $rc1; rerun summary: $(summary_of "$one" || true))"
          still="$still $tcase"
        fi
      done
      if [ -n "$still" ]; then
        echo "UNEXPECTED pjdfstest failures:"; printf '  %s\n' $still
        for tcase in $still; do
          sed 's/\x1b\[[0-9;]*m//g' "$pjd_log" | grep -A3 -E "^$tcase " | head -8 | sed 's/^/  /'
        done
        pstatus=1
      fi
      if [ "$flakes" -gt "$PJD_MAX_FLAKES" ]; then
        echo "pjdfstest: $flakes cases failed and then passed alone; more than $PJD_MAX_FLAKES is not flakiness"
        pstatus=1
      fi
    fi
    # The counts must be the stated ones (flakes count as passed): passes
    # quietly turning into skips or expected failures show up here.
    want="$PJD_FAILED $PJD_SKIPPED $PJD_PASSED $PJD_EXPECTED_FAILURES $PJD_TOTAL"
    got="$((f - flakes)) $s $((p + flakes)) $x $t"
    if [ "$got" != "$want" ]; then
      echo "pjdfstest: counts differ from scripts/conformance/expected.env"
      echo "  want: $PJD_FAILED failed, $PJD_SKIPPED skipped, $PJD_PASSED passed, $PJD_EXPECTED_FAILURES expected failures, $PJD_TOTAL total"
      read -r gf gs gp gx gt <<<"$got"
      echo "  got:  $gf failed, $gs skipped, $gp passed, $gx expected failures, $gt total"
      pstatus=1
    elif [ $pstatus -eq 0 ]; then
      echo "pjdfstest ($label): OK ($((p + flakes)) passed, $x expected failures, $s skipped, as stated; $flakes flaky)"
    fi
  fi
  if [ $pstatus -ne 0 ]; then
    kept="target/conformance-pjdfstest-$label.${work##*.}.log"   # this run's own
    mkdir -p target && cp "$pjd_log" "$kept"
    echo "pjdfstest ($label): FAILED (its full output: $kept)"
  fi
  [ $pstatus -eq 0 ] || status=1
}
on rw && run_pjdfstest rw "$link"
on staged && run_pjdfstest staged "$slink"
on daemon && run_pjdfstest daemon "$dlink"
[ -z "$umnt" ] || ! on uring || run_pjdfstest uring "$ulink"
if on checkpoints; then
  ckpt_start pjdfstest
  run_pjdfstest checkpoints "$clink"
  ckpt_stop pjdfstest || status=1
fi

# ---- fsx ----------------------------------------------------------------
if [ $quick -eq 1 ]; then seeds="1"; n=20000; else seeds="1 2 3"; n=100000; fi
echo "== fsx: seeds [$seeds], $n ops each without mmap, and 5 x $((n / 5)) with mmap (limit ${LIMIT_FSX} s each; up to $FSX_LANES units at once)"
run_fsx() { # name profile ops seed [zone]
  local name=$1 profile=$2 ops=$3 seed=$4 zone=${5:-rw}
  local backing="$work/zone/$name" at="$mnt/$zone/$name"
  [ "$zone" = st ] && backing="$work/stage/st/upper/$name"
  [ "$zone" = ck ] && at="$cmnt/ck/$name"
  [ "$zone" = dp ] && backing="$work/dzone/$name" at="$dmnt/dp/$name"
  [ "$zone" = ur ] && backing="$work/uzone/$name" at="$umnt/ur/$name"
  local out="$work/fsx-$name.log"
  local fsx_rc=0 ck_rc=0
  bounded "fsx $name" "$LIMIT_FSX" fsx -N "$ops" -S "$seed" -f "scripts/conformance/$profile" "$at" >"$out" 2>&1 || fsx_rc=1
  # The checkpoint loop (ck) ends with fsx: the stage's copy is found
  # and compared below with no checkpoint moving it meanwhile.
  if [ "$zone" = ck ]; then ckpt_stop "fsx-$name" || ck_rc=1; fi
  if [ $fsx_rc -ne 0 ]; then
    echo "fsx $name (seed $seed) FAILED:"; tail -30 "$out"; return 1
  fi
  [ $ck_rc -eq 0 ] || return 1
  grep -q 'All operations completed A-OK!' "$out" || { echo "fsx $name: exit 0 without A-OK"; tail -5 "$out"; return 1; }
  # The same plan on tmpfs must end with the same bytes as the backing file.
  if ! bounded "fsx $name (tmpfs reference)" "$LIMIT_FSX" fsx -N "$ops" -S "$seed" -f "scripts/conformance/$profile" "$shm/$name" >/dev/null 2>&1; then
    echo "fsx $name: the reference run on tmpfs failed"; return 1
  fi
  sync; echo 3 > /proc/sys/vm/drop_caches
  # With checkpoints, the stage's copy is the newest one: in the upper dir,
  # or else in the newest layer that has it; and the view must show it too.
  if [ "$zone" = ck ]; then
    backing=$(ck_copy "$name")
    if ! cmp -s "$at" "$shm/$name"; then
      echo "fsx $name: the file in the view differs from the reference run"; rm -f "$shm/$name"; return 1
    fi
  fi
  if ! cmp -s "$backing" "$shm/$name"; then
    echo "fsx $name: the backing file differs from the reference run"; rm -f "$shm/$name"; return 1
  fi
  rm -f "$shm/$name" "$at"
  if [ "$zone" = st ] && [ -e "$work/szone/$name" ]; then
    echo "fsx $name: the staged zone's backing dir got the file"; return 1
  fi
  if [ "$zone" = ck ] && [ -e "$work/czone/$name" ]; then
    echo "fsx $name: the checkpointed zone's backing dir got the file"; return 1
  fi
  echo "fsx $name: $ops ops OK, $(case "$zone" in st|ck) echo "staged copy" ;; *) echo "backing file" ;; esac) equals the reference"
}
# ck_copy NAME: the checkpoints zone's newest copy of NAME in its stage.
ck_copy() {
  local d="$work/cstage/ck" l
  if [ -e "$d/upper/$1" ]; then echo "$d/upper/$1"; return; fi
  for l in $(ls "$d/layers" 2>/dev/null | sort -rn); do
    if [ -e "$d/layers/$l/$1" ]; then echo "$d/layers/$l/$1"; return; fi
  done
  echo "$d/upper/$1"
}
# run_fsx_ckpt NAME ...: run_fsx on the checkpoints zone, the loop running.
run_fsx_ckpt() { # run_fsx's arguments; run_fsx stops the loop when fsx ends
  ckpt_start "fsx-$1"
  run_fsx "$@" ck
}
# The plan, in units that share no file, zone state or checkpoint loop:
# each rw seed, the staged zone, the checkpoints zone (its loop), the
# daemon data path, io_uring, and the non-root worker. Up to FSX_LANES
# units run at once (fsx spends most of its time waiting on round trips,
# so two CPUs serve three lanes); each unit runs its own fsx runs one after
# another, and its lines are printed when it ends.
fsx_plan() { # prefix seed zone: the no-mmap run and the five mmap runs
  local prefix=$1 s=$2 zone=$3 part st=0
  run_fsx "${prefix}nommap-$s" fsx-nommap.toml "$n" "$s" "$zone" || st=1
  for part in 1 2 3 4 5; do
    run_fsx "${prefix}mmap-$s-$part" fsx-mmap.toml $((n / 5)) "$s$part" "$zone" || st=1
  done
  return $st
}
# The same plans on the checkpoints zone, the checkpoint loop running:
# the view and the stage's newest copy must end as the reference run.
fsx_ckpt_plan() { # seed
  local s=$1 part st=0
  run_fsx_ckpt "ckpt-nommap-$s" fsx-nommap.toml "$n" "$s" || st=1
  for part in 1 2 3 4 5; do
    run_fsx_ckpt "ckpt-mmap-$s-$part" fsx-mmap.toml $((n / 5)) "$s$part" || st=1
  done
  return $st
}
# The same suite as a non-root worker (the daemon switches to its uid).
fsx_nobody() {
  mkdir -p "$work/zone/nobody" && chown nobody "$work/zone/nobody"
  if bounded "fsx as nobody" "$LIMIT_FSX" setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
      fsx -N $((n / 5)) -S 99 -f scripts/conformance/fsx-nommap.toml "$mnt/rw/nobody/f" >"$work/fsx-nobody.log" 2>&1; then
    owner=$(stat -c %U "$work/zone/nobody/f")
    echo "fsx as nobody: $((n / 5)) ops OK, backing file owned by $owner"
    [ "$owner" = nobody ] || { echo "fsx as nobody: file owned by $owner"; return 1; }
  else
    echo "fsx as nobody FAILED:"; tail -30 "$work/fsx-nobody.log"; return 1
  fi
}
# A unit signalled (cleanup, below) stops what it runs and ends.
fsx_unit_abort() {
  [ -z "$running" ] || kill -TERM "$running" 2>/dev/null || true
  [ -z "$ck_pid" ] || kill -TERM "$ck_pid" 2>/dev/null || true
  exit 1
}
units=()
if [ -z "$brk" ]; then
  # The longest units first (the checkpoints loop and the daemon data
  # path slow theirs down), so that no long one starts last.
  on checkpoints && units+=("fsx_ckpt_plan 1")
  on daemon && units+=("fsx_plan daemon- 1 dp")
  if on rw; then for s in $seeds; do units+=("fsx_plan '' $s rw"); done; fi
  # The staged zone: the same plans, the file kept in the stage.
  on staged && units+=("fsx_plan staged- 1 st")
  if [ -n "$umnt" ] && on uring; then units+=("fsx_plan uring- 1 ur"); fi
  on rw && units+=("fsx_nobody")
fi
start=$(date +%s)
if [ -n "$brk" ]; then
  echo "fsx: not run on a deliberately broken mount"
else
  next=0
  while [ $next -lt ${#units[@]} ] || [ ${#unit_pids[@]} -gt 0 ]; do
    while [ ${#unit_pids[@]} -lt "$FSX_LANES" ] && [ $next -lt ${#units[@]} ]; do
      (
        trap fsx_unit_abort TERM
        t0=$SECONDS urc=0
        eval "${units[$next]}" || urc=$?
        echo "== fsx unit '${units[$next]}': $((SECONDS - t0)) s"
        exit $urc
      ) >"$work/fsx-unit-$next.out" 2>&1 &
      unit_pids[$!]=$next
      next=$((next + 1))
    done
    urc=0 done_pid=""
    wait -n -p done_pid "${!unit_pids[@]}" || urc=$?
    if [ -z "$done_pid" ]; then
      echo "conformance: waiting for the fsx units failed (exit $urc)" >&2; status=1; break
    fi
    cat "$work/fsx-unit-${unit_pids[$done_pid]}.out"
    [ $urc -eq 0 ] || status=1
    unset "unit_pids[$done_pid]"
  done
  echo "fsx total: $(( $(date +%s) - start )) s"
fi

if [ $status -eq 0 ]; then echo "conformance: OK"; else echo "conformance: FAILED"; fi
exit $status
