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
//!
//! The policies can be replaced while packets flow
//! ([`Exporter::set_policies`], between two offers): the classifier and
//! routes are rebuilt, the sinks of destinations still used are kept (a
//! sink is identified by its collector, its mirror, or its policy's name
//! and rotation), the others finished. A change that fails changes nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clarion_capture::{RotatingPcapng, Rotation};
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
    /// The header streams' exporter name, worker index, key and datagram
    /// size (each stream draws its own session).
    pub headers: EncoderConfig,
    /// The host's interfaces by index (`Frame::interface`): live, the
    /// `-i` names in order; empty for capture files (a policy naming an
    /// interface is then refused).
    pub interfaces: Vec<String>,
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

    fn finish(&mut self) {
        match self {
            Sink::Collector(c) => c.finish(),
            Sink::Vxlan(v) => v.flush(),
            Sink::Files { files, .. } => files.finish(),
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

/// What makes two sends one destination (and a sink kept across
/// [`Exporter::set_policies`]).
#[derive(Clone, Debug, PartialEq)]
enum SinkKey {
    Collector(SocketAddr),
    /// Analyzer, VNI, snap.
    Vxlan(SocketAddr, u32, Option<u32>),
    /// A policy's own files (their snap may change in place).
    Files {
        policy: String,
        rotation: Rotation,
    },
}

/// Export policies on the packet path (see the module doc).
pub struct Exporter {
    classifier: Classifier,
    names: Vec<String>,
    /// The policies as given (for [`Exporter::policies`]).
    sources: Vec<ExportSpec>,
    /// Per policy: its sinks.
    sends: Vec<Vec<usize>>,
    /// Per policy: the interfaces it takes packets of (bit `i`: the
    /// config's interface `i`); `u64::MAX` for any.
    on: Vec<u64>,
    /// Routes per set id: 1 slot, or one per interface plus one for
    /// others when a policy names interfaces.
    stride: usize,
    matched: Vec<u64>,
    sinks: Vec<Sink>,
    /// Beside `sinks`.
    keys: Vec<SinkKey>,
    /// Counters of the sinks finished by [`Exporter::set_policies`].
    retired: Vec<DestinationStats>,
    /// Per policy name: how many file sequences it has opened.
    opened_files: Vec<(String, u32)>,
    config: ExportConfig,
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
        let mut x = Exporter {
            classifier: policy::classifier(&[], config.fast_path)?,
            names: Vec::new(),
            sources: Vec::new(),
            sends: Vec::new(),
            on: Vec::new(),
            stride: 1,
            matched: Vec::new(),
            sinks: Vec::new(),
            keys: Vec::new(),
            retired: Vec::new(),
            opened_files: Vec::new(),
            routes: Vec::new(),
            offered: 0,
            last_ts_ns: 0,
            sampler,
            config: config.clone(),
        };
        x.set_policies(policies)?;
        Ok(x)
    }

    /// Replaces the policies at runtime. Destinations the new set still
    /// uses keep their sinks (a collector's stream goes on with its
    /// sequence, a policy's files are not restarted; a new snap length
    /// applies from the next packet); those no longer used are finished
    /// (headers sent, files closed) and their counters kept in
    /// [`Exporter::stats`]. Policies that stay keep their counts. A
    /// policy's files opened anew (removed and added again, or a new
    /// rotation) are named `POLICY-RUN-rN` (N = 2, 3, ...), since files
    /// are never overwritten.
    ///
    /// On an error nothing has changed. Cost: the classifier is rebuilt
    /// and every route is computed again on its set's next packet.
    pub fn set_policies(&mut self, policies: &[ExportSpec]) -> Result<(), ExportError> {
        let mut names: Vec<String> = Vec::new();
        for p in policies {
            if names.contains(&p.name) {
                return Err(ExportError::DuplicatePolicy(p.name.clone()));
            }
            names.push(p.name.clone());
        }
        let mut on = Vec::with_capacity(policies.len());
        for p in policies {
            on.push(self.interface_mask(p)?);
        }
        let classifier = policy::classifier(policies, self.config.fast_path)?;
        // Plan: each destination once, by key, and each policy's sends.
        let mut keys: Vec<(SinkKey, Option<u32>)> = Vec::new();
        let mut sends = Vec::new();
        for p in policies {
            let mut mine = Vec::new();
            let mut has_files = false;
            for s in &p.sends {
                let (key, snap) = match (s.action, s.destination) {
                    (ExportAction::Headers, Destination::Collector(addr)) => (SinkKey::Collector(addr), None),
                    (ExportAction::Packets { snap }, Destination::Vxlan { analyzer, vni }) => {
                        (SinkKey::Vxlan(analyzer, vni, snap), None)
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
                        if self.config.export_dir.is_none() {
                            return Err(ExportError::NoExportDir {
                                policy: p.name.clone(),
                            });
                        }
                        let rotation = Rotation {
                            max_bytes,
                            max_age: max_age_ns.map(std::time::Duration::from_nanos),
                        };
                        (
                            SinkKey::Files {
                                policy: p.name.clone(),
                                rotation,
                            },
                            snap,
                        )
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
                let index = match keys.iter().position(|(k, _)| *k == key) {
                    Some(i) => i,
                    None => {
                        keys.push((key, snap));
                        keys.len() - 1
                    }
                };
                if !mine.contains(&index) {
                    mine.push(index);
                }
            }
            sends.push(mine);
        }
        // Open what is new (fallible, so before anything changes).
        let mut opened: Vec<Option<Sink>> = Vec::with_capacity(keys.len());
        let mut opened_files = self.opened_files.clone();
        for (key, snap) in &keys {
            if self.keys.contains(key) {
                opened.push(None);
                continue;
            }
            opened.push(Some(match key {
                SinkKey::Collector(addr) => Sink::Collector(Collector::open(*addr, &self.config.headers)?),
                SinkKey::Vxlan(analyzer, vni, snap) => Sink::Vxlan(Vxlan::open(*analyzer, *vni, *snap)?),
                SinkKey::Files { policy, rotation } => {
                    let dir = self
                        .config
                        .export_dir
                        .as_deref()
                        .ok_or_else(|| ExportError::NoExportDir {
                            policy: policy.clone(),
                        })?;
                    std::fs::create_dir_all(dir).map_err(|error| ExportError::ExportDir {
                        path: dir.to_path_buf(),
                        error,
                    })?;
                    let n = match opened_files.iter_mut().find(|(p, _)| p == policy) {
                        Some((_, n)) => {
                            *n += 1;
                            *n
                        }
                        None => {
                            opened_files.push((policy.clone(), 1));
                            1
                        }
                    };
                    let mut b = base(dir, policy, &self.config.run_id);
                    if n > 1 {
                        b.as_mut_os_string().push(format!("-r{n}"));
                    }
                    // Refused now, not found out at the first packet (which
                    // then dropped every packet of the policy, said only in
                    // the summary).
                    if let (path, Err(error)) = RotatingPcapng::probe(&b) {
                        return Err(ExportError::Unwritable {
                            policy: policy.clone(),
                            path,
                            error,
                        });
                    }
                    Sink::Files {
                        files: Files::new(b, *rotation),
                        snap: *snap,
                    }
                }
            }));
        }
        // Commit: nothing fails from here.
        let mut old: Vec<Option<Sink>> = std::mem::take(&mut self.sinks).into_iter().map(Some).collect();
        let old_keys = std::mem::take(&mut self.keys);
        let mut sinks = Vec::with_capacity(keys.len());
        for ((key, snap), new) in keys.iter().zip(opened) {
            let mut sink = match new {
                Some(s) => s,
                None => {
                    let i = old_keys.iter().position(|k| k == key);
                    match i.and_then(|i| old.get_mut(i)).and_then(Option::take) {
                        Some(s) => s,
                        // Unreachable: the key was found among the old ones above.
                        None => continue,
                    }
                }
            };
            if let Sink::Files { snap: s, .. } = &mut sink {
                *s = *snap;
            }
            sinks.push(sink);
        }
        for mut s in old.into_iter().flatten() {
            s.finish();
            self.retired.push(s.stats().clone());
        }
        let matched = names
            .iter()
            .map(|n| {
                self.names
                    .iter()
                    .position(|o| o == n)
                    .map_or(0, |i| self.matched[i])
            })
            .collect();
        self.sources = policies.to_vec();
        self.classifier = classifier;
        self.names = names;
        self.matched = matched;
        self.sends = sends;
        self.stride = if on.iter().all(|&m| m == u64::MAX) {
            1
        } else {
            self.config.interfaces.len().min(63) + 1
        };
        self.on = on;
        self.sinks = sinks;
        self.keys = keys.into_iter().map(|(k, _)| k).collect();
        self.opened_files = opened_files;
        self.routes.clear();
        Ok(())
    }

    /// The interfaces `p` takes packets of, as a bit set over the config's.
    fn interface_mask(&self, p: &ExportSpec) -> Result<u64, ExportError> {
        if p.interfaces.is_empty() {
            return Ok(u64::MAX);
        }
        let mut mask = 0u64;
        for name in &p.interfaces {
            match self.config.interfaces.iter().position(|i| i == name) {
                Some(i) if i < 63 => mask |= 1 << i,
                _ => {
                    return Err(ExportError::UnknownInterface {
                        policy: p.name.clone(),
                        interface: name.clone(),
                        known: self.config.interfaces.clone(),
                    })
                }
            }
        }
        Ok(mask)
    }

    /// The installed policies, in order.
    pub fn policies(&self) -> &[ExportSpec] {
        &self.sources
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
        if self.classifier.set_actions(set).is_empty() {
            return;
        }
        // Interface slot: 0 when no policy names interfaces.
        let slot = if self.stride == 1 {
            0
        } else {
            usize::from(frame.interface).min(self.stride - 1)
        };
        let bit = if slot < 63 { 1u64 << slot } else { 0 };
        let takes = |on: &[u64], p: u32| on.get(p as usize).is_some_and(|&m| m == u64::MAX || m & bit != 0);
        let id = set.0 as usize * self.stride + slot;
        if self.routes.len() <= id {
            self.routes.resize(id + 1, None);
        }
        if self.routes[id].is_none() {
            let mut r: Vec<usize> = Vec::new();
            for &p in self.classifier.set_actions(set) {
                if !takes(&self.on, p) {
                    continue;
                }
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
        if route.is_empty() {
            // Only policies of other interfaces take it.
            self.routes[id] = Some(route);
            return;
        }
        for &p in self.classifier.set_actions(set) {
            if !takes(&self.on, p) {
                continue;
            }
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
                Sink::Collector(c) => {
                    let h =
                        HeaderRecord::from_packet(rec, frame.interface, ratio).with_wire_len(frame.orig_len);
                    c.push(&h);
                }
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
    /// `now_ns` (packet time), flushes files and sends the VXLAN mirrors'
    /// batches; call about every 100 ms.
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
                    Sink::Vxlan(v) => v.flush(),
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
            s.finish();
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
            destinations: self
                .retired
                .iter()
                .cloned()
                .chain(self.sinks.iter().map(|s| s.stats().clone()))
                .collect(),
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
