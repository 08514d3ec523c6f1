//! Shared by the golden and scenario tests: reading a capture into the
//! reference's inputs, loading events, and running both evaluators.

#![allow(dead_code)] // Each test binary uses a different part.

use std::path::{Path, PathBuf};

use clarion_capture::PacketSource;
use clarion_engine::{Monitor, MonitorConfig, Unparsed};
use clarion_lang::spec::EventSpec;
use clarion_reference::{evaluate, Config, Input};
use clarion_report::Report;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn read_inputs(path: &Path) -> Vec<Input> {
    let mut src = clarion_capture::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut inputs = Vec::new();
    while let Some(item) = src.next_packet() {
        let raw = item.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        inputs.push(
            match clarion_wire::parse_frame(raw.link, raw.data, raw.ts_ns, raw.orig_len) {
                Ok(rec) => Input::Packet(rec),
                Err(e) if e.is_not_ip() => Input::NotIp { ts_ns: raw.ts_ns },
                Err(_) => Input::Malformed { ts_ns: raw.ts_ns },
            },
        );
    }
    inputs
}

pub fn events(path: &Path) -> Vec<EventSpec> {
    let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    clarion_lang::check(&src)
        .unwrap_or_else(|d| panic!("{}", d.render(&path.display().to_string(), &src, false)))
}

pub fn monitor(events: &[EventSpec], inputs: &[Input]) -> Vec<Report> {
    let cfg = MonitorConfig {
        host: "golden".into(),
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    // `on demand` events come with the drill-downs installing them.
    for e in events.iter().filter(|e| !e.on_demand) {
        m.install(e.clone()).expect("golden events install");
    }
    let mut out = Vec::new();
    for input in inputs {
        feed(&mut m, input, &mut out);
    }
    m.finish(&mut out);
    out
}

pub fn reference(events: &[EventSpec], inputs: &[Input]) -> Vec<Report> {
    evaluate(
        events,
        inputs,
        &Config {
            host: "golden".into(),
            ..Config::default()
        },
    )
}

/// Hands one input to the monitor as the CLI would.
pub fn feed(m: &mut Monitor, input: &Input, out: &mut Vec<Report>) {
    match input {
        Input::Packet(p) => m.process(p, out),
        Input::Malformed { ts_ns } => m.note_unparsed(*ts_ns, Unparsed::Malformed, out),
        Input::NotIp { ts_ns } => m.note_unparsed(*ts_ns, Unparsed::NotIp, out),
    }
}

/// JSON text of the reports: exact comparison including undefined values.
pub fn lines(reports: &[Report]) -> Vec<String> {
    reports.iter().map(|r| r.to_json().to_string()).collect()
}

/// Panics naming the first differing report (the whole lists are long).
pub fn assert_same_reports(what: &str, got: &[Report], expected: &[Report]) {
    let (g, e) = (lines(got), lines(expected));
    if let Some(i) = (0..g.len().max(e.len())).find(|&i| g.get(i) != e.get(i)) {
        panic!(
            "{what}: first difference at report {i}:\n monitor:   {:?}\n reference: {:?}",
            g.get(i),
            e.get(i)
        );
    }
}
