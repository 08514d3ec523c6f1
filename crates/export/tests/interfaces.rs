//! `interface A, B`: a policy takes only the packets of the interfaces it
//! names, by the host's interface list; unknown names are refused.

use clarion_export::{ExportConfig, ExportError, Exporter, Frame};
use clarion_wire::{FlowKey, LinkType, PacketRecord};

fn policies(text: &str) -> Vec<clarion_lang::spec::ExportSpec> {
    clarion_lang::check_exports(text).expect("policies")
}

fn packet(ts_ns: u64, proto: u8) -> PacketRecord {
    PacketRecord {
        ts_ns,
        key: FlowKey::new(
            "10.0.0.1".parse().expect("an address"),
            "10.0.0.2".parse().expect("an address"),
            proto,
            None,
            None,
        ),
        size: 60,
        ..PacketRecord::default()
    }
}

#[test]
fn policies_take_their_interfaces_packets_only() {
    let dir = std::env::temp_dir().join(format!("clarion-ifaces-{}", std::process::id()));
    let p = policies(
        "export a_only\n  interface veth-a\n  send packets to pcapng\n\
         export b_and_c\n  interface veth-b, eth0.100\n  filter proto = udp\n  send packets to pcapng\n\
         export any\n  send packets to pcapng\n",
    );
    let config = ExportConfig {
        export_dir: Some(dir.clone()),
        interfaces: vec!["veth-a".into(), "veth-b".into(), "eth0.100".into()],
        ..ExportConfig::default()
    };
    let mut x = Exporter::new(&p, &config).expect("an exporter");
    let frame = [0u8; 60];
    // (interface, proto) of each packet, and which policies take it.
    let cases: [(u16, u8, [bool; 3]); 6] = [
        (0, 17, [true, false, true]),
        (1, 17, [false, true, true]),
        (1, 6, [false, false, true]),
        (2, 17, [false, true, true]),
        (3, 17, [false, false, true]),
        (9, 17, [false, false, true]),
    ];
    let mut want = [0u64; 3];
    for round in 0..3u64 {
        for (i, (iface, proto, takes)) in cases.iter().enumerate() {
            let rec = packet(round * 100 + i as u64, *proto);
            x.offer(
                &rec,
                &Frame {
                    link: LinkType::Ethernet,
                    data: &frame,
                    orig_len: 60,
                    interface: *iface,
                },
            );
            for (w, t) in want.iter_mut().zip(takes) {
                *w += u64::from(*t);
            }
        }
    }
    x.finish();
    let got: Vec<u64> = x.stats().policies.iter().map(|p| p.matched).collect();
    assert_eq!(got, want);
    let files: Vec<u64> = x.stats().destinations.iter().map(|d| d.packets).collect();
    assert_eq!(files, want, "each policy's files hold its packets");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unknown_interfaces_are_refused() {
    let p = policies("export a\n  interface eth7\n  send headers to collector 127.0.0.1\n");
    let config = ExportConfig {
        interfaces: vec!["eth0".into()],
        ..ExportConfig::default()
    };
    let e = Exporter::new(&p, &config).expect_err("eth7 is not captured");
    assert!(matches!(e, ExportError::UnknownInterface { .. }), "{e}");
    assert!(e.to_string().contains("its interfaces: eth0"), "{e}");
    let e = Exporter::new(&p, &ExportConfig::default()).expect_err("files have no interfaces");
    assert!(e.to_string().contains("a capture file has no interfaces"), "{e}");
}
