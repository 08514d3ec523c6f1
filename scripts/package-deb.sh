#!/usr/bin/env bash
# Builds the Debian packages of Clarion: clarion (the command, stripped;
# manual pages; bash, zsh and fish completions; the clarion-agent and
# clarion-manager systemd units; /etc/clarion/clarion.toml) and
# clarion-dbgsym (the debug information split off the binary, found by
# its build id).
#
# Usage: bash scripts/package-deb.sh [--no-build] [--bin FILE] [--out DIR]
#   --no-build  package the binary as built (default: cargo build --release first)
#   --bin FILE  the clarion binary to package (default: target/release/clarion)
#   --out DIR   where the .deb files go (default: target/debian)
# Needs dpkg-deb, objcopy (binutils) and gzip; prints the packages' paths.
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
bin=target/release/clarion
out=target/debian
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --bin) bin=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package-deb: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for tool in dpkg-deb objcopy gzip; do
  command -v "$tool" >/dev/null || { echo "package-deb: $tool is missing (apt-get install dpkg binutils gzip)" >&2; exit 1; }
done
if [ "$build" = 1 ]; then
  cargo build --release --locked -p clarion-cli
fi
[ -x "$bin" ] || { echo "package-deb: no binary at $bin (build it, or give --bin)" >&2; exit 1; }

version=$("$bin" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
# The newest glibc symbol version the binary links against.
glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
main=$work/clarion
dbg=$work/clarion-dbgsym
mkdir -p "$main/DEBIAN" "$dbg/DEBIAN" "$out"

# The binary: debug information split off into the dbgsym package (symbols
# stay, so perf and backtraces still name functions), linked by build id
# and by a .gnu_debuglink.
build_id=$(readelf -n "$bin" | awk '/Build ID/ {print $3}')
[ -n "$build_id" ] || { echo "package-deb: $bin has no build id" >&2; exit 1; }
debug_file=usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
mkdir -p "$(dirname "$dbg/$debug_file")" "$main/usr/bin"
objcopy --only-keep-debug --compress-debug-sections=zlib "$bin" "$dbg/$debug_file"
objcopy --strip-debug --add-gnu-debuglink="$dbg/$debug_file" "$bin" "$main/usr/bin/clarion"
chmod 0755 "$main/usr/bin/clarion"
chmod 0644 "$dbg/$debug_file"

# Manual pages and completions, from the command definition itself.
man_dir=$main/usr/share/man/man1
"$bin" man --out-dir "$man_dir" 2>/dev/null
gzip -9n "$man_dir"/*.1
install -d "$main/usr/share/bash-completion/completions" \
  "$main/usr/share/zsh/vendor-completions" "$main/usr/share/fish/vendor_completions.d"
"$bin" completions bash >"$main/usr/share/bash-completion/completions/clarion"
"$bin" completions zsh >"$main/usr/share/zsh/vendor-completions/_clarion"
"$bin" completions fish >"$main/usr/share/fish/vendor_completions.d/clarion.fish"

# The services, their configuration, the docs.
for unit in clarion-agent clarion-manager; do
  install -D -m 0644 "packaging/$unit.service" "$main/usr/lib/systemd/system/$unit.service"
done
install -D -m 0640 packaging/clarion.toml "$main/etc/clarion/clarion.toml"
doc=$main/usr/share/doc/clarion
install -d "$doc/examples"
install -m 0644 README.md docs/install.md "$doc/"
install -m 0644 examples/*.clarion "$doc/examples/"
cat >"$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: clarion

Files: *
Copyright: Clarion developers
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
install -d "$dbg/usr/share/doc"
ln -s clarion "$dbg/usr/share/doc/clarion-dbgsym"

fill() { # template, size in KiB -> control file on stdout
  sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$2/" \
    -e "s/@DEPENDS@/libc6 (>= $glibc), libgcc-s1/" -e "s/@BUILDID@/$build_id/" "$1"
}
fill packaging/debian/control "$(du -sk --exclude=DEBIAN "$main" | cut -f1)" >"$main/DEBIAN/control"
fill packaging/debian/control-dbgsym "$(du -sk --exclude=DEBIAN "$dbg" | cut -f1)" >"$dbg/DEBIAN/control"
install -m 0644 packaging/debian/conffiles "$main/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$main/DEBIAN/"
for p in "$main" "$dbg"; do
  (cd "$p" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
done
deb=$out/clarion_${version}_${arch}.deb
dbgsym=$out/clarion-dbgsym_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$main" "$deb" >/dev/null
dpkg-deb --root-owner-group -Zgzip --build "$dbg" "$dbgsym" >/dev/null
echo "$deb"
echo "$dbgsym"
