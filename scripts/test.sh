#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is
# missing (Debian), then runs every test:
#
#   1. cargo build (all targets)
#   2. cargo test (unit and integration tests; they really mount under
#      temporary directories; tests/package.rs builds the .deb from the
#      debug binary with scripts/package-deb.sh and installs it into a
#      scratch root)
#   3. cargo test --doc (the doc examples compile, and run unless no_run)
#   4. the Python client (scripts/test-python.sh: mypy --strict, pytest)
#      and the TypeScript client (scripts/test-node.sh: tsc, node --test)
#   5. the suites every environment must pass, again as root without
#      fusermount3, as an unprivileged user, and over FUSE over io_uring
#      (scripts/test-envs.sh)
#   6. scripts/conformance.sh (pjdfstest and fsx against a mounted zone)
#
# Every step runs under a time limit; one that runs out fails with a line
# naming the step and the limit. A test that can't run here (no root, no
# /dev/fuse, a missing tool) fails under CI=true; otherwise it prints a
# `ZONEMOUNT-SKIP:` line and is counted as skipped, not passed. The last
# line is `summary: N passed, N failed, N skipped` over all steps; the exit
# status is non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Time limits, in seconds (generous: ~3x what a run takes on 2 cores).
LIMIT_BUILD=${ZONEMOUNT_LIMIT_BUILD:-2400}
LIMIT_TEST=${ZONEMOUNT_LIMIT_TEST:-2400}
LIMIT_DOC=${ZONEMOUNT_LIMIT_DOC:-900}
LIMIT_ENV=${ZONEMOUNT_LIMIT_ENV:-1200}
LIMIT_PY=${ZONEMOUNT_LIMIT_PY:-900}
LIMIT_NODE=${ZONEMOUNT_LIMIT_NODE:-900}
LIMIT_CONFORMANCE=${ZONEMOUNT_LIMIT_CONFORMANCE:-3600}

missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v setfattr >/dev/null || missing+=(attr)
command -v git >/dev/null || missing+=(git)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v timeout >/dev/null || missing+=(coreutils)
# a pty for the review walk (tests/review.rs)
command -v script >/dev/null || missing+=(bsdutils)
# man pages rendered (tests/manuals.rs), units verified and the .deb
# installed into a scratch root (tests/package.rs, tests/lifecycle.rs).
command -v man >/dev/null || missing+=(man-db)
command -v groff >/dev/null || missing+=(groff-base)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v dpkg-deb >/dev/null || missing+=(dpkg)
# an npm install as one step of a checkpointed task (tests/checkpoints.rs)
command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

work=$(mktemp -d /tmp/zmtest.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Tests that skip append a line here (tests/common `require`).
export ZONEMOUNT_SKIP_LOG="$work/skips.log"
: > "$ZONEMOUNT_SKIP_LOG"

# step NAME LIMIT COMMAND...: run COMMAND under `timeout`, then say how
# long it took; a run that hits the limit says so on stderr. Returns
# COMMAND's status (124 on timeout).
# `timeout` signals its whole process group, so the test binaries and the
# daemons they started go too; the conformance script unmounts its own
# mount on the way out.
step() {
  local name=$1 limit=$2 rc=0 t0=$SECONDS
  shift 2
  echo "== test.sh: $name (time limit ${limit} s)"
  timeout --kill-after=30 "$limit" "$@" || rc=$?
  echo "== test.sh: $name took $((SECONDS - t0)) s"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "test.sh: TIMEOUT: step '$name' did not finish within its limit of ${limit} s" >&2
    rc=124
  elif [ $rc -ne 0 ]; then
    echo "test.sh: step '$name' FAILED (exit $rc)" >&2
  fi
  return $rc
}

failed_steps=()
rc_build=0 rc_test=0 rc_doc=0 rc_conf=0
test_log="$work/cargo-test.log" doc_log="$work/cargo-doc.log" envs_log="$work/envs.log"
py_log="$work/python.log" node_log="$work/node.log"
: > "$test_log"; : > "$doc_log"; : > "$envs_log"; : > "$py_log"; : > "$node_log"
step "cargo build" "$LIMIT_BUILD" cargo build --locked --all-targets || rc_build=$?
if [ $rc_build -eq 0 ]; then
  step "cargo test" "$LIMIT_TEST" cargo test --locked --all-targets 2>&1 | tee "$test_log" || rc_test=$?
  step "cargo test --doc" "$LIMIT_DOC" cargo test --locked --doc 2>&1 | tee "$doc_log" || rc_doc=$?
else
  failed_steps+=("cargo build")
fi
[ $rc_test -eq 0 ] || failed_steps+=("cargo test")
[ $rc_doc -eq 0 ] || failed_steps+=("cargo test --doc")

# The Python client: mypy --strict and its pytest suite against real mounts.
rc_py=0
if [ $rc_build -eq 0 ]; then
  step "python client" "$LIMIT_PY" bash scripts/test-python.sh "$work/python" 2>&1 | tee "$py_log" || rc_py=$?
else
  rc_py=1
fi
[ $rc_py -eq 0 ] || failed_steps+=("python client")

# The TypeScript client: tsc (strict) and node --test against real mounts.
rc_node=0
if [ $rc_build -eq 0 ]; then
  step "node client" "$LIMIT_NODE" bash scripts/test-node.sh "$work/node" 2>&1 | tee "$node_log" || rc_node=$?
else
  rc_node=1
fi
[ $rc_node -eq 0 ] || failed_steps+=("node client")

# The suites every environment must pass, again: as root where fusermount3
# is unusable (a private mount namespace with it covered), as an
# unprivileged user with the setuid fusermount3, and as root over FUSE
# over io_uring where the kernel has it (scripts/test-envs.sh).
ENV_SUITES=(errno_table lifecycle run approvals escape bounded_fds staged checkpoints data_path moves hide ask_lock stages package direct attribution review)
rc_envs=0
for env_name in nofusermount user uring; do
  rc_env=0
  if [ $rc_build -eq 0 ]; then
    step "integration suites: $env_name" "$LIMIT_ENV" bash scripts/test-envs.sh "$env_name" "${ENV_SUITES[@]}" 2>&1 | tee -a "$envs_log" || rc_env=$?
  else
    rc_env=1
  fi
  if [ $rc_env -ne 0 ] && [ $rc_env -ne 3 ]; then failed_steps+=("integration suites: $env_name"); rc_envs=1; fi
done

# Conformance suites against a real mount (pjdfstest, fsx); needs root.
# Exit 0: passed; 3: skipped (not root, outside CI); anything else: failed.
step "conformance" "$LIMIT_CONFORMANCE" bash scripts/conformance.sh 2>&1 | tee "$work/conformance.log" || rc_conf=$?
if [ $rc_conf -ne 0 ] && [ $rc_conf -ne 3 ]; then failed_steps+=("conformance"); fi

if [ -s "$ZONEMOUNT_SKIP_LOG" ]; then
  echo "== skipped (this machine lacks what they need; under CI=true they fail):"
  sort -u "$ZONEMOUNT_SKIP_LOG"
fi

# One closing line for the whole run, after one line per environment.
#  - cargo prints one `test result:` line per test binary (summed here) and
#    one `test NAME ... ok` line per test. A test that recorded a skip
#    (`ZONEMOUNT-SKIP: <suite>::<test>: why`, <suite> being the test
#    binary's name without its hash, prefixed `ENV/` outside the default
#    environment) returned early, and cargo calls it ok: it is counted as
#    skipped instead of passed.
#  - `Running [ENV] tests/foo.rs (...)` (scripts/test-envs.sh) starts a
#    suite run in environment ENV; cargo's own runs are environment `root`.
#  - A step that failed with no failed test to show for it (a build error,
#    a timeout, a crashed test binary) counts as one failure.
#  - The conformance suites count per case: each pjdfstest case (its
#    expected failures, the device-node cases, count as skipped) and each
#    fsx run; shown as environment `conformance`.
awk -v skips="$ZONEMOUNT_SKIP_LOG" -v rc_build="$rc_build" -v rc_test="$rc_test" \
    -v rc_doc="$rc_doc" -v rc_conf="$rc_conf" -v rc_envs="$rc_envs" -v rc_py="$rc_py" -v rc_node="$rc_node" '
  function flush_pjd() {
    if (have_pjd) { pjd_p += cur_p; pjd_f += cur_f; pjd_s += cur_s; have_pjd = 0 }
  }
  BEGIN {
    while ((getline line < skips) > 0) {
      sub(/^ZONEMOUNT-SKIP: /, "", line)
      i = index(line, ": "); if (i > 0) line = substr(line, 1, i - 1)
      skip[line] = 1
    }
    env = "root"
  }
  FNR == 1 { env = "root" }
  # "Running tests/foo.rs (target/debug/deps/foo-0123abcd)" names the suite.
  /^ *Running / {
    env = "root"; prefix = ""
    if ($2 ~ /^\[/) { env = $2; gsub(/[][]/, "", env); prefix = env "/" }
    nm = $NF; gsub(/[()]/, "", nm); n = split(nm, parts, "/"); nm = parts[n]
    sub(/-[0-9a-f]+$/, "", nm); suite = prefix nm
  }
  /^ *Doc-tests / { suite = "doc:" $2; env = "root" }
  /^test .* \.\.\. ok$/ {
    key = suite "::" $2
    if (key in skip) { sk[env]++; delete skip[key] }
  }
  # The conformance log: pjdfstest cases and fsx runs, one test each.
  # pjdfstest: its Summary, unless the script then says OK with the flaky
  # cases (failed, then passed alone) counted as passed.
  # One Summary per zone the suite ran on (plain, staged), each added in.
  FILENAME == ARGV[5] && /^Summary: [0-9]+ failed, [0-9]+ skipped, [0-9]+ passed, [0-9]+ expected failures/ {
    flush_pjd(); cur_f = $2; cur_s = $4 + $8; cur_p = $6; have_pjd = 1; seen["conformance"] = 1
  }
  FILENAME == ARGV[5] && /^pjdfstest( \([a-z]+\))?: OK \(/ {
    line = $0; sub(/^pjdfstest( \([a-z]+\))?: OK \(/, "", line); split(line, w, " "); cur_p = w[1]; cur_f = 0
  }
  FILENAME == ARGV[5] && /^fsx .*: [0-9]+ ops OK/ { pe["conformance"]++; fsx_ok++; seen["conformance"] = 1 }
  FILENAME == ARGV[5] && /^fsx / && !/ops OK/ && !/^fsx total:/ && !/^fsx: not run/ {
    fe["conformance"]++; seen["conformance"] = 1
  }
  /^test result:/ { for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed/) pe[env] += $i
      if ($(i+1) ~ /^failed/) { fe[env] += $i; ff[FILENAME] += $i }
      if ($(i+1) ~ /^ignored/) se[env] += $i }
      seen[env] = 1 }
  END {
    flush_pjd()
    if (rc_build != 0) f++
    if (rc_test != 0 && ff[ARGV[1]] == 0) f++
    if (rc_doc != 0 && ff[ARGV[2]] == 0) f++
    if (rc_envs != 0 && ff[ARGV[3]] == 0) f++
    if (rc_py != 0 && ff[ARGV[4]] == 0) f++
    if (rc_node != 0 && ff[ARGV[6]] == 0) f++
    pe["conformance"] += pjd_p; fe["conformance"] += pjd_f; se["conformance"] += pjd_s
    s = 0
    for (e in seen) {
      pe[e] -= sk[e]; se[e] += sk[e]
      printf "  environment %s: %d passed, %d failed, %d skipped\n", e, pe[e], fe[e], se[e]
      p += pe[e]; f += fe[e]; s += se[e]
    }
    # A conformance run that failed with no failed case to show for it
    # (a dead mount, a timeout) counts as one failure; one skipped whole
    # (not root, outside CI) as one skip.
    if (rc_conf == 3) s++
    else if (rc_conf != 0 && fe["conformance"] == 0) f++
    printf "summary: %d passed, %d failed, %d skipped\n", p, f, s
  }' "$test_log" "$doc_log" "$envs_log" "$py_log" "$work/conformance.log" "$node_log"

if [ ${#failed_steps[@]} -gt 0 ]; then
  echo "test.sh: FAILED: ${failed_steps[*]}" >&2
  exit 1
fi
