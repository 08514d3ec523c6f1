//! A host's health ([`HostHealth`]) from its cumulative counters.
//!
//! # Design
//!
//! The thread that owns the packets (a replay's driver, a live host's
//! loop) hands its running totals ([`HealthCounters`]) to a
//! [`HealthHandle`] now and then ([`HealthHandle::record`], cheap enough
//! for every service call); whoever reports the health (the agent's
//! heartbeat, the host's control API) asks the handle for it
//! ([`HealthHandle::health`]). Between the two sits [`HealthMeter`], the
//! core without I/O or clock: times are nanoseconds given by the caller.
//!
//! The packet rate is over a sliding window, not since start: the meter
//! keeps a short history of (time, packets) samples at least
//! `spacing_ns` apart, and the rate at `now` is the packets counted since
//! the newest sample at or before `now − window_ns` (the oldest sample
//! just after start), divided by the time since that sample. A host that
//! stops recording (its capture ended, or it is stuck) so sees its rate
//! fall to 0 as `now` moves on. Everything else is a total, or the latest
//! value.
//!
//! # Invariants
//!
//! Counters only grow; a recorded total below the previous one (never
//! expected) counts as no change, never as a negative rate. The history
//! holds at most `window_ns / spacing_ns + 2` samples.
//!
//! # Cost
//!
//! [`HealthHandle::record`]: one uncontended mutex and a comparison, plus
//! a push and pops on the history every `spacing_ns`. [`HealthHandle::health`]:
//! one mutex and a pass over at most ~22 samples (5 s window, 250 ms spacing).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::model::{HostHealth, HostInfo};

/// The rate's window.
pub const RATE_WINDOW_NS: u64 = 5_000_000_000;
/// Samples of the history at least this far apart.
pub const SAMPLE_SPACING_NS: u64 = 250_000_000;

/// A host's running totals since it started, as its packet loop counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthCounters {
    /// Frames that reached the monitor (IP or not, parsed or not).
    pub packets: u64,
    /// Packets lost before the monitor (kernel or ring drops).
    pub drops_kernel: u64,
    /// Of `packets`, frames that could not be parsed.
    pub malformed: u64,
    /// Of `packets`, packets of flows the flow table could not track.
    pub untracked: u64,
    pub sweeps: u64,
    pub sweeps_late: u64,
    /// The latest sweep's wall time and the longest, where measured.
    pub sweep_last_ns: Option<u64>,
    pub sweep_max_ns: Option<u64>,
}

impl HealthCounters {
    /// The fraction of packets inspected (see [`HostHealth::completeness`]).
    pub fn completeness(&self) -> f64 {
        let offered = self.packets.saturating_add(self.drops_kernel);
        if offered == 0 {
            return 1.0;
        }
        let lost = self.malformed.saturating_add(self.untracked).min(self.packets);
        (self.packets - lost) as f64 / offered as f64
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct HealthMeter {
    window_ns: u64,
    spacing_ns: u64,
    /// (time, packets), oldest first; never empty.
    history: VecDeque<(u64, u64)>,
    latest: HealthCounters,
    latest_ns: u64,
    started_ns: u64,
}

impl HealthMeter {
    /// A meter started at `now_ns` with every counter 0.
    pub fn new(now_ns: u64, window_ns: u64, spacing_ns: u64) -> HealthMeter {
        HealthMeter {
            window_ns: window_ns.max(1),
            spacing_ns,
            history: VecDeque::from([(now_ns, 0)]),
            latest: HealthCounters::default(),
            latest_ns: now_ns,
            started_ns: now_ns,
        }
    }

    /// The host's totals at `now_ns` (times must not go backwards; an
    /// earlier one is taken as the latest seen).
    pub fn record(&mut self, now_ns: u64, c: HealthCounters) {
        let now_ns = now_ns.max(self.latest_ns);
        let packets = c.packets.max(self.latest.packets);
        self.latest = HealthCounters { packets, ..c };
        self.latest_ns = now_ns;
        match self.history.back_mut() {
            // A sample is the total at its time: the last one recorded then.
            Some(back) if back.0 == now_ns => back.1 = packets,
            Some(back) if now_ns - back.0 < self.spacing_ns => {}
            _ => self.history.push_back((now_ns, packets)),
        }
        self.trim(now_ns);
    }

    /// Drops samples older than the one the rate at `now_ns` starts from.
    fn trim(&mut self, now_ns: u64) {
        let from = now_ns.saturating_sub(self.window_ns);
        while self.history.len() > 1 && self.history[1].0 <= from {
            self.history.pop_front();
        }
    }

    /// The sample the rate at `now_ns` counts from.
    fn base(&self, now_ns: u64) -> (u64, u64) {
        let from = now_ns.saturating_sub(self.window_ns);
        let mut base = self.history[0];
        for &s in &self.history {
            if s.0 <= from {
                base = s;
            }
        }
        base
    }

    /// The health at `now_ns` (not before the latest record).
    pub fn health(&self, now_ns: u64) -> HostHealth {
        let now_ns = now_ns.max(self.latest_ns);
        let (base_ns, base_packets) = self.base(now_ns);
        let span_ns = now_ns - base_ns;
        let c = &self.latest;
        let packets_per_second = if span_ns == 0 {
            0.0
        } else {
            c.packets.saturating_sub(base_packets) as f64 * 1e9 / span_ns as f64
        };
        HostHealth {
            packets_per_second,
            rate_window_s: span_ns as f64 / 1e9,
            packets_total: c.packets,
            drops_total: c
                .drops_kernel
                .saturating_add(c.malformed)
                .saturating_add(c.untracked),
            drops_kernel_total: c.drops_kernel,
            malformed_total: c.malformed,
            untracked_total: c.untracked,
            completeness: c.completeness(),
            sweeps_total: c.sweeps,
            late_sweeps_total: c.sweeps_late,
            sweep_seconds_last: c.sweep_last_ns.map(|ns| ns as f64 / 1e9),
            sweep_seconds_max: c.sweep_max_ns.map(|ns| ns as f64 / 1e9),
            uptime_s: (now_ns - self.started_ns) as f64 / 1e9,
        }
    }
}

/// A [`HealthMeter`] on the monotonic clock, shared between the thread
/// that records and those that report (clones share one meter).
#[derive(Clone, Debug)]
pub struct HealthHandle {
    origin: Instant,
    meter: Arc<Mutex<HealthMeter>>,
}

impl Default for HealthHandle {
    fn default() -> Self {
        HealthHandle::new()
    }
}

impl HealthHandle {
    /// A host starting now, with the default window and spacing.
    pub fn new() -> HealthHandle {
        HealthHandle {
            origin: Instant::now(),
            meter: Arc::new(Mutex::new(HealthMeter::new(0, RATE_WINDOW_NS, SAMPLE_SPACING_NS))),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthMeter> {
        // A panicked recorder leaves a meter that is still consistent.
        self.meter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The host's totals now.
    pub fn record(&self, c: HealthCounters) {
        let now = self.now_ns();
        self.lock().record(now, c);
    }

    /// The host's health now.
    pub fn health(&self) -> HostHealth {
        let now = self.now_ns();
        self.lock().health(now)
    }
}

/// The manager's latest list of hosts, written by its service every
/// second and read by its metrics page (clones share one list).
#[derive(Clone, Debug, Default)]
pub struct HostsBoard(Arc<Mutex<Vec<HostInfo>>>);

impl HostsBoard {
    pub fn set(&self, hosts: Vec<HostInfo>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = hosts;
    }

    pub fn get(&self) -> Vec<HostInfo> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Per-host series of the manager's `/metrics` (Prometheus text format
/// 0.0.4), one sample per inventory host, labelled `host` (a bounded set:
/// the inventory's). `clarion_host_up` for every host; the health series
/// only for hosts that sent health (a missing series, not a 0, says
/// "unknown").
pub fn render_prometheus(hosts: &[HostInfo]) -> String {
    use std::fmt::Write;
    type Get = fn(&HostHealth) -> f64;
    let families: [(&str, &str, &str, Get); 6] = [
        (
            "clarion_host_packets_per_second",
            "gauge",
            "Frames per second the host's monitor received, over its last 5 s.",
            |h| h.packets_per_second,
        ),
        (
            "clarion_host_packets_total",
            "counter",
            "Frames the host's monitor received since the host started.",
            |h| h.packets_total as f64,
        ),
        (
            "clarion_host_drops_total",
            "counter",
            "Packets the host lost (kernel drops, malformed, untracked) since it started.",
            |h| h.drops_total as f64,
        ),
        (
            "clarion_host_completeness",
            "gauge",
            "The share of packets the host inspected since it started (1: none lost).",
            |h| h.completeness,
        ),
        (
            "clarion_host_sweeps_late_total",
            "counter",
            "The host's sweeps unfinished when the next epoch ended.",
            |h| h.late_sweeps_total as f64,
        ),
        (
            "clarion_host_uptime_seconds",
            "gauge",
            "Seconds since the host started.",
            |h| h.uptime_s,
        ),
    ];
    let label = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP clarion_host_up 1 if the manager heard from the host in the last 3 s.\n# TYPE clarion_host_up gauge"
    );
    for h in hosts {
        let _ = writeln!(
            out,
            "clarion_host_up{{host=\"{}\"}} {}",
            label(&h.name),
            u8::from(h.state == "up")
        );
    }
    for (name, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for h in hosts {
            if let Some(x) = &h.health {
                // Rust's shortest round-trip printing; health values are finite.
                let _ = writeln!(out, "{name}{{host=\"{}\"}} {}", label(&h.name), get(x));
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP clarion_host_refused_total The host's reports and answers the manager refused as impossible, by reason.\n# TYPE clarion_host_refused_total counter"
    );
    for h in hosts {
        for (reason, n) in &h.refused {
            let _ = writeln!(
                out,
                "clarion_host_refused_total{{host=\"{}\",reason=\"{}\"}} {n}",
                label(&h.name),
                label(reason)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counters(packets: u64) -> HealthCounters {
        HealthCounters {
            packets,
            ..HealthCounters::default()
        }
    }

    /// The rate by brute force: arrivals after the newest record time at or
    /// before `now − window` (0, the start, if none), over the time since it.
    fn reference_rate(arrivals: &[u64], records: &[u64], now: u64, window: u64) -> (f64, u64) {
        let from = now.saturating_sub(window);
        let base = records.iter().copied().filter(|&t| t <= from).max().unwrap_or(0);
        let counted = arrivals.iter().filter(|&&t| t > base && t <= now).count();
        let span = now - base;
        let rate = if span == 0 {
            0.0
        } else {
            counted as f64 * 1e9 / span as f64
        };
        (rate, span)
    }

    proptest! {
        /// With every record kept (no spacing), the rate is exactly the
        /// reference's, whatever the arrivals and the query time.
        #[test]
        fn rate_over_the_window_matches_a_brute_force_count(
            mut arrivals in prop::collection::vec(1u64..20_000_000_000, 0..300),
            extra in prop::collection::vec(1u64..20_000_000_000, 0..20),
            after in 0u64..10_000_000_000,
        ) {
            arrivals.sort_unstable();
            let window = 5_000_000_000;
            let mut m = HealthMeter::new(0, window, 0);
            // Records at each arrival (the total so far) and at a few other times.
            let mut events: Vec<(u64, bool)> = arrivals.iter().map(|&t| (t, true)).collect();
            events.extend(extra.iter().map(|&t| (t, false)));
            events.sort_unstable();
            let mut seen = 0;
            let mut records = Vec::new();
            for (t, arrival) in events {
                seen += u64::from(arrival);
                m.record(t, counters(seen));
                records.push(t);
            }
            let last = records.last().copied().unwrap_or(0);
            let now = last + after;
            let h = m.health(now);
            let (rate, span) = reference_rate(&arrivals, &records, now, window);
            prop_assert!((h.packets_per_second - rate).abs() <= 1e-9 * rate.max(1.0),
                "{} vs {}", h.packets_per_second, rate);
            prop_assert_eq!(h.rate_window_s, span as f64 / 1e9);
            prop_assert_eq!(h.packets_total, arrivals.len() as u64);
        }

        /// With the real spacing, a steady rate is measured within one
        /// sample spacing's worth of packets.
        #[test]
        fn a_steady_rate_is_measured_as_it_is(per_s in 1u64..200_000, gap_ms in 1u64..100) {
            let mut m = HealthMeter::new(0, RATE_WINDOW_NS, SAMPLE_SPACING_NS);
            let end = 12_000_000_000u64;
            let mut t = 0;
            while t <= end {
                m.record(t, counters(per_s * t / 1_000_000_000));
                t += gap_ms * 1_000_000;
            }
            let now = t - gap_ms * 1_000_000;
            let h = m.health(now);
            let tolerance = per_s as f64 * (gap_ms as f64 / 1e3) / 5.0 + 1.0;
            prop_assert!((h.packets_per_second - per_s as f64).abs() <= tolerance,
                "{} packets/s measured, {} sent", h.packets_per_second, per_s);
            prop_assert!(h.rate_window_s >= 5.0 && h.rate_window_s <= 5.25 + gap_ms as f64 / 1e3,
                "{}", h.rate_window_s);
        }
    }

    #[test]
    fn a_host_that_stops_recording_falls_to_zero() {
        let mut m = HealthMeter::new(0, RATE_WINDOW_NS, SAMPLE_SPACING_NS);
        for s in 0..=10u64 {
            m.record(s * 1_000_000_000, counters(s * 1000));
        }
        assert_eq!(m.health(10_000_000_000).packets_per_second, 1000.0);
        // 2 s later, 5 s window: 3 s of packets over 5 s.
        assert_eq!(m.health(12_000_000_000).packets_per_second, 600.0);
        assert_eq!(m.health(16_000_000_000).packets_per_second, 0.0);
        assert_eq!(m.health(16_000_000_000).packets_total, 10_000);
        assert_eq!(m.health(16_000_000_000).uptime_s, 16.0);
    }

    #[test]
    fn the_history_stays_short() {
        let mut m = HealthMeter::new(0, RATE_WINDOW_NS, SAMPLE_SPACING_NS);
        for t in 0..100_000u64 {
            m.record(t * 1_000_000, counters(t));
        }
        assert!(m.history.len() <= 22, "{}", m.history.len());
    }

    #[test]
    fn completeness_is_the_share_inspected() {
        let c = HealthCounters {
            packets: 90,
            drops_kernel: 10,
            malformed: 5,
            untracked: 4,
            ..HealthCounters::default()
        };
        // 81 inspected of 100 offered.
        assert_eq!(c.completeness(), 0.81);
        assert_eq!(HealthCounters::default().completeness(), 1.0);
        assert_eq!(counters(7).completeness(), 1.0);
        let mut m = HealthMeter::new(0, RATE_WINDOW_NS, SAMPLE_SPACING_NS);
        m.record(1, c);
        let h = m.health(1);
        assert_eq!((h.drops_total, h.completeness), (19, 0.81));
        assert_eq!(h.sweep_seconds_last, None);
    }

    #[test]
    fn every_host_has_a_series_and_health_only_where_sent() {
        let mut meter = HealthMeter::new(0, RATE_WINDOW_NS, 0);
        meter.record(
            2_000_000_000,
            HealthCounters {
                packets: 252,
                drops_kernel: 3,
                ..HealthCounters::default()
            },
        );
        let host = |name: &str, state: &str, health: Option<HostHealth>| HostInfo {
            name: name.into(),
            prefixes: Vec::new(),
            state: state.into(),
            last_seen_ms: None,
            finished: false,
            triggers: 0,
            satisfaction_reports: 0,
            polls_answered: 0,
            polls_missed: 0,
            refused: Default::default(),
            health,
        };
        let mut liar = host("we\"ird", "unknown", None);
        liar.refused = [("wrong_group".to_string(), 4), ("beyond_the_link".to_string(), 2)].into();
        let page = render_prometheus(&[host("lan", "up", Some(meter.health(2_000_000_000))), liar]);
        let samples: Vec<&str> = page.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "clarion_host_up{host=\"lan\"} 1",
                "clarion_host_up{host=\"we\\\"ird\"} 0",
                "clarion_host_packets_per_second{host=\"lan\"} 126",
                "clarion_host_packets_total{host=\"lan\"} 252",
                "clarion_host_drops_total{host=\"lan\"} 3",
                "clarion_host_completeness{host=\"lan\"} 0.9882352941176471",
                "clarion_host_sweeps_late_total{host=\"lan\"} 0",
                "clarion_host_uptime_seconds{host=\"lan\"} 2",
                "clarion_host_refused_total{host=\"we\\\"ird\",reason=\"beyond_the_link\"} 2",
                "clarion_host_refused_total{host=\"we\\\"ird\",reason=\"wrong_group\"} 4",
            ]
        );
        assert_eq!(page.matches("# TYPE ").count(), 8, "{page}");
    }

    /// The API's description lists exactly the fields a host's health has.
    #[test]
    fn the_openapi_schema_names_every_field() {
        let full = HostHealth {
            sweep_seconds_last: Some(1.0),
            sweep_seconds_max: Some(1.0),
            ..HealthMeter::new(0, 1, 0).health(0)
        };
        let serde_json::Value::Object(sent) = serde_json::to_value(&full).expect("json") else {
            panic!("an object");
        };
        let mut sent: Vec<&str> = sent.keys().map(String::as_str).collect();
        sent.sort_unstable();
        let schema = crate::OPENAPI
            .split("\n    HostHealth:\n")
            .nth(1)
            .expect("a HostHealth schema");
        let properties = schema.split("\n      properties:\n").nth(1).expect("properties");
        let mut described: Vec<&str> = properties
            .lines()
            .take_while(|l| l.starts_with("        "))
            .filter_map(|l| l.strip_prefix("        ")?.split(':').next())
            .filter(|k| !k.starts_with(' '))
            .collect();
        described.sort_unstable();
        assert_eq!(described, sent);
    }

    #[test]
    fn health_travels_as_json_and_older_peers_need_none() {
        let mut m = HealthMeter::new(0, RATE_WINDOW_NS, SAMPLE_SPACING_NS);
        m.record(
            3_000_000_000,
            HealthCounters {
                packets: 3,
                sweep_last_ns: Some(1_500_000),
                sweep_max_ns: Some(2_000_000),
                ..HealthCounters::default()
            },
        );
        let h = m.health(3_000_000_000);
        assert_eq!(h.packets_per_second, 1.0);
        assert_eq!(h.sweep_seconds_last, Some(0.0015));
        let back: HostHealth =
            serde_json::from_str(&serde_json::to_string(&h).expect("json")).expect("reads");
        assert_eq!(back, h);
        // A host from before health: no `health` key, read as none.
        let old = r#"{"name":"a","prefixes":[],"state":"up","last_seen_ms":1,"finished":false,
            "triggers":0,"satisfaction_reports":0,"polls_answered":0,"polls_missed":0}"#;
        let info: crate::HostInfo = serde_json::from_str(old).expect("old host reads");
        assert_eq!(info.health, None);
        let text = serde_json::to_string(&info).expect("json");
        assert!(!text.contains("health"), "{text}");
    }
}
