//! Community ID v1 (corelight/community-id-spec): a flow hash that every
//! tool computes alike, so records join with Zeek's and Suricata's logs.
//!
//! `"1:" + base64(sha1(seed ‖ addr_a ‖ addr_b ‖ proto ‖ 0 ‖ port_a ‖ port_b))`,
//! big-endian, with the endpoints ordered so that `(addr_a, port_a)` is the
//! smaller; ports only for protocols that have them. ICMP is the exception
//! the spec handles with type and code in place of ports: a Clarion flow
//! of ICMP holds every type between two hosts, so its ID is computed as
//! for a protocol without ports (addresses and protocol only).

use base64::Engine;
use clarion_wire::FlowKey;
use sha1::{Digest, Sha1};

/// The Community ID of a flow key with `seed` (0 unless a site chose one).
pub fn community_id(key: &FlowKey, seed: u16) -> String {
    let len = if key.is_ipv6() { 16 } else { 4 };
    let (src, dst) = (&key.src_ip[..len], &key.dst_ip[..len]);
    let ports = key.has_ports() && matches!(key.proto, 6 | 17 | 132);
    let (sp, dp) = if ports {
        (key.src_port, key.dst_port)
    } else {
        (0, 0)
    };
    // Ordered: the smaller endpoint first (address, then port).
    let (a, pa, b, pb) = if (src, sp) <= (dst, dp) {
        (src, sp, dst, dp)
    } else {
        (dst, dp, src, sp)
    };
    let mut h = Sha1::new();
    h.update(seed.to_be_bytes());
    h.update(a);
    h.update(b);
    h.update([key.proto, 0]);
    if ports {
        h.update(pa.to_be_bytes());
        h.update(pb.to_be_bytes());
    }
    let digest = h.finalize();
    format!("1:{}", base64::engine::general_purpose::STANDARD.encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str, dst: &str, proto: u8, ports: Option<(u16, u16)>) -> FlowKey {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), proto, ports, None)
    }

    /// The spec's baseline values (also Zeek's `community_id_v1` tests).
    #[test]
    fn matches_the_specs_test_vectors() {
        let tcp = key("1.2.3.4", "5.6.7.8", 6, Some((1122, 3344)));
        assert_eq!(community_id(&tcp, 0), "1:wCb3OG7yAFWelaUydu0D+125CLM=");
        let udp = key("1.2.3.4", "5.6.7.8", 17, Some((1122, 3344)));
        assert_eq!(community_id(&udp, 0), "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg=");
    }

    #[test]
    fn both_directions_share_an_id_and_the_seed_changes_it() {
        let k = FlowKey::new(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            6,
            Some((443, 50000)),
            Some(7),
        );
        assert_eq!(community_id(&k, 0), community_id(&k.reversed(), 0));
        assert_ne!(community_id(&k, 0), community_id(&k, 1));
        let mut other_vlan = k;
        other_vlan.vlan = 8;
        assert_eq!(
            community_id(&k, 0),
            community_id(&other_vlan, 0),
            "the VLAN is not part of it"
        );
    }
}
