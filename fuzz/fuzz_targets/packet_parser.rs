//! The whole per-packet parse: first byte picks the link type, the rest is the frame.
#![no_main]

use clarion_wire::{parse_frame, proto, LinkType, MAX_WINDOW_SCALE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let link = LinkType::ALL[usize::from(pick) % LinkType::ALL.len()];
    let Ok(rec) = parse_frame(link, frame, 0, frame.len() as u32) else {
        return;
    };
    // Invariants of every record, beyond "no panic".
    assert!(rec.volume <= rec.size);
    assert_eq!(rec.captured_len as usize, frame.len());
    assert!(rec.ecn <= 3);
    if rec.key.has_ports() {
        assert!(matches!(rec.key.proto, proto::TCP | proto::UDP));
        assert!(!rec.is_later_fragment);
    }
    if let Some(tcp) = rec.tcp {
        assert_eq!(rec.key.proto, proto::TCP);
        assert!(tcp.wscale.is_none_or(|s| s <= MAX_WINDOW_SCALE));
    }
});
