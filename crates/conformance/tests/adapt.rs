//! Degraded mode (`--adapt`, MONA) held to the reference evaluator on real
//! captures (`../shared/captures/`, beside the checkout; skipped with a
//! message where absent):
//!
//! - with nothing shed, the monitor's reports are the reference's, only
//!   marked degraded with a recall estimate of 1;
//! - with flows shed, every report is a true one where the predicate
//!   cannot grow false by losing flows, each event's `flows_unmeasured`
//!   is what shedding its flows gives, and the estimated recall is
//!   compared with the true recall (the share of the reference's reports
//!   made) window by window.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use clarion_engine::{AdaptConfig, Health, Monitor, MonitorConfig, Report, Shed};
use clarion_reference::Input;
use common::{assert_same_reports, events, feed, read_inputs, reference, repo};

fn captures() -> Option<Vec<std::path::PathBuf>> {
    let dir = repo().join("../shared/captures");
    if !dir.is_dir() {
        eprintln!(
            "skipping: {} not found (real captures live beside the checkout)",
            dir.display()
        );
        return None;
    }
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    v.sort();
    Some(v)
}

/// The monitor in degraded mode with a fixed shedding, without accuracy
/// control (so that what is measured is what the shedding says): its
/// reports and health records.
fn degraded(
    evs: &[clarion_lang::spec::EventSpec],
    inputs: &[Input],
    shed: Shed,
) -> (Vec<Report>, Vec<Health>) {
    let adapt = AdaptConfig {
        accuracy_threshold: None,
        ..AdaptConfig::default()
    };
    degraded_with(evs, inputs, shed, adapt).0
}

/// [`degraded`] with these settings; also the model's predicted time of
/// all the packets.
fn degraded_with(
    evs: &[clarion_lang::spec::EventSpec],
    inputs: &[Input],
    shed: Shed,
    adapt: AdaptConfig,
) -> ((Vec<Report>, Vec<Health>), f64) {
    let cfg = MonitorConfig {
        host: "golden".into(),
        keep_health: true,
        adapt: Some(adapt),
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(cfg);
    for e in evs.iter().filter(|e| !e.on_demand) {
        m.install(e.clone()).expect("events install");
    }
    m.set_shed(shed);
    let mut out = Vec::new();
    let mut work = 0.0;
    for input in inputs {
        feed(&mut m, input, &mut out);
        work += m.last_packet_cost_ns();
    }
    m.finish(&mut out);
    let mut health = Vec::new();
    m.take_health(&mut health);
    ((out, health), work)
}

/// A report as the normal mode makes it.
fn undegraded(r: &Report) -> Report {
    let mut r = r.clone();
    r.completeness.degraded = false;
    r.completeness.flows_unmeasured = 0;
    r.completeness.recall_estimate = None;
    r
}

#[test]
fn without_shedding_degraded_mode_equals_the_reference() {
    let Some(files) = captures() else { return };
    let evs = events(&repo().join("crates/conformance/tests/golden/real_captures.clarion"));
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let inputs = read_inputs(&path);
        let expected = reference(&evs, &inputs);
        let (got, health) = degraded(&evs, &inputs, Shed::NONE);
        for r in &got {
            assert!(r.completeness.degraded, "{name}: {r:?}");
            assert_eq!(r.completeness.flows_unmeasured, 0, "{name}: {r:?}");
            assert_eq!(r.completeness.recall_estimate, Some(1.0), "{name}: {r:?}");
        }
        let plain: Vec<Report> = got.iter().map(undegraded).collect();
        assert_same_reports(&name, &plain, &expected);
        let windows: usize = health.iter().map(|h| h.accuracy.len()).sum();
        assert!(windows > 0, "{name}: no accuracy in the health stream");
        for a in health.iter().flat_map(|h| &h.accuracy) {
            assert_eq!(a.flows_unmeasured, 0);
            assert_eq!(a.recall_estimate, 1.0, "{name}: {a:?}");
        }
        eprintln!(
            "{name}: {} reports, = reference, {windows} windows' accuracy",
            got.len()
        );
    }
}

/// With a constant share of flows bypassed (not looked up, only counted),
/// the monitor sees exactly the packets of the other flows: its reports
/// are the reference's over those packets (their times as the monitor's
/// clock takes them: a packet earlier than the latest seen, bypassed or
/// not, at the latest time), and each window's unmeasured flow-epochs are
/// its measured ones scaled by b / (1 − b).
#[test]
fn a_constant_bypass_equals_the_reference_on_the_flows_kept() {
    let Some(files) = captures() else { return };
    let evs = events(&repo().join("crates/conformance/tests/golden/real_captures.clarion"));
    let blank = |r: &Report| {
        let mut r = undegraded(r);
        r.completeness = clarion_report::Completeness::default();
        r
    };
    // The captures, and many flows of generated traffic.
    let mut all: Vec<(String, Vec<Input>)> = files
        .iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, read_inputs(path))
        })
        .collect();
    all.push(("generated".into(), generated_traffic(40, 30, 6, 7)));
    let mut totals = [(0u64, 0u64); 2];
    for (name, inputs) in &all {
        for (share, total) in [0.3, 0.75].into_iter().zip(&mut totals) {
            let mut m = Monitor::new(MonitorConfig {
                host: "golden".into(),
                keep_health: true,
                adapt: Some(AdaptConfig {
                    accuracy_threshold: None,
                    ..AdaptConfig::default()
                }),
                ..MonitorConfig::default()
            });
            for e in evs.iter().filter(|e| !e.on_demand) {
                m.install(e.clone()).expect("events install");
            }
            m.set_bypass(share);
            assert_eq!(m.bypass(), share);
            let mut kept = Vec::with_capacity(inputs.len());
            let mut latest = 0;
            let mut bypassed = 0u64;
            for input in inputs {
                let ts = match input {
                    Input::Packet(p) => p.ts_ns,
                    Input::Malformed { ts_ns } | Input::NotIp { ts_ns } => *ts_ns,
                };
                latest = latest.max(ts);
                match input {
                    Input::Packet(p) if m.bypasses(&p.key) => bypassed += 1,
                    Input::Packet(p) => {
                        kept.push(Input::Packet(clarion_wire::PacketRecord { ts_ns: latest, ..*p }))
                    }
                    Input::Malformed { .. } => kept.push(Input::Malformed { ts_ns: latest }),
                    Input::NotIp { .. } => kept.push(Input::NotIp { ts_ns: latest }),
                }
            }
            let mut got = Vec::new();
            for input in inputs {
                feed(&mut m, input, &mut got);
            }
            m.finish(&mut got);
            assert_eq!(m.counters().packets_bypassed, bypassed, "{name} at {share}");
            total.0 += bypassed;
            total.1 += kept.len() as u64;
            let expected = reference(&evs, &kept);
            let got: Vec<Report> = got.iter().map(blank).collect();
            let expected: Vec<Report> = expected.iter().map(blank).collect();
            assert_same_reports(&format!("{name} at {share}"), &got, &expected);
            let mut health = Vec::new();
            m.take_health(&mut health);
            let ratio = share / (1.0 - share);
            for a in health.iter().flat_map(|h| &h.accuracy) {
                let want = (a.flows_measured as f64 * ratio).round();
                assert!(
                    (a.flows_unmeasured as f64 - want).abs() <= 1.0,
                    "{name} at {share}: {a:?}, want about {want} unmeasured"
                );
            }
            eprintln!(
                "{name}: bypassing {share}: {bypassed} of {} packets, {} reports = reference on the rest",
                inputs.len(),
                got.len()
            );
        }
    }
    for (share, (bypassed, kept)) in [0.3, 0.75].into_iter().zip(totals) {
        let seen = bypassed as f64 / (bypassed + kept) as f64;
        assert!(
            (seen - share).abs() < 0.2,
            "bypassing {share}: {bypassed} packets bypassed, {kept} kept"
        );
    }
}

type WindowKey = (String, u64);

/// For a window's accuracy record: its true groups (none: no true event)
/// and how many of them the monitor reported.
fn matched<'a>(
    a: &clarion_engine::EventAccuracy,
    truth: &'a BTreeMap<WindowKey, BTreeSet<String>>,
    made: &BTreeMap<WindowKey, BTreeSet<String>>,
) -> Option<(usize, &'a BTreeSet<String>)> {
    let key = (a.event.clone(), a.window.start_ns);
    let true_groups = truth.get(&key)?;
    Some((
        made.get(&key).map_or(0, |g| g.intersection(true_groups).count()),
        true_groups,
    ))
}

/// Reports by (event, window start): their groups.
fn by_window(reports: &[Report]) -> BTreeMap<WindowKey, BTreeSet<String>> {
    let mut m: BTreeMap<WindowKey, BTreeSet<String>> = BTreeMap::new();
    for r in reports {
        m.entry((r.event.to_string(), r.window.start_ns))
            .or_default()
            .insert(format!("{:?}", r.group));
    }
    m
}

#[test]
fn estimated_recall_against_the_true_recall() {
    let Some(files) = captures() else { return };
    let evs = events(&repo().join("crates/conformance/tests/golden/mona_chain.clarion"));
    let mut errors: Vec<f64> = Vec::new();
    // Per event, over every window: true events, events found, estimated events.
    let mut totals: BTreeMap<String, (f64, f64, f64)> = BTreeMap::new();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let inputs = read_inputs(&path);
        let truth = by_window(&reference(&evs, &inputs));
        for shed in [
            Shed { steps: 0, extra: 0.3 },
            Shed { steps: 1, extra: 0.5 },
            Shed { steps: 2, extra: 0.0 },
        ] {
            let (got, health) = degraded(&evs, &inputs, shed);
            let made = by_window(&got);
            for a in health.iter().flat_map(|h| &h.accuracy) {
                let Some((found, true_groups)) = matched(a, &truth, &made) else {
                    continue;
                };
                let true_recall = found as f64 / true_groups.len() as f64;
                if a.recall_estimate > 0.0 {
                    let t = totals.entry(a.event.clone()).or_default();
                    t.0 += true_groups.len() as f64;
                    t.1 += found as f64;
                    t.2 += a.reports as f64 / a.recall_estimate;
                }
                if a.flows_unmeasured == 0 || true_recall == 0.0 {
                    continue;
                }
                let err = (a.recall_estimate - true_recall).abs() / true_recall;
                if std::env::var("ADAPT_DEBUG").is_ok() && err > 0.2 {
                    eprintln!(
                        "{name} {shed:?} {} @{}: true {}/{} = {true_recall:.3}, est {:.3} (measured {}, unmeasured {}, reports {})",
                        a.event, a.window.start_ns, found, true_groups.len(), a.recall_estimate, a.flows_measured, a.flows_unmeasured, a.reports
                    );
                }
                errors.push(err);
            }
        }
        eprintln!("{name}: {} windows compared so far", errors.len());
    }
    assert!(
        totals.values().any(|t| t.0 >= 20.0),
        "too few events for the test to prove anything"
    );
    for (event, (truth, found, est)) in &totals {
        let (true_recall, estimated) = (found / truth, found / est);
        eprintln!("{event}: over all windows true recall {true_recall:.3}, estimated {estimated:.3}");
        // Windows of these captures hold a few flows each: one window's
        // recall is a ratio of small integers no estimate can follow to
        // 20% (figures below); over all windows it must.
        if *truth >= 20.0 {
            assert!(
                (estimated - true_recall).abs() <= 0.2 * true_recall,
                "{event}: estimated recall {estimated:.3} against the true {true_recall:.3}"
            );
        }
    }
    if errors.is_empty() {
        return;
    }
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    let over = errors.iter().filter(|&&e| e > 0.2).count();
    let max = errors.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "recall estimate: {} windows, mean error {:.1}%, max {:.1}%, {} over 20%",
        errors.len(),
        100.0 * mean,
        100.0 * max,
        over
    );
}

/// A xorshift generator: the traffic below is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// MONA's setting (§VI): many flows per window, each with a heavy-tailed
/// rate that drifts from window to window, so that a varying share of them
/// fires. `sources` × `per_source` UDP flows over `windows` windows of 10 ms.
fn generated_traffic(sources: u32, per_source: u32, windows: u64, seed: u64) -> Vec<Input> {
    use clarion_wire::{FlowKey, PacketRecord};
    let mut rng = Rng(seed);
    let t0 = 1_700_000_000_000_000_000u64;
    let flows: Vec<(FlowKey, f64)> = (0..sources)
        .flat_map(|s| (0..per_source).map(move |f| (s, f)))
        .map(|(s, f)| {
            let src = std::net::Ipv4Addr::new(10, (s >> 8) as u8, s as u8, 1);
            let dst = std::net::Ipv4Addr::new(192, 168, 0, (f + 1) as u8);
            (
                FlowKey::new(src.into(), dst.into(), 17, Some((10_000 + f as u16, 53)), None),
                0.0,
            )
        })
        .collect();
    // Heavy-tailed base rates (packets a window): Pareto with shape 1.5.
    let mut flows: Vec<(FlowKey, f64)> = flows
        .into_iter()
        .map(|(k, _)| (k, 1.0 / (1.0 - rng.unit()).powf(1.0 / 1.5)))
        .collect();
    let mut out = Vec::new();
    for w in 0..windows {
        // The whole load swings by a factor of 2 over 20 windows.
        let swing = 1.0 + 0.5 * (w as f64 * std::f64::consts::TAU / 20.0).sin();
        let mut packets = Vec::new();
        for (key, rate) in &mut flows {
            // Each flow's rate drifts a little (a random walk in log space).
            *rate *= (0.3 * (rng.unit() - 0.5)).exp();
            *rate = rate.clamp(0.2, 200.0);
            let mean = *rate * swing;
            let n = (mean + rng.unit()).floor() as u64;
            for _ in 0..n {
                let ts = t0 + w * 10_000_000 + (rng.unit() * 10_000_000.0) as u64;
                let size = 100 + (rng.unit() * 1300.0) as u32;
                packets.push(PacketRecord {
                    ts_ns: ts,
                    key: *key,
                    size,
                    volume: size - 28,
                    ttl: 64,
                    captured_len: size + 14,
                    ..PacketRecord::default()
                });
            }
        }
        packets.sort_by_key(|p| p.ts_ns);
        out.extend(packets.into_iter().map(Input::Packet));
    }
    out
}

#[test]
fn estimated_recall_on_generated_traffic_is_within_20_percent_in_every_window() {
    let src = "
event big_flows
  when sum(volume) > 4KB
  per 5tuple
  every 10ms
  priority 80

event heavy_sources
  when sum(volume) > 30KB
  per src_ip
  every 10ms
  priority 60

event bursty_flows
  when count(is_burst) > 30% and sum(packets) > 2
  per 5tuple
  every 10ms
  priority 40
";
    let evs = clarion_lang::check(src).expect("events check");
    let inputs = generated_traffic(300, 5, 60, 0x9e37_79b9_7f4a_7c15);
    let truth = by_window(&reference(&evs, &inputs));
    let mut errors: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for shed in [
        Shed {
            steps: 0,
            extra: 0.25,
        },
        Shed { steps: 0, extra: 0.6 },
        Shed { steps: 1, extra: 0.3 },
        Shed { steps: 2, extra: 0.2 },
    ] {
        let (got, health) = degraded(&evs, &inputs, shed);
        let made = by_window(&got);
        for a in health.iter().flat_map(|h| &h.accuracy) {
            let Some((found, true_groups)) = matched(a, &truth, &made) else {
                continue;
            };
            // Windows with too few events to measure a recall to 20%.
            if true_groups.len() < 30 || a.flows_unmeasured == 0 {
                continue;
            }
            let true_recall = found as f64 / true_groups.len() as f64;
            // Nothing measured: the estimate is 0, exactly the truth.
            let err = if true_recall == 0.0 {
                a.recall_estimate
            } else {
                (a.recall_estimate - true_recall).abs() / true_recall
            };
            if std::env::var("ADAPT_DEBUG").is_ok() {
                eprintln!(
                    "{shed:?} {} @{}: true {found}/{} = {true_recall:.3}, est {:.3} (measured {}, unmeasured {}, reports {})",
                    a.event,
                    a.window.start_ns,
                    true_groups.len(),
                    a.recall_estimate,
                    a.flows_measured,
                    a.flows_unmeasured,
                    a.reports
                );
            }
            errors.entry(a.event.clone()).or_default().push(err);
        }
    }
    for (event, errs) in &errors {
        let mean = errs.iter().sum::<f64>() / errs.len() as f64;
        let max = errs.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "{event}: {} windows, mean error {:.1}%, max {:.1}%",
            errs.len(),
            100.0 * mean,
            100.0 * max
        );
        // MONA's figures (Fig. 5a), for tasks whose groups are flows and,
        // with sums and counts scaled back up by the measured share, for
        // `per src_ip` groups (docs/adapt.md), which close fewer windows.
        let enough = if event == "heavy_sources" { 5 } else { 50 };
        {
            assert!(
                errs.len() >= enough,
                "{event}: only {} windows compared",
                errs.len()
            );
            assert!(
                max <= 0.2,
                "{event}: a window's estimate is {:.1}% off",
                100.0 * max
            );
            assert!(mean <= 0.08, "{event}: mean error {:.1}%", 100.0 * mean);
        }
    }
}

/// Per event: the share of windows whose true recall reaches `threshold`
/// (MONA's satisfaction) and the mean true recall, over windows with a
/// true event.
fn satisfaction(
    truth: &BTreeMap<WindowKey, BTreeSet<String>>,
    made: &BTreeMap<WindowKey, BTreeSet<String>>,
    threshold: f64,
) -> BTreeMap<String, (f64, f64)> {
    let mut per: BTreeMap<String, (u32, f64, u32)> = BTreeMap::new();
    for (key, groups) in truth {
        let found = made.get(key).map_or(0, |g| g.intersection(groups).count());
        let recall = found as f64 / groups.len() as f64;
        let e = per.entry(key.0.clone()).or_default();
        e.0 += u32::from(recall >= threshold);
        e.1 += recall;
        e.2 += 1;
    }
    per.into_iter()
        .map(|(k, (ok, sum, n))| (k, (f64::from(ok) / f64::from(n), sum / f64::from(n))))
        .collect()
}

#[test]
fn accuracy_control_gives_flows_to_poor_events_at_constant_cost() {
    let src = "
event big_flows
  when sum(volume) > 4KB
  per 5tuple
  every 10ms
  priority 80

event bursty_flows
  when count(is_burst) > 30% and sum(packets) > 2
  per 5tuple
  every 10ms
  priority 40
";
    let evs = clarion_lang::check(src).expect("events check");
    let inputs = generated_traffic(300, 5, 60, 0x2545_f491_4f6c_dd1d);
    let truth = by_window(&reference(&evs, &inputs));
    // Everything but the most important event shed, for every flow.
    let shed = Shed { steps: 1, extra: 0.0 };
    let off = AdaptConfig {
        accuracy_threshold: None,
        ..AdaptConfig::default()
    };
    let ((without, _), work_without) = degraded_with(&evs, &inputs, shed, off);
    let ((with, health), work_with) = degraded_with(&evs, &inputs, shed, AdaptConfig::default());
    if std::env::var("ADAPT_DEBUG").is_ok() {
        let made = by_window(&with);
        for a in health.iter().flat_map(|h| &h.accuracy) {
            let key = (a.event.clone(), a.window.start_ns);
            let t = truth.get(&key).map_or(0, |g| g.len());
            let f = made.get(&key).map_or(0, |g| g.len());
            eprintln!(
                "{} @{}: est {:.3} true {f}/{t} measured {} unmeasured {}",
                a.event, a.window.start_ns, a.recall_estimate, a.flows_measured, a.flows_unmeasured
            );
        }
    }
    let before = satisfaction(&truth, &by_window(&without), 0.75);
    let after = satisfaction(&truth, &by_window(&with), 0.75);
    eprintln!("satisfaction without accuracy control {before:?}, with {after:?}");
    eprintln!(
        "predicted work: {:.1} ms without, {:.1} ms with ({:+.1}%)",
        work_without / 1e6,
        work_with / 1e6,
        100.0 * (work_with / work_without - 1.0)
    );
    let recall = |s: &BTreeMap<String, (f64, f64)>, e: &str| s.get(e).map_or(0.0, |x| x.1);
    // Shed for every flow, the poor event gets flows back (as many as the
    // rich one can give while its estimate stays above the threshold and
    // its headroom: with an estimate that follows its true recall, about a
    // fifth of its flows, whose time buys a seventh of the poor event's
    // costlier ones) ...
    assert_eq!(recall(&before, "bursty_flows"), 0.0);
    assert!(recall(&after, "bursty_flows") >= 0.1, "{after:?}");
    // ... from the rich one, which keeps about the threshold ...
    assert_eq!(recall(&before, "big_flows"), 1.0);
    assert!(recall(&after, "big_flows") >= 0.7, "{after:?}");
    // ... at about the same cost (Eq. 9).
    assert!((work_with / work_without - 1.0).abs() <= 0.1);
}
