//! The end-of-run summary printed to standard error.

use std::fmt;
use std::time::Duration;

pub(crate) use clarion_cmdline::{percentile, thousands};
use clarion_engine::Counters;

pub struct Summary {
    pub counters: Counters,
    /// The DoS filter's threshold at the end (0: off, or no one threshold:
    /// live workers raised theirs apart, see `dos_threshold_raises`).
    pub dos_threshold: u32,
    pub frames: u64,
    /// Frames the source could not hand over (unsupported link type).
    pub skipped: u64,
    /// Packets the capture says were dropped before it was written.
    pub dropped: u64,
    pub elapsed: Duration,
    /// Events installed; `None`: a run without events (records alone),
    /// whose summary leaves out the monitor's lines.
    pub events: Option<usize>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        let secs = self.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            self.frames as f64 / secs
        } else {
            0.0
        };
        writeln!(
            f,
            "clarion: {} frames in {:.3} s ({} frames/s)",
            thousands(self.frames),
            secs,
            thousands(rate as u64)
        )?;
        writeln!(
            f,
            "  packets {} ({} bytes), malformed {}, not IP {}, out of order {}",
            thousands(c.packets),
            thousands(c.bytes),
            thousands(c.malformed),
            thousands(c.not_ip),
            thousands(c.out_of_order)
        )?;
        if self.skipped > 0 || self.dropped > 0 {
            writeln!(
                f,
                "  warning: {} frames skipped (unsupported link type), {} dropped before capture",
                thousands(self.skipped),
                thousands(self.dropped)
            )?;
        }
        match self.events {
            Some(events) => self.monitor_lines(f, events),
            None => Ok(()),
        }
    }
}

impl Summary {
    /// The monitor's lines: flows, the DoS filter, TCP, drill-downs, events.
    fn monitor_lines(&self, f: &mut fmt::Formatter<'_>, events: usize) -> fmt::Result {
        let c = &self.counters;
        writeln!(
            f,
            "  flows {} created, {} evicted, {} packets untracked (table full)",
            thousands(c.flows_created),
            thousands(c.flows_evicted),
            thousands(c.packets_untracked)
        )?;
        if self.dos_threshold > 0 {
            writeln!(
                f,
                "  DoS filter: threshold {} B ({} raises after unfinished sweeps), {} packets filtered",
                thousands(u64::from(self.dos_threshold)),
                c.dos_threshold_raises,
                thousands(c.packets_dos_filtered)
            )?;
        } else if c.dos_threshold_raises > 0 {
            writeln!(
                f,
                "  DoS filter: threshold raised {} times after unfinished sweeps, {} packets filtered",
                c.dos_threshold_raises,
                thousands(c.packets_dos_filtered)
            )?;
        }
        if c.rtt_samples > 0 || c.tcp_segments_unlisted > 0 {
            writeln!(
                f,
                "  TCP: {} RTT samples, {} segments unlisted (list full; --tcp-segment-limit)",
                thousands(c.rtt_samples),
                thousands(c.tcp_segments_unlisted)
            )?;
        }
        if c.drill_downs_installed > 0 {
            writeln!(
                f,
                "  drill-downs: {} instances installed, {} extended, {} started late",
                thousands(c.drill_downs_installed),
                thousands(c.drill_downs_extended),
                thousands(c.drill_downs_late)
            )?;
        }
        writeln!(
            f,
            "  {} events, {} trigger matches, {} sweeps ({} late), {} reports",
            events,
            thousands(c.triggers_matched),
            thousands(c.sweeps_completed),
            thousands(c.sweeps_late),
            thousands(c.reports)
        )
    }
}
