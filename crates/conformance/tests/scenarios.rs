//! The scenario captures: real Linux TCP (iperf3, bursty writers) and a UDP
//! burst between network namespaces, through tbf bottlenecks and random
//! loss, made by `scenarios/*.sh` and committed in `scenarios/golden/` with
//! their metadata and tshark's per-flow analysis (`scenarios/tshark-summary.sh`).
//!
//! - the monitor equals the reference evaluator on the use-case events;
//! - `is_lost` per flow equals tshark's retransmissions (and out-of-order
//!   segments, which tshark tells apart by timing and Clarion does not);
//! - per flow, the RTT samples are as many as tshark's `ack_rtt` samples
//!   that Karn's rule keeps (tshark does not apply it), and their median
//!   is within 5% of those samples' median; tshark's unfiltered median is
//!   printed beside it;
//! - the paper's root-cause-of-congestion use case, proactive and reactive,
//!   and the burst-loss use case, with the detection epochs printed.
//!
//! `CLARION_SCENARIOS_DIR` points the tests at another directory holding
//! the same files: `scenarios/check.sh` runs the scenarios live and then
//! these tests on the fresh captures.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use clarion_engine::{Monitor, MonitorConfig};
use clarion_lang::spec::EventSpec;
use clarion_reference::{rtt_samples, Config, Input};
use clarion_report::Report;
use common::{assert_same_reports, events, feed, lines, monitor, read_inputs, reference, repo};
use serde_json::Value;

const EPOCH_NS: u64 = 10_000_000;

/// Testing a fresh live run (`scenarios/check.sh`) rather than the committed captures.
fn live() -> bool {
    std::env::var_os("CLARION_SCENARIOS_DIR").is_some()
}

fn golden(name: &str) -> PathBuf {
    let dir = std::env::var_os("CLARION_SCENARIOS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("scenarios/golden"));
    dir.join(name)
}

fn use_cases() -> Vec<EventSpec> {
    events(&repo().join("scenarios/use-cases.clarion"))
}

fn event(name: &str) -> EventSpec {
    use_cases()
        .into_iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no event {name}"))
}

fn json(name: &str) -> Value {
    let path = golden(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A flow as tshark names it: (src, sport, dst, dport).
type Flow = (IpAddr, u16, IpAddr, u16);

/// tshark's per-flow summary of a capture.
fn tshark(capture: &str) -> BTreeMap<Flow, Value> {
    let path = golden(&capture.replace(".pcap", ".tshark.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let ip = |k: &str| v[k].as_str().and_then(|s| s.parse().ok()).expect("address");
            let port = |k: &str| v[k].as_u64().and_then(|p| u16::try_from(p).ok()).expect("port");
            ((ip("src"), port("sport"), ip("dst"), port("dport")), v)
        })
        .collect()
}

fn flow_of(r: &Report) -> Flow {
    let g = &r.group;
    let ip = |x: Option<(IpAddr, u8)>| x.map(|(a, _)| a).expect("5-tuple group");
    let port = |x: Option<Option<u16>>| x.flatten().expect("5-tuple group with ports");
    (ip(g.src_ip), port(g.src_port), ip(g.dst_ip), port(g.dst_port))
}

fn value(r: &Report, key: &str) -> f64 {
    r.values
        .iter()
        .find(|(k, _)| &**k == key)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{} has no {key}", r.event))
}

const CAPTURES: [&str; 3] = ["loss.pcap", "congestion-sw.pcap", "burst_loss.pcap"];

#[test]
fn monitor_equals_reference_on_the_scenarios() {
    let evs = use_cases();
    for name in CAPTURES {
        let inputs = read_inputs(&golden(name));
        let got = monitor(&evs, &inputs);
        let expected = reference(&evs, &inputs);
        assert!(got.len() > 10, "{name}: {} reports prove little", got.len());
        assert_same_reports(name, &got, &expected);
        let g = lines(&got);
        eprintln!(
            "{name}: {} frames, {} reports, monitor = reference",
            inputs.len(),
            g.len()
        );
        if !live() {
            expect_golden_reports(name, &g);
        }
    }
}

/// The committed captures' reports are pinned: `NAME.reports.jsonl` beside
/// each (rewritten with `CLARION_BLESS=1`).
fn expect_golden_reports(capture: &str, lines: &[String]) {
    let path = golden(&capture.replace(".pcap", ".reports.jsonl"));
    let text = lines.join("\n") + "\n";
    if std::env::var_os("CLARION_BLESS").is_some() {
        std::fs::write(&path, &text).expect("write golden reports");
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with CLARION_BLESS=1 to create it)", path.display()));
    assert!(
        text == want,
        "{}: reports changed; if intended, rerun with CLARION_BLESS=1 and review the diff",
        path.display()
    );
}

#[test]
fn retransmissions_per_flow_equal_tshark() {
    let totals = vec![event("tcp_totals")];
    for name in CAPTURES {
        let inputs = read_inputs(&golden(name));
        let mut lost: BTreeMap<Flow, f64> = BTreeMap::new();
        for r in monitor(&totals, &inputs) {
            *lost.entry(flow_of(&r)).or_default() += value(&r, "sum(is_lost)");
        }
        let ts = tshark(name);
        assert_eq!(
            lost.keys().collect::<Vec<_>>(),
            ts.keys().collect::<Vec<_>>(),
            "{name}: the same TCP flows"
        );
        let mut total = 0.0;
        for (flow, v) in &ts {
            let want = v["retransmission_or_out_of_order"].as_f64().expect("a count");
            assert_eq!(lost[flow], want, "{name}: is_lost of {flow:?}");
            total += want;
        }
        assert!(total > 10.0, "{name}: {total} retransmissions prove little");
        eprintln!(
            "{name}: {total} retransmissions in {} flows, as tshark counts",
            ts.len()
        );
    }
}

fn median(mut v: Vec<i64>) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

#[test]
fn rtt_samples_agree_with_tshark_under_karns_rule() {
    for name in CAPTURES {
        let inputs: Vec<Input> = read_inputs(&golden(name));
        let mut by_flow: BTreeMap<Flow, Vec<i64>> = BTreeMap::new();
        for s in rtt_samples(&inputs, &Config::default()) {
            let k = s.flow;
            let flow = (k.src_addr(), k.src_port, k.dst_addr(), k.dst_port);
            by_flow.entry(flow).or_default().push(s.rtt);
        }
        let mut compared = 0;
        for (flow, v) in tshark(name) {
            let karn = &v["rtt_karn"];
            let n = karn["count"].as_u64().unwrap_or(0);
            let ours = by_flow.remove(&flow).unwrap_or_default();
            // Equal, on fresh live runs too. The differences live runs
            // showed (CI: 1,872 against 1,883; 4 of 22 local runs off by
            // one) were all ACKs of resends that tshark labelled
            // out-of-order, which `rtt_karn` now reads as sent twice
            // (scenarios/README.md).
            assert!(
                ours.len() as u64 == n,
                "{name} {flow:?}: {} RTT samples, tshark under Karn's rule {n}",
                ours.len()
            );
            if n < 100 {
                continue;
            }
            let ours = median(ours);
            let want = karn["median_ns"].as_f64().expect("a median");
            let off = (ours - want).abs() / want;
            eprintln!(
                "{name} {flow:?}: median RTT {:.3} ms over {n} samples; tshark's under Karn's rule {:.3} ms \
                 ({:.1}% apart); all of tshark's {:.3} ms over {}",
                ours / 1e6,
                want / 1e6,
                off * 100.0,
                v["rtt"]["median_ns"].as_f64().unwrap_or(f64::NAN) / 1e6,
                v["rtt"]["count"]
            );
            assert!(off <= 0.05, "{name} {flow:?}: {ours} vs tshark {want}");
            compared += 1;
        }
        assert!(
            by_flow.is_empty(),
            "{name}: samples for flows tshark has none for: {by_flow:?}"
        );
        assert!(compared > 0, "{name}: no flow with enough RTT samples");
    }
}

/// Runs events over the inputs; `on_report` may install more events as reports come.
fn run_with(
    initial: Vec<EventSpec>,
    inputs: &[Input],
    mut on_report: impl FnMut(&Report) -> Option<EventSpec>,
) -> Vec<Report> {
    let mut m = Monitor::new(MonitorConfig::default());
    for e in initial {
        m.install(e).expect("use-case events install");
    }
    let (mut all, mut out) = (Vec::new(), Vec::new());
    let mut take = |m: &mut Monitor, out: &mut Vec<Report>| {
        for r in out.drain(..) {
            if let Some(e) = on_report(&r) {
                m.install(e).expect("drill-down event installs");
            }
            all.push(r);
        }
    };
    for input in inputs {
        feed(&mut m, input, &mut out);
        take(&mut m, &mut out);
    }
    m.finish(&mut out);
    take(&mut m, &mut out);
    all
}

/// Epochs (10 ms) from the one in which `t0` falls to the window's start: 0 is the burst's own epoch.
fn epoch_after(r: &Report, t0: u64) -> i64 {
    (r.window.start_ns / EPOCH_NS) as i64 - (t0 / EPOCH_NS) as i64
}

#[test]
fn root_cause_of_congestion_proactive_and_reactive() {
    let meta = json("congestion.json");
    let burst_start = meta["udp_burst"]["sent"]["start_ns"]
        .as_u64()
        .expect("burst start");
    let udp: IpAddr = meta["udp_burst"]["src"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("udp sender");
    let tcp_senders: Vec<IpAddr> = meta["tcp_flows"]
        .as_array()
        .expect("tcp flows")
        .iter()
        .filter_map(|f| f["src"].as_str()?.parse().ok())
        .collect();
    let inputs = read_inputs(&golden("congestion-sw.pcap"));
    let after = |reports: &[Report], ev: &str, src: &[IpAddr]| -> Option<i64> {
        reports
            .iter()
            .filter(|r| &*r.event == ev && src.contains(&flow_of(r).0))
            .map(|r| epoch_after(r, burst_start))
            .filter(|&e| e >= 0)
            .min()
    };
    // Before the burst, the TCP flows share the bottleneck without congestion.
    let proactive = run_with(
        vec![event("tcp_congestion"), event("heavy_hitter")],
        &inputs,
        |_| None,
    );
    let before = proactive
        .iter()
        .filter(|r| &*r.event == "tcp_congestion" && r.window.start_ns + 5 * EPOCH_NS < burst_start)
        .count();
    if before > 0 && live() {
        // Real TCP on a loaded machine can fill the bottleneck's queue by
        // itself (CI, 6 Dec 2026: 4 reports before the burst): the root
        // cause is then not the burst alone. The committed capture is
        // held to it.
        eprintln!("root cause: skipped on this live run: its TCP flows were congested {before} times before the burst");
        return;
    }
    assert_eq!(before, 0, "no congestion long before the burst");
    // A fresh live run is real TCP: now and then its flows ride out the
    // burst without the congestion the event describes. What the monitor
    // reports on it is held to the reference by
    // `monitor_equals_reference_on_the_scenarios`; the committed capture
    // must show the whole story.
    let (Some(congestion), Some(heavy)) = (
        after(&proactive, "tcp_congestion", &tcp_senders),
        after(&proactive, "heavy_hitter", &[udp]),
    ) else {
        assert!(
            live(),
            "congestion and the heavy hitter are detected in the committed capture"
        );
        eprintln!(
            "root cause: skipped on this live run: its TCP flows were not congested after the UDP burst \
             (real traffic varies; the committed capture is tested in full)"
        );
        return;
    };
    eprintln!(
        "proactive: the UDP burst starts in epoch 0; congestion of the TCP flows detected in epoch {congestion}, \
         the UDP flow named a heavy hitter in epoch {heavy} (the paper: congestion three epochs after the burst \
         started, the heavy hitter in the fourth)"
    );
    assert!(
        (0..=4).contains(&congestion),
        "congestion within a few epochs: {congestion}"
    );
    assert!((0..=1).contains(&heavy), "the burst is heavy at once: {heavy}");

    // Reactive: the heavy-hitter event is installed only when congestion fires.
    let mut installed_at = None;
    let reactive = run_with(vec![event("tcp_congestion")], &inputs, |r| {
        let fire =
            &*r.event == "tcp_congestion" && installed_at.is_none() && epoch_after(r, burst_start) >= 0;
        fire.then(|| {
            installed_at = Some(epoch_after(r, burst_start));
            event("heavy_hitter")
        })
    });
    let installed_at = installed_at.expect("congestion fired");
    // Window k is reported as epoch k + 1 begins; an event installed then
    // starts with the first whole window after it (docs/semantics.md). From
    // there on, the drill-down names the UDP flow exactly where the
    // proactive event did.
    let first = installed_at + 2;
    let udp_epochs = |reports: &[Report]| -> Vec<i64> {
        reports
            .iter()
            .filter(|r| &*r.event == "heavy_hitter" && flow_of(r).0 == udp)
            .map(|r| epoch_after(r, burst_start))
            .filter(|&e| e >= first)
            .collect()
    };
    let named = udp_epochs(&reactive);
    assert_eq!(
        named,
        udp_epochs(&proactive),
        "the drill-down sees what the proactive event saw"
    );
    match named.first() {
        Some(heavy) => eprintln!(
            "reactive: congestion reported for epoch {installed_at}, heavy-hitter event installed then; \
             the UDP flow named in epoch {heavy}"
        ),
        None => eprintln!(
            "reactive: congestion reported for epoch {installed_at}; the burst had ended before the \
             drill-down's first window (epoch {first})"
        ),
    }
    if !live() {
        assert_eq!(
            named.first(),
            Some(&first),
            "named in the first window after installation"
        );
    }
}

#[test]
fn burst_loss_fires_when_and_only_when_losses_come_in_bursts() {
    let meta = json("burst_loss.json");
    let paced_start = meta["tcp_flow"]["paced_start_ns"].as_u64().expect("paced start");
    let inputs = read_inputs(&golden("burst_loss.pcap"));
    let reports = run_with(vec![event("burst_loss")], &inputs, |_| None);
    let (bursty, paced): (Vec<&Report>, Vec<&Report>) =
        reports.iter().partition(|r| r.window.end_ns <= paced_start);
    let periods = meta["tshark_retransmissions_by_phase"]["bursty"]["write_periods_with_retransmissions"]
        .as_u64()
        .expect("periods");
    eprintln!(
        "burst_loss: {} reports in the bursty phase ({periods} write periods with retransmissions), {} in the paced phase",
        bursty.len(),
        paced.len()
    );
    assert!(paced.is_empty(), "no bursty losses once paced: {paced:?}");
    assert!(
        bursty.len() as u64 >= periods / 2,
        "fires in most bursty write periods"
    );
}
