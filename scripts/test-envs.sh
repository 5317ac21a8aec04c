#!/usr/bin/env bash
# Run integration suites again in an environment other than "root with
# fusermount3", each a real mount on this machine:
#
#   nofusermount  root in a private mount namespace where fusermount3 is
#                 covered by /dev/null (a container image without fuse3)
#   user          an unprivileged user (ZONEMOUNT_TEST_USER, default
#                 zmtest, created if missing) with the setuid fusermount3;
#                 /dev/fuse is made 0666 (Debian's default) for the run
#                 and put back afterwards
#   uring         root, with the fuse module's enable_uring switched on
#                 for the run (set back afterwards) and
#                 ZONEMOUNT_IO_URING=1 (a mount's default is /dev/fuse):
#                 every mount is served over FUSE over io_uring. Skipped
#                 on a kernel without it (before 6.14).
#
#   bash scripts/test-envs.sh ENV SUITE...     (needs root)
#
# SUITE names a tests/SUITE.rs binary (built here with `cargo test
# --no-run`). Each binary's output is printed after a line
#   Running [ENV] tests/SUITE.rs (PATH)
# so scripts/test.sh counts its results per environment. The tests learn
# the environment from ZONEMOUNT_TEST_ENV; what an environment lacks by
# design (root, in `user`) they skip with a recorded reason.
# Exit status: 0 when every suite passed, 1 otherwise, 2 on bad usage, 3
# when this can't run here (not root, no unshare/setpriv) outside CI.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)

env_name=${1:-}
[ $# -ge 2 ] || { echo "usage: test-envs.sh nofusermount|user|uring SUITE..." >&2; exit 2; }
shift
case $env_name in nofusermount|user|uring) ;; *) echo "test-envs.sh: unknown environment '$env_name'" >&2; exit 2 ;; esac

cant() {
  if [ "${CI:-}" = true ]; then
    echo "test-envs.sh: $env_name: $1 (under CI=true that is a failure)" >&2
    exit 1
  fi
  echo "ZONEMOUNT-SKIP: env $env_name: $1" >&2
  exit 3
}
[ "$(id -u)" -eq 0 ] || cant "needs root to set the environment up"
for t in unshare setpriv mount; do command -v $t >/dev/null || cant "needs $t"; done

# The test binaries, by suite.
declare -a bins=()
args=()
for s in "$@"; do args+=(--test "$s"); done
while IFS= read -r exe; do bins+=("$exe"); done < <(
  cargo test --locked --no-run --message-format=json "${args[@]}" 2>/dev/null |
    grep '"kind":\["test"\]' | grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//')
[ ${#bins[@]} -eq $# ] || { echo "test-envs.sh: expected $# test binaries, cargo built ${#bins[@]}" >&2; exit 1; }

scratch=$(mktemp -d /tmp/zmenv.XXXXXX)
chmod 0711 "$scratch"
fuse_mode=""
uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=""
cleanup() {
  [ -n "$fuse_mode" ] && chmod "$fuse_mode" /dev/fuse
  [ -n "$uring_was" ] && echo "$uring_was" > "$uring_param"
  if [ -n "${ZONEMOUNT_SKIP_LOG:-}" ] && [ -f "$scratch/skips.log" ]; then
    cat "$scratch/skips.log" >> "$ZONEMOUNT_SKIP_LOG"
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT

# The tests append skips to a log of their own here (the caller's log may
# be in a directory the test user can't reach); it is added to the
# caller's ZONEMOUNT_SKIP_LOG at the end.
skip_log=$scratch/skips.log
touch "$skip_log"

run_env=(env "CI=${CI:-}" "ZONEMOUNT_TEST_ENV=$env_name" "ZONEMOUNT_SKIP_LOG=$skip_log" "RUST_BACKTRACE=1")

if [ "$env_name" = uring ]; then
  # FUSE over io_uring: the kernel's switch on for this run (set back
  # after). A kernel without it (before 6.14) can't run this environment;
  # that is the kernel's limit, not a missing tool: skipped even under CI.
  if [ ! -e "$uring_param" ]; then
    echo "ZONEMOUNT-SKIP: env uring: this kernel has no FUSE over io_uring ($uring_param)" >&2
    exit 3
  fi
  uring_was=$(cat "$uring_param")
  echo Y > "$uring_param"
  # Every mount of the suites asks for it, as `--io-uring` would.
  run_env+=("ZONEMOUNT_IO_URING=1")
  prepare="true"
  as=()
elif [ "$env_name" = user ]; then
  user=${ZONEMOUNT_TEST_USER:-zmtest}
  if ! id -u "$user" >/dev/null 2>&1; then
    echo "test-envs.sh: creating the test user $user"
    useradd --create-home --shell /bin/sh "$user"
  fi
  uid=$(id -u "$user"); gid=$(id -g "$user"); home=$(getent passwd "$user" | cut -d: -f6)
  fuse_mode=$(stat -c %a /dev/fuse)
  chmod 0666 /dev/fuse
  chmod 0666 "$skip_log"
  # The user must reach the binaries and the repo (tests read its files):
  # a clone under a private directory such as /root is shown to the user by
  # a tmpfs over the first directory it can't pass, with the repo bound back
  # at its own path, inside the private mount namespace the suites run in.
  blocked=""
  d=""
  IFS=/ read -ra parts <<< "${repo#/}"
  for p in "${parts[@]}"; do
    d="$d/$p"
    if ! setpriv --reuid="$uid" --regid="$gid" --init-groups test -x "$d"; then blocked=$d; break; fi
  done
  prepare="mkdir -p '$scratch/repo'"
  if [ -n "$blocked" ]; then
    prepare="$prepare && mount --bind '$repo' '$scratch/repo' && mount -t tmpfs -o mode=0755 zmenv '$blocked' && mkdir -p '$repo' && mount --bind '$scratch/repo' '$repo'"
  fi
  run_env+=("HOME=$home" "USER=$user" "LOGNAME=$user" "PATH=/usr/local/bin:/usr/bin:/bin" "XDG_RUNTIME_DIR=")
  as=(setpriv --reuid="$uid" --regid="$gid" --init-groups)
else
  # Cover fusermount3 wherever it is (a /bin symlink to /usr/bin resolves to
  # the same file; covering twice does no harm).
  prepare="for f in /usr/bin/fusermount3 /bin/fusermount3 /usr/local/bin/fusermount3; do if [ -e \"\$f\" ]; then mount --bind /dev/null \"\$f\"; fi; done; if [ -x \"\$(command -v fusermount3 || true)\" ] && [ -s \"\$(command -v fusermount3)\" ]; then echo 'test-envs.sh: fusermount3 still usable' >&2; exit 1; fi"
  as=()
fi

rc=0
for bin in "${bins[@]}"; do
  suite=$(basename "$bin"); suite=${suite%-*}
  echo "     Running [$env_name] tests/$suite.rs ($bin)"
  # One private mount namespace per suite: what it covers or mounts goes
  # with it.
  unshare -m --propagation private -- bash -c "$prepare && exec \"\$@\"" zmenv \
    "${as[@]}" "${run_env[@]}" "$bin" || rc=1
done
exit $rc
