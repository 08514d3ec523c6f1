#!/usr/bin/env bash
# Regenerates the committed XDP object crates/xdp/bpf/redirect.bpf.o from its
# C source. Building Clarion does not run this: the object is committed so a
# Rust toolchain is all a build needs (the convention of cilium's bpf2go).
#
# Needs clang (any version with the bpf target), the kernel UAPI headers and
# libbpf's bpf_helpers.h; on Debian: apt-get install clang llvm libbpf-dev.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/crates/xdp/bpf"
obj="$dir/redirect.bpf.o"

CLANG="${CLANG:-clang}"
if ! command -v "$CLANG" >/dev/null; then
    echo "build-bpf.sh: $CLANG not found (apt-get install clang llvm libbpf-dev)" >&2
    exit 1
fi

# The multiarch include dir holds asm/types.h, which linux/bpf.h needs.
multiarch="$(gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")"

# -g emits BTF (.BTF/.BTF.ext), which the BTF-style map definition needs;
# the DWARF sections are stripped afterwards to keep the object small.
# Compiled from the repository root with a relative path, so the object
# (its BTF line info names the source file) is the same in every checkout.
(cd "$root" && "$CLANG" -O2 -g -Wall -Werror -target bpf -fdebug-prefix-map="$root"=. \
    -I"/usr/include/$multiarch" \
    -c crates/xdp/bpf/redirect.bpf.c -o "$obj")

STRIP="${LLVM_STRIP:-}"
if [[ -z "$STRIP" ]]; then
    for s in llvm-strip llvm-strip-{20,19,18,17,16,15,14}; do
        if command -v "$s" >/dev/null; then STRIP="$s"; break; fi
    done
fi
if [[ -n "$STRIP" ]]; then
    "$STRIP" -g "$obj"
else
    echo "build-bpf.sh: llvm-strip not found, leaving debug info in $obj" >&2
fi

echo "wrote $obj ($(wc -c <"$obj") bytes)"
