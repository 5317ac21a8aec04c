#!/usr/bin/env bash
# The Python client's checks: installs it with no index into a stock
# virtualenv (`pip install --no-index --no-build-isolation`: its build
# backend is in the tree and needs nothing fetched), then into a fresh
# virtualenv with pytest and mypy, type-checks it with `mypy --strict`,
# and runs its pytest suite against real mounts of the zonemount binary
# the client finds: $ZONEMOUNT_BIN if set, else `zonemount` on PATH, where
# target/debug comes first. Installs python3 and python3-venv with apt
# when missing.
#
#   bash scripts/test-python.sh [WORK_DIR]
#
# Prints one cargo-style line, `test result: ... N passed; N failed; N
# ignored` (scripts/test.sh counts it), and exits non-zero when anything
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)
work=${1:-$(mktemp -d /tmp/zmpy.XXXXXX)}
mkdir -p "$work"

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "test-python.sh: installing python3 and python3-venv"
  sudo_=(); [ "$(id -u)" -eq 0 ] || sudo_=(sudo)
  "${sudo_[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_[@]}" apt-get install -y -qq python3 python3-venv >/dev/null
fi

# Installed from a copy, so that nothing a build leaves lands in the tree.
rm -rf "$work/src"; cp -r "$repo/clients/python" "$work/src"
rc=0 extra_passed=0 extra_failed=0

# Nothing fetched: a stock venv (whatever setuptools it has, or none) and
# no index, then the installed package imports from outside the tree.
echo "== pip install --no-index --no-build-isolation clients/python (stock venv)"
stock="$work/stock-venv"
rm -rf "$stock"; python3 -m venv "$stock"
if "$stock/bin/pip" install -q --disable-pip-version-check --no-index --no-build-isolation "$work/src" &&
   (cd "$work" && "$stock/bin/python" -c 'import zonemount, sys; from zonemount import Status, run, check; assert "site-packages" in zonemount.__file__, zonemount.__file__; sys.exit(0)'); then
  extra_passed=$((extra_passed + 1))
else
  echo "test-python.sh: the client does not install with no index" >&2
  extra_failed=$((extra_failed + 1)); rc=1
fi

venv="$work/venv"
rm -rf "$venv"; python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check pytest mypy
"$venv/bin/pip" install -q --disable-pip-version-check --no-index --no-build-isolation "$work/src"

# The tests find the binary as the client does (ZONEMOUNT_BIN, else PATH).
export PATH="$repo/target/debug:$PATH"
echo "== mypy --strict clients/python examples/supervisor.py"
if (cd "$repo/clients/python" && "$venv/bin/python" -m mypy --strict src/zonemount tests _backend ../../examples/supervisor.py); then
  extra_passed=$((extra_passed + 1))
else
  extra_failed=$((extra_failed + 1)); rc=1
fi
echo "== pytest clients/python/tests"
junit="$work/pytest.xml"
# Run from outside the source tree: the tests import the installed package.
(cd "$work" && timeout 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="$junit" "$repo/clients/python/tests") || rc=1

# The no-index install and mypy count as one test each; pytest's own
# counts from its report.
"$venv/bin/python" - "$junit" "$rc" "$extra_passed" "$extra_failed" <<'PY'
import sys, xml.etree.ElementTree as ET
path, rc = sys.argv[1], int(sys.argv[2])
extra_passed, extra_failed = int(sys.argv[3]), int(sys.argv[4])
try:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    total = int(suite.get("tests", 0)); failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
except Exception:
    total = failed = skipped = 0
    failed = 1
passed = total - failed - skipped + extra_passed
failed += extra_failed
status = "ok" if rc == 0 and failed == 0 else "FAILED"
print(f"test result: {status}. {passed} passed; {failed} failed; {skipped} ignored; 0 measured; 0 filtered out (pytest)")
PY
exit $rc
