#!/usr/bin/env bash
# Unmount every zonemount mount under DIR (DIR itself included), each by its
# exact path, wait for their daemons, and report what was done.
#
#   scripts/teardown.sh DIR
#
# Mounts are found by filesystem type (fuse.zonemount, or a plain fuse mount
# whose source is zonemount, as older versions made) in /proc/mounts, whose
# octal escapes (\040 for a space, ...) are decoded; nothing of another type
# is touched, and nothing outside DIR. Each mount goes through
# `zonemount unmount PATH` (which waits up to 10 s for the daemon), falling
# back to `--lazy` when busy; without the zonemount binary, through
# fusermount3 -u (or umount as root). Safe to run twice: a second run finds
# nothing and says so. Exit status: 0 when everything found was unmounted,
# 1 when something failed, 2 on bad usage.
#
# The binary: $ZONEMOUNT, else `zonemount` on PATH.
set -uo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$(realpath -m -- "$1")
zm=${ZONEMOUNT:-$(command -v zonemount || true)}

# /proc/mounts field -> path: every backslash starts a 3-digit octal escape.
decode() {
  local field=$1
  printf -v REPLY '%b' "${field//\\/\\0}"
}

under_dir() {
  [ "$dir" = / ] || [ "$1" = "$dir" ] || [[ "$1" == "$dir"/* ]]
}

# Pids of the daemon serving this path: from the registry (`zonemount list
# --json`: a "mountpoint" line, then its "pid" line), else any zonemount
# process whose last argument is exactly this path.
daemon_pids() {
  local want=$1 f pid line cur=
  if [ -n "$zm" ]; then
    while IFS= read -r line; do
      case $line in
        *'"mountpoint": "'*)
          cur=${line#*'"mountpoint": "'}
          cur=${cur%'",'}
          ;;
        *'"pid": '[0-9]*)
          pid=${line#*'"pid": '}
          pid=${pid%,}
          [ "$cur" = "$want" ] && echo "$pid" && return 0
          ;;
      esac
    done < <("$zm" list --json 2>/dev/null)
  fi
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    [ "$pid" = "$$" ] && continue
    local -a args=()
    mapfile -d '' -t args <"$f" 2>/dev/null || continue
    [ ${#args[@]} -ge 2 ] || continue
    [ "${args[0]##*/}" = zonemount ] || continue
    [ "${args[-1]%/}" = "$want" ] && echo "$pid"
  done
}

alive() {
  local state
  state=$(sed -n 's/.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

unmount_one() {
  local mp=$1 out
  if [ -n "$zm" ]; then
    out=$("$zm" unmount "$mp" 2>&1) && return 0
    if [[ "$out" == *busy* ]]; then
      out=$("$zm" unmount --lazy "$mp" 2>&1) && { echo "  (busy: detached lazily)"; return 0; }
    fi
  elif [ "$(id -u)" -eq 0 ]; then
    out=$(umount -- "$mp" 2>&1) || out=$(umount -l -- "$mp" 2>&1) && return 0
  else
    out=$(fusermount3 -u -- "$mp" 2>&1) || out=$(fusermount3 -u -z -- "$mp" 2>&1) && return 0
  fi
  echo "  $out"
  return 1
}

found=()
while read -r src field fstype _rest; do
  # fuse.zonemount; or plain fuse named zonemount (older versions, as root
  # without fusermount3).
  [ "$fstype" = fuse.zonemount ] || { [ "$fstype" = fuse ] && [ "$src" = zonemount ]; } || continue
  decode "$field"
  under_dir "$REPLY" && found+=("$REPLY")
done </proc/mounts

if [ ${#found[@]} -eq 0 ]; then
  echo "teardown: no zonemount mounts under $dir"
  exit 0
fi

ok=0
failed=0
# Latest first: a mount stacked later is the one on top.
for ((i = ${#found[@]} - 1; i >= 0; i--)); do
  mp=${found[i]}
  mapfile -t pids < <(daemon_pids "$mp")
  if msg=$(unmount_one "$mp"); then
    [ -n "$msg" ] && echo "$msg"
    for _ in $(seq 100); do
      left=()
      for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
      [ ${#left[@]} -eq 0 ] && break
      sleep 0.1
    done
    if [ ${#left[@]} -gt 0 ]; then
      echo "unmounted $mp, but daemon ${left[*]} is still running after 10 s"
      failed=$((failed + 1))
    else
      echo "unmounted $mp${pids:+ (daemon ${pids[*]} exited)}"
      ok=$((ok + 1))
    fi
  else
    echo "FAILED to unmount $mp"
    echo "$msg"
    failed=$((failed + 1))
  fi
done
echo "teardown: $ok unmounted, $failed failed under $dir"
[ "$failed" -eq 0 ]
