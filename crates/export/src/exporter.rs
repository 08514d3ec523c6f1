//! The exporter: every parsed packet is classified against the policies
//! and handed to the destinations of those that take it.
//!
//! Per packet, on the reading thread: one classification (a uniflow hash
//! lookup on a fast-path hit), then, only for taken packets, the route of
//! that set of policies — its destinations, each once, computed the first
//! time the set is seen — and the work of each destination (a header
//! record into a datagram, a frame into a VXLAN datagram or a file). A packet no policy takes
//! costs the lookup alone.
//!
//! Destinations are shared: two policies sending headers to one collector
//! feed one stream, and a packet taken by both is sent to it once.
//!
//! With a CPU budget ([`SamplingConfig::budget`]) a [`crate::sampling`]
//! sampler stands between the route and the destinations: every packet is
//! still classified and counted by its policies (a hash lookup on the fast
//! path, the same for every packet, which sampling could not make cheaper
//! than the draw it would need anyway, and which keeps the policies'
//! counts exact), and only the export work — the part that grows with the
//! bytes and the sends — is sampled, all destinations of a packet alike.
//! Without a budget the sampler costs one branch per taken packet.

use std::path::{Path, PathBuf};

use clarion_capture::Rotation;
use clarion_classify::{Classifier, Verdict};
use clarion_headers::{EncoderConfig, HeaderRecord};
use clarion_lang::spec::{Destination, ExportAction, ExportSpec};
use clarion_wire::{LinkType, PacketRecord};

use crate::destination::{Collector, DestinationStats, Files, Vxlan};
use crate::policy::{self, FastPathKind};
use crate::sampling::{MonotonicClock, Sampler, SamplingConfig, SamplingStats, WorkClock};
use crate::ExportError;

/// How long a header waits in a half-full datagram, in packet time.
pub const FLUSH_AFTER_NS: u64 = 100_000_000;

/// How an exporter is set up beside the policies.
#[derive(Clone, Debug, Default)]
pub struct ExportConfig {
    /// Where `pcapng` destinations write (required if a policy has one).
    pub export_dir: Option<PathBuf>,
    /// The classifier's fast path.
    pub fast_path: FastPathKind,
    /// The exporter's id in every header datagram, and the datagrams' size.
    pub headers: EncoderConfig,
    /// Names this run's files: `DIR/POLICY-RUN-NNNNNN.pcapng`.
    pub run_id: String,
    /// The export work's CPU budget (`--export-cpu`) and its control.
    pub sampling: SamplingConfig,
}

/// One frame as read, beside its parsed record.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub link: LinkType,
    pub data: &'a [u8],
    /// Length on the wire.
    pub orig_len: u32,
    /// The exporter's index of the input or interface it came from.
    pub interface: u16,
}

/// One policy's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyStats {
    pub name: String,
    /// Packets the policy took.
    pub matched: u64,
}

/// Everything an exporter has done.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportStats {
    /// Packets offered (every parsed packet).
    pub offered: u64,
    pub policies: Vec<PolicyStats>,
    pub destinations: Vec<DestinationStats>,
    pub classifier: clarion_classify::Stats,
    /// The sampler's state, with a CPU budget.
    pub sampling: Option<SamplingStats>,
}

#[derive(Debug)]
enum Sink {
    Collector(Collector),
    Vxlan(Vxlan),
    Files { files: Files, snap: Option<u32> },
}

impl Sink {
    fn stats(&self) -> &DestinationStats {
        match self {
            Sink::Collector(c) => &c.stats,
            Sink::Vxlan(v) => &v.stats,
            Sink::Files { files, .. } => &files.stats,
        }
    }

    fn stats_mut(&mut self) -> &mut DestinationStats {
        match self {
            Sink::Collector(c) => &mut c.stats,
            Sink::Vxlan(v) => &mut v.stats,
            Sink::Files { files, .. } => &mut files.stats,
        }
    }
}

/// Export policies on the packet path (see the module doc).
pub struct Exporter {
    classifier: Classifier,
    names: Vec<String>,
    /// Per policy: its sinks.
    sends: Vec<Vec<usize>>,
    matched: Vec<u64>,
    sinks: Vec<Sink>,
    /// Per classifier set id: the sinks, each once (built on first sight).
    routes: Vec<Option<Box<[usize]>>>,
    offered: u64,
    last_ts_ns: u64,
    /// With a CPU budget.
    sampler: Option<Sampler>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("policies", &self.names)
            .field("sinks", &self.sinks)
            .field("offered", &self.offered)
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// The exporter of `policies`; a sampler times its work on the monotonic clock.
    pub fn new(policies: &[ExportSpec], config: &ExportConfig) -> Result<Exporter, ExportError> {
        Exporter::with_clock(policies, config, Box::new(MonotonicClock::new()))
    }

    /// The exporter of `policies`, its sampler (if `config` has a budget)
    /// reading `clock` (tests inject simulated time and costs).
    pub fn with_clock(
        policies: &[ExportSpec],
        config: &ExportConfig,
        clock: Box<dyn WorkClock>,
    ) -> Result<Exporter, ExportError> {
        let sampler = Sampler::new(&config.sampling, clock)?;
        let mut names: Vec<String> = Vec::new();
        for p in policies {
            if names.contains(&p.name) {
                return Err(ExportError::DuplicatePolicy(p.name.clone()));
            }
            names.push(p.name.clone());
        }
        let classifier = policy::classifier(policies, config.fast_path)?;
        let mut sinks: Vec<Sink> = Vec::new();
        let mut collectors: Vec<(std::net::SocketAddr, usize)> = Vec::new();
        // (analyzer, VNI, snap) of each mirror opened, and its sink.
        type MirrorKey = (std::net::SocketAddr, u32, Option<u32>);
        let mut mirrors: Vec<(MirrorKey, usize)> = Vec::new();
        let mut sends = Vec::new();
        for p in policies {
            let mut mine = Vec::new();
            let mut has_files = false;
            for s in &p.sends {
                let index = match (s.action, s.destination) {
                    (ExportAction::Headers, Destination::Collector(addr)) => {
                        match collectors.iter().find(|(a, _)| *a == addr) {
                            Some((_, i)) => *i,
                            None => {
                                sinks.push(Sink::Collector(Collector::open(addr, config.headers)?));
                                collectors.push((addr, sinks.len() - 1));
                                sinks.len() - 1
                            }
                        }
                    }
                    (ExportAction::Packets { snap }, Destination::Vxlan { analyzer, vni }) => {
                        let key = (analyzer, vni, snap);
                        match mirrors.iter().find(|(k, _)| *k == key) {
                            Some((_, i)) => *i,
                            None => {
                                sinks.push(Sink::Vxlan(Vxlan::open(analyzer, vni, snap)?));
                                mirrors.push((key, sinks.len() - 1));
                                sinks.len() - 1
                            }
                        }
                    }
                    (
                        ExportAction::Packets { snap },
                        Destination::Pcapng {
                            max_bytes,
                            max_age_ns,
                        },
                    ) => {
                        if has_files {
                            return Err(ExportError::TwoFileSends {
                                policy: p.name.clone(),
                            });
                        }
                        has_files = true;
                        let dir = config
                            .export_dir
                            .as_deref()
                            .ok_or_else(|| ExportError::NoExportDir {
                                policy: p.name.clone(),
                            })?;
                        let rotation = Rotation {
                            max_bytes,
                            max_age: max_age_ns.map(std::time::Duration::from_nanos),
                        };
                        sinks.push(Sink::Files {
                            files: Files::new(base(dir, &p.name, &config.run_id), rotation),
                            snap,
                        });
                        sinks.len() - 1
                    }
                    // The checker allows no other pairs; one built by hand is
                    // refused rather than half-served.
                    (action, destination) => {
                        return Err(ExportError::Unsupported {
                            policy: p.name.clone(),
                            what: format!("{action:?} to {destination:?}"),
                        })
                    }
                };
                if !mine.contains(&index) {
                    mine.push(index);
                }
            }
            sends.push(mine);
        }
        if let Some(dir) = &config.export_dir {
            if sinks.iter().any(|s| matches!(s, Sink::Files { .. })) {
                std::fs::create_dir_all(dir).map_err(|error| ExportError::ExportDir {
                    path: dir.clone(),
                    error,
                })?;
            }
        }
        Ok(Exporter {
            classifier,
            matched: vec![0; names.len()],
            names,
            sends,
            sinks,
            routes: Vec::new(),
            offered: 0,
            last_ts_ns: 0,
            sampler,
        })
    }

    /// Whether any policy is installed (an exporter without one costs nothing).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Classifies one packet and sends it where its policies say.
    #[inline]
    pub fn offer(&mut self, rec: &PacketRecord, frame: &Frame<'_>) {
        self.offered += 1;
        self.last_ts_ns = self.last_ts_ns.max(rec.ts_ns);
        let Verdict::Set(set) = self.classifier.classify(&rec.key) else {
            return;
        };
        let id = set.0 as usize;
        if self.classifier.set_actions(set).is_empty() {
            return;
        }
        if self.routes.len() <= id {
            self.routes.resize(id + 1, None);
        }
        if self.routes[id].is_none() {
            let mut r: Vec<usize> = Vec::new();
            for &p in self.classifier.set_actions(set) {
                for &s in self.sends.get(p as usize).map_or(&[][..], Vec::as_slice) {
                    if !r.contains(&s) {
                        r.push(s);
                    }
                }
            }
            self.routes[id] = Some(r.into());
        }
        // Moved out while the sinks are borrowed, and back: no copy a packet.
        let route = self.routes[id].take().unwrap_or_default();
        for &p in self.classifier.set_actions(set) {
            if let Some(m) = self.matched.get_mut(p as usize) {
                *m += 1;
            }
        }
        let (ratio, timed) = match &mut self.sampler {
            None => (1, false),
            Some(s) => match s.admit() {
                Some(ratio) => (ratio, s.begin()),
                None => {
                    self.routes[id] = Some(route);
                    return;
                }
            },
        };
        for s in route.iter() {
            let sink = &mut self.sinks[*s];
            match sink {
                Sink::Collector(c) => c.push(&HeaderRecord::from_packet(rec, frame.interface, ratio)),
                Sink::Vxlan(v) => v.send(frame.link, frame.data),
                Sink::Files { files, snap } => {
                    let data = cut(frame.data, *snap);
                    files.write(frame.link, rec.ts_ns, data, frame.orig_len);
                }
            }
            sink.stats_mut().represented += u64::from(ratio);
        }
        self.routes[id] = Some(route);
        if timed {
            if let Some(s) = &mut self.sampler {
                s.end();
            }
        }
    }

    /// The sampler's state (cheap: no allocation), with a CPU budget.
    pub fn sampling(&self) -> Option<SamplingStats> {
        self.sampler.as_ref().map(Sampler::stats)
    }

    /// Sends header datagrams that have waited [`FLUSH_AFTER_NS`] by
    /// `now_ns` (packet time) and flushes files; call about every 100 ms.
    ///
    /// With a CPU budget the flushes count as export work, and the
    /// sampler's interval closes here if it is due (so that the fraction
    /// climbs back when too few packets are exported to close it).
    pub fn tick(&mut self, now_ns: u64) {
        let now = now_ns.max(self.last_ts_ns);
        let sinks = &mut self.sinks;
        let mut flush = || {
            for s in sinks.iter_mut() {
                match s {
                    Sink::Collector(c) => c.flush_older(now, FLUSH_AFTER_NS),
                    Sink::Vxlan(_) => {}
                    Sink::Files { files, .. } => files.flush(),
                }
            }
        };
        match &mut self.sampler {
            Some(s) => s.tick(flush),
            None => flush(),
        }
    }

    /// Sends every pending header and closes the files.
    pub fn finish(&mut self) {
        for s in &mut self.sinks {
            match s {
                Sink::Collector(c) => c.finish(),
                Sink::Vxlan(_) => {}
                Sink::Files { files, .. } => files.finish(),
            }
        }
    }

    pub fn stats(&self) -> ExportStats {
        ExportStats {
            offered: self.offered,
            policies: self
                .names
                .iter()
                .zip(&self.matched)
                .map(|(name, &matched)| PolicyStats {
                    name: name.clone(),
                    matched,
                })
                .collect(),
            destinations: self.sinks.iter().map(|s| s.stats().clone()).collect(),
            classifier: self.classifier.stats(),
            sampling: self.sampling(),
        }
    }
}

/// The first `snap` bytes of a frame.
fn cut(data: &[u8], snap: Option<u32>) -> &[u8] {
    match snap {
        Some(n) => data.get(..n as usize).unwrap_or(data),
        None => data,
    }
}

/// `DIR/POLICY-RUN` (or `DIR/POLICY` without a run id).
fn base(dir: &Path, policy: &str, run_id: &str) -> PathBuf {
    if run_id.is_empty() {
        dir.join(policy)
    } else {
        dir.join(format!("{policy}-{run_id}"))
    }
}
