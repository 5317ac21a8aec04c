#!/usr/bin/env bash
# The TypeScript client's checks: installs its pinned dev dependencies
# with `npm ci` into a copy of clients/node, builds it with `tsc` (strict:
# the type check), and runs its tests with node's own test runner against
# real mounts of target/debug/zonemount (or $ZONEMOUNT_BIN). Installs
# nodejs and npm with apt when missing.
#
#   bash scripts/test-node.sh [WORK_DIR]
#
# Prints one cargo-style line, `test result: ... N passed; N failed; N
# ignored` (scripts/test.sh counts it; the build counts as one test), and
# exits non-zero when anything failed. Without node or npm (and no apt to
# install them) it skips, except under CI=true, where it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)
if [ $# -ge 1 ]; then
  work=$1
else
  work=$(mktemp -d /tmp/zmnode.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

result() { # STATUS PASSED FAILED IGNORED
  echo "test result: $1. $2 passed; $3 failed; $4 ignored; 0 measured; 0 filtered out (node --test)"
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if command -v apt-get >/dev/null; then
    echo "test-node.sh: installing nodejs and npm"
    sudo_=(); [ "$(id -u)" -eq 0 ] || sudo_=(sudo)
    "${sudo_[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_[@]}" apt-get install -y -qq nodejs npm >/dev/null || true
  fi
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  why="the TypeScript client's tests need node and npm (Debian: apt-get install nodejs npm)"
  if [ "${CI:-}" = "true" ]; then
    echo "test-node.sh: $why (CI=true: failing instead of skipping)" >&2
    result FAILED 0 1 0
    exit 1
  fi
  echo "ZONEMOUNT-SKIP: node client: $why"
  [ -z "${ZONEMOUNT_SKIP_LOG:-}" ] || echo "ZONEMOUNT-SKIP: node client: $why" >> "$ZONEMOUNT_SKIP_LOG"
  result ok 0 0 1
  exit 0
fi
echo "== node $(node --version), npm $(npm --version)"

# Built in a copy: npm ci and tsc would leave node_modules/ and dist/ in
# the source tree.
rm -rf "$work/node"; mkdir -p "$work/node"
(cd "$repo/clients/node" && tar --exclude=./node_modules --exclude=./dist -cf - .) | tar -xf - -C "$work/node"

export ZONEMOUNT_BIN=${ZONEMOUNT_BIN:-$repo/target/debug/zonemount}
# The unit tests read clients/escaped-code-points.txt from the repository.
export ZONEMOUNT_REPO=$repo
rc=0 built=0
echo "== npm ci && npm run build (tsc, strict) in clients/node"
if (cd "$work/node" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build); then
  built=1
else
  rc=1
fi

tap="$work/node.tap"
: > "$tap"
if [ $built -eq 1 ]; then
  echo "== node --test clients/node/test"
  # Each test has its own time limit; this one bounds the whole run.
  (cd "$work/node" && timeout --kill-after=10 600 node --test \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" \
    dist/test/*.test.js) || rc=1
fi

# node's own counts from its TAP summary; the build is one more test.
count() { sed -n "s/^# $1 \([0-9][0-9]*\)$/\1/p" "$tap" | tail -1; }
pass=$(count pass); fail=$(count fail); cancelled=$(count cancelled); skipped=$(count skipped); todo=$(count todo)
pass=${pass:-0}; fail=$((${fail:-0} + ${cancelled:-0})); skipped=$((${skipped:-0} + ${todo:-0}))
if [ $built -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
# A run that failed with no failed test to show for it (a timeout, a crash).
if [ $rc -ne 0 ] && [ $fail -eq 0 ]; then fail=1; fi
if [ $rc -eq 0 ] && [ $fail -eq 0 ]; then result ok "$pass" 0 "$skipped"; else result FAILED "$pass" "$fail" "$skipped"; fi
exit $rc
