//! Bytes as a capture file, read to the end, each packet parsed.
#![no_main]

use clarion_capture::{PacketSource, SliceReader};
use clarion_wire::parse_frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = SliceReader::new(data) else {
        return;
    };
    let mut fatal = false;
    let mut next_index = 0;
    while let Some(item) = reader.next_packet() {
        assert!(!fatal, "a fatal error must end the source");
        match item {
            Ok(p) => {
                assert!(p.index >= next_index, "indexes only grow");
                next_index = p.index + 1;
                assert!(p.byte_offset as usize + p.data.len() <= data.len());
                let _ = parse_frame(p.link, p.data, p.ts_ns, p.orig_len);
            }
            Err(e) => {
                let _ = e.to_string();
                fatal = e.is_fatal();
            }
        }
    }
    let stats = reader.stats();
    assert!(stats.bytes_read <= data.len() as u64);
    assert!(reader.next_packet().is_none(), "None is final");
});
