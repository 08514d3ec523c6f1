//! The page's shape, checked against a plain parse of the text format; the
//! format itself is checked by Prometheus's parser in
//! crates/cli/tests/prometheus.rs.

use super::*;
use proptest::prelude::*;

fn workers(n: usize) -> Vec<Arc<WorkerMetrics>> {
    (0..n).map(|_| Arc::new(WorkerMetrics::default())).collect()
}

/// name{labels} -> value, for every sample line (a reference parser: split
/// at the last space).
fn samples(page: &str) -> Vec<(String, String)> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("a sample is `name value`");
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn value(page: &str, key: &str) -> Option<String> {
    samples(page).into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn report(event: &str, values: &[(&str, f64)]) -> Report {
    Report {
        event: event.into(),
        window: clarion_report::Window::default(),
        group: clarion_report::GroupKey::default(),
        values: values.iter().map(|(k, v)| (Name::from(*k), *v)).collect(),
        origin: clarion_report::Origin::default(),
        completeness: clarion_report::Completeness {
            complete: true,
            ..clarion_report::Completeness::default()
        },
        capture: None,
        missing_hosts: Box::default(),
    }
}

#[test]
fn degraded_mode_gauges_only_in_degraded_mode() {
    let w = workers(2);
    let host = HostMetrics::new(&[]);
    let page = render(&w, &host);
    assert!(
        !page.contains("clarion_shed_depth")
            && !page.contains("clarion_cost_factor")
            && !page.contains("clarion_bypass_share"),
        "{page}"
    );
    w[0].adapting.store(true, Ordering::Relaxed);
    w[0].shed_depth_milli.store(1_250, Ordering::Relaxed);
    w[0].bypass_milli.store(125, Ordering::Relaxed);
    w[0].cost_factor_milli.store(3_000, Ordering::Relaxed);
    let page = render(&w, &host);
    assert!(page.contains("clarion_shed_depth{worker=\"0\"} 1.25\n"), "{page}");
    assert!(page.contains("clarion_cost_factor{worker=\"0\"} 3\n"), "{page}");
    assert!(
        page.contains("clarion_bypass_share{worker=\"0\"} 0.125\n"),
        "{page}"
    );
    assert!(page.contains("# TYPE clarion_shed_depth gauge\n"), "{page}");
}

#[test]
fn every_family_has_help_and_type_once_and_no_quantile_gauges() {
    let w = workers(2);
    w[1].packets.store(42, Ordering::Relaxed);
    w[0].delay_max_ns.store(1_500_000, Ordering::Relaxed);
    let host = HostMetrics::new(&["eth0".into(), "we\"ird".into()]);
    let mut partial = report("a", &[("count", 4.0)]);
    partial.completeness.dropped = 1;
    host.written(&[report("a", &[("count", 3.0)]), partial]);
    if let Some(i) = host.interface("eth0") {
        i.up.store(0, Ordering::Relaxed);
        i.downs.store(2, Ordering::Relaxed);
    }
    let page = render(&w, &host);
    let expected = [
        ("clarion_packets_total{worker=\"1\"}", "42"),
        ("clarion_queue_delay_seconds_max{worker=\"0\"}", "0.0015"),
        ("clarion_reports_total{scope=\"host\"}", "2"),
        ("clarion_reports_partial_total{scope=\"host\"}", "1"),
        (
            "clarion_event_last_value{event=\"a\",scope=\"host\",group=\"all\",aggregate=\"count\"}",
            "4",
        ),
        ("clarion_interface_up{interface=\"eth0\"}", "0"),
        ("clarion_interface_down_total{interface=\"eth0\"}", "2"),
        ("clarion_interface_up{interface=\"we\\\"ird\"}", "1"),
    ];
    for (sample, want) in expected {
        assert_eq!(value(&page, sample).as_deref(), Some(want), "{sample}");
    }
    assert!(!page.contains("p99") && !page.contains("seconds_last"), "{page}");
    each_sample_of_one_family_declared_once(&page);
    assert!(page.contains("clarion_build_info{version=\""), "{page}");
}

/// Each sample belongs to the family of the latest TYPE line, declared once.
fn each_sample_of_one_family_declared_once(page: &str) {
    let mut declared = std::collections::HashSet::new();
    let mut current: Option<(String, String)> = None;
    for l in page.lines() {
        if let Some(t) = l.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').expect("TYPE name kind");
            assert!(declared.insert(name.to_string()), "{name} declared twice");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{l}");
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            }
            current = Some((name.to_string(), kind.to_string()));
        } else if !l.starts_with('#') {
            let (name, kind) = current.as_ref().expect("a sample after a TYPE");
            let metric = l.split(['{', ' ']).next().unwrap_or_default();
            let ok = if kind == "histogram" {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| metric == format!("{name}{s}"))
            } else {
                metric == name
            };
            assert!(ok, "{l} is not of {name}");
        }
    }
}

#[test]
fn a_manager_page_has_no_worker_families() {
    let host = HostMetrics::new(&[]).with_scope(Scope::Network);
    let page = render(&[], &host);
    assert!(!page.contains("clarion_packets_total"), "{page}");
    assert!(!page.contains("clarion_interface_up"), "{page}");
    assert!(
        page.contains("# TYPE clarion_event_fired_total counter"),
        "{page}"
    );
    assert!(
        page.contains("clarion_reports_total{scope=\"network\"} 0\n"),
        "{page}"
    );
    host.written(&[report("a", &[("count", 3.0)])]);
    let page = render(&[], &host);
    assert!(
        page.contains("clarion_event_fired_total{event=\"a\",scope=\"network\"} 1\n"),
        "{page}"
    );
}

#[test]
fn seconds_have_no_float_noise() {
    // 6312 * 1e-9 is 0.000006312000000000001; one division is exact to print.
    assert_eq!(seconds(6312), "0.000006312");
    assert_eq!(seconds(1_500_000_000), "1.5");
    assert_eq!(seconds(0), "0");
    assert_eq!(float(f64::INFINITY), "+Inf");
    assert_eq!(float(f64::NEG_INFINITY), "-Inf");
    assert_eq!(float(f64::NAN), "NaN");
}

#[test]
fn queue_delay_bounds_are_fine_bucket_tops() {
    // Every bound is the largest value of some fine bucket, so a fine
    // bucket never straddles one: recording the bound and bound+1 into a
    // fine histogram puts them in different buckets with the bound as a top.
    for &b in &QUEUE_DELAY_BOUNDS_NS {
        let mut h = DelayHistogram::default();
        h.record(b);
        h.record(b + 1);
        let tops: Vec<u64> = h.buckets().map(|(t, _)| t).collect();
        assert_eq!(tops.len(), 2, "{b}: {tops:?}");
        assert_eq!(tops[0], b);
    }
}

/// A report of `event` for the group `dst_port = port` in the 100 ms
/// window starting at `start` (in windows).
fn report_of(event: &str, start: u64, port: u16, value: f64) -> Report {
    let mut r = report(event, &[("sum(volume)", value), ("count(packets)", 1.0)]);
    r.window = clarion_report::Window {
        start_ns: start * 100_000_000,
        end_ns: (start + 1) * 100_000_000,
    };
    r.group.dst_port = Some(Some(port));
    r
}

/// `group -> value of sum(volume)` of the page's last values of `event`.
fn last_values(page: &str, event: &str) -> BTreeMap<String, f64> {
    let prefix = format!("clarion_event_last_value{{event=\"{event}\",scope=\"host\",group=\"");
    samples(page)
        .into_iter()
        .filter_map(|(k, v)| {
            let group = k
                .strip_prefix(&prefix)?
                .strip_suffix("\",aggregate=\"sum(volume)\"}")?;
            Some((group.to_string(), v.parse().ok()?))
        })
        .collect()
}

#[test]
fn last_values_follow_the_latest_window_and_expire() {
    let host = HostMetrics::new(&[]);
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    host.events.observe_at(
        &[report_of("e", 5, 80, 10.0), report_of("e", 5, 443, 30.0)],
        at(0),
    );
    let page = render_at(&[], &host, at(1));
    let want: BTreeMap<String, f64> = [
        ("dst_port=443".to_string(), 30.0),
        ("dst_port=80".to_string(), 10.0),
    ]
    .into();
    assert_eq!(last_values(&page, "e"), want, "{page}");
    // Every aggregate of a shown group is there.
    assert!(page.contains(
        "clarion_event_last_value{event=\"e\",scope=\"host\",group=\"dst_port=80\",aggregate=\"count(packets)\"} 1\n"
    ));
    // A late report of an earlier window is counted, not shown.
    host.events.observe_at(&[report_of("e", 4, 22, 99.0)], at(2));
    assert_eq!(last_values(&render_at(&[], &host, at(2)), "e"), want);
    // A later window replaces the groups of the earlier one.
    host.events.observe_at(&[report_of("e", 6, 53, 5.0)], at(3));
    let page = render_at(&[], &host, at(3));
    assert_eq!(last_values(&page, "e"), [("dst_port=53".to_string(), 5.0)].into());
    assert_eq!(
        value(&page, "clarion_event_fired_total{event=\"e\",scope=\"host\"}").as_deref(),
        Some("4")
    );
    // Quiet for longer than the TTL: no last value, the count stays.
    let later = at(3) + LAST_VALUE_TTL + Duration::from_secs(1);
    let page = render_at(&[], &host, later);
    assert!(last_values(&page, "e").is_empty(), "{page}");
    assert!(page.contains("# TYPE clarion_event_last_value gauge\n"), "{page}");
    assert_eq!(
        value(&page, "clarion_event_fired_total{event=\"e\",scope=\"host\"}").as_deref(),
        Some("4")
    );
    // Then any window starts over, even an earlier one (a restarted replay).
    host.events.observe_at(&[report_of("e", 1, 80, 7.0)], later);
    assert_eq!(
        last_values(&render_at(&[], &host, later), "e"),
        [("dst_port=80".to_string(), 7.0)].into()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Folding a fine histogram equals observing each value on its own
    /// (the reference: count the values at or under each bound).
    #[test]
    fn folded_queue_delays_count_as_observed(delays in proptest::collection::vec(
        prop_oneof![0u64..5_000, 0u64..5_000_000, 0u64..3_000_000_000], 0..300)) {
        let mut fine = DelayHistogram::default();
        for &d in &delays {
            fine.record(d);
        }
        let folded = Histogram::queue_delay();
        folded.add(&fine);
        let (buckets, sum) = folded.snapshot();
        prop_assert_eq!(sum, delays.iter().sum::<u64>());
        for (le, c) in buckets {
            let want = delays.iter().filter(|&&d| le.is_none_or(|b| d <= b)).count() as u64;
            prop_assert_eq!(c, want, "le {:?}", le);
        }
        let observed = Histogram::queue_delay();
        for &d in &delays {
            observed.observe_ns(d);
        }
        prop_assert_eq!(observed.snapshot(), folded.snapshot());
    }

    /// The rendered buckets are cumulative, end at +Inf, and `_count`
    /// equals it; `_sum` is the sum in seconds.
    #[test]
    fn rendered_histogram_is_cumulative(sweeps in proptest::collection::vec(0u64..4_000_000_000, 0..50)) {
        let w = workers(1);
        for &s in &sweeps {
            w[0].sweep.observe_ns(s);
        }
        let page = render(&w, &HostMetrics::new(&[]));
        let buckets: Vec<(String, u64)> = samples(&page)
            .into_iter()
            .filter(|(k, _)| k.starts_with("clarion_sweep_seconds_bucket"))
            .map(|(k, v)| (k, v.parse().expect("a count")))
            .collect();
        prop_assert_eq!(buckets.len(), SWEEP_BOUNDS_NS.len() + 1);
        for ((k, c), b) in buckets.iter().zip(SWEEP_BOUNDS_NS.iter().map(Some).chain([None])) {
            let want = sweeps.iter().filter(|&&s| b.is_none_or(|b| s <= *b)).count() as u64;
            prop_assert_eq!(*c, want, "{}", k);
        }
        let last_is_inf = buckets.last().is_some_and(|(k, _)| k.ends_with("le=\"+Inf\"}"));
        prop_assert!(last_is_inf);
        let count = value(&page, "clarion_sweep_seconds_count{worker=\"0\"}");
        prop_assert_eq!(count, Some(sweeps.len().to_string()));
        let sum: f64 = value(&page, "clarion_sweep_seconds_sum{worker=\"0\"}")
            .and_then(|v| v.parse().ok())
            .expect("a sum");
        prop_assert_eq!(sum, sweeps.iter().sum::<u64>() as f64 / 1e9);
    }

    /// The last values of an event are the TOP_GROUPS largest groups of
    /// the latest window reported so far (by `sum(volume)`, then by
    /// label), as a plain sort of every report of that window gives.
    #[test]
    fn last_values_are_the_top_groups_of_the_latest_window(
        picks in proptest::collection::vec((0u64..4, 0u16..40, prop_oneof![9 => -1e3f64..1e3, 1 => Just(f64::NAN)]), 1..300)
    ) {
        // One report per group and window, as monitors and managers write.
        let mut seen = std::collections::HashSet::new();
        let reports: Vec<Report> = picks
            .iter()
            .filter(|(w, p, _)| seen.insert((*w, *p)))
            .map(|&(w, p, v)| report_of("e", w, p, v))
            .collect();
        let host = HostMetrics::new(&[]);
        let now = Instant::now();
        for chunk in reports.chunks(5) {
            host.events.observe_at(chunk, now);
        }
        // Reference: the latest window so far when each report came.
        let mut latest = 0;
        let mut kept: Vec<&Report> = Vec::new();
        for r in &reports {
            if r.window.start_ns > latest || kept.is_empty() {
                latest = r.window.start_ns;
                kept.clear();
            }
            if r.window.start_ns == latest {
                kept.push(r);
            }
        }
        let size = |r: &Report| if r.values[0].1.is_nan() { f64::NEG_INFINITY } else { r.values[0].1 };
        kept.sort_by(|a, b| size(b).total_cmp(&size(a)).then_with(|| a.group.label().cmp(&b.group.label())));
        kept.truncate(TOP_GROUPS);
        let want: BTreeMap<String, String> = kept.iter().map(|r| (r.group.label(), float(r.values[0].1))).collect();
        let page = render_at(&[], &host, now);
        let prefix = "clarion_event_last_value{event=\"e\",scope=\"host\",group=\"";
        let got: BTreeMap<String, String> = samples(&page)
            .into_iter()
            .filter_map(|(k, v)| {
                let g = k.strip_prefix(prefix)?.strip_suffix("\",aggregate=\"sum(volume)\"}")?;
                Some((g.to_string(), v))
            })
            .collect();
        prop_assert_eq!(got, want);
    }

    /// Per event: fired counts and last values as a plain map would give,
    /// with the events past the bound summed under `_other`.
    #[test]
    fn event_series_are_bounded_and_counted(
        picks in proptest::collection::vec((0usize..1_200, -1e6f64..1e6), 1..2_000)
    ) {
        let host = HostMetrics::new(&[]);
        let reports: Vec<Report> = picks
            .iter()
            .map(|&(e, v)| report(&format!("e{e}"), &[("sum(volume)", v)]))
            .collect();
        for chunk in reports.chunks(7) {
            host.written(chunk);
        }
        // Reference: the first MAX_EVENT_SERIES distinct names keep theirs.
        let mut own: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut fired: BTreeMap<String, u64> = BTreeMap::new();
        let mut last: BTreeMap<String, f64> = BTreeMap::new();
        for r in &reports {
            if !own.contains(&*r.event) && own.len() < MAX_EVENT_SERIES {
                own.insert(r.event.to_string());
            }
            let key = if own.contains(&*r.event) { r.event.to_string() } else { OTHER_EVENT.to_string() };
            *fired.entry(key.clone()).or_default() += 1;
            last.insert(key, r.values[0].1);
        }
        let page = render(&[], &host);
        let all: std::collections::HashMap<String, String> = samples(&page).into_iter().collect();
        let got: BTreeMap<String, u64> = samples(&page)
            .into_iter()
            .filter_map(|(k, v)| {
                let e = k
                    .strip_prefix("clarion_event_fired_total{event=\"")?
                    .strip_suffix("\",scope=\"host\"}")?;
                Some((e.to_string(), v.parse().ok()?))
            })
            .collect();
        prop_assert_eq!(&got, &fired);
        prop_assert!(got.len() <= MAX_EVENT_SERIES + 1);
        for (e, v) in &last {
            let key = format!(
                "clarion_event_last_value{{event=\"{e}\",scope=\"host\",group=\"all\",aggregate=\"sum(volume)\"}}"
            );
            let shown: f64 = all.get(&key).and_then(|s| s.parse().ok()).expect("a value");
            prop_assert_eq!(shown, *v);
        }
        prop_assert_eq!(
            value(&page, "clarion_reports_total{scope=\"host\"}"),
            Some(reports.len().to_string())
        );
    }
}

#[test]
fn process_stats_match_independent_readings() {
    let Some(before) = ProcessStats::read() else {
        eprintln!("skipped: no /proc");
        return;
    };
    // Open files: ten more while held. Other test threads open and close
    // files meanwhile, so a reading can be off by theirs: one of a few tries
    // must see all ten.
    let mut tries = Vec::new();
    let during = loop {
        let fewer = ProcessStats::read().expect("readable again");
        let files: Vec<std::fs::File> = (0..10)
            .map(|_| std::fs::File::open("/proc/self/stat").expect("open"))
            .collect();
        let during = ProcessStats::read().expect("readable twice");
        drop(files);
        if during.open_fds >= fewer.open_fds + 10 {
            break during;
        }
        tries.push((fewer.open_fds, during.open_fds));
        assert!(tries.len() < 20, "never ten more open files: {tries:?}");
    };
    // Resident memory: /proc/self/status's VmRSS (kB), read apart, within a factor.
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    let ours = during.resident_bytes / 1024;
    assert!(
        ours * 2 >= rss_kb && ours <= rss_kb * 2,
        "{ours} kB vs VmRSS {rss_kb} kB"
    );
    // Start time: before now, and within the last hour (a test run).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let start = during.start_ticks as f64 / during.ticks_per_second as f64;
    assert!(
        start <= now + 1.0 && start > now - 3600.0,
        "start {start} now {now}"
    );
    // CPU time: grows by at least most of a busy 300 ms on this thread.
    let t = std::time::Instant::now();
    let mut x = 0u64;
    while t.elapsed() < std::time::Duration::from_millis(300) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let after = ProcessStats::read().expect("readable");
    let spent = (after.cpu_ticks - before.cpu_ticks) as f64 / after.ticks_per_second as f64;
    assert!(spent >= 0.1, "{spent} s of CPU after a 300 ms busy loop");
}

#[test]
fn process_stat_parses_a_command_with_parentheses() {
    let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 \
                500 104857600 2560 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
    let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
    let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                  Max open files            1024                 524288               files\n";
    let p = ProcessStats::parse(stat, boot, limits, 7, 100, 4096).expect("parsed");
    assert_eq!(p.cpu_ticks, 300);
    assert_eq!(p.virtual_bytes, 104_857_600);
    assert_eq!(p.resident_bytes, 2560 * 4096);
    assert_eq!(p.start_ticks, 1_700_000_000 * 100 + 500);
    assert_eq!(p.max_fds, Some(1024));
    let unlimited = limits.replace("1024  ", "unlimited");
    let p = ProcessStats::parse(stat, boot, &unlimited, 7, 100, 4096).expect("parsed");
    assert_eq!(p.max_fds, None);
    assert!(ProcessStats::parse("garbage", boot, limits, 7, 100, 4096).is_none());
}
