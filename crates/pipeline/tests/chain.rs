//! The pipeline against its parts called by hand (the model): on the
//! bundled example and every shared capture, a monitor with flow records
//! and GPVs beside it, fed as a live worker feeds it (batches of changing
//! size, frames that do not parse between them, quiet-wire ticks), must
//! give the reports, records and GPVs that the monitor, the meter and the
//! cache give when each is called alone on the same calls, in the same
//! order. And the rules of the crate documentation: frames only to the
//! stages that take them now, sinks flushed on the caller's clock, every
//! stage and sink ended whatever one of them says.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clarion_engine::{Monitor, MonitorConfig, Report, Unparsed};
use clarion_export::{ExportConfig, Exporter};
use clarion_flows::{FlowConfig, FlowMeter};
use clarion_gpv::{AppRuntime, CacheConfig, Gpv, GpvCache};
use clarion_pipeline::{
    Error, ExportPolicies, FlowRecords, Frame, Gpvs, Outputs, Pipeline, Sinks, Stage, Stages, FLUSH_EVERY_NS,
};
use clarion_records::FlowRecord;
use clarion_sinks::{BoxSink, FanOut, Sink, SinkError};
use clarion_testdata::Frame as Read;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn monitor() -> Monitor {
    let src = std::fs::read_to_string(repo().join("examples/demo.clarion")).unwrap();
    let mut m = Monitor::new(MonitorConfig::default());
    for e in clarion_lang::check(&src).unwrap() {
        if !e.on_demand {
            m.install(e).unwrap();
        }
    }
    m
}

/// One call a driver makes.
enum Call<'a> {
    Frame(&'a Read),
    Batch(Vec<clarion_wire::PacketRecord>),
    Unparsed(u64),
    Tick(u64),
}

/// A live worker's calls on `frames`: batches of 1 to 40 records (a
/// pseudo-random walk), each frame handed over before its batch, a frame
/// that does not parse ending the batch before it, and in every gap of
/// over 10 ms between a batch and the next frame a tick halfway (a quiet
/// wire meanwhile).
fn calls(frames: &[Read]) -> Vec<Call<'_>> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut size = 7usize;
    for (i, f) in frames.iter().enumerate() {
        let Some(rec) = f.record else {
            if !batch.is_empty() {
                out.push(Call::Batch(std::mem::take(&mut batch)));
            }
            out.push(Call::Unparsed(f.ts_ns));
            continue;
        };
        out.push(Call::Frame(f));
        batch.push(rec);
        if batch.len() >= size {
            out.push(Call::Batch(std::mem::take(&mut batch)));
            size = (size * 7 + 3) % 40 + 1;
            let next = frames.get(i + 1).map_or(rec.ts_ns, |n| n.ts_ns);
            if next > rec.ts_ns + 10_000_000 {
                out.push(Call::Tick(rec.ts_ns + (next - rec.ts_ns) / 2));
            }
        }
    }
    if !batch.is_empty() {
        out.push(Call::Batch(batch));
    }
    out
}

/// How many reports, records and GPVs there were after each call.
type Counts = Vec<(usize, usize, usize)>;

/// What the parts give called one by one.
fn by_hand(calls: &[Call<'_>]) -> (Vec<Report>, Vec<FlowRecord>, Vec<Gpv>, Counts) {
    let (mut m, mut meter) = (monitor(), FlowMeter::new(FlowConfig::default()).unwrap());
    let mut cache = GpvCache::new(CacheConfig::default()).unwrap();
    let (mut reports, mut records, mut gpvs) = (Vec::new(), Vec::new(), Vec::new());
    let mut counts = Vec::new();
    for c in calls {
        match c {
            Call::Frame(_) => {}
            Call::Batch(b) => {
                m.process_batch(b, &mut reports);
                meter.process_batch(b, &mut records);
                b.iter().for_each(|p| cache.push(p, &mut gpvs));
            }
            Call::Unparsed(ts) => m.note_unparsed(*ts, Unparsed::Malformed, &mut reports),
            Call::Tick(t) => {
                m.tick(*t, &mut reports);
                meter.tick(*t, &mut records);
                cache.tick(*t, &mut gpvs);
            }
        }
        counts.push((reports.len(), records.len(), gpvs.len()));
    }
    m.finish(&mut reports);
    meter.finish(&mut records);
    cache.finish(&mut gpvs);
    (reports, records, gpvs, counts)
}

/// What the pipeline gives on the same calls.
fn piped(calls: &[Call<'_>]) -> (Vec<Report>, Vec<FlowRecord>, Vec<Gpv>, Counts) {
    let stages = Stages {
        records: Some(FlowRecords::new(FlowConfig::default()).unwrap()),
        gpvs: Some(Gpvs::new(CacheConfig::default()).unwrap()),
        ..Stages::default()
    };
    let mut p = Pipeline::new(monitor(), stages);
    let mut out = Outputs::default();
    let mut counts = Vec::new();
    for c in calls {
        match c {
            Call::Frame(f) => {
                let frame = Frame {
                    link: f.link,
                    data: &f.data,
                    orig_len: f.orig_len,
                    interface: 0,
                };
                p.frame(&f.record.unwrap(), &frame);
            }
            Call::Batch(b) => p.batch(b, &mut out).unwrap(),
            Call::Unparsed(ts) => p.unparsed(*ts, Unparsed::Malformed, &mut out).unwrap(),
            Call::Tick(t) => p.tick(*t, &mut out).unwrap(),
        }
        counts.push((out.reports.len(), out.records.len(), out.gpvs.len()));
    }
    p.finish(&mut out).unwrap();
    p.end(&mut out).unwrap();
    let frames = calls.iter().filter(|c| matches!(c, Call::Frame(_))).count();
    assert_eq!(p.frames(), frames as u64);
    (out.reports, out.records, out.gpvs, counts)
}

#[test]
fn a_pipeline_gives_what_its_parts_give_called_alone() {
    let mut captures = vec![repo().join("examples/demo.pcap")];
    captures.extend(clarion_testdata::capture_files());
    for path in captures {
        let frames = clarion_testdata::frames(&path);
        let calls = calls(&frames);
        let (reports, records, gpvs, counts) = by_hand(&calls);
        let got = piped(&calls);
        let name = clarion_testdata::name(&path);
        assert!(
            !records.is_empty() && !gpvs.is_empty(),
            "{name}: nothing to compare"
        );
        assert_eq!(got.0, reports, "{name}: reports");
        assert_eq!(got.1, records, "{name}: records");
        assert_eq!(got.2, gpvs, "{name}: GPVs");
        let first = counts.iter().zip(&got.3).position(|(a, b)| a != b);
        assert_eq!(first, None, "{name}: made by another call");
        let ticks = calls.iter().filter(|c| matches!(c, Call::Tick(_))).count();
        eprintln!(
            "{name}: {} reports, {} records, {} GPVs the same, each by the same of {} calls ({ticks} ticks)",
            reports.len(),
            records.len(),
            gpvs.len(),
            calls.len()
        );
    }
}

/// An exporter waiting for policies is offered nothing, so the pipeline
/// asks no stage for frames; once policies arrive (between frames, as a
/// runtime change does) every later frame is offered, and only those.
#[test]
fn frames_go_only_to_stages_that_take_them_now() {
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = collector.local_addr().unwrap().port();
    let exporter = Exporter::new(&[], &ExportConfig::default()).unwrap();
    let stages = Stages {
        exports: Some(ExportPolicies::new(exporter)),
        ..Stages::default()
    };
    let mut p = Pipeline::new(monitor(), stages);
    let frames: Vec<Read> = clarion_testdata::frames(&repo().join("examples/demo.pcap"))
        .into_iter()
        .filter(|f| f.record.is_some())
        .take(200)
        .collect();
    // As a driver does: the frame if a stage takes it, then its batch.
    let offer = |p: &mut Pipeline<Monitor>, f: &Read| {
        let rec = f.record.unwrap();
        if p.takes_frames() {
            let frame = Frame {
                link: f.link,
                data: &f.data,
                orig_len: f.orig_len,
                interface: 0,
            };
            p.frame(&rec, &frame);
        }
        p.batch(&[rec], &mut Outputs::default()).unwrap();
    };
    frames[..120].iter().for_each(|f| offer(&mut p, f));
    let offered = |p: &Pipeline<Monitor>| p.stage::<ExportPolicies>().unwrap().exporter().stats().offered;
    assert_eq!(offered(&p), 0, "no policy: no frame offered");
    assert!(!p.takes_frames(), "no stage takes frames");
    assert_eq!(p.frames(), 120);
    let text = format!("export all\n  send headers to collector 127.0.0.1 port {port}\n");
    let policies = clarion_lang::check_exports(&text).unwrap();
    let set = p.stage_mut(|x: &mut ExportPolicies| x.exporter_mut().set_policies(&policies));
    set.unwrap().unwrap();
    assert!(p.takes_frames(), "the exporter takes frames from the change on");
    frames[120..].iter().for_each(|f| offer(&mut p, f));
    assert_eq!(offered(&p), 80, "every frame after the change, and only those");
    assert_eq!(p.frames(), 200);
}

/// A sink of records that counts what it is asked, and may refuse to finish.
#[derive(Clone, Default)]
struct Counted(Arc<Mutex<(u64, u64, bool)>>, bool);

impl Sink<FlowRecord> for Counted {
    fn write(&mut self, _: &FlowRecord) -> Result<(), SinkError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        self.0.lock().unwrap().0 += 1;
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        self.0.lock().unwrap().2 = true;
        match self.1 {
            true => Err(SinkError::Closed {
                destination: "test".into(),
            }),
            false => Ok(()),
        }
    }
    fn destination(&self) -> &str {
        "test"
    }
}

impl Sink<Gpv> for Counted {
    fn write(&mut self, _: &Gpv) -> Result<(), SinkError> {
        Ok(())
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        self.0.lock().unwrap().1 += 1;
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        self.0.lock().unwrap().2 = true;
        Ok(())
    }
    fn destination(&self) -> &str {
        "test"
    }
}

fn sinks(records: &Counted, gpvs: &Counted) -> Sinks {
    let r: BoxSink<FlowRecord> = Box::new(records.clone());
    let g: BoxSink<Gpv> = Box::new(gpvs.clone());
    Sinks::default()
        .with_records(FanOut::new(vec![r]))
        .with_gpvs(Some(g), AppRuntime::new())
}

#[test]
fn sinks_flush_once_a_second_of_the_callers_clock() {
    let (r, g) = (Counted::default(), Counted::default());
    let mut s = sinks(&r, &g);
    let t0 = 1_700_000_000_000_000_000u64;
    for t in [
        t0,
        t0 + 1,
        t0 + FLUSH_EVERY_NS - 1,
        t0 + FLUSH_EVERY_NS,
        t0 + FLUSH_EVERY_NS + 5,
    ] {
        s.flush_due(t).unwrap();
    }
    assert_eq!(r.0.lock().unwrap().0, 2, "the first call, then a second later");
    assert_eq!(g.0.lock().unwrap().1, 2);
}

/// A record sink that fails to finish does not keep the GPV sink nor the
/// exporter from ending: the error is the first one, everything ended.
#[test]
fn end_ends_every_stage_and_sink_whatever_one_says() {
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = collector.local_addr().unwrap().port();
    let text = format!("export all\n  send headers to collector 127.0.0.1 port {port}\n");
    let policies = clarion_lang::check_exports(&text).unwrap();
    let stages = Stages {
        exports: Some(ExportPolicies::new(
            Exporter::new(&policies, &ExportConfig::default()).unwrap(),
        )),
        ..Stages::default()
    };
    let (r, g) = (Counted(Arc::default(), true), Counted::default());
    let mut p = Pipeline::new(monitor(), stages).deliver_to(sinks(&r, &g));
    let mut out = Outputs::default();
    p.finish(&mut out).unwrap();
    let ended = p.end(&mut out);
    assert!(
        matches!(ended, Err(Error::Records(SinkError::Closed { .. }))),
        "{ended:?}"
    );
    assert!(
        r.0.lock().unwrap().2 && g.0.lock().unwrap().2,
        "both sinks finished"
    );
    assert!(out.exports.is_some(), "the exporter ended, its counters out");
}
