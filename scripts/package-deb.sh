#!/usr/bin/env bash
# Build the Debian package: target/debian/zonemount_<version>_<arch>.deb
#
#   scripts/package-deb.sh                 # cargo build --release, then the package
#   scripts/package-deb.sh --binary PATH   # package this binary as it is (no build)
#   scripts/package-deb.sh --out DIR       # write the .deb in DIR
#   scripts/package-deb.sh --compression gzip   # faster than the default xz
#
# The test suite (tests/package.rs) packages the debug binary it tests
# (`--binary target/debug/zonemount --compression gzip`, stripped like any
# other) to keep its time small; a release is built from the default, the
# release binary.
#
# What it holds: /usr/bin/zonemount (stripped); the man pages `zonemount
# man --dir` writes (man1, and zonemount.yaml(5) in man5), gzipped; the
# bash, zsh and fish completions in the dirs those shells search;
# /sbin/mount.fuse.zonemount -> mount.fuse3, so `mount -t fuse.zonemount`
# and fstab lines find fuse3's helper by their type's name; the systemd
# units (system: /lib/systemd/system/zonemount@.service, user:
# /usr/lib/systemd/user/zonemount@.service, both running
# /usr/bin/zonemount); the copyright (MIT), README and changelog in
# /usr/share/doc/zonemount (gzipped). Version from Cargo.toml, Architecture from
# `dpkg --print-architecture`, Depends from dpkg-shlibdeps where dpkg-dev
# is installed (else libc6, libgcc-s1) plus fuse3; Recommends bubblewrap
# (for `run --isolate`). Maintainer: $DEBFULLNAME <$DEBEMAIL> when set.
#
# Needs dpkg-deb and gzip (on every Debian); lintian, when installed, is
# run on the result and its errors fail the build.
set -euo pipefail
cd "$(dirname "$0")/.."

binary="" out="target/debian" compression="xz"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --compression) compression=${2:?--compression needs xz, gzip or none}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package-deb.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

for tool in dpkg-deb dpkg gzip; do
  command -v "$tool" >/dev/null || { echo "package-deb.sh: needs $tool (a Debian system)" >&2; exit 1; }
done

if [ -z "$binary" ]; then
  cargo build --release --locked
  binary=target/release/zonemount
fi
[ -x "$binary" ] || { echo "package-deb.sh: $binary is not an executable" >&2; exit 1; }

# Version: the [package] table's, which the binary must report too (a
# stale binary is not packaged under a newer number).
version=$(awk '/^\[package\]/{p=1; next} /^\[/{p=0} p && /^version *=/{gsub(/[" ]/, "", $0); sub(/^version=/, ""); print; exit}' Cargo.toml)
[ -n "$version" ] || { echo "package-deb.sh: no version in Cargo.toml" >&2; exit 1; }
reported=$("$binary" -V)
if [ "$reported" != "zonemount $version" ]; then
  echo "package-deb.sh: $binary says '$reported', Cargo.toml says $version: rebuild it" >&2
  exit 1
fi
arch=$(dpkg --print-architecture)
# File times in the package: the commit's (dpkg-deb clamps to it).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

stage=$(mktemp -d "${TMPDIR:-/tmp}/zonemount-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
doc="$root/usr/share/doc/zonemount"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/sbin" "$doc" \
  "$root/usr/share/man/man1" "$root/usr/share/man/man5" \
  "$root/usr/share/bash-completion/completions" \
  "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" \
  "$root/lib/systemd/system" "$root/usr/lib/systemd/user"

install -m 0755 "$binary" "$root/usr/bin/zonemount"
if command -v strip >/dev/null; then
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/zonemount"
else
  echo "package-deb.sh: no strip (binutils): the binary keeps its symbols" >&2
fi
zm="$root/usr/bin/zonemount"

"$zm" man --dir "$stage/man"
for page in "$stage"/man/*.1; do
  gzip -9n < "$page" > "$root/usr/share/man/man1/$(basename "$page").gz"
done
for page in "$stage"/man/*.5; do
  gzip -9n < "$page" > "$root/usr/share/man/man5/$(basename "$page").gz"
done
"$zm" completions bash > "$root/usr/share/bash-completion/completions/zonemount"
"$zm" completions zsh > "$root/usr/share/zsh/vendor-completions/_zonemount"
"$zm" completions fish > "$root/usr/share/fish/vendor_completions.d/zonemount.fish"

# mount(8) runs /sbin/mount.<type> for -t fuse.zonemount; fuse3's helper
# runs `zonemount SOURCE MOUNTPOINT -o OPTIONS` (the helper form).
ln -s mount.fuse3 "$root/sbin/mount.fuse.zonemount"

sed 's#^ExecStart=zonemount #ExecStart=/usr/bin/zonemount #' contrib/systemd/zonemount@.service \
  > "$root/lib/systemd/system/zonemount@.service"
sed 's#^ExecStart=zonemount #ExecStart=/usr/bin/zonemount #' contrib/systemd/user/zonemount@.service \
  > "$root/usr/lib/systemd/user/zonemount@.service"
for u in "$root/lib/systemd/system/zonemount@.service" "$root/usr/lib/systemd/user/zonemount@.service"; do
  grep -q '^ExecStart=/usr/bin/zonemount ' "$u" || { echo "package-deb.sh: $u: ExecStart not pinned" >&2; exit 1; }
done

gzip -9n < README.md > "$doc/README.md.gz"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: zonemount"
  echo
  echo "Files: *"
  echo "Copyright: $(grep -m1 '^Copyright' LICENSE | sed 's/^Copyright (c) //; s/^Copyright //')"
  echo "License: MIT"
  echo
  echo "License: MIT"
  # The license text, each line indented, blank lines as " ." (DEP-5).
  sed -n '/^Permission/,$p' LICENSE | sed 's/^$/./; s/^/ /'
} > "$doc/copyright"
maintainer="${DEBFULLNAME:-zonemount maintainers} <${DEBEMAIL:-zonemount@localhost}>"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "zonemount ($version) unstable; urgency=medium"
  echo
  echo "  * Built by scripts/package-deb.sh from commit $commit."
  echo
  echo " -- $maintainer  $(date -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.Debian.gz"

# Depends: the shared libraries the binary links, as dpkg-shlibdeps works
# them out (it wants a debian/control to read; a minimal one is enough).
depends="libc6, libgcc-s1"
if command -v dpkg-shlibdeps >/dev/null; then
  mkdir -p "$stage/src/debian"
  printf 'Source: zonemount\n\nPackage: zonemount\nArchitecture: any\n' > "$stage/src/debian/control"
  if shl=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/zonemount" 2>/dev/null); then
    depends=${shl#shlibs:Depends=}
  fi
fi

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: zonemount
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends, fuse3
Recommends: bubblewrap
Section: admin
Priority: optional
Description: policed zones of host directories for AI workers (FUSE)
 zonemount mounts "zones" (host directories, read-only, read-write or
 staged) as one tree for an AI worker, with rules for each zone: which
 writes, deletes and reads are allowed, asked for (the call waits for a
 decision from the supervisor) or refused; paths hidden or protected; and
 staged zones whose changes reach the host only when committed.
 .
 This package has the zonemount command, its man pages and shell
 completions, the mount.fuse.zonemount helper link for fstab lines, and
 systemd units for long-lived mounts (system and user).
EOF

mkdir -p "$out"
deb="$out/zonemount_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"$compression" --build "$root" "$deb" >/dev/null
if command -v lintian >/dev/null; then
  lintian --fail-on error "$deb"
fi
echo "$deb"
