//! Encode and decode cost per record on pathspider_real.pcap (one real
//! hour of an enterprise LAN), one interface, default MTU.

use std::hint::black_box;
use std::path::Path;

use clarion_capture::{CaptureFile, PacketSource};
use clarion_headers::{Decoder, Encoder, EncoderConfig, HeaderRecord};
use clarion_wire::parse_frame;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn records() -> Option<Vec<HeaderRecord>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures/pathspider_real.pcap");
    let Ok(mut src) = CaptureFile::open(&path) else {
        eprintln!("skipped: no capture at {}", path.display());
        return None;
    };
    let mut out = Vec::new();
    while let Some(Ok(p)) = src.next_packet() {
        if let Ok(rec) = parse_frame(p.link, p.data, p.ts_ns, p.orig_len) {
            out.push(HeaderRecord::from_packet(&rec, 0, 1));
        }
    }
    Some(out)
}

fn datagrams(recs: &[HeaderRecord]) -> Vec<Vec<u8>> {
    let mut enc = Encoder::new(EncoderConfig::default()).expect("the default MTU");
    let mut out = Vec::new();
    for r in recs {
        if let Some(d) = enc.push(r) {
            out.push(d.to_vec());
        }
    }
    out.extend(enc.flush().map(<[u8]>::to_vec));
    out
}

fn bench(c: &mut Criterion) {
    let Some(recs) = records() else { return };
    let dgrams = datagrams(&recs);
    let mut g = c.benchmark_group("headers/pathspider_real");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.sample_size(20);
    g.bench_function("encode", |b| {
        b.iter(|| {
            let mut enc = Encoder::new(EncoderConfig::default()).expect("the default MTU");
            let mut bytes = 0usize;
            for r in &recs {
                if let Some(d) = enc.push(r) {
                    bytes += d.len();
                }
            }
            bytes += enc.flush().map_or(0, <[u8]>::len);
            black_box(bytes)
        })
    });
    g.bench_function("decode", |b| {
        let mut out = Vec::with_capacity(recs.len());
        b.iter(|| {
            let mut dec = Decoder::new();
            out.clear();
            for d in &dgrams {
                dec.decode_into(d, &mut out).expect("our own datagrams");
            }
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
