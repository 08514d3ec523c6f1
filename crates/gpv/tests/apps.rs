//! Each app against an independent reference computed from the raw
//! packets: on GPVs from small caches (many evictions and splits), on the
//! same GPVs through a file, on generated traffic and on every capture.
//! And the runtime: apps added and removed while the stream runs.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use clarion_gpv::apps::{Culprit, FlowFeatures};
use clarion_gpv::{
    app_by_name, AppRuntime, CacheConfig, Classifier, Gpv, GpvApp, GpvError, MicroBurst, MicroBurstConfig,
    Profiler, APP_NAMES,
};
use clarion_wire::{FlowKey, PacketRecord};
use common::*;
use proptest::prelude::*;

fn size(p: &PacketRecord) -> u64 {
    u64::from(p.size.min(65535))
}

// ---- references, from the raw packets ----

/// Per source host: packets, and the bucket counts of per-flow gaps.
fn profile(packets: &[PacketRecord]) -> BTreeMap<IpAddr, (u64, BTreeMap<usize, u64>)> {
    let mut last: HashMap<FlowKey, u64> = HashMap::new();
    let mut out: BTreeMap<IpAddr, (u64, BTreeMap<usize, u64>)> = BTreeMap::new();
    for p in packets {
        let host = out.entry(p.key.src_addr()).or_default();
        host.0 += 1;
        if let Some(prev) = last.insert(p.key, p.ts_ns) {
            let gap = p.ts_ns.saturating_sub(prev);
            // The smallest b with gap < 2^b (0 for a zero gap).
            let b = (0..=64)
                .find(|&b| u128::from(gap) < 1u128 << b)
                .expect("64 bits suffice");
            *host.1.entry(b).or_default() += 1;
        }
    }
    out
}

fn profiler_output(app: &Profiler) -> BTreeMap<IpAddr, (u64, BTreeMap<usize, u64>)> {
    let packets = app.packets();
    app.histograms()
        .into_iter()
        .map(|(a, h)| {
            let buckets = h
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(b, &c)| (b, c))
                .collect();
            (a, (packets[&a], buckets))
        })
        .collect()
}

/// Per flow: all packets, the first eight sizes, their gaps, and the four statistics.
#[derive(Debug)]
struct Features {
    packets: u64,
    sizes: Vec<u16>,
    gaps: Vec<u64>,
    stats: [Option<f64>; 4],
}

fn stats(xs: &[f64]) -> (Option<f64>, Option<f64>) {
    if xs.is_empty() {
        return (None, None);
    }
    let n = xs.len() as f64;
    let mut sum = 0.0;
    for x in xs {
        sum += x;
    }
    let m = sum / n;
    let mut ss = 0.0;
    for x in xs {
        ss += (x - m) * (x - m);
    }
    (Some(m), Some((ss / n).sqrt()))
}

fn features(packets: &[PacketRecord]) -> BTreeMap<FlowKey, Features> {
    let mut by_flow: BTreeMap<FlowKey, Vec<&PacketRecord>> = BTreeMap::new();
    for p in packets {
        by_flow.entry(p.key).or_default().push(p);
    }
    by_flow
        .into_iter()
        .map(|(k, ps)| {
            let first = &ps[..ps.len().min(8)];
            let sizes: Vec<u16> = first.iter().map(|p| size(p) as u16).collect();
            let gaps: Vec<u64> = first
                .windows(2)
                .map(|w| w[1].ts_ns.saturating_sub(w[0].ts_ns))
                .collect();
            let (sm, ss) = stats(&sizes.iter().map(|&s| f64::from(s)).collect::<Vec<_>>());
            let (gm, gs) = stats(&gaps.iter().map(|&g| g as f64).collect::<Vec<_>>());
            (
                k,
                Features {
                    packets: ps.len() as u64,
                    sizes,
                    gaps,
                    stats: [sm, ss, gm, gs],
                },
            )
        })
        .collect()
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0),
        (a, b) => a == b,
    }
}

fn check_classifier(app: &Classifier, want: &BTreeMap<FlowKey, Features>) {
    let got = app.flows();
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, w) in want {
        let g: &FlowFeatures = got[k];
        assert_eq!(
            (g.packets, g.sizes(), g.inter_arrivals_ns()),
            (w.packets, &w.sizes[..], &w.gaps[..]),
            "{k:?}"
        );
        let s = [
            g.size_mean(),
            g.size_std(),
            g.inter_arrival_mean_ns(),
            g.inter_arrival_std_ns(),
        ];
        for (i, (g, w)) in s.iter().zip(w.stats).enumerate() {
            assert!(close(*g, w), "{k:?} statistic {i}: {g:?} vs {w:?}");
        }
    }
}

/// Flows with packets in `[t - w, t)`, by bytes descending, then key.
fn culprits(packets: &[PacketRecord], t: u64, w: u64) -> Vec<Culprit> {
    let mut m: BTreeMap<FlowKey, (u64, u64)> = BTreeMap::new();
    for p in packets
        .iter()
        .filter(|p| p.ts_ns >= t.saturating_sub(w) && p.ts_ns < t)
    {
        let e = m.entry(p.key).or_default();
        e.0 += size(p);
        e.1 += 1;
    }
    let mut v: Vec<Culprit> = m
        .into_iter()
        .map(|(key, (bytes, packets))| Culprit { key, bytes, packets })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)));
    v
}

/// Queries: windows ending just after some packets, of several widths.
fn queries(packets: &[PacketRecord]) -> Vec<(u64, u64)> {
    let step = (packets.len() / 7).max(1);
    let mut q = Vec::new();
    for p in packets.iter().step_by(step) {
        for w in [1, 1_000, 1_000_000, 100_000_000, 10_000_000_000] {
            q.push((p.ts_ns + 1, w));
            q.push((p.ts_ns, w));
        }
    }
    q
}

// ---- the checks ----

/// All three apps on one GPV stream, against the references.
fn check_apps(packets: &[PacketRecord], gpvs: &[Gpv]) -> serde_json::Value {
    let mut profiler = Profiler::new();
    let mut classifier = Classifier::new();
    let mut burst = MicroBurst::new(MicroBurstConfig {
        window_ns: 1_000_000,
        retain_ns: u64::MAX,
        top: usize::MAX,
    });
    let mut recent = MicroBurst::named(
        "recent",
        MicroBurstConfig {
            window_ns: 5_000_000,
            retain_ns: 5_000_000,
            top: usize::MAX,
        },
    );
    for g in gpvs {
        profiler.on_gpv(g);
        classifier.on_gpv(g);
        burst.on_gpv(g);
        recent.on_gpv(g);
    }
    assert_eq!(profiler_output(&profiler), profile(packets));
    check_classifier(&classifier, &features(packets));
    for (t, w) in queries(packets) {
        assert_eq!(burst.culprits(t, w), culprits(packets, t, w), "t {t} w {w}");
    }
    // The report's window is complete with a retention of only the window.
    let latest = packets.iter().map(|p| p.ts_ns).max();
    assert_eq!(recent.latest_ns(), latest);
    if let Some(latest) = latest {
        assert_eq!(
            recent.culprits(latest + 1, 5_000_000),
            culprits(packets, latest + 1, 5_000_000)
        );
        assert!(recent.retained() <= burst.retained());
    }
    let report = serde_json::json!({
        "profiler": profiler.report(),
        "classifier": classifier.report(),
        "microburst": burst.report(),
        "recent": recent.report(),
    });
    // The report is the typed output: spot-check one culprit's bytes.
    if let Some(latest) = latest {
        let want = culprits(packets, latest + 1, 1_000_000);
        assert_eq!(
            report["microburst"]["culprits"]
                .as_array()
                .expect("culprits is an array")
                .len(),
            want.len()
        );
        assert_eq!(report["microburst"]["culprits"][0]["bytes"], want[0].bytes);
    }
    report
}

/// Every app equals its reference on every cache configuration, and
/// through a file; the reports agree across all of them.
fn check_everything(packets: &[PacketRecord], configs: &[CacheConfig]) {
    let mut reports = Vec::new();
    for cfg in configs {
        let gpvs = build_gpvs(packets, *cfg);
        reports.push(check_apps(packets, &gpvs));
        reports.push(check_apps(packets, &through_file(&gpvs)));
    }
    for r in &reports[1..] {
        assert_eq!(r, &reports[0]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn generated_traffic(packets in traffic(), cfg in cache_config()) {
        let mut configs = small_configs();
        configs.push(cfg);
        check_everything(&packets, &configs);
    }
}

#[test]
fn real_captures() {
    for (name, packets) in captures() {
        eprintln!("{name}: {} packets", packets.len());
        check_everything(&packets, &small_configs());
    }
}

// ---- the runtime ----

#[test]
fn runtime_binds_apps_late() {
    let Some((_, packets)) = captures()
        .into_iter()
        .find(|(n, _)| n == "pathspider_tcp_ecn.pcap")
    else {
        return;
    };
    let gpvs = build_gpvs(&packets, small_configs()[0]);
    let half = gpvs.len() / 2;
    let mut rt = AppRuntime::new();
    rt.add(app_by_name("profiler").unwrap()).unwrap();
    assert!(matches!(
        rt.add(Box::new(Profiler::new())),
        Err(GpvError::DuplicateApp(_))
    ));
    rt.add(Box::new(Profiler::named("profiler-2"))).unwrap();
    gpvs[..half].iter().for_each(|g| rt.on_gpv(g));
    // Bound mid-stream: sees only what follows, like a fresh app fed the rest.
    rt.add(app_by_name("classifier").unwrap()).unwrap();
    let removed = rt.remove("profiler-2");
    assert!(removed.is_some() && rt.remove("profiler-2").is_none());
    gpvs[half..].iter().for_each(|g| rt.on_gpv(g));
    assert_eq!(rt.names(), vec!["profiler", "classifier"]);
    assert_eq!(rt.gpvs(), gpvs.len() as u64);

    let mut whole = Profiler::new();
    let mut first_half = Profiler::new();
    let mut second_half = Classifier::new();
    gpvs.iter().for_each(|g| whole.on_gpv(g));
    gpvs[..half].iter().for_each(|g| first_half.on_gpv(g));
    gpvs[half..].iter().for_each(|g| second_half.on_gpv(g));
    let report = rt.report();
    assert_eq!(report["profiler"], whole.report());
    assert_eq!(report["classifier"], second_half.report());
    assert_eq!(removed.unwrap().report(), first_half.report());
    assert_ne!(whole.report(), first_half.report());
}

#[test]
fn apps_by_name() {
    for name in APP_NAMES {
        assert_eq!(app_by_name(name).unwrap().name(), name);
    }
    assert!(matches!(app_by_name("nope"), Err(GpvError::UnknownApp(n)) if n == "nope"));
    let mut empty = MicroBurst::new(MicroBurstConfig::default());
    assert!(empty.report()["end_ns"].is_null());
}

/// `run` feeds a whole file, and stops at damage with the GPVs before it fed.
#[test]
fn runtime_runs_a_file() {
    let Some((_, packets)) = captures().into_iter().find(|(n, _)| n == "libtrace_anon-v4.pcap") else {
        return;
    };
    let gpvs = build_gpvs(&packets, small_configs()[0]);
    let mut w = clarion_gpv::GpvWriter::new(Vec::new()).unwrap();
    gpvs.iter().for_each(|g| w.write(g).unwrap());
    let bytes = w.finish().unwrap();
    let direct = |gpvs: &[Gpv]| {
        let mut rt = AppRuntime::new();
        rt.add(Box::new(Profiler::new())).unwrap();
        gpvs.iter().for_each(|g| rt.on_gpv(g));
        rt.report()
    };
    let mut rt = AppRuntime::new();
    rt.add(Box::new(Profiler::new())).unwrap();
    let n = rt.run(clarion_gpv::GpvReader::new(&bytes[..]).unwrap()).unwrap();
    assert_eq!(n, gpvs.len() as u64);
    assert_eq!(rt.report(), direct(&gpvs));
    // Cut inside the last record: all but the last GPV are fed, then the error.
    let mut rt = AppRuntime::new();
    rt.add(Box::new(Profiler::new())).unwrap();
    let cut = clarion_gpv::GpvReader::new(&bytes[..bytes.len() - 1]).unwrap();
    assert!(matches!(rt.run(cut), Err(GpvError::Truncated { .. })));
    assert_eq!(rt.gpvs(), gpvs.len() as u64 - 1);
    assert_eq!(rt.report(), direct(&gpvs[..gpvs.len() - 1]));
}
