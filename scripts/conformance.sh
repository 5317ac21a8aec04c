#!/usr/bin/env bash
# Conformance: pjdfstest and fsx against a mounted rw zone (DESIGN §9).
#
#   bash scripts/conformance.sh [--quick]
#
# Needs root (pjdfstest switches uids; the mount serves other users with
# --allow-other). Installs pjdfstest 0.2.2 and fsx 0.3.2 with cargo when
# missing, and creates the `tests` user the suite needs. Prints a summary
# and exits non-zero on any failure that is not an expected one:
#  - pjdfstest's block/char device cases: zonemount refuses device nodes
#    (EPERM) by design (DESIGN §3), so every case that makes one fails.
# Everything it mounts is unmounted on exit, by exact path.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

if [ "$(id -u)" -ne 0 ]; then
  if [ "${CI:-}" = "true" ]; then echo "conformance: must run as root under CI" >&2; exit 1; fi
  echo "conformance: SKIP (needs root)"; exit 0
fi
export PATH="$HOME/.cargo/bin:$PATH"
command -v pjdfstest >/dev/null || cargo install --locked --quiet pjdfstest --version 0.2.2
command -v fsx >/dev/null || cargo install --locked --quiet fsx --version 0.3.2
id tests >/dev/null 2>&1 || useradd --system --user-group --no-create-home tests
cargo build --release --locked --quiet
bin="$repo/target/release/zonemount"

work=$(mktemp -d /tmp/zmconf.XXXXXX)
chmod 755 "$work"
mnt="$work/mnt"
link=/zmc   # pjdfstest needs a short path (unix-socket names, PATH_MAX math)
mkdir -p "$mnt" "$work/zone" "$work/native"
chmod 755 "$work/zone" "$work/native"
cat > "$work/project.yaml" <<YAML
sandbox:
  mode: direct
  zones:
    rw: { path: ./zone, mode: rw }
YAML
cleanup() {
  "$bin" unmount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
  [ -L "$link" ] && [ "$(readlink "$link")" = "$mnt/rw" ] && rm -f "$link"
  rm -rf "$work"
}
trap cleanup EXIT
"$bin" mount --allow-other --config "$work/project.yaml" "$mnt"
if [ -e "$link" ] || [ -L "$link" ]; then
  echo "conformance: $link exists and is not ours; remove it first" >&2; exit 1
fi
ln -s "$mnt/rw" "$link"

status=0
# ---- pjdfstest ---------------------------------------------------------
pjd_log="$work/pjdfstest.log"
echo "== pjdfstest on a zonemount rw zone (direct mode, --allow-other)"
pjdfstest -c scripts/conformance/pjdfstest.toml -p "$link" -s /dev/shm >"$pjd_log" 2>&1 || true
summary=$(grep -E '^Summary:' "$pjd_log" || echo "Summary: (none)")
failed=$(grep -E ' FAILED$' "$pjd_log" | awk '{print $1}' || true)
expected=$(printf '%s\n' "$failed" | grep -E '::(block|char)$' || true)
unexpected=$(printf '%s\n' "$failed" | grep -vE '::(block|char)$' | grep -v '^$' || true)
echo "$summary"
echo "expected failures (device nodes refused by design): $(printf '%s\n' "$expected" | grep -c . || true)"
# A case that fails once is run again alone (up to twice) and reported as
# flaky if it then passes: open::etxtbsy races its own child's exec.
still=""
for t in $unexpected; do
  ok=0
  for _ in 1 2; do
    if pjdfstest -c scripts/conformance/pjdfstest.toml -p "$link" -s /dev/shm -e "$t" >>"$pjd_log.retry" 2>&1; then
      ok=1; break
    fi
  done
  if [ $ok -eq 1 ]; then echo "flaky (failed, then passed alone): $t"; else still="$still $t"; fi
done
if [ -n "$still" ]; then
  echo "UNEXPECTED pjdfstest failures:"; printf '  %s\n' $still
  grep -A3 -E "^($(printf '%s|' $still | sed 's/|$//')) " "$pjd_log" | head -60 || true
  status=1
fi

# ---- fsx ----------------------------------------------------------------
if [ $quick -eq 1 ]; then seeds="1"; n=20000; else seeds="1 2 3"; n=100000; fi
echo "== fsx: seeds [$seeds], $n ops each without mmap, and 5 x $((n / 5)) with mmap"
run_fsx() { # name profile ops seed
  local name=$1 profile=$2 ops=$3 seed=$4
  local out="$work/fsx-$name.log"
  if ! fsx -N "$ops" -S "$seed" -f "scripts/conformance/$profile" "$mnt/rw/$name" >"$out" 2>&1; then
    echo "fsx $name (seed $seed) FAILED:"; tail -30 "$out"; return 1
  fi
  # The same plan on tmpfs must end with the same bytes as the backing file.
  fsx -N "$ops" -S "$seed" -f "scripts/conformance/$profile" "/dev/shm/zmconf-$name" >/dev/null 2>&1
  sync; echo 3 > /proc/sys/vm/drop_caches
  if ! cmp -s "$work/zone/$name" "/dev/shm/zmconf-$name"; then
    echo "fsx $name: the backing file differs from the reference run"; rm -f "/dev/shm/zmconf-$name"; return 1
  fi
  rm -f "/dev/shm/zmconf-$name" "$mnt/rw/$name"
  echo "fsx $name: $ops ops OK, backing file equals the reference"
}
start=$(date +%s)
for s in $seeds; do
  run_fsx "nommap-$s" fsx-nommap.toml "$n" "$s" || status=1
  for part in 1 2 3 4 5; do
    run_fsx "mmap-$s-$part" fsx-mmap.toml $((n / 5)) "$s$part" || status=1
  done
done
# The same suite as a non-root worker (the daemon switches to its uid).
mkdir -p "$work/zone/nobody" && chown nobody "$work/zone/nobody"
if setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
    fsx -N $((n / 5)) -S 99 -f scripts/conformance/fsx-nommap.toml "$mnt/rw/nobody/f" >"$work/fsx-nobody.log" 2>&1; then
  owner=$(stat -c %U "$work/zone/nobody/f")
  echo "fsx as nobody: $((n / 5)) ops OK, backing file owned by $owner"
  [ "$owner" = nobody ] || { echo "fsx as nobody: file owned by $owner"; status=1; }
else
  echo "fsx as nobody FAILED:"; tail -30 "$work/fsx-nobody.log"; status=1
fi
echo "fsx total: $(( $(date +%s) - start )) s"

if [ $status -eq 0 ]; then echo "conformance: OK"; else echo "conformance: FAILED"; fi
exit $status
