//! `clarion-lab fleet`: the network-wide event manager under a simulated
//! fleet, over a real NATS server.
//!
//! What runs: a `nats-server` of its own (unless `--nats`), the manager
//! (or `--shared K` managers sharing the events) as child processes
//! running the manager library's NATS service (`fleet-manager`, what
//! `clarion manager` runs, without the API and the store), and in this
//! process `--hosts` simulated agents ([`sim`]) over a few connections.
//! Each host sends the satisfaction reports the seeded workload
//! ([`model`]) says, as its windows end; the manager polls the others and
//! decides. A subscriber on `clarion.events` receives the fired
//! decisions, which are compared with the model's reference: wrong (fired
//! when it should not, or with another value) and missing.
//!
//! Measured: reports sent and acknowledged (an acknowledgement comes once
//! the report's decision is made, or its fired report written, held up to
//! `clarion_nats::acks::ACK_HOLD` to go with the host's others), decisions,
//! the latency from a window's end (Unix time: windows are aligned to it,
//! and the hosts share the machine's clock) to its fired report at the
//! subscriber, the managers' CPU time and memory from `/proc`, and the
//! generator's and the server's CPU time (is the machine the limit?).

pub mod model;
mod procs;
pub mod sim;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use clarion_cmdline::{parse_duration, percentile};
use futures_util::StreamExt;
use serde_json::json;

use crate::{thousands, Failure};
use model::Model;
use procs::{ManagerFigures, ManagerProc, ManagerSpec, NatsServer, Usage};

#[derive(Args, Debug)]
pub struct FleetArgs {
    /// Simulated hosts (agents), each a distinct host of the inventory.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub hosts: usize,

    /// Network-wide events (`sum(volume) > T across hosts`).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub events: usize,

    /// Hosts each event is placed on: an aligned block of hosts' prefixes (a power of two).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub per_event: usize,

    /// Groups (destination addresses) of each event per window.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub groups: usize,

    /// The share of an event's placed hosts whose local trigger fires in a window and group.
    #[arg(long, default_value_t = 0.25, value_name = "FRACTION")]
    pub share: f64,

    /// The events' windows, given to the events in turn.
    #[arg(long, default_value = "10ms,50ms,100ms", value_name = "LIST")]
    pub intervals: String,

    /// How long the hosts send satisfaction reports.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: u64,

    /// The workload's seed: the same seed, the same reports and decisions.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Run K managers sharing the events (`clarion manager --shared`:
    /// every manager reads every report, each decides its share of the
    /// events); without it, one manager alone.
    #[arg(long, value_name = "K")]
    pub shared: Option<usize>,

    /// NATS connections the simulated hosts share (host h on connection h % N).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub connections: usize,

    /// The generator's threads.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,

    /// The manager's poll timeout (a polled host that does not answer in
    /// time leaves the decision partial).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub poll_timeout: String,

    /// Use this NATS server (JetStream enabled for --shared) instead of starting one.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,

    /// The nats-server binary to start (default: on PATH, else /usr/sbin/nats-server).
    #[arg(long, value_name = "FILE")]
    pub nats_server: Option<PathBuf>,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The manager a fleet runs: `clarion manager`'s NATS service in its own
/// process, no API, no store. Not for direct use.
#[derive(Args, Debug)]
pub struct FleetManagerArgs {
    #[arg(long)]
    pub nats: String,
    #[arg(long)]
    pub inventory: PathBuf,
    #[arg(long)]
    pub events: Option<PathBuf>,
    #[arg(long, default_value = "manager")]
    pub name: String,
    #[arg(long)]
    pub shared: bool,
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub poll_timeout: u64,
}

/// Runs the manager's service until SIGTERM; prints its figures as one JSON line.
pub fn fleet_manager(a: &FleetManagerArgs) -> Result<ExitCode, Failure> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets this process's own flag:
    // a generator that dies must not leave its manager running.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop))?;
    let text = std::fs::read_to_string(&a.inventory)
        .with_context(|| format!("reading {}", a.inventory.display()))?;
    let inventory = clarion_manager::Inventory::parse(&text)?;
    let mut book = clarion_nats::EventBook::new(clarion_manager::Manager::new(&a.name, inventory), None);
    let events = match &a.events {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    if let (Some(text), false) = (&events, a.shared) {
        book.add(text, clarion_nats::OnDuplicate::Refuse)
            .map_err(|e| anyhow!("installing the events: {e}"))?;
    }
    let opts = clarion_nats::ManagerOptions {
        url: a.nats.clone(),
        security: clarion_nats::Security::default(),
        poll_timeout: Duration::from_nanos(a.poll_timeout),
        until_finished: false,
        // As `clarion manager` sends them.
        max_poll_batch: 1024,
        jetstream: false,
        shared: a.shared,
        shared_events: events.filter(|_| a.shared),
        hosts_board: None,
        history: None,
    };
    let s = clarion_nats::serve(
        &opts,
        &a.name,
        book,
        None,
        stop,
        &mut |_: &clarion_engine::Report| {},
    )?;
    let v = json!({
        "registrations": s.registrations,
        "satisfied": s.satisfied,
        "polls": s.polls,
        "poll_timeouts": s.poll_timeouts,
        "decisions": s.decisions,
        "fired": s.fired,
        "partial": s.partial,
        "invalid": s.invalid,
        "refused": s.refused.values().sum::<u64>(),
        "not_owned": s.not_owned,
    });
    println!("{v}");
    Ok(ExitCode::SUCCESS)
}

/// A fired report received on `clarion.events`.
#[derive(Clone, Debug)]
struct Received {
    event: Option<usize>,
    start_ns: u64,
    group: Option<usize>,
    total: f64,
    partial: bool,
    latency_us: u32,
}

/// How the run's decisions compare with the reference.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Precision {
    expected_reports: u64,
    expected_decisions: u64,
    expected_fired: u64,
    received_fired: u64,
    /// Received, but the reference does not fire there, or with another
    /// value (a partial one: with more than the reference's).
    wrong: u64,
    /// The reference fires, nothing received.
    missing: u64,
    /// Received more than once.
    duplicates: u64,
    /// Received marked incomplete (a host did not answer).
    partial_received: u64,
}

fn compare(m: &Model, from_ns: u64, to_ns: u64, received: &[Received]) -> Precision {
    let mut p = Precision::default();
    let mut got: HashMap<(usize, u64, usize), u32> = HashMap::new();
    for r in received {
        p.received_fired += 1;
        p.partial_received += u64::from(r.partial);
        let (Some(e), Some(g)) = (r.event, r.group) else {
            p.wrong += 1;
            continue;
        };
        let n = got.entry((e, r.start_ns, g)).or_default();
        *n += 1;
        if *n > 1 {
            p.duplicates += 1;
            continue;
        }
        let in_run = r.start_ns >= from_ns && r.start_ns + m.events[e].interval_ns <= to_ns;
        let x = m.expected(e, r.start_ns, g);
        // A partial decision sums the hosts that answered: at most the
        // whole sum (volumes are never negative), so it fires only where
        // the reference does; a complete one has the reference's sum.
        let value_ok = if r.partial {
            r.total <= x.total as f64
        } else {
            r.total == x.total as f64
        };
        if !in_run || !x.fired || !value_ok {
            p.wrong += 1;
        }
    }
    for e in 0..m.events.len() {
        for start in m.windows(e, from_ns, to_ns) {
            for g in 0..m.groups {
                let x = m.expected(e, start, g);
                p.expected_reports += x.reports;
                p.expected_decisions += u64::from(x.decided);
                p.expected_fired += u64::from(x.fired);
                if x.fired && !got.contains_key(&(e, start, g)) {
                    p.missing += 1;
                }
            }
        }
    }
    p
}

fn parse_intervals(s: &str) -> Result<Vec<u64>, Failure> {
    s.split(',')
        .map(|i| {
            parse_duration(i).map_err(|e| Failure::Usage(format!("clarion-lab: fleet: --intervals: {e}")))
        })
        .collect()
}

pub fn fleet(a: &FleetArgs) -> Result<ExitCode, Failure> {
    let usage = |m: String| Failure::Usage(format!("clarion-lab: fleet: {m}"));
    let intervals = parse_intervals(&a.intervals)?;
    let model = Model::new(
        a.hosts,
        a.events,
        a.per_event,
        a.groups,
        a.share,
        &intervals,
        a.seed,
    )
    .map_err(usage)?;
    if a.connections == 0 || a.threads == 0 {
        return Err(usage("--connections and --threads must be at least 1".into()));
    }
    if a.shared == Some(0) {
        return Err(usage("--shared needs at least 1 manager".into()));
    }
    if a.duration < 1_000_000_000 {
        return Err(usage("--duration must be at least 1s".into()));
    }
    parse_duration(&a.poll_timeout).map_err(|e| usage(format!("--poll-timeout: {e}")))?;
    let model = Arc::new(model);
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let inventory = dir.path().join("hosts.txt");
    let events = dir.path().join("fleet.clarion");
    std::fs::write(&inventory, model.inventory_text())?;
    std::fs::write(&events, model.events_text())?;

    let server = match &a.nats {
        Some(_) => None,
        None => {
            let bin = a.nats_server.clone().or_else(procs::find_nats_server).ok_or_else(|| {
                anyhow!("nats-server is not installed (Debian: apt-get install nats-server); give --nats-server FILE or --nats URL")
            })?;
            Some(NatsServer::start(&bin)?)
        }
    };
    let url = match (&a.nats, &server) {
        (Some(u), _) => u.clone(),
        (None, Some(s)) => s.url.clone(),
        (None, None) => unreachable!("a server is started when no URL is given"),
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads)
        .enable_all()
        .build()?;
    let mut managers = start_managers(a, &rt, &url, &inventory, &events, model.events.len())?;
    for m in &managers {
        eprintln!(
            "clarion-lab fleet: manager {} is pid {} (perf record -e cpu-clock -g -p {})",
            m.name,
            m.pid(),
            m.pid()
        );
    }
    let server_pid = server.as_ref().map(|s| s.process.0.id());
    let result = rt.block_on(drive(a, Arc::clone(&model), &url, &mut managers, server_pid));
    // The managers stop (and say what they did) whatever happened.
    let mut figures = ManagerFigures::default();
    let mut stop_errors = Vec::new();
    for m in managers {
        match m.stop(Duration::from_secs(30)) {
            Ok(f) => figures.add(&f),
            Err(e) => stop_errors.push(e),
        }
    }
    let run = result?;
    if let Some(e) = stop_errors.into_iter().next() {
        return Err(e.into());
    }
    // What the managers decided as they stopped (with the answers they had) is on its way.
    std::thread::sleep(Duration::from_millis(300));
    let received = run.received.lock().map(|v| v.clone()).unwrap_or_default();
    let precision = compare(&model, run.from_ns, run.to_ns, &received);
    let out = Outcome {
        model: &model,
        a,
        run: &run,
        figures: &figures,
        precision: &precision,
        received: &received,
        nats_cpu_s: run.server_cpu_s,
    };
    if a.json {
        println!("{}", out.json());
    } else {
        print!("{}", out.table());
    }
    let failed = precision.wrong > 0 || precision.missing > 0 || run.unexpected_polls > 0;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Starts the managers; shared ones once the events are shared out among them all.
fn start_managers(
    a: &FleetArgs,
    rt: &tokio::runtime::Runtime,
    url: &str,
    inventory: &std::path::Path,
    events: &std::path::Path,
    n_events: usize,
) -> anyhow::Result<Vec<ManagerProc>> {
    let k = a.shared.unwrap_or(1);
    let mut managers = Vec::with_capacity(k);
    for i in 0..k {
        let name = format!("m{}", i + 1);
        managers.push(ManagerProc::spawn(&ManagerSpec {
            url,
            inventory,
            // The first adds the events (to the shared bucket); the others find them there.
            events: (i == 0).then_some(events),
            name: &name,
            shared: a.shared.is_some(),
            poll_timeout: &a.poll_timeout,
        })?);
        if a.shared.is_some() {
            rt.block_on(wait_owners(url, &mut managers, n_events))?;
        }
    }
    Ok(managers)
}

/// Waits until every event is owned and each of `managers` owns some
/// (ownership is settled at each manager's tend, every second).
async fn wait_owners(url: &str, managers: &mut [ManagerProc], n_events: usize) -> anyhow::Result<()> {
    let client = async_nats::connect(url)
        .await
        .with_context(|| format!("cannot connect to the NATS server at {url}"))?;
    let js = async_nats::jetstream::new(client);
    let deadline = Instant::now() + Duration::from_secs(60);
    let share = n_events / managers.len();
    let mut last = String::new();
    loop {
        for m in managers.iter_mut() {
            m.alive()?;
        }
        if let Ok(owners) = js.get_key_value(clarion_nats::shared::OWNERS_BUCKET).await {
            let mut by: HashMap<String, usize> = HashMap::new();
            if let Ok(mut keys) = owners.keys().await {
                while let Some(Ok(k)) = keys.next().await {
                    if !k.starts_with("o.") {
                        continue;
                    }
                    if let Ok(Some(v)) = owners.get(&k).await {
                        *by.entry(String::from_utf8_lossy(&v).into_owned()).or_default() += 1;
                    }
                }
            }
            let owned: usize = by.values().sum();
            let settled = managers
                .iter()
                .all(|m| by.get(&m.name).is_some_and(|&n| n >= share));
            if owned == n_events && settled {
                return Ok(());
            }
            last = format!("{owned} of {n_events} events owned: {by:?}");
        }
        if Instant::now() > deadline {
            bail!("the shared managers did not share the events out within 60 s ({last})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the run measured.
struct Run {
    from_ns: u64,
    to_ns: u64,
    /// Filled by the `clarion.events` subscriber until the managers have stopped.
    received: Arc<Mutex<Vec<Received>>>,
    sent: u64,
    sent_at_end: u64,
    acked_at_end: u64,
    acked: u64,
    ack_messages: u64,
    resent: u64,
    polls: u64,
    poll_batches: u64,
    unexpected_polls: u64,
    other_controls: u64,
    invalid: u64,
    send_lag: Vec<u32>,
    ack_latency: Vec<u32>,
    manager_cpu_s: Vec<f64>,
    manager_runq_wait_s: Vec<f64>,
    manager_mem: Vec<Usage>,
    load_average: f64,
    generator_cpu_s: f64,
    server_cpu_s: Option<f64>,
    wall_s: f64,
}

/// Registers the fleet, runs the load for `--duration`, waits for its
/// last decisions, and says goodbye. `server_pid`: the NATS server this
/// run started (its CPU time is measured too).
async fn drive(
    a: &FleetArgs,
    model: Arc<Model>,
    url: &str,
    managers: &mut [ManagerProc],
    server_pid: Option<u32>,
) -> anyhow::Result<Run> {
    let clients = sim::connect(url, a.connections).await?;
    // Fired decisions, received as any consumer would.
    let watcher = async_nats::connect(url)
        .await
        .with_context(|| format!("cannot connect to the NATS server at {url}"))?;
    let mut fired = watcher
        .subscribe(clarion_nats::protocol::EVENTS)
        .await
        .map_err(|e| anyhow!("subscribing to clarion.events: {e}"))?;
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    {
        let (received, model) = (Arc::clone(&received), Arc::clone(&model));
        tokio::spawn(async move {
            while let Some(msg) = fired.next().await {
                let now = sim::wall_ns();
                let r = serde_json::from_slice::<serde_json::Value>(&msg.payload)
                    .ok()
                    .and_then(|v| clarion_report::Report::from_json(&v).ok());
                let got = match r {
                    Some(r) => {
                        let event = model.event_of(&r.event);
                        Received {
                            event,
                            start_ns: r.window.start_ns,
                            group: event.and_then(|e| model.group_of(e, &r.group)),
                            total: r.values.first().map_or(f64::NAN, |v| v.1),
                            partial: !r.completeness.complete || !r.missing_hosts.is_empty(),
                            latency_us: u32::try_from(now.saturating_sub(r.window.end_ns) / 1000)
                                .unwrap_or(u32::MAX),
                        }
                    }
                    None => Received {
                        event: None,
                        start_ns: 0,
                        group: None,
                        total: f64::NAN,
                        partial: false,
                        latency_us: 0,
                    },
                };
                if let Ok(mut v) = received.lock() {
                    v.push(got);
                }
            }
        });
    }
    let registered_by = Instant::now() + Duration::from_secs(120);
    let started = Instant::now();
    let fleet = sim::Fleet::register(Arc::clone(&model), clients, registered_by).await?;
    eprintln!(
        "clarion-lab fleet: {} hosts registered in {:.1} s",
        thousands(model.hosts as u64),
        started.elapsed().as_secs_f64()
    );
    fleet.listen().await?;
    // From the next whole second at least a second ahead: the hosts heartbeat meanwhile.
    let sec = 1_000_000_000;
    let from_ns = (sim::wall_ns() / sec + 2) * sec;
    let to_ns = from_ns + a.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for c in 0..a.connections {
        senders.push(tokio::spawn(Arc::clone(&fleet).send(
            c,
            from_ns,
            to_ns,
            Arc::clone(&stop),
        )));
    }
    sleep_until_ns(from_ns).await;
    let pids: Vec<u32> = managers.iter().map(ManagerProc::pid).collect();
    let before: Vec<Option<Usage>> = pids.iter().map(|&p| procs::usage(p)).collect();
    let gen_before = procs::own_cpu_s();
    let server_before = server_pid.and_then(|p| Some((p, procs::usage(p)?)));
    // Managers that die mid-run end it at once.
    while sim::wall_ns() < to_ns {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for m in managers.iter_mut() {
            m.alive()?;
        }
    }
    let after: Vec<Option<Usage>> = pids.iter().map(|&p| procs::usage(p)).collect();
    let generator_cpu_s = procs::own_cpu_s() - gen_before;
    let server_cpu_s = server_before.and_then(|(pid, b)| Some(procs::usage(pid)?.cpu_s - b.cpu_s));
    let sent_at_end = fleet.counters.sent.load(Ordering::Relaxed);
    // The decisions of the run are acknowledged up to `ACK_HOLD` and a turn
    // of the manager's 50 ms tick after them: counted then, so that the
    // reports decided in the run are not cut short by the hold (the hosts
    // send no report after `to_ns`).
    tokio::time::sleep(clarion_nats::acks::ACK_HOLD + Duration::from_millis(50)).await;
    let acked_at_end = fleet.counters.acked.load(Ordering::Relaxed);
    // The last windows' decisions: until every report is acknowledged, at
    // most the poll timeout and a resend later.
    let grace = Instant::now()
        + Duration::from_nanos(parse_duration(&a.poll_timeout).unwrap_or(0))
        + Duration::from_secs(4);
    while fleet.unacked() > 0 && Instant::now() < grace {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The fired reports of the last decisions are on their way.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
    }
    fleet.bye(Duration::from_secs(5)).await;
    let c = &fleet.counters;
    let take = |m: &Mutex<Vec<u32>>| m.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
    Ok(Run {
        from_ns,
        to_ns,
        received,
        sent: c.sent.load(Ordering::Relaxed),
        sent_at_end,
        acked_at_end,
        acked: c.acked.load(Ordering::Relaxed),
        ack_messages: c.ack_messages.load(Ordering::Relaxed),
        resent: c.resent.load(Ordering::Relaxed),
        polls: c.polls.load(Ordering::Relaxed),
        poll_batches: c.poll_batches.load(Ordering::Relaxed),
        unexpected_polls: c.unexpected_polls.load(Ordering::Relaxed),
        other_controls: c.other_controls.load(Ordering::Relaxed),
        invalid: c.invalid.load(Ordering::Relaxed),
        send_lag: take(&fleet.samples.send_lag),
        ack_latency: take(&fleet.samples.ack),
        manager_cpu_s: before
            .iter()
            .zip(&after)
            .map(|(b, a)| match (b, a) {
                (Some(b), Some(a)) => a.cpu_s - b.cpu_s,
                _ => f64::NAN,
            })
            .collect(),
        manager_runq_wait_s: before
            .iter()
            .zip(&after)
            .map(|(b, a)| match (b, a) {
                (Some(b), Some(a)) => a.runq_wait_s - b.runq_wait_s,
                _ => f64::NAN,
            })
            .collect(),
        manager_mem: after.iter().map(|u| u.unwrap_or_default()).collect(),
        load_average: procs::load_average(),
        generator_cpu_s,
        server_cpu_s,
        wall_s: a.duration as f64 / 1e9,
    })
}

async fn sleep_until_ns(t: u64) {
    let wait = t.saturating_sub(sim::wall_ns());
    tokio::time::sleep(Duration::from_nanos(wait)).await;
}

struct Outcome<'a> {
    model: &'a Model,
    a: &'a FleetArgs,
    run: &'a Run,
    figures: &'a ManagerFigures,
    precision: &'a Precision,
    received: &'a [Received],
    nats_cpu_s: Option<f64>,
}

/// p50, p99 and max of microsecond samples, in milliseconds.
fn quantiles(v: &[u32]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_unstable();
    let ms = |x: u32| f64::from(x) / 1000.0;
    (
        ms(percentile(&s, 0.5)),
        ms(percentile(&s, 0.99)),
        ms(s.last().copied().unwrap_or(0)),
    )
}

impl Outcome<'_> {
    fn manager_cpu(&self) -> f64 {
        self.run.manager_cpu_s.iter().sum()
    }

    fn fired_latency(&self) -> Vec<u32> {
        self.received
            .iter()
            .filter(|r| r.event.is_some())
            .map(|r| r.latency_us)
            .collect()
    }

    fn json(&self) -> serde_json::Value {
        let (r, f, p) = (self.run, self.figures, self.precision);
        let w = r.wall_s;
        let cpu = self.manager_cpu();
        let lat = |v: &[u32]| {
            let (p50, p99, max) = quantiles(v);
            json!({"p50_ms": p50, "p99_ms": p99, "max_ms": max, "samples": v.len()})
        };
        json!({
            "hosts": self.model.hosts,
            "events": self.model.events.len(),
            "per_event": self.model.per_event,
            "groups": self.model.groups,
            "share": self.model.share,
            "intervals": self.a.intervals,
            "duration_s": w,
            "seed": self.model.seed,
            "managers": r.manager_cpu_s.len(),
            "shared": self.a.shared.is_some(),
            "connections": self.a.connections,
            "reports": {
                "expected": p.expected_reports,
                "sent": r.sent,
                "sent_per_s": r.sent_at_end as f64 / w,
                "decided": r.acked,
                "decided_per_s": r.acked_at_end as f64 / w,
                "lost": r.sent.saturating_sub(r.acked),
                "resent": r.resent,
                "ack_messages": r.ack_messages,
            },
            "decisions": {
                "expected": p.expected_decisions,
                "made": f.decisions,
                "per_s": f.decisions as f64 / w,
                "partial": f.partial,
                "fired": f.fired,
                "expected_fired": p.expected_fired,
                "fired_received": p.received_fired,
                "wrong": p.wrong,
                "missing": p.missing,
                "duplicates": p.duplicates,
                "partial_received": p.partial_received,
            },
            "latency_fired": lat(&self.fired_latency()),
            "latency_ack": lat(&r.ack_latency),
            "generator_send_lag": lat(&r.send_lag),
            "polls": {
                "sent_by_managers": f.polls,
                "answered": r.polls,
                "batches": r.poll_batches,
                "timeouts": f.poll_timeouts,
                "unexpected": r.unexpected_polls,
            },
            "manager": {
                "cpu_s": r.manager_cpu_s,
                "cores": cpu / w,
                "runq_wait_s": r.manager_runq_wait_s,
                "decisions_per_core_s": f.decisions as f64 / cpu,
                "reports_per_core_s": r.acked_at_end as f64 / cpu,
                "rss_kb": r.manager_mem.iter().map(|m| m.rss_kb).collect::<Vec<_>>(),
                "peak_rss_kb": r.manager_mem.iter().map(|m| m.peak_rss_kb).collect::<Vec<_>>(),
                "invalid": f.invalid,
                "refused": f.refused,
                "not_owned": f.not_owned,
            },
            "generator_cpu_s": r.generator_cpu_s,
            "load_average": r.load_average,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "nats_server_cpu_s": self.nats_cpu_s,
            "other_controls": r.other_controls,
            "invalid_messages": r.invalid,
        })
    }

    fn table(&self) -> String {
        let (r, f, p) = (self.run, self.figures, self.precision);
        let w = r.wall_s;
        let cpu = self.manager_cpu();
        let rate = |n: u64| format!("{} /s", thousands((n as f64 / w) as u64));
        let ms3 = |v: &[u32]| {
            let (a, b, c) = quantiles(v);
            format!(
                "{a:.2} / {b:.2} / {c:.2} ms ({} samples)",
                thousands(v.len() as u64)
            )
        };
        let mut rows: Vec<(&str, String)> = vec![
            (
                "fleet",
                format!(
                    "{} hosts, {} events on {} hosts each, {} group(s), share {}, windows {}, {:.0} s, seed {}",
                    thousands(self.model.hosts as u64),
                    thousands(self.model.events.len() as u64),
                    self.model.per_event,
                    self.model.groups,
                    self.model.share,
                    self.a.intervals,
                    w,
                    self.model.seed
                ),
            ),
            (
                "managers",
                match self.a.shared {
                    Some(k) => format!("{k} shared"),
                    None => "1".into(),
                },
            ),
            ("reports sent", format!("{} ({}; {} expected)", thousands(r.sent), rate(r.sent_at_end), thousands(p.expected_reports))),
            ("reports decided", format!("{} ({} during the run)", thousands(r.acked), rate(r.acked_at_end))),
            ("reports lost", format!("{} (never acknowledged; {} sent again)", thousands(r.sent.saturating_sub(r.acked)), thousands(r.resent))),
            ("decisions", format!("{} of {} expected ({}), {} partial, {} fired", thousands(f.decisions), thousands(p.expected_decisions), rate(f.decisions), thousands(f.partial), thousands(f.fired))),
            (
                "fired",
                format!(
                    "{} received of {} expected: {} wrong, {} missing, {} duplicate, {} partial",
                    thousands(p.received_fired),
                    thousands(p.expected_fired),
                    p.wrong,
                    p.missing,
                    p.duplicates,
                    p.partial_received
                ),
            ),
            ("window end → fired report", format!("p50 / p99 / max {}", ms3(&self.fired_latency()))),
            ("window end → acknowledgement", format!("p50 / p99 / max {}", ms3(&r.ack_latency))),
            ("window end → report sent", format!("p50 / p99 / max {} (the generator's lag)", ms3(&r.send_lag))),
            ("polls", format!("{} sent, {} answered in {} batches, {} timed out, {} unexpected", thousands(f.polls), thousands(r.polls), thousands(r.poll_batches), f.poll_timeouts, r.unexpected_polls)),
            (
                "manager CPU",
                format!(
                    "{:.2} s ({}) = {:.2} core(s), {:.2} s waiting for a CPU; {} decisions and {} reports per core-second",
                    cpu,
                    r.manager_cpu_s.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(" + "),
                    cpu / w,
                    r.manager_runq_wait_s.iter().sum::<f64>(),
                    thousands((f.decisions as f64 / cpu) as u64),
                    thousands((r.acked_at_end as f64 / cpu) as u64)
                ),
            ),
            (
                "manager memory",
                r.manager_mem
                    .iter()
                    .map(|m| format!("RSS {} MiB (peak {} MiB)", m.rss_kb / 1024, m.peak_rss_kb / 1024))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            (
                "other CPU",
                format!(
                    "generator {:.2} s, nats-server {}; load average {:.1} on {} CPUs at the end",
                    r.generator_cpu_s,
                    self.nats_cpu_s.map_or("not ours".into(), |c| format!("{c:.2} s")),
                    r.load_average,
                    std::thread::available_parallelism().map_or(0, |n| n.get())
                ),
            ),
        ];
        if f.invalid + f.refused + r.invalid + r.other_controls > 0 {
            rows.push((
                "oddities",
                format!(
                    "manager: {} invalid, {} refused; hosts: {} invalid, {} other control messages",
                    f.invalid, f.refused, r.invalid, r.other_controls
                ),
            ));
        }
        let width = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
        rows.iter().map(|(k, v)| format!("{k:<width$}  {v}\n")).collect()
    }
}
