// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
//
// Clarion's XDP program: hand every frame received on an RX queue to the
// AF_XDP socket registered for that queue in `xsks`. A queue without a socket
// (no map entry) gets XDP_PASS, so the kernel stack keeps working there.
//
// The compiled object (redirect.bpf.o) is committed next to this file so that
// building Clarion needs only a Rust toolchain; regenerate it with
// scripts/build-bpf.sh after changing this file.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Index = RX queue id, value = AF_XDP socket fd (written by user space).
// max_entries is overridden at load time with the device's queue count.
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int clarion_redirect(struct xdp_md *ctx)
{
	// The low bits of the flags are the action taken when the lookup fails
	// (kernel >= 5.3): no socket on this queue -> XDP_PASS.
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
