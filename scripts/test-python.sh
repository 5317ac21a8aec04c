#!/usr/bin/env bash
# The Python client's checks: installs it with pip into a fresh virtualenv
# (with pytest and mypy), type-checks it with `mypy --strict`, and runs its
# pytest suite against real mounts of target/debug/zonemount (or
# $ZONEMOUNT_BIN). Installs python3 and python3-venv with apt when missing.
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

venv="$work/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check pytest mypy "$repo/clients/python"

export ZONEMOUNT_BIN=${ZONEMOUNT_BIN:-$repo/target/debug/zonemount}
rc=0
echo "== mypy --strict clients/python"
(cd "$repo/clients/python" && "$venv/bin/python" -m mypy --strict src/zonemount tests) || rc=1
echo "== pytest clients/python/tests"
junit="$work/pytest.xml"
# Run from outside the source tree: the tests import the installed package.
(cd "$work" && timeout 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="$junit" "$repo/clients/python/tests") || rc=1

# mypy counts as one test; pytest's own counts from its report.
"$venv/bin/python" - "$junit" "$rc" <<'PY'
import sys, xml.etree.ElementTree as ET
path, rc = sys.argv[1], int(sys.argv[2])
try:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    total = int(suite.get("tests", 0)); failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
except Exception:
    total = failed = skipped = 0
    failed = 1
passed = total - failed - skipped
status = "ok" if rc == 0 and failed == 0 else "FAILED"
print(f"test result: {status}. {passed} passed; {failed} failed; {skipped} ignored; 0 measured; 0 filtered out (pytest)")
PY
exit $rc
