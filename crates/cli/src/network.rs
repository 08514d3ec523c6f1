//! `clarion run --pcap FILE --inventory HOSTS`: the embedded transport. The
//! capture is split by the inventory into one monitor per host, and the
//! event manager decides the network-wide events (`across hosts`), all in
//! this process (crate clarion-network).

use std::path::Path;

use clarion_lang::spec::EventSpec;
use clarion_manager::Inventory;
use clarion_network::Network;

use crate::args::RunArgs;
use clarion_host::Replayed;

use crate::host_spec::monitor_config;
use crate::summary::{thousands, Summary};
use crate::Failure;

/// Reads the inventory and installs every event.
pub fn build(a: &RunArgs, path: &Path, specs: &[EventSpec]) -> Result<Network, Failure> {
    let inventory = read_inventory(path)?;
    let config = monitor_config(a);
    let manager = a.host.clone().unwrap_or_else(|| "manager".into());
    let mut net = Network::new(inventory, &manager, &config);
    for s in specs {
        net.install(s.clone())
            .map_err(|e| Failure::Usage(format!("clarion: {}: {e}", crate::host_spec::events_name(a))))?;
    }
    if !specs.iter().any(|s| s.scope.is_network()) {
        eprintln!(
            "clarion: note: {} has no network-wide event (`across hosts`); each host's events are reported per host",
            crate::host_spec::events_name(a)
        );
    }
    Ok(net)
}

/// Reads and checks an inventory file.
pub fn read_inventory(path: &Path) -> Result<Inventory, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("clarion: cannot read inventory {}: {e}", path.display())))?;
    Inventory::parse(&text).map_err(|e| Failure::Usage(format!("clarion: {}: {e}", path.display())))
}

/// `dos_threshold`: every host's DoS filter threshold (a file's sweeps
/// are never late: none is raised).
pub fn print_summary(net: &Network, run: &Replayed, events: usize, dos_threshold: u32) {
    let mut counters = clarion_engine::Counters::default();
    for (_, c) in net.host_counters() {
        counters.add(&c);
    }
    let s = Summary {
        counters,
        dos_threshold,
        frames: run.frames,
        skipped: run.source.skipped,
        dropped: run.source.dropped,
        elapsed: run.elapsed,
        events: Some(events),
    };
    eprint!("{s}");
    for (host, c) in net.host_counters() {
        eprintln!(
            "  host {host}: {} packets, {} flows, {} reports",
            thousands(c.packets),
            thousands(c.flows_created),
            thousands(c.reports)
        );
    }
    let n = net.counters();
    eprintln!(
        "  network: {} decisions ({} fired), {} polls answered, {} packets of no host",
        thousands(n.decisions),
        thousands(n.fired),
        thousands(n.polls),
        thousands(n.unowned)
    );
    if n.drill_downs > 0 {
        eprintln!(
            "  network: {} drill-down instances installed, {} extended",
            thousands(n.drill_downs),
            thousands(n.drill_downs_extended)
        );
    }
}
