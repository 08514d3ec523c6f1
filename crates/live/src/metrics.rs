//! Self-metrics in the Prometheus text exposition format (version 0.0.4).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::WorkerMetrics;

/// What the host adds to its workers' metrics.
#[derive(Debug, Default)]
pub struct HostMetrics {
    /// Reports written (after the merge, when workers are merged).
    pub reports: AtomicU64,
    /// The interfaces captured, in the order given.
    pub interfaces: Vec<InterfaceMetrics>,
}

/// One captured interface, as the host saw it (whatever its workers).
#[derive(Debug)]
pub struct InterfaceMetrics {
    pub name: String,
    /// 1 while it is up and captured, 0 while down or away.
    pub up: AtomicU64,
    /// Times it went down or away.
    pub downs: AtomicU64,
}

impl HostMetrics {
    pub fn new(interfaces: &[String]) -> HostMetrics {
        HostMetrics {
            reports: AtomicU64::new(0),
            interfaces: interfaces
                .iter()
                .map(|name| InterfaceMetrics {
                    name: name.clone(),
                    up: AtomicU64::new(1),
                    downs: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    pub fn interface(&self, name: &str) -> Option<&InterfaceMetrics> {
        self.interfaces.iter().find(|i| i.name == name)
    }
}

/// A label value in the exposition format: backslash, quote and newline
/// escaped (an interface name may hold the first two).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The metrics page: one sample per worker for each worker metric.
pub fn render(workers: &[Arc<WorkerMetrics>], host: &HostMetrics) -> String {
    type Get = fn(&WorkerMetrics) -> &AtomicU64;
    // (name, type, help, value, unit: 1 for counts, 1e-9 for nanoseconds as seconds)
    let families: [(&str, &str, &str, Get, f64); 14] = [
        (
            "clarion_packets_total",
            "counter",
            "IP packets processed.",
            |m| &m.packets,
            1.0,
        ),
        (
            "clarion_bytes_total",
            "counter",
            "IP bytes processed.",
            |m| &m.bytes,
            1.0,
        ),
        (
            "clarion_kernel_drops_total",
            "counter",
            "Packets the kernel dropped before Clarion (full ring).",
            |m| &m.drops,
            1.0,
        ),
        (
            "clarion_malformed_total",
            "counter",
            "Frames that could not be parsed.",
            |m| &m.malformed,
            1.0,
        ),
        (
            "clarion_epochs_total",
            "counter",
            "Epochs swept.",
            |m| &m.epochs,
            1.0,
        ),
        (
            "clarion_sweeps_late_total",
            "counter",
            "Sweeps unfinished when the next epoch ended.",
            |m| &m.sweeps_late,
            1.0,
        ),
        (
            "clarion_flows_active",
            "gauge",
            "Flows in the flow table.",
            |m| &m.flows_active,
            1.0,
        ),
        (
            "clarion_queue_delay_seconds_max",
            "gauge",
            "Longest queueing delay (kernel timestamp to processed) since start.",
            |m| &m.delay_max_ns,
            1e-9,
        ),
        (
            "clarion_queue_delay_seconds_p99",
            "gauge",
            "99th percentile queueing delay in the latest epoch.",
            |m| &m.last_delay_p99_ns,
            1e-9,
        ),
        (
            "clarion_sweep_seconds_last",
            "gauge",
            "Sweep time of the latest epoch (its end to its sweep's end).",
            |m| &m.last_sweep_wall_ns,
            1e-9,
        ),
        (
            "clarion_sweep_seconds_max",
            "gauge",
            "Longest sweep since start.",
            |m| &m.max_sweep_wall_ns,
            1e-9,
        ),
        (
            "clarion_clock_lag_seconds",
            "gauge",
            "How far the monitor's clock lags the wall clock on a quiet wire: windows close this long after they end.",
            |m| &m.clock_lag_ns,
            1e-9,
        ),
        (
            "clarion_shed_depth",
            "gauge",
            "Degraded mode (--adapt): monitoring states flows are moved down, steps plus the share moved one more (0: every flow measured for every event).",
            |m| &m.shed_depth_milli,
            1e-3,
        ),
        (
            "clarion_cost_factor",
            "gauge",
            "Degraded mode (--adapt): measured over modelled processing time (above 1: the machine is slower than the profile, e.g. cache contention).",
            |m| &m.cost_factor_milli,
            1e-3,
        ),
    ];
    let mut out = String::new();
    // Degraded mode's gauges only where it is on (a 0 would read as a measurement).
    let adapting = workers.iter().any(|m| m.adapting.load(Ordering::Relaxed));
    for (name, kind, help, get, unit) in families {
        let degraded_only = name == "clarion_shed_depth" || name == "clarion_cost_factor";
        if degraded_only && !adapting {
            continue;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (w, m) in workers.iter().enumerate() {
            let v = get(m).load(Ordering::Relaxed);
            if unit == 1.0 {
                let _ = writeln!(out, "{name}{{worker=\"{w}\"}} {v}");
            } else {
                let _ = writeln!(out, "{name}{{worker=\"{w}\"}} {}", v as f64 * unit);
            }
        }
    }
    type GetIf = fn(&InterfaceMetrics) -> &AtomicU64;
    let per_interface: [(&str, &str, &str, GetIf); 2] = [
        (
            "clarion_interface_up",
            "gauge",
            "1 while the interface is up and captured, 0 while it is down or away (its windows are then incomplete).",
            |i| &i.up,
        ),
        (
            "clarion_interface_down_total",
            "counter",
            "Times the interface went down or away.",
            |i| &i.downs,
        ),
    ];
    for (name, kind, help, get) in per_interface {
        if host.interfaces.is_empty() {
            break;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for i in &host.interfaces {
            let v = get(i).load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{interface=\"{}\"}} {v}", label(&i.name));
        }
    }
    let _ = writeln!(
        out,
        "# HELP clarion_reports_total Reports written.\n# TYPE clarion_reports_total counter\nclarion_reports_total {}",
        host.reports.load(Ordering::Relaxed)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_mode_gauges_only_in_degraded_mode() {
        let w: Vec<Arc<WorkerMetrics>> = (0..2).map(|_| Arc::new(WorkerMetrics::default())).collect();
        let host = HostMetrics::new(&[]);
        let page = render(&w, &host);
        assert!(
            !page.contains("clarion_shed_depth") && !page.contains("clarion_cost_factor"),
            "{page}"
        );
        w[0].adapting.store(true, Ordering::Relaxed);
        w[0].shed_depth_milli.store(1_250, Ordering::Relaxed);
        w[0].cost_factor_milli.store(3_000, Ordering::Relaxed);
        let page = render(&w, &host);
        assert!(page.contains("clarion_shed_depth{worker=\"0\"} 1.25\n"), "{page}");
        assert!(page.contains("clarion_cost_factor{worker=\"0\"} 3\n"), "{page}");
        assert!(page.contains("# TYPE clarion_shed_depth gauge\n"), "{page}");
    }

    #[test]
    fn every_family_has_help_type_and_one_sample_per_worker() {
        let w: Vec<Arc<WorkerMetrics>> = (0..2).map(|_| Arc::new(WorkerMetrics::default())).collect();
        w[1].packets.store(42, Ordering::Relaxed);
        w[0].delay_max_ns.store(1_500_000, Ordering::Relaxed);
        let host = HostMetrics::new(&["eth0".into(), "we\"ird".into()]);
        host.reports.store(7, Ordering::Relaxed);
        if let Some(i) = host.interface("eth0") {
            i.up.store(0, Ordering::Relaxed);
            i.downs.store(2, Ordering::Relaxed);
        }
        let page = render(&w, &host);
        assert!(
            page.contains("clarion_packets_total{worker=\"1\"} 42\n"),
            "{page}"
        );
        assert!(
            page.contains("clarion_queue_delay_seconds_max{worker=\"0\"} 0.0015\n"),
            "{page}"
        );
        assert!(page.ends_with("clarion_reports_total 7\n"));
        assert!(
            page.contains("clarion_interface_up{interface=\"eth0\"} 0\n"),
            "{page}"
        );
        assert!(
            page.contains("clarion_interface_down_total{interface=\"eth0\"} 2\n"),
            "{page}"
        );
        assert!(
            page.contains("clarion_interface_up{interface=\"we\\\"ird\"} 1\n"),
            "{page}"
        );
        let samples = page.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples, 12 * 2 + 2 * 2 + 1);
        for l in page.lines().filter(|l| l.starts_with("# TYPE")) {
            assert!(l.ends_with(" counter") || l.ends_with(" gauge"), "{l}");
        }
    }
}
