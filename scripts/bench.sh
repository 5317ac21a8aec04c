#!/usr/bin/env bash
# Benchmark: zonemount against the native backing dir and bindfs, in one
# interleaved run (DESIGN §7, issue 8).
#
#   bash scripts/bench.sh [--quick] [--reps N] [--json FILE] [--only W1,W2]
#                         [--fd-entries N] [--placements pinned,unpinned]
#                         [--threads N]   (zonemount's FUSE threads, default 4)
#                         [--targets T1,T2]  (default: all; native always runs)
#                         [--base BIN]  (adds zm-base: another zonemount binary)
#                         [--cpus LIST]  (the CPUs "pinned" runs on, default 0)
#                         [--real-tree DIR]  (the real-tree workloads over a
#                                            copy of DIR, not the generated tree)
#
# Builds release, makes a journaled ext4 image on a loop device under
# /var/tmp (the root fs here has no journal and mounts with `discard`, which
# makes creates and deletes swing 10x), and mounts over one backing dir:
#   native   the backing dir itself
#   bindfs   Debian's bindfs (installed when missing)
#   zm       zonemount, kernel passthrough on
#   zm-nopt  zonemount --no-passthrough (data through the daemon)
#   zm-nopoll zonemount --busy-poll 0 (no thread polls for the next request:
#            each one wakes a sleeping thread)
#   zm-staged zonemount, the zone staged (changes go to a stage on the same
#            ext4 image; the stage is discarded after each run)
#   zm-ckpt50 the same with 50 checkpoints taken before each run (each after
#            a small change: a 2-byte file of its own), --max-checkpoints 64
#            (none merged); compared with zm-staged (DESIGN: within 1.3x)
#   zm-hide  zonemount, the zone with `hide` patterns (`**/.env`, `*.pem`,
#            `secrets/`: none matches the fixtures), so every lookup, listing
#            and new name is matched against them
#   zm-uring zonemount, kernel passthrough on, served over FUSE over io_uring
#            (the fuse module's enable_uring is switched on for the run and
#            set back after; every other zonemount target is mounted with
#            --no-io-uring, so they measure the /dev/fuse transport)
#   zm-user  zonemount run by an ordinary user (ZONEMOUNT_BENCH_USER, default
#            zmtest, created if missing), as users run it on a laptop: no
#            passthrough, file data through the daemon; its workloads run as
#            that user too (/dev/fuse is made 0666 for the run and put back
#            after)
#   zm-user-wb  the same with --writeback-cache (the kernel gathers writes)
#   zm-caller   the root daemon (as zm, with --allow-other), its workloads
#            run by that ordinary user: a supervisor's mount used by a
#            worker that is not root (each change is made with the worker's
#            uid, gid and groups)
#   zm-base  with --base BIN only: the zonemount binary BIN (e.g. one built
#            from an earlier commit) mounted as zm is, so a change is
#            measured against what it replaces in the same interleaved run;
#            with zm-uring too, also zm-base-uring: BIN over io_uring; with
#            zm-hide too, also zm-base-hide: BIN with zm-hide's zone
#   zm-isolate  `zonemount run --isolate`, a fresh run per repetition, the
#            workload's function run whole inside the sandbox (setup,
#            warm-up runs and the timed run): the read-only workloads
#            (grep_r, git_status, find_ls, real_grep, real_status) with the
#            fixtures as a ro zone, run as root; the others (not ask_pending,
#            fds, commit, checkpoint) with the whole backing dir as a rw
#            zone, run by the ordinary user of zm-user (a root CMD keeps rw
#            zones on the daemon). Either zone is bound straight from its
#            backing dir (the bench stops if `run` says otherwise); the
#            sandbox's drop() asks the bench through two FIFOs in the zone
#   zm-isolate-daemon  the same with --no-direct: the zone through the
#            daemon, as run --isolate served every zone before issue 31
#   zm-kopen  zonemount mount --kernel-opens with the backing dir as one ro
#            zone (the kernel opens files itself, reads fill the page cache
#            through the daemon); only the read-only workloads (those of
#            zm-isolate, and seq_read_cold and rand_read)
# The real-tree workloads real_grep (`grep -r`, warm) and real_status (`git
# status`, warm) run over a source-like tree of 12,000 files, about 110 MB
# (2,000 with --quick), with a git repository: generated deterministically
# once and cached as a tarball under /var/tmp/zonemount-bench-cache (kept
# across runs), or a copy of --real-tree DIR (e.g. ~/.cargo/registry/src).
# The workload open_close opens one small file read-only and closes it
# 100,000 times (10,000 with --quick): what an OPEN and a RELEASE round
# trip cost when the daemon has nothing to open, the floor of a warm
# `grep -r` through the daemon.
# And, with the workload `commit`: a 10,000-file untar into the staged zone,
# then `zonemount commit` timed against `cp -a` of the same tree. With the
# workload `checkpoint`: scripts/bench-checkpoints.sh on the ext4 image
# (`zonemount checkpoint` with 10 and with 10,000 changed files, `rewind`
# of 10,000; then with --layers, `find -ls` and `stat` of a backing tree,
# cold, through 51 checkpoints against none), its medians in the table
# and the JSON.
# Each workload runs REPS times; within a repetition the targets take turns
# (the order rotates), with dentries and inodes dropped before each run.
# "pinned": the daemons and the workload on CPU 0, or the CPUs of --cpus
# (protocol cost, stable); "unpinned": anywhere (what users get; pays
# cross-CPU wake-ups). Both run by default, in one run (--placements).
# Prints a table of median times and ratios to native, and writes JSON.
#
# --quick: small sizes, one repetition (for development).
# Needs root (loop mount, drop_caches, taskset of the daemons). Everything
# it makes is removed by exact path on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

orig_args="$*"
quick=0
reps=""
json=""
only=""
fd_entries=""
threads=4
placements="pinned,unpinned"
targets_opt=""
base_bin=""
pinned_cpus=0
real_src=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --reps) reps=$2; shift ;;
    --json) json=$2; shift ;;
    --only) only=$2; shift ;;
    --fd-entries) fd_entries=$2; shift ;;
    --placements) placements=$2; shift ;;
    --threads) threads=$2; shift ;;
    --targets) targets_opt=$2; shift ;;
    --base) base_bin=$(realpath "$2"); shift ;;
    --cpus) pinned_cpus=$2; shift ;;
    --real-tree) real_src=$(realpath "$2"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: needs root (loop mount, drop_caches)" >&2; exit 1
fi

if [ $quick = 1 ]; then
  SEQ_MB=64; RAND_MB=16; RAND_N=2000; TAR_FILES=600; TREE_ENTRIES=3000
  CREATE_N=500; OPEN_N=10000; ASK_N=500; FD_ENTRIES=${fd_entries:-20000}; FD_GIT=2000
  REAL_FILES=2000
  REPS=${reps:-1}; IMG_GB=3
else
  SEQ_MB=1024; RAND_MB=256; RAND_N=50000; TAR_FILES=10000; TREE_ENTRIES=100000
  CREATE_N=10000; OPEN_N=100000; ASK_N=5000; FD_ENTRIES=${fd_entries:-200000}; FD_GIT=20000
  REAL_FILES=12000
  REPS=${reps:-3}; IMG_GB=8
fi
[[ "$pinned_cpus" =~ ^[0-9]+([,-][0-9]+)*$ ]] || { echo "bench: --cpus $pinned_cpus: a CPU list as taskset takes it (0 or 0,1 or 0-1)" >&2; exit 2; }
json=${json:-$repo/target/bench.json}
ALL_WORKLOADS="seq_write seq_write_4k seq_read_cold seq_read_warm rand_read open_close untar rm_rf git_commit git_status grep_r find_ls real_grep real_status create unlink ask_pending fds commit checkpoint"
WORKLOADS=${only//,/ }
WORKLOADS=${WORKLOADS:-$ALL_WORKLOADS}
for w in $WORKLOADS; do
  case " $ALL_WORKLOADS " in *" $w "*) ;; *) echo "bench: unknown workload $w (known: $ALL_WORKLOADS)" >&2; exit 2 ;; esac
done
ALL_TARGETS="native bindfs zm zm-nopt zm-nopoll zm-staged zm-ckpt50 zm-hide zm-uring zm-user zm-user-wb zm-caller zm-isolate zm-isolate-daemon zm-kopen"
TARGETS="native"
for t in ${targets_opt//,/ }; do
  case " $ALL_TARGETS " in *" $t "*) ;; *) echo "bench: unknown target $t (known: $ALL_TARGETS)" >&2; exit 2 ;; esac
  [ "$t" = native ] || TARGETS="$TARGETS $t"
done
[ -n "$targets_opt" ] || TARGETS=$ALL_TARGETS
want() { case " $TARGETS " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -n "$base_bin" ]; then
  [ -x "$base_bin" ] || { echo "bench: --base $base_bin is not an executable" >&2; exit 2; }
  TARGETS="$TARGETS zm-base"
  want zm || TARGETS="$TARGETS zm"
  want zm-uring && TARGETS="$TARGETS zm-base-uring"
  want zm-hide && TARGETS="$TARGETS zm-base-hide"
fi
# Room on the image for every target's seq_write file at once (they stay
# for the read workloads; a staged target's lands in its stage) and the
# fixtures: 8 targets filled 8 GB.
[ $quick = 1 ] || IMG_GB=$(( 4 + 2 * $(wc -w <<< "$TARGETS") ))
{ want zm-isolate || want zm-isolate-daemon; } && { command -v bwrap >/dev/null || apt-get install -y -qq bubblewrap >/dev/null; }

export PATH="$HOME/.cargo/bin:$PATH"
# git status must not rewrite the shared fixture's index; the fixture is
# root's, and the unprivileged target's git must still use it.
export GIT_OPTIONAL_LOCKS=0
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
echo "== building release"
cargo build --release --locked --quiet
bin="$repo/target/release/zonemount"
command -v bindfs >/dev/null || { apt-get update -qq >/dev/null 2>&1 || true; apt-get install -y -qq bindfs >/dev/null; }
command -v git >/dev/null || apt-get install -y -qq git >/dev/null

# ---- the stage: an ext4 image with a journal, on a loop device ------------
work=$(mktemp -d /var/tmp/zonemount-bench.XXXXXX)
img="$work/ext4.img"
fs="$work/ext4"
data="$fs/data"
mnt_b="$work/mnt-bindfs"
mnt_z="$work/mnt-zm"
mnt_d="$work/mnt-zm-nopt"
mnt_n="$work/mnt-zm-nopoll"
mnt_f="$work/mnt-fds"
mnt_s="$work/mnt-zm-staged"
mnt_k="$work/mnt-zm-ckpt50"
mnt_u="$work/mnt-zm-uring"
mnt_p="$work/mnt-zm-user"
mnt_w="$work/mnt-zm-user-wb"
mnt_c="$work/mnt-zm-caller"
mnt_o="$work/mnt-zm-base"
mnt_r="$work/mnt-zm-kopen"
mnt_q="$work/mnt-zm-base-uring"
mnt_h="$work/mnt-zm-hide"
mnt_hb="$work/mnt-zm-base-hide"
fuse_mode=""
uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=""
raw="$work/times.tsv"
bg_pids=()
cleanup() {
  set +e
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ "${ops_ok:-0}" = 1 ]; then
    echo 0 > "$ev/enable"; echo 0 > "$ev/filter"; : > "$tr/trace"; echo "$old_buf" > "$tr/buffer_size_kb"
  fi
  [ -n "${tracefs_mounted:-}" ] && umount "$tr"
  for m in "$mnt_f" "$mnt_d" "$mnt_n" "$mnt_z" "$mnt_s" "$mnt_k" "$mnt_u" "$mnt_p" "$mnt_w" "$mnt_c" "$mnt_o" "$mnt_r" "$mnt_q" "$mnt_h" "$mnt_hb"; do
    grep -q " $m " /proc/mounts && { "$bin" unmount "$m" >/dev/null 2>&1 || umount -l "$m"; }
  done
  grep -q " $mnt_b " /proc/mounts && { fusermount -u "$mnt_b" 2>/dev/null || umount -l "$mnt_b"; }
  [ -n "$uring_was" ] && echo "$uring_was" > "$uring_param"
  [ -n "$fuse_mode" ] && chmod "$fuse_mode" /dev/fuse
  grep -q " $fs " /proc/mounts && umount "$fs" 2>/dev/null || { grep -q " $fs " /proc/mounts && umount -l "$fs"; }
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

truncate -s "${IMG_GB}G" "$img"
mkfs.ext4 -q -F -N 1500000 "$img"
mkdir -p "$fs" "$mnt_b" "$mnt_z" "$mnt_d" "$mnt_n" "$mnt_f" "$mnt_s" "$mnt_k" "$mnt_u" "$mnt_p" "$mnt_w" "$mnt_c" "$mnt_o" "$mnt_r" "$mnt_q" "$mnt_h" "$mnt_hb"
# The unprivileged target's user must reach the helper, the mountpoints
# and the fixtures.
chmod 755 "$work"
mount -o loop "$img" "$fs"
mkdir -p "$data" "$fs/askz" "$fs/fds"
chmod 755 "$data"

# ---- helpers -------------------------------------------------------------
helper="$work/helper.py"
cat > "$helper" <<'PY'
import os, random, sys, time
op, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
if op == "create":
    for i in range(n):
        os.close(os.open(f"{path}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
elif op == "unlink":
    for i in range(n):
        os.unlink(f"{path}/f{i}")
elif op == "openclose":
    # One small file opened read-only and closed n times: the cost of an
    # OPEN and a RELEASE with nothing to open (the daemon keeps its fd).
    for _ in range(n):
        os.close(os.open(path, os.O_RDONLY))
elif op == "randread":
    fd = os.open(path, os.O_RDONLY)
    blocks = os.fstat(fd).st_size // 4096
    rng = random.Random(8)
    for _ in range(n):
        os.pread(fd, 4096, rng.randrange(blocks) * 4096)
    os.close(fd)
elif op == "tree":
    # n entries: dirs of 100 small text files (some matching grep's word).
    rng = random.Random(1)
    made = 0; d = 0
    while made < n:
        dp = f"{path}/d{d // 50}/e{d}"
        os.makedirs(dp); made += 1; d += 1
        for j in range(min(99, n - made)):
            with open(f"{dp}/f{j}.txt", "w") as f:
                f.write(("needle " if rng.random() < 0.01 else "") + "x" * rng.randrange(64, 2048) + "\n")
            # An hour old: a git index written after is not "racily clean"
            # (git would re-read every file, natively too).
            os.utime(f"{dp}/f{j}.txt", (time.time() - 3600, time.time() - 3600))
            made += 1
elif op == "realtree":
    # n source-like files: nested dirs of ~40, log-normal sizes (median
    # ~5 KB, mean ~9 KB, at most 400 KB), lines of code-ish words; a line
    # in ~0.5% holds grep's word. Deterministic: the same tree every time.
    rng = random.Random(31)
    words = ["fn", "let", "mut", "self", "return", "match", "impl", "struct",
             "if", "else", "for", "in", "while", "pub", "use", "mod", "const",
             "Some", "None", "Ok", "Err", "value", "index", "buffer", "len",
             "config", "zone", "path", "open", "read", "write", "close", "map",
             "iter", "collect", "into", "from", "=", "==", "+", "{", "}", "(",
             ")", ";", "&", "->", "::", "0", "1", "42", "\"text\"", "// note"]
    lines = []
    for _ in range(4000):
        line = "    " * rng.randrange(4) + " ".join(rng.choice(words) for _ in range(rng.randrange(2, 14)))
        lines.append(line + "\n")
    exts = [".rs", ".c", ".h", ".py", ".js", ".ts", ".go", ".md", ".toml", ".json"]
    old = time.time() - 3600
    for i in range(n):
        dp = f"{path}/p{i // 4000}/m{(i // 200) % 20}/s{(i // 40) % 5}"
        if i % 40 == 0:
            os.makedirs(dp, exist_ok=True)
        size = min(400_000, int(rng.lognormvariate(8.5, 1.1)))
        out = []; got = 0
        while got < size:
            l = lines[rng.randrange(len(lines))]
            if rng.random() < 0.005: l = "needle " + l
            out.append(l); got += len(l)
        fp = f"{dp}/f{i}{exts[i % len(exts)]}"
        with open(fp, "w") as f:
            f.write("".join(out))
        os.utime(fp, (old, old))
else:
    sys.exit("unknown op " + op)
print(f"{time.perf_counter() - t:.6f}")
PY

drop() { sync; echo "${1:-2}" > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
# The VM's host's steal time: "steal total" ticks of all CPUs (/proc/stat).
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat; }
steal_pct() { # "steal total" before, after
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); d = y[2] - x[2]; printf "%.1f\n", (d > 0 ? 100 * (y[1] - x[1]) / d : 0) }'
}

# The target's view of the backing dir `data`.
root_of() {
  case "$1" in
    native) echo "$data" ;;
    bindfs) echo "$mnt_b" ;;
    zm) echo "$mnt_z/w" ;;
    zm-nopt) echo "$mnt_d/w" ;;
    zm-nopoll) echo "$mnt_n/w" ;;
    zm-staged) echo "$mnt_s/w" ;;
    zm-ckpt50) echo "$mnt_k/w" ;;
    zm-uring) echo "$mnt_u/w" ;;
    zm-user) echo "$mnt_p/w" ;;
    zm-user-wb) echo "$mnt_w/w" ;;
    zm-caller) echo "$mnt_c/w" ;;
    zm-base) echo "$mnt_o/w" ;;
    zm-base-uring) echo "$mnt_q/w" ;;
    zm-hide) echo "$mnt_h/w" ;;
    zm-base-hide) echo "$mnt_hb/w" ;;
    zm-kopen) echo "$mnt_r/w" ;;
    # In the sandbox: the fixtures are the zone /fixture.
    zm-isolate|zm-isolate-daemon) echo "" ;;
  esac
}

# The unprivileged target: its user, and how to run a command as that user.
as_user=()
if want zm-user || want zm-user-wb || want zm-caller || want zm-isolate || want zm-isolate-daemon; then
  bench_user=${ZONEMOUNT_BENCH_USER:-zmtest}
  id -u "$bench_user" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$bench_user"
  bench_uid=$(id -u "$bench_user"); bench_gid=$(id -g "$bench_user")
  as_user=(setpriv --reuid="$bench_uid" --regid="$bench_gid" --init-groups
           env -u XDG_RUNTIME_DIR HOME="$(getent passwd "$bench_user" | cut -d: -f6)")
fi
if want zm-user || want zm-user-wb || want zm-isolate || want zm-isolate-daemon; then
  fuse_mode=$(stat -c %a /dev/fuse)
  chmod 0666 /dev/fuse
fi
# own DIR: a scratch dir of the unprivileged target is its user's (its
# daemon works with that user's rights on the backing dir).
own() { case "$1" in s-zm-user|s-zm-user-wb|s-zm-caller) chown -R "$bench_uid:$bench_gid" "$data/$1" ;; esac; }

place() { # pin or unpin every daemon's threads
  local cpus=$1 p t n
  # Every daemon of ours, whatever its binary is called (a --base BIN too).
  for p in $(pgrep -f -- " mount .* $work/mnt-") $(pgrep -f "bindfs .* $mnt_b"); do
    taskset -a -p -c "$cpus" "$p" >/dev/null 2>&1 || true
    # Unpinned, an io_uring queue's thread stays on its own CPU (as the
    # daemon keeps it: the kernel queues each request on the ring of the
    # CPU it was made on).
    [ "$cpus" = "$pinned_cpus" ] && continue
    for t in /proc/"$p"/task/*; do
      n=$(cat "$t/comm" 2>/dev/null) || continue
      case "$n" in fuse-ring-*) taskset -p -c "${n#fuse-ring-}" "${t##*/}" >/dev/null 2>&1 || true ;; esac
    done
  done
}

# ---- mounts -----------------------------------------------------------------
cat > "$work/zm.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    - { name: w, path: $data, mode: rw }
    - { name: askz, path: $fs/askz, mode: rw, approval: { write: ask } }
YAML
# bindfs as a user would run it to re-present a dir (libfuse 2, 1 s TTLs).
want bindfs && bindfs "$data" "$mnt_b"
# zm (and the fds check's mount) always: the ask and fds workloads use it.
"$bin" mount --config "$work/zm.yaml" --threads "$threads" --no-io-uring "$mnt_z"
want zm-nopt && "$bin" mount --config "$work/zm.yaml" --threads "$threads" --no-passthrough --no-io-uring "$mnt_d"
want zm-nopoll && "$bin" mount -q --config "$work/zm.yaml" --threads "$threads" --busy-poll 0 --no-io-uring "$mnt_n"
if want zm-uring; then
  [ -e "$uring_param" ] || { echo "bench: this kernel has no FUSE over io_uring ($uring_param)" >&2; exit 1; }
  uring_was=$(cat "$uring_param")
  "$bin" mount --config "$work/zm.yaml" --threads "$threads" --io-uring "$mnt_u"
  "$bin" status "$mnt_u" | grep -q '^transport: io_uring' || { echo "bench: $mnt_u is not served over io_uring" >&2; exit 1; }
fi
cat > "$work/zm-staged.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    - { name: w, path: $data, mode: rw, staged: true }
YAML
if want zm-user || want zm-user-wb; then
  cat > "$work/zm-user.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    - { name: w, path: $data, mode: rw }
YAML
  chown "$bench_uid:$bench_gid" "$mnt_p" "$mnt_w"
  want zm-user && "${as_user[@]}" "$bin" mount -q --config "$work/zm-user.yaml" --threads "$threads" --no-io-uring "$mnt_p"
  want zm-user-wb && "${as_user[@]}" "$bin" mount -q --config "$work/zm-user.yaml" --threads "$threads" --no-io-uring --writeback-cache "$mnt_w"
fi
want zm-caller && "$bin" mount -q --config "$work/zm.yaml" --threads "$threads" --no-io-uring --allow-other "$mnt_c"
if want zm-kopen; then
  cat > "$work/zm-kopen.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    - { name: w, path: $data, mode: ro }
YAML
  "$bin" mount -q --config "$work/zm-kopen.yaml" --threads "$threads" --no-io-uring --kernel-opens "$mnt_r"
  "$bin" status "$mnt_r" | grep -q 'the kernel opens files itself' || { echo "bench: $mnt_r does not let the kernel open files:" >&2; "$bin" status "$mnt_r" >&2; exit 1; }
fi
want zm-base && "$base_bin" mount -q --config "$work/zm.yaml" --threads "$threads" --no-io-uring "$mnt_o"
if want zm-base-uring; then
  "$base_bin" mount -q --config "$work/zm.yaml" --threads "$threads" --io-uring "$mnt_q"
  "$base_bin" status "$mnt_q" | grep -q '^transport: io_uring' || { echo "bench: $mnt_q is not served over io_uring" >&2; exit 1; }
fi
if want zm-hide; then
  cat > "$work/zm-hide.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    - { name: w, path: $data, mode: rw, hide: ["**/.env", "*.pem", "secrets/"] }
YAML
  "$bin" mount -q --config "$work/zm-hide.yaml" --threads "$threads" --no-io-uring "$mnt_h"
  want zm-base-hide && "$base_bin" mount -q --config "$work/zm-hide.yaml" --threads "$threads" --no-io-uring "$mnt_hb"
fi
# The staged zone also serves the `commit` workload.
{ want zm-staged || [[ " $WORKLOADS " == *" commit "* ]]; } && "$bin" mount -q --config "$work/zm-staged.yaml" --threads "$threads" --no-io-uring --stage-dir "$fs/stage" "$mnt_s"
want zm-ckpt50 && "$bin" mount -q --config "$work/zm-staged.yaml" --threads "$threads" --no-io-uring --max-checkpoints 64 --stage-dir "$fs/stage-ckpt50" "$mnt_k"
echo "== targets: $TARGETS (mounts under $work)"

# ---- fixtures (made natively, shared read-only) ----------------------------
echo "== fixtures: tree of $TREE_ENTRIES entries, a ${RAND_MB} MiB file, a $TAR_FILES-file tarball"
fx="$data/fixture"
mkdir -p "$fx"
case " $WORKLOADS " in *" git_status "*|*" grep_r "*|*" find_ls "*)
  python3 "$helper" tree "$fx/tree" "$TREE_ENTRIES" >/dev/null
  ( cd "$fx/tree" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm fixture && git repack -adq && git prune ) ;;
esac
case " $WORKLOADS " in *" real_grep "*|*" real_status "*)
  if [ -n "$real_src" ]; then
    echo "== real tree: a copy of $real_src"
    mkdir -p "$fx/real"; cp -a "$real_src/." "$fx/real/"
    [ -d "$fx/real/.git" ] || ( cd "$fx/real" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm fixture && git repack -adq && git prune )
  else
    cache=/var/tmp/zonemount-bench-cache
    real_tar="$cache/realtree-v1-$REAL_FILES.tar"
    if [ ! -f "$real_tar" ]; then
      echo "== real tree: generating $REAL_FILES files once (cached in $real_tar)"
      mkdir -p "$cache"; rm -rf "$cache/gen"
      python3 "$helper" realtree "$cache/gen/real" "$REAL_FILES" >/dev/null
      ( cd "$cache/gen/real" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm fixture && git repack -adq && git prune )
      tar -C "$cache/gen" -cf "$real_tar.part" real && mv "$real_tar.part" "$real_tar"
      rm -rf "$cache/gen"
    fi
    tar -C "$fx" -xf "$real_tar"
  fi
  # Copied or extracted files have new ctimes: refresh the index once (a
  # plain `git status` here may not write it: GIT_OPTIONAL_LOCKS=0), or
  # every status would re-read every file.
  env -u GIT_OPTIONAL_LOCKS git -C "$fx/real" update-index -q --refresh >/dev/null || true
  echo "== real tree: $(find "$fx/real" -path "$fx/real/.git" -prune -o -type f -print | wc -l) files, $(du -sm --exclude=.git "$fx/real" | cut -f1) MB" ;;
esac
head -c $((RAND_MB << 20)) /dev/urandom > "$fx/rand.bin"
printf "one small file\n" > "$fx/one.txt"
mkdir -p "$work/src"
python3 "$helper" tree "$work/src/t" "$TAR_FILES" >/dev/null
tar -C "$work/src" -cf "$fx/src.tar" t
rm -rf "$work/src"
sync

# ---- workloads ----------------------------------------------------------------
# Each prints the seconds it took; setup and cleanup are outside the timing.
# $1 = target root, $2 = scratch dir name (per target), $3 = taskset prefix.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.6f\n", b - a }'; }
timed() { local t0; t0=$(now); "$@" >/dev/null 2>&1 || echo "bench: failed: $*" >&2; since "$t0"; }

w_seq_write() { local d="$1/$2"; mkdir -p "$data/$2"; own "$2"; drop; timed $3 dd if=/dev/zero of="$d/big" bs=1M count=$SEQ_MB conv=fsync; }
# A quarter of seq_write's size in 4 KiB blocks (a round trip each where
# nothing gathers them).
w_seq_write_4k() { local d="$1/$2" s; mkdir -p "$data/$2"; own "$2"; drop; s=$(timed $3 dd if=/dev/zero of="$d/big4k" bs=4k count=$((SEQ_MB * 64)) conv=fsync); rm -f "$data/$2/big4k"; echo "$s"; }
w_seq_read_cold() { local d="$1/$2"; [ -f "$data/$2/big" ] || { mkdir -p "$data/$2"; dd if=/dev/zero of="$data/$2/big" bs=1M count=$SEQ_MB conv=fsync status=none; own "$2"; }; drop 3; timed $3 dd if="$d/big" of=/dev/null bs=1M; }
w_seq_read_warm() { local d="$1/$2"; drop; $3 cat "$d/big" >/dev/null; timed $3 dd if="$d/big" of=/dev/null bs=1M; }
w_open_close() { drop; $3 cat "$1/fixture/one.txt" >/dev/null; $3 python3 "$helper" openclose "$1/fixture/one.txt" 1000 >/dev/null; $3 python3 "$helper" openclose "$1/fixture/one.txt" "$OPEN_N"; }
w_rand_read() { drop; $3 cat "$1/fixture/rand.bin" >/dev/null; $3 python3 "$helper" randread "$1/fixture/rand.bin" "$RAND_N"; }
w_untar() { local d="$1/$2"; rm -rf "$data/$2"; mkdir -p "$data/$2"; own "$2"; drop; timed $3 tar -C "$d" -xf "$data/fixture/src.tar"; }
w_rm_rf() { local d="$1/$2"; rm -rf "$data/$2"; mkdir -p "$data/$2"; tar -C "$data/$2" -xf "$data/fixture/src.tar"; own "$2"; sync; drop; timed $3 rm -rf "$d/t"; }
git_commit() { cd "$1" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm x; }
w_git_commit() { local d="$1/$2"; rm -rf "$data/$2"; mkdir -p "$data/$2"; tar -C "$data/$2" -xf "$data/fixture/src.tar"; own "$2"; sync; drop; timed $3 bash -c "$(declare -f git_commit); git_commit '$d/t'"; }
w_git_status() { local d="$1/fixture/tree"; drop; $3 git -C "$d" status --porcelain >/dev/null; timed $3 git -C "$d" status --porcelain; }
# Two untimed runs: reads leave the kernel's cached atime stale, so the
# second run refreshes attributes; from the third on a warm grep is steady.
w_grep_r() { local d="$1/fixture/tree"; drop; $3 grep -r -c needle "$d" >/dev/null; $3 grep -r -c needle "$d" >/dev/null; timed $3 grep -r -c needle "$d"; }
w_real_grep() { local d="$1/fixture/real"; drop; $3 grep -r -c needle "$d" >/dev/null; $3 grep -r -c needle "$d" >/dev/null; timed $3 grep -r -c needle "$d"; }
w_real_status() { local d="$1/fixture/real"; drop; $3 git -C "$d" status --porcelain >/dev/null; timed $3 git -C "$d" status --porcelain; }
w_find_ls() { local d="$1/fixture/tree"; drop; $3 find "$d" -ls >/dev/null; timed $3 find "$d" -ls; }
w_create() { local d="$1/$2"; rm -rf "$data/$2"; mkdir -p "$data/$2"; own "$2"; drop; $3 python3 "$helper" create "$d" "$CREATE_N"; }
w_unlink() { local d="$1/$2"; rm -rf "$data/$2"; mkdir -p "$data/$2"; python3 "$helper" create "$data/$2" "$CREATE_N" >/dev/null; own "$2"; sync; drop; $3 python3 "$helper" unlink "$d" "$CREATE_N"; }

# FUSE requests per opcode during one run (pinned, first repetition),
# counted by the kernel's fuse_request_send tracepoint for that connection.
tr=/sys/kernel/tracing
# A fresh machine may not have tracefs mounted: mount it for the run (and
# take it down after), or the counts are silently missing.
tracefs_mounted=""
if [ ! -d "$tr/events" ] && mount -t tracefs nodev "$tr" 2>/dev/null; then tracefs_mounted=1; fi
ev=$tr/events/fuse/fuse_request_send
ops_ok=0; [ -w "$ev/enable" ] && [ -w "$tr/buffer_size_kb" ] && ops_ok=1
[ $ops_ok = 1 ] || echo "== no FUSE request counts: $ev is not writable (tracefs)"
if [ $ops_ok = 1 ]; then
  old_buf=$(cut -d' ' -f1 < "$tr/buffer_size_kb")
  echo 65536 > "$tr/buffer_size_kb" 2>/dev/null || ops_ok=0
fi
conn_of() { case "$1" in native|zm-isolate|zm-isolate-daemon) echo "" ;; zm-user|zm-user-wb) "${as_user[@]}" stat -c %d "$(root_of "$1")" ;; *) stat -c %d "$(root_of "$1")" ;; esac; }
ops_begin() {
  [ $ops_ok = 1 ] && [ -n "$1" ] || return 0
  echo "connection == $1" > "$ev/filter"; : > "$tr/trace"; echo 1 > "$ev/enable"
}
ops_end() { # conn placement workload target
  [ $ops_ok = 1 ] && [ -n "$1" ] || return 0
  echo 0 > "$ev/enable"
  grep -o '(FUSE_[A-Z_0-9]*)' "$tr/trace" | tr -d '()' | sed 's/^FUSE_//' | sort | uniq -c |
    while read -r n op; do printf '%s\t%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "$op" "$n"; done >> "$work/ops.tsv" || true
  echo 0 > "$ev/filter"; : > "$tr/trace"
}

# zm-isolate: the workload's function run whole in `zonemount run --isolate`
# (the fixtures as the ro zone /fixture), its caches dropped before; the
# sandbox prints the timed run's seconds last.
ISOLATE_WORKLOADS=" grep_r git_status find_ls real_grep real_status "
ISOLATE_RW_WORKLOADS=" seq_write seq_write_4k seq_read_cold seq_read_warm rand_read open_close untar rm_rf git_commit create unlink "
KOPEN_WORKLOADS="$ISOLATE_WORKLOADS seq_read_cold rand_read open_close "
GIT_ENV=(--env GIT_OPTIONAL_LOCKS --env GIT_CONFIG_COUNT --env GIT_CONFIG_KEY_0 --env GIT_CONFIG_VALUE_0)
isolated() { # workload taskset-prefix [run option]
  local secs
  drop
  secs=$($2 "$bin" run --isolate ${3:-} --zone "fixture=$data/fixture:ro" "${GIT_ENV[@]}" \
    -- bash -c "$(declare -f now since timed "w_$1"); drop() { :; }; w_$1 '' s-iso ''" 2>"$work/isolate.err" | tail -1)
  isolate_check fixture "${3:-}" "$secs" "$1"
  echo "$secs"
}
# The rw workloads: the backing dir as the rw zone /d, the workload run by
# the bench user (data=/d inside), drop() served by a root loop outside
# through the FIFOs .drop/req and .drop/done (a zone bound straight passes
# FIFOs on; through the daemon, --no-direct, it does not: there drop()
# does nothing and the runs are warmer than native's).
isolated_rw() { # workload taskset-prefix [run option]
  local secs srv drop_in
  mkdir -p "$data/.drop"; rm -f "$data/.drop/req" "$data/.drop/done"
  mkfifo -m 0666 "$data/.drop/req" "$data/.drop/done"
  cp "$helper" "$data/.drop/helper.py"; chmod 0644 "$data/.drop/helper.py"
  # A root dir of the zone the user may make and remove its scratch dir in.
  chmod 1777 "$data"
  ( while read -r lvl < "$data/.drop/req"; do [ "$lvl" = quit ] && break; drop "$lvl"; echo ok > "$data/.drop/done"; done ) &
  srv=$!
  drop_in='drop() { echo "${1:-2}" > /d/.drop/req; read -r _ < /d/.drop/done; }'
  [ "${3:-}" = --no-direct ] && drop_in='drop() { :; }'
  drop
  secs=$($2 "${as_user[@]}" "$bin" run --isolate ${3:-} --zone "d=$data:rw" "${GIT_ENV[@]}" \
    -- bash -c "$(declare -f now since timed git_commit "w_$1"); $drop_in; data=/d; helper=/d/.drop/helper.py; CREATE_N=$CREATE_N; SEQ_MB=$SEQ_MB; RAND_N=$RAND_N; OPEN_N=$OPEN_N; own() { :; }; w_$1 /d s-zm-isolate ''" 2>"$work/isolate.err" | tail -1)
  timeout 10 bash -c "echo quit > '$data/.drop/req'" 2>/dev/null || kill "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  chmod 755 "$data"
  isolate_check d "${3:-}" "$secs" "$1"
  echo "$secs"
}
# Stop when `run` did not put zone $1 the way the target measures (bound
# straight, or through the daemon with --no-direct).
isolate_check() { # zone run-option seconds workload
  local want="bound straight"
  if ! [[ "$3" =~ ^[0-9]+(\.[0-9]+)?$ ]] || grep -q "^bench: failed" "$work/isolate.err"; then
    echo "bench: run --isolate: $4 failed or gave no time:" >&2; cat "$work/isolate.err" >&2; exit 1
  fi
  [ "$2" = --no-direct ] && want="through the daemon"
  grep -q "run --isolate: $1: $want" "$work/isolate.err" || {
    echo "bench: run --isolate did not put zone $1 $want:" >&2; cat "$work/isolate.err" >&2; exit 1
  }
}

# zm-ckpt50, before each run (untimed): 50 checkpoints, each after a small
# change of its own (a 2-byte file under .ckpt50/), then a check that the
# zone keeps all 50.
ckpt50() {
  local i n
  mkdir -p "$mnt_k/w/.ckpt50"
  for i in $(seq 1 50); do
    # Written by a process that ends (a write by this shell itself would
    # make the `discard` after the run a worker's own decision: refused).
    sh -c 'echo "$1" > "$2"' sh "$i" "$mnt_k/w/.ckpt50/c$i"
    "$bin" checkpoint --label "bench $i" "$mnt_k" >/dev/null 2>"$work/ckpt50.err" || { cat "$work/ckpt50.err" >&2; exit 1; }
  done
  n=$("$bin" checkpoints --json "$mnt_k" | python3 -c 'import json, sys; print(sum(len(z["checkpoints"]) for z in json.load(sys.stdin)["zones"]))')
  [ "$n" = 50 ] || { echo "bench: zm-ckpt50 keeps $n checkpoints, not 50" >&2; exit 1; }
}

cleanup_scratch() { rm -rf "$data"/s-* 2>/dev/null || true; }

# ---- the interleaved run ------------------------------------------------------
: > "$raw"
run_workload() { # placement workload
  local placement=$1 w=$2 prefix="" rep t i order
  [ "$placement" = pinned ] && prefix="taskset -c $pinned_cpus"
  for rep in $(seq 1 "$REPS"); do
    # Rotate the order so no target always runs first (or after another).
    order=($TARGETS)
    for i in $(seq 1 $(( (rep - 1) % 4 ))); do order=("${order[@]:1}" "${order[0]}"); done
    for t in "${order[@]}"; do
      local secs conn="" t0ticks st
      [ "$rep" = 1 ] && [ "$placement" = pinned ] && conn=$(conn_of "$t")
      [ "$t" = zm-ckpt50 ] && ckpt50
      ops_begin "$conn"
      local as="$prefix"
      case "$t" in zm-user|zm-user-wb|zm-caller) as="${as_user[*]} $prefix" ;; esac
      [ "$t" = zm-kopen ] && { [[ "$KOPEN_WORKLOADS" == *" $w "* ]] || continue; }
      t0ticks=$(cpu_ticks)
      if [ "$t" = zm-isolate ] || [ "$t" = zm-isolate-daemon ]; then
        if [[ "$ISOLATE_WORKLOADS" == *" $w "* ]]; then
          secs=$(isolated "$w" "$prefix" "$([ "$t" = zm-isolate-daemon ] && echo --no-direct)")
        elif [[ "$ISOLATE_RW_WORKLOADS" == *" $w "* ]]; then
          secs=$(isolated_rw "$w" "$prefix" "$([ "$t" = zm-isolate-daemon ] && echo --no-direct)")
        else
          continue
        fi
      else
        secs=$("w_$w" "$(root_of "$t")" "s-$t" "$as" | tail -1)
      fi
      st=$(steal_pct "$t0ticks" "$(cpu_ticks)")
      ops_end "$conn" "$placement" "$w" "$t"
      # A staged run's changes are dropped (untimed), as after a task.
      [ "$t" = zm-staged ] && "$bin" discard "$mnt_s" >/dev/null
      [ "$t" = zm-ckpt50 ] && "$bin" discard "$mnt_k" >/dev/null
      printf '%s\t%s\t%s\t%s\n' "$placement" "$w" "$t" "$secs" >> "$raw"
      printf '%s\t%s\t%s\t%s\n' "$placement" "$w" "$t" "$st" >> "$work/steal.tsv"
      printf '  %-9s %-14s %-8s rep %d: %ss (steal %s%%)\n' "$placement" "$w" "$t" "$rep" "$secs" "$st"
    done
  done
  case "$w" in seq_read_warm|untar|rm_rf|git_commit|create|unlink) cleanup_scratch ;; esac
}

# `ask` pending in zone askz while zone w creates and unlinks files.
ask_pending() { # placement
  local placement=$1 prefix="" rep secs have_approvals=no
  [ "$placement" = pinned ] && prefix="taskset -c $pinned_cpus"
  "$bin" --help 2>/dev/null | grep -qw approvals && have_approvals=yes
  for rep in $(seq 1 "$REPS"); do
    for pending in none one; do
      local waiter=""
      rm -rf "$data/s-ask"; mkdir -p "$data/s-ask"
      if [ $pending = one ]; then
        # Without approvals (issue 4) this ask is denied at once and the
        # writer exits: the figure then measures nothing pending.
        (echo x > "$mnt_z/askz/pending-$rep") 2>/dev/null &
        waiter=$!; bg_pids+=("$waiter")
        sleep 0.2
        if [ "$have_approvals" = yes ]; then
          # Make sure the request really waits before measuring.
          for _ in $(seq 1 50); do
            "$bin" approvals list "$mnt_z" 2>/dev/null | grep -q pending- && break
            sleep 0.1
          done
          "$bin" approvals list "$mnt_z" 2>/dev/null | grep -q pending- \
            || echo "  ask_pending: WARNING: no request was pending"
        fi
      fi
      drop
      secs=$( { $prefix python3 "$helper" create "$mnt_z/w/s-ask" "$ASK_N"; $prefix python3 "$helper" unlink "$mnt_z/w/s-ask" "$ASK_N"; } | awk '{ s += $1 } END { printf "%.6f\n", s }')
      # SIGKILL: the broker withdraws the waiting request (EINTR) at once.
      [ -n "$waiter" ] && { kill -KILL "$waiter" 2>/dev/null || true; wait "$waiter" 2>/dev/null || true; }
      printf '%s\t%s\t%s\t%s\n' "$placement" ask_pending "zm-ask-$pending" "$secs" >> "$raw"
      printf '  %-9s %-14s %-11s rep %d: %ss (approvals built: %s)\n' "$placement" ask_pending "$pending" "$rep" "$secs" "$have_approvals"
    done
  done
  rm -rf "$data/s-ask" "$fs/askz"/pending-* 2>/dev/null || true
  echo "$have_approvals" > "$work/ask-approvals"
}

# Bounded fds: the daemon runs with RLIMIT_NOFILE 20,000 (hard), walks a
# tree of FD_ENTRIES entries with `find -ls`, and `git add -A`s FD_GIT files.
fds_check() {
  rm -rf "$fs/fds"; mkdir -p "$fs/fds"
  echo "  fds: making $FD_ENTRIES entries"
  python3 - "$fs/fds/big" "$FD_ENTRIES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
made = 0; d = 0
while made < n:
    dp = f"{root}/d{d // 100}/e{d}"; os.makedirs(dp); made += 1; d += 1
    for j in range(min(999, n - made)):
        os.close(os.open(f"{dp}/f{j}", os.O_CREAT | os.O_WRONLY, 0o644)); made += 1
PY
  python3 "$helper" tree "$fs/fds/repo" "$FD_GIT" >/dev/null
  cat > "$work/fds.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    - { name: f, path: $fs/fds, mode: rw }
YAML
  prlimit --nofile=20000:20000 "$bin" mount --config "$work/fds.yaml" "$mnt_f"
  local pid max=0 n ok=yes t0 tf tg
  pid=$(pgrep -f "zonemount mount .* $mnt_f" | head -1)
  ( while kill -0 "$pid" 2>/dev/null; do ls "/proc/$pid/fd" 2>/dev/null | wc -l; sleep 0.2; done ) > "$work/fdcount" &
  local sampler=$!; bg_pids+=("$sampler")
  drop
  t0=$(now)
  find "$mnt_f/f/big" -ls > "$work/find.out" 2>"$work/find.err" || ok=no
  tf=$(since "$t0")
  n=$(wc -l < "$work/find.out")
  t0=$(now)
  (cd "$mnt_f/f/repo" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm x) 2>"$work/git.err" || ok=no
  tg=$(since "$t0")
  kill "$sampler" 2>/dev/null || true
  max=$(sort -n "$work/fdcount" | tail -1)
  "$bin" unmount "$mnt_f" >/dev/null
  echo "  fds: find -ls listed $n of $FD_ENTRIES entries in ${tf}s; git add -A + commit of $FD_GIT files in ${tg}s; daemon fds at most $max (limit 20000); ok=$ok"
  printf 'fds\t%s\t%s\t%s\t%s\t%s\t%s\n' "$FD_ENTRIES" "$n" "$FD_GIT" "$max" "$ok" "$tf" > "$work/fds.result"
  [ -s "$work/find.err" ] && head -3 "$work/find.err"
  rm -rf "$fs/fds"
}

# commit: untar the tarball into the staged zone (untimed), then time
# `zonemount commit` of it into the backing dir, against `cp -a` of the
# same tree natively on the same filesystem.
commit_bench() { # placement
  local placement=$1 prefix="" rep secs
  [ "$placement" = pinned ] && prefix="taskset -c $pinned_cpus"
  for rep in $(seq 1 "$REPS"); do
    rm -rf "$data/s-commit" "$fs/cp-src" "$fs/cp-dst"
    mkdir -p "$mnt_s/w/s-commit"
    tar -C "$mnt_s/w/s-commit" -xf "$data/fixture/src.tar"
    sync; drop
    secs=$(timed $prefix "$bin" commit "$mnt_s")
    [ -f "$data/s-commit/t/d0/e0/f0.txt" ] || echo "bench: commit left no files" >&2
    printf '%s\t%s\t%s\t%s\n' "$placement" commit zm-commit "$secs" >> "$raw"
    printf '  %-9s %-14s %-11s rep %d: %ss\n' "$placement" commit zm-commit "$rep" "$secs"
    mkdir -p "$fs/cp-src"; tar -C "$fs/cp-src" -xf "$data/fixture/src.tar"; sync; drop
    secs=$(timed $prefix cp -a "$fs/cp-src/t" "$fs/cp-dst")
    printf '%s\t%s\t%s\t%s\n' "$placement" commit cp-a "$secs" >> "$raw"
    printf '  %-9s %-14s %-11s rep %d: %ss\n' "$placement" commit cp-a "$rep" "$secs"
  done
  rm -rf "$data/s-commit" "$fs/cp-src" "$fs/cp-dst"
}

IFS=, read -r -a places <<< "$placements"
for placement in "${places[@]}"; do
  if [ "$placement" = pinned ]; then place "$pinned_cpus"; else place "0-$(( $(nproc) - 1 ))"; fi
  echo "== $placement"
  for w in $WORKLOADS; do
    case "$w" in
      ask_pending) ask_pending "$placement" ;;
      commit) commit_bench "$placement" ;;
      fds|checkpoint) ;;
      *) run_workload "$placement" "$w" ;;
    esac
  done
done
place "0-$(( $(nproc) - 1 ))"
case " $WORKLOADS " in *" fds "*) echo "== bounded fds"; fds_check ;; esac
# Checkpoint and rewind timings, on the ext4 image (not interleaved: they
# time zonemount's own commands).
case " $WORKLOADS " in *" checkpoint "*)
  echo "== checkpoint and rewind (scripts/bench-checkpoints.sh)"
  # Their per-zone lines on stderr are kept, and shown when it fails.
  if ! bash scripts/bench-checkpoints.sh --reps "$([ $quick = 1 ] && echo 3 || echo 5)" --bin "$bin" --dir "$fs" \
      2>"$work/checkpoints.err" | tee "$work/checkpoints.out"; then
    echo "bench: scripts/bench-checkpoints.sh FAILED:" >&2; tail -20 "$work/checkpoints.err" >&2
    echo "FAILED" >> "$work/checkpoints.out"
  fi
  # A tree in the backing dir read cold through 51 checkpoints (the
  # overlay's depth) against none.
  if ! bash scripts/bench-checkpoints.sh --layers --reps "$([ $quick = 1 ] && echo 3 || echo 5)" --bin "$bin" --dir "$fs" \
      2>"$work/checkpoints.err" | tee -a "$work/checkpoints.out"; then
    echo "bench: scripts/bench-checkpoints.sh --layers FAILED:" >&2; tail -20 "$work/checkpoints.err" >&2
    echo "FAILED" >> "$work/checkpoints.out"
  fi ;;
esac

# ---- report -------------------------------------------------------------------
python3 - "$raw" "$json" "$work" "$quick" "$REPS" "$orig_args" "$threads" "$pinned_cpus" <<'PY'
import json, os, platform, statistics, sys, time
raw, out, work, quick, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", int(sys.argv[5])
rows = [l.rstrip("\n").split("\t") for l in open(raw) if l.strip()]
res = {}
for placement, w, t, secs in rows:
    try: v = float(secs)
    except ValueError: continue
    res.setdefault((placement, w, t), []).append(v)
def stat(v): return {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}
names = {"native": "native", "bindfs": "bindfs", "zm": "zm (passthrough)", "zm-nopt": "zm (no passthrough)", "zm-nopoll": "zm (--busy-poll 0)", "zm-staged": "zm (staged)", "zm-ckpt50": "zm (staged, 50 checkpoints)", "zm-uring": "zm (io_uring)", "zm-user": "zm (unprivileged)", "zm-user-wb": "zm (unprivileged, writeback)", "zm-caller": "zm (root daemon, user's workload)", "zm-base": "zm-base (--base)", "zm-base-uring": "zm-base (--base, io_uring)", "zm-hide": "zm (hide patterns)", "zm-base-hide": "zm-base (--base, hide patterns)", "zm-isolate": "zm (run --isolate)", "zm-isolate-daemon": "zm (run --isolate --no-direct)", "zm-kopen": "zm (ro, --kernel-opens)"}
targets = [t for t in names if any(r[2] == t for r in rows)]
order = []
for placement, w, t, _ in rows:
    if (placement, w) not in order: order.append((placement, w))
results = []
lines = []
steal = {}
if os.path.exists(f"{work}/steal.tsv"):
    for l in open(f"{work}/steal.tsv"):
        p, w, t, pct = l.split()
        steal.setdefault(p, []).append(float(pct))
for placement in dict.fromkeys(p for p, _ in order):
    lines.append(f"\n{placement}: median seconds (min-max), and ratio to native (zm: and to bindfs)")
    if steal.get(placement):
        v = steal[placement]
        lines.append(f"(the VM's host took {statistics.median(v):.1f}% of CPU time (steal) in the median timed run, {max(v):.1f}% at most)")
    lines.append("| workload | " + " | ".join(names[t] for t in targets) + " |")
    lines.append("|---|" + "---:|" * len(targets))
    for p, w in order:
        if p != placement: continue
        if w == "ask_pending":
            a, b = res.get((p, w, "zm-ask-none")), res.get((p, w, "zm-ask-one"))
            if a and b:
                share = statistics.median(a) / statistics.median(b)
                results.append({"placement": p, "workload": w, "none": stat(a), "one_pending": stat(b), "throughput_share": share})
                lines.append(f"| ask pending elsewhere (zm, {len(a)} reps) | none pending {statistics.median(a):.3f}s | one pending {statistics.median(b):.3f}s | throughput {share*100:.0f}% of none | |")
            continue
        if w == "commit":
            a, b = res.get((p, w, "zm-commit")), res.get((p, w, "cp-a"))
            if a and b:
                ratio = statistics.median(a) / statistics.median(b)
                results.append({"placement": p, "workload": w, "commit": stat(a), "cp_a": stat(b), "ratio_to_cp_a": ratio})
                lines.append(f"| commit of the untar (staged, {len(a)} reps) | cp -a {statistics.median(b):.3f}s | zonemount commit {statistics.median(a):.3f}s | **{ratio:.2f}x** cp -a | | |")
            continue
        nat = res.get((p, w, "native"))
        cells = []
        for t in targets:
            v = res.get((p, w, t))
            if not v: cells.append("-"); continue
            s = stat(v)
            ratio = s["median"] / statistics.median(nat) if nat and statistics.median(nat) > 0 else None
            results.append({"placement": p, "workload": w, "target": t, **s, "ratio_to_native": ratio})
            zm = res.get((p, w, "zm"))
            bf = res.get((p, w, "bindfs"))
            vs_bindfs = s["median"] / statistics.median(bf) if bf and t != "bindfs" and statistics.median(bf) > 0 else None
            if vs_bindfs is not None: results[-1]["ratio_to_bindfs"] = vs_bindfs
            # Staged and unprivileged are also compared with the root daemon's plain zone.
            vs_zm = f" ({s['median'] / statistics.median(zm):.2f}x zm)" if t in ("zm-staged", "zm-hide", "zm-nopoll", "zm-user", "zm-user-wb", "zm-caller", "zm-base") and zm and statistics.median(zm) > 0 else ""
            vs_bf = f" ({vs_bindfs:.2f}x bindfs)" if t == "zm" and vs_bindfs is not None else ""
            st = res.get((p, w, "zm-staged"))
            if t == "zm-ckpt50" and st and statistics.median(st) > 0:
                results[-1]["ratio_to_staged"] = s["median"] / statistics.median(st)
                vs_zm += f" ({results[-1]['ratio_to_staged']:.2f}x zm-staged)"
            cells.append(f"{s['median']:.3f}s ({s['min']:.2f}-{s['max']:.2f})" + ("" if t == "native" or ratio is None else f" **{ratio:.2f}x**{vs_zm}{vs_bf}"))
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
fds = None
if os.path.exists(f"{work}/fds.result"):
    f = open(f"{work}/fds.result").read().split("\t")
    fds = {"entries": int(f[1]), "listed": int(f[2]), "git_files": int(f[3]), "max_daemon_fds": int(f[4]), "ok": f[5] == "yes", "find_seconds": float(f[6]), "rlimit_nofile": 20000}
    lines.append(f"\nbounded fds (RLIMIT_NOFILE 20000): find -ls listed {fds['listed']}/{fds['entries']} entries, git add -A of {fds['git_files']} files ok={fds['ok']}, daemon fds at most {fds['max_daemon_fds']}")
ops_file = f"{work}/ops.tsv"
ops = {}
if os.path.exists(ops_file):
    for l in open(ops_file):
        p, w, t, op, n = l.split()
        ops.setdefault(f"{w} {t}", {})[op] = int(n)
    lines.append("\nFUSE requests per run (pinned, first repetition, timed run incl. its warm-up):")
    for k, v in ops.items():
        lines.append(f"  {k}: total {sum(v.values())}: " + ", ".join(f"{o} {n}" for o, n in sorted(v.items(), key=lambda x: -x[1])))
ckpt = None
if os.path.exists(f"{work}/checkpoints.out"):
    import re
    ckpt = {}
    lines.append("\ncheckpoint and rewind (scripts/bench-checkpoints.sh, median ms):")
    for l in open(f"{work}/checkpoints.out"):
        if l.strip() == "FAILED":
            ckpt["failed"] = True
            lines.append("  scripts/bench-checkpoints.sh FAILED (its output is above)")
        m = re.match(r"^(.*?):\s+median ([0-9.]+) ms of ([0-9]+)$", l.strip())
        if m:
            ckpt[m.group(1)] = {"median_ms": float(m.group(2)), "runs": int(m.group(3))}
            lines.append(f"  {m.group(1)}: {float(m.group(2)):.1f} ms (median of {m.group(3)})")
        m = re.match(r"^(.*?), .*cold: no checkpoint ([0-9.]+) ms, 51 checkpoints ([0-9.]+) ms: ([0-9.]+)x \(median of ([0-9]+)\)$", l.strip())
        if m:
            ckpt[m.group(1).strip() + ", cold, 51 checkpoints vs none"] = {
                "none_ms": float(m.group(2)), "ckpt51_ms": float(m.group(3)), "ratio": float(m.group(4)), "runs": int(m.group(5))}
            lines.append(f"  {m.group(1).strip()}, cold: {float(m.group(3)):.1f} ms with 51 checkpoints vs {float(m.group(2)):.1f} ms with none: {m.group(4)}x (median of {m.group(5)})")
        if l.startswith("live overlay"):
            lines.append("  " + l.strip())
approvals = open(f"{work}/ask-approvals").read().strip() if os.path.exists(f"{work}/ask-approvals") else None
if approvals == "no":
    lines.append("\nask pending: `zonemount approvals` is not built yet, so the ask is denied at once; that row measures nothing pending.")
doc = {
    "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    "kernel": platform.release(), "cpus": os.cpu_count(), "quick": quick, "reps": reps,
    "command": "bash scripts/bench.sh " + sys.argv[6], "results": results, "bounded_fds": fds, "checkpoints": ckpt,
    "approvals_built": approvals == "yes", "fuse_ops": ops, "steal_pct": {p: stat(v) for p, v in steal.items()}, "zonemount_threads": int(sys.argv[7]), "pinned_cpus": sys.argv[8],
}
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
json.dump(doc, open(out, "w"), indent=1)
print("\n".join(lines))
print(f"\nkernel {doc['kernel']}, {doc['cpus']} CPUs, {doc['date']}; JSON: {out}")
PY
