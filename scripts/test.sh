#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is
# missing (Debian), then runs every test. Tests that need FUSE really mount
# under temporary directories; with CI=true they fail, not skip, when FUSE
# is unavailable.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v setfattr >/dev/null || missing+=(attr)
command -v git >/dev/null || missing+=(git)
command -v bwrap >/dev/null || missing+=(bubblewrap)
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

cargo build --locked --all-targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked --all-targets 2>&1 | tee "$log"

# Conformance suites against a real mount (pjdfstest, fsx); needs root.
bash scripts/conformance.sh

# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) {
       if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
