//! The monitor: match and scatter per packet, gather, test and report per epoch.
//!
//! # Must run single-threaded
//! A `Monitor` is one worker's state; it is `Send` but takes `&mut self`
//! everywhere. Several workers each own one (no locks on the packet path).
//!
//! # Time
//! The monitor keeps its own clock: the largest timestamp seen so far
//! (`docs/semantics.md`). When that clock passes the end of the current
//! epoch, the finished epoch is swept: each trigger gathers the statistics
//! its flows kept for that epoch into the group accumulators of its open
//! window, and windows that have ended are tested and reported. Epochs are
//! numbered by a sequence whose parity picks each set's epoch log
//! (`epoch_log.rs`), so packets of the new epoch never touch what the sweep
//! reads, as long as the sweep finishes within one epoch (else it is
//! counted late and finished on the spot before the next epoch's packets).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use clarion_lang::spec::EventSpec;
use clarion_report::{Completeness, GroupKey, Health, Name, Origin, Report, Window};
use clarion_wire::{tcp_flags, FlowKey, PacketRecord};

use crate::blind::BlindSpans;
use crate::config::{Counters, MonitorConfig, Tuning};
use crate::decaying_peak::DecayingPeak;
use crate::dos_filter::DosFilter;
use crate::flow_table::{hash_key, EntryKey, FlowTable, NO_ENTRY, NO_SET};
use crate::history::History;
use crate::key::{one_flow_per_group, report_group, tags_of, TagsSeen};
use crate::match_cache::MatchCache;
use crate::match_set::{Lookup, MatchSet, NO_REC};
use crate::measure::{Expr, FlowContext, StatFlags, TcpValues};
use crate::merge::{Installed, Partials};
use crate::prefetch::prefetch;
use crate::recent::Recent;
use crate::tcp_state::NO_TCP;
use crate::trigger::{Head, Trigger, WindowValues};
use crate::trigger_index::{filter_matches, filter_rules, TriggerId, TriggerIndex};
use crate::EngineError;

mod bypass;
mod drill;
mod firings;
mod shed;
mod sweep;

pub use bypass::MAX_BYPASS;
pub(crate) use shed::RecallBook;
pub use shed::{EpochLoad, ShedDecision};
use sweep::{Direct, Sweep};

/// Why a frame never became a packet record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unparsed {
    /// The frame could not be parsed (truncated or impossible headers).
    Malformed,
    /// Not an IP packet (ARP, LLDP, …): knowingly ignored.
    NotIp,
}

/// One worker's packet monitor. See the module documentation.
#[derive(Debug)]
pub struct Monitor {
    config: MonitorConfig,
    /// `config.host`, shared by the monitor's reports.
    host: Name,
    flows: FlowTable,
    /// In front of matching, on the flow table's miss path only.
    dos: DosFilter,
    index: TriggerIndex,
    /// A new flow's matched set by the key bits filters read (`tuning.match_cache`).
    match_cache: MatchCache,
    /// By id; ids are never reused, so interned sets never name a dead
    /// trigger's successor. Boxed: the sweep finds a trigger through one
    /// dense array of pointers (the ~8 triggers of a set in one line), and
    /// an inline `Option<Trigger>` would keep its tag in the trigger's last
    /// line (a `Vec` capacity's niche), one more line per trigger swept.
    triggers: Vec<Option<Box<Trigger>>>,
    /// By id, beside `triggers`: what a per-flow test reads of each (see [`Head`]).
    heads: Vec<Head>,
    sets: Vec<MatchSet>,
    set_ids: FxHashMap<Vec<TriggerId>, u32>,
    started: bool,
    /// Packet time: the largest timestamp seen.
    now: u64,
    /// Time of the first frame: windows starting before it were not observed in full.
    first_ts: u64,
    epoch_ns: u64,
    /// An epoch length waiting for an aligned boundary to take effect.
    pending_epoch_ns: Option<u64>,
    epoch_start: u64,
    epoch_seq: u64,
    /// Traffic of each recent swept epoch (start, counts), back over the
    /// windows kept for polls (at most [`POLL_EPOCHS`] beyond the open
    /// ones): a window's completeness is the sum over its epochs, so
    /// triggers without data in an epoch need no work for it, and a poll's
    /// answer carries the host's packets in its window.
    epoch_log: VecDeque<(u64, Completeness)>,
    /// Epochs starting before this are no longer in `epoch_log`.
    epochs_known_from: u64,
    /// Longest installed interval (with the windows kept, how far back
    /// `epoch_log` reaches).
    max_interval_ns: u64,
    /// Longest interval and gcd of the intervals of the installed triggers (0, 0 without any).
    intervals: (u64, u64),
    /// Triggers with an open window: the only ones a sweep has to close.
    open_list: Vec<TriggerId>,
    /// Per half, the sets some member flow wrote statistics to in that
    /// half's latest epoch (each once, see `MatchSet::marked`): a sweep
    /// visits only them, not every set.
    active_sets: [Vec<u32>; 2],
    /// Every window ending at or before this is closed.
    closed_to: u64,
    /// Traffic of the current epoch, for completeness records.
    epoch_counts: Completeness,
    /// Epochs not seen in full, with `keep_health` (see [`Monitor::take_health`]).
    health: Vec<Health>,
    /// When the driver could not see the input ([`Monitor::note_blind`]),
    /// back to the oldest window still open: such windows are not complete.
    blind: BlindSpans,
    sweep: Option<Sweep>,
    /// The vector of the last finished sweep's reports, emptied, for the
    /// next: at a million flows a sweep makes ~60 k reports, and growing a
    /// new vector each epoch was page faults and copies (~4 % of the run).
    spare_reports: Vec<Report>,
    spare_firings: firings::Firings,
    /// The last sweep's vectors, for the next (`sweep::Spares`).
    spare_sweep: sweep::Spares,
    /// The reports of recent sweeps: what `spare_reports` keeps room for.
    report_peak: DecayingPeak,
    /// Where the reclaim's next scan of the flow entries starts (a clock
    /// hand: see [`Monitor::reclaim`]).
    reclaim_hand: usize,
    /// Packet time and packets counted at the latest reclaim (its pace
    /// is by packet time, its extra reads by packets).
    reclaim_at: (u64, u64),
    /// Entries the reclaim found idle, freed once their removal's lines
    /// are loaded (kept from sweep to sweep: no allocation).
    reclaim_found: Vec<u32>,
    counters: Counters,
    scratch: Vec<TriggerId>,
    /// Entry of the latest packet's flow (`tuning.last_flow`).
    last_entry: u32,
    /// Some packet had a VLAN tag or a VNI (then `per 5tuple` may join flows).
    tags_seen: TagsSeen,
    /// What goes to the merger (`merge_output`).
    merge: MergeOut,
    /// The values of the per-flow tests of the last `history_windows`
    /// swept epochs (triggers tested per flow keep no history of their own).
    recent: Recent,
    /// Drill-down instances installed, by name (see [`drill`]).
    drill: clarion_drilldown::Book<TriggerId>,
    /// Gcd of the intervals included by [`Monitor::include_interval`] (0: none).
    included_gcd: u64,
    /// Installed triggers with drill-downs, by name (their reports name
    /// them). Two instances of one name live side by side while the older
    /// one's last windows are swept; they install the same drill-downs.
    drill_parents: FxHashMap<String, Vec<TriggerId>>,
    /// How many installed triggers have each name ([`Monitor::has_event`]
    /// in constant time: an agent checks every trigger its manager sends).
    names: FxHashMap<String, u32>,
    /// Degraded mode (`MonitorConfig::adapt`), see `shed.rs`.
    adapt: Option<shed::Adapt>,
    /// Degraded mode: the flows bypassed in the running epoch, see `bypass.rs`.
    bypass: bypass::Bypass,
}

/// A worker's output for the host-level merger, between two takes.
#[derive(Debug, Default)]
struct MergeOut {
    /// Installs and removals since the last sweep, for its partials.
    installed: Vec<Installed>,
    removed: Vec<(TriggerId, u64)>,
    /// Blind spans noted since the last sweep, for its partials.
    blind: BlindSpans,
    /// Each finished sweep's partials, oldest first.
    ready: Vec<Partials>,
}

/// A table of at most this many entries is scanned whole at every
/// reclaim, so that its flows go at the first sweep past their timeout
/// (what the unit tests' small tables expect); a larger one is paced.
const RECLAIM_WHOLE: usize = 64;

/// Entries the reclaim reads at a sweep beyond its pace, up to one per
/// packet since the last reclaim: under load (thousands of packets an
/// epoch) it frees idle flows far sooner than the pace's quarter timeout
/// (at 1 M entries, a turn in ~2.4 s of 10 ms sweeps instead of 15 s), so
/// that a churning table does not fill with dead flows; on a sparse
/// capture (a few packets an epoch) it costs next to nothing.
const RECLAIM_SCAN_MIN: usize = 4096;

/// The reclaim's hand goes round the entries within this many epochs at
/// most, whatever the timeout: with [`STATS_EPOCH_AGE`], what keeps a flow
/// entry's 32-bit epoch ([`FlowEntry::stats_epoch`]) within 2^30 epochs
/// of the current one, so that wrapping comparisons of it are exact.
const MAX_TURN_EPOCHS: u64 = 1 << 28;

/// The age in epochs beyond which the reclaim ages an entry's epoch no
/// further (see [`MAX_TURN_EPOCHS`]): an entry is visited every 2^28
/// epochs, so its epoch is never more than 2^29 + 2^28 epochs old.
const STATS_EPOCH_AGE: u32 = 1 << 29;

/// Idle entries the reclaim frees in a batch, their removals' lines
/// (slot, TCP state) loaded first.
const RECLAIM_BATCH: usize = 16;

/// Packets per pass of [`Monitor::process_batch`]: enough misses in flight
/// to hide memory latency, few enough that the prefetched lines stay cached
/// (at most 64: a bit mask marks repeated flows).
pub const BATCH: usize = 32;

/// How many packets ahead in a batch the packet loop prefetches a likely
/// entry's set header, and its record of the epoch (or where its first
/// write appends one) and connection state (`(set, statistics)`). With
/// few flows these lines are in the cache and a short distance is
/// cheapest; once flows outnumber the cache ([`FAR_FLOWS`]) each is a miss
/// and the distance must cover a memory latency: at two packets (~80 ns)
/// the statistics' load still stalled at 100 k flows (~6 % of a run; 4
/// ahead took the median batch from 150 to 120–129 ns there, and cost
/// ~1 ns at 300 flows; 10 and 14 ahead gave nothing more with the epoch
/// logs). A chunk's first packets have theirs prefetched once its entries
/// are (there is no packet before them in the chunk to do it): median
/// batch 74.7 -> 68.5 ns at 100 k flows, 101.4 -> 93.2 ns at 1 M
/// (`scripts/bench-ab.sh`, primed).
const NEAR_AHEAD: (usize, usize) = (3, 2);
const FAR_AHEAD: (usize, usize) = (6, 4);
/// Tracked flows below which the packet loop prefetches nothing past the
/// entries: the entries, records and connection states of ~1,000 flows
/// (~250 KiB) stay in L2. At 300 flows (Trumpet's workload) the set,
/// record and state prefetches were ~15 instructions a packet of ~430.
const CACHED_FLOWS: usize = 1_024;
/// Tracked flows from which the packet loop prefetches [`FAR_AHEAD`]: about
/// where their entries and statistics (~180 bytes a flow) outgrow a 2 MiB L2.
const FAR_FLOWS: usize = 16_384;

/// Tracked flows from which the batch loop loads a second slot line where
/// a probe may reach it (`FOLLOW_FROM` in `flow_table.rs`): where the slots
/// outgrow the caches. Measured median batch with and without, same runs:
/// 100 k flows 61.0–62.6 against 58.5–60.7 ns (the next line was cached:
/// the prefetch only cost), 300 k flows 64.8–67.3 against 65.7–66.0,
/// 1 M flows 67.9–69.8 against 85.4–86.4.
const FOLLOW_FLOWS: usize = 1 << 19;

/// The gcd of an event's interval and those of the events its drill-downs
/// install, at every level.
fn drill_gcd(spec: &EventSpec) -> u64 {
    spec.installed_events()
        .iter()
        .fold(spec.interval_ns, |g, e| gcd(g, e.interval_ns))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Monitor {
    pub fn new(config: MonitorConfig) -> Self {
        let epoch_ns = config.default_epoch_ns.max(1);
        Monitor {
            host: Name::from(config.host.as_str()),
            adapt: config.adapt.clone().map(shed::Adapt::new),
            bypass: bypass::Bypass::default(),
            flows: FlowTable::new(config.flow_capacity, config.tuning.huge_pages),
            dos: DosFilter::new(config.dos_filter_slots, config.dos_threshold_bytes),
            index: TriggerIndex::default(),
            match_cache: MatchCache::default(),
            triggers: Vec::new(),
            heads: Vec::new(),
            sets: Vec::new(),
            set_ids: FxHashMap::default(),
            started: false,
            now: 0,
            first_ts: 0,
            epoch_ns,
            pending_epoch_ns: None,
            epoch_start: 0,
            epoch_seq: 0,
            epoch_log: VecDeque::new(),
            epochs_known_from: 0,
            max_interval_ns: epoch_ns,
            intervals: (0, 0),
            open_list: Vec::new(),
            active_sets: [Vec::new(), Vec::new()],
            closed_to: 0,
            epoch_counts: Completeness::default(),
            health: Vec::new(),
            blind: BlindSpans::default(),
            sweep: None,
            spare_reports: Vec::new(),
            spare_firings: Default::default(),
            spare_sweep: Default::default(),
            report_peak: DecayingPeak::default(),
            reclaim_hand: 0,
            reclaim_at: (0, 0),
            reclaim_found: Vec::new(),
            counters: Counters::default(),
            scratch: Vec::new(),
            last_entry: NO_ENTRY,
            tags_seen: 0,
            merge: MergeOut::default(),
            recent: Recent::default(),
            drill: clarion_drilldown::Book::default(),
            drill_parents: FxHashMap::default(),
            names: FxHashMap::default(),
            included_gcd: 0,
            config,
        }
    }

    // ----- control plane -------------------------------------------------

    /// Installs an event. Before the first packet it covers every window;
    /// afterwards it starts with the first window that begins at or after
    /// the next epoch boundary. A network-wide event (`across ...`, see
    /// [`clarion_lang::spec::Scope`]) is refused: an event manager installs
    /// its per-host triggers instead; so is an `on demand` one, which its
    /// parent's drill-down installs.
    pub fn install(&mut self, spec: EventSpec) -> Result<TriggerId, EngineError> {
        if spec.on_demand {
            return Err(EngineError::OnDemand { event: spec.name });
        }
        let interval = spec.interval_ns.max(1);
        let start_ns = if self.started {
            let boundary = self.epoch_start + self.epoch_ns;
            boundary.div_ceil(interval) * interval
        } else {
            0
        };
        self.install_from(spec, start_ns)
    }

    /// Installs an event whose first window starts at `start_ns`, a
    /// multiple of its interval that no packet measured so far reaches
    /// (the caller's business: see `install`, and `drill` for instances).
    pub(crate) fn install_from(&mut self, spec: EventSpec, start_ns: u64) -> Result<TriggerId, EngineError> {
        // A drill-down fires on what one monitor saw: with workers merged,
        // no worker sees the whole host's groups.
        if !spec.drill_downs.is_empty() && self.config.merge_output {
            return Err(EngineError::DrillDownAcrossWorkers { event: spec.name });
        }
        // One monitor sees one host's packets: a network-wide predicate
        // evaluated on them would be a different event, so it only comes
        // here split into host triggers.
        if spec.scope.is_network() {
            return Err(EngineError::NetworkWide { event: spec.name });
        }
        let unsupported = spec.unsupported_variables();
        if !unsupported.is_empty() {
            let vars = unsupported
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            return Err(EngineError::Unsupported {
                event: spec.name,
                variables: vars,
            });
        }
        if spec.interval_ns == 0 {
            return Err(EngineError::BadInterval { event: spec.name });
        }
        let rules: Vec<_> = spec.filters.iter().flat_map(filter_rules).collect();
        let interval = spec.interval_ns;
        // The epoch divides the intervals of the events it may install
        // too, so that an instance's windows are whole epochs.
        let epoch_interval = drill_gcd(&spec);
        let name = spec.name.clone();
        let mut trigger = Trigger::new(spec, rules, start_ns).ok_or(EngineError::Unsupported {
            event: name,
            variables: "connection state".into(),
        })?;
        let id = self.triggers.len() as TriggerId;
        if self.config.merge_output {
            // A group keeping the whole 5-tuple is on this worker alone
            // only when flows are spread by their 5-tuple.
            let local = self.config.five_tuple_fanout && one_flow_per_group(&trigger.spec.granularity, 0);
            trigger.exported = !local;
            self.merge.installed.push(Installed {
                id,
                start_ns,
                spec: trigger.spec.clone(),
                local,
            });
        }
        if !trigger.spec.drill_downs.is_empty() {
            self.drill_parents
                .entry(trigger.spec.name.clone())
                .or_default()
                .push(id);
        }
        *self.names.entry(trigger.spec.name.clone()).or_default() += 1;
        self.index.insert(id, &trigger.rules);
        self.match_cache.reset(self.index.shape());
        let matching: Vec<u32> = (0..self.flows.entries.len() as u32)
            .filter(|&i| {
                self.flows.entries[i as usize].live && filter_matches(&trigger.rules, &self.flows.key(i))
            })
            .collect();
        self.heads.push(Head::of(&trigger, false));
        self.triggers.push(Some(Box::new(trigger)));
        for i in matching {
            let mut set = self.set_triggers(i);
            set.push(id);
            set.sort_unstable();
            self.migrate(i, set);
        }
        self.retune_epoch(Some((interval, epoch_interval)));
        Ok(id)
    }

    /// Removes an installed trigger at once; its open window, and one being swept, is dropped unreported.
    pub fn remove(&mut self, id: TriggerId) -> Result<EventSpec, EngineError> {
        let t = self
            .triggers
            .get_mut(id as usize)
            .and_then(Option::take)
            .ok_or(EngineError::UnknownTrigger(id))?;
        if let Some(h) = self.heads.get_mut(id as usize) {
            *h = Head::GONE;
        }
        self.index.remove(id);
        self.match_cache.reset(self.index.shape());
        self.drill.forget(id);
        if let Some(n) = self.names.get_mut(&t.spec.name) {
            *n -= 1;
            if *n == 0 {
                self.names.remove(&t.spec.name);
            }
        }
        if let Some(ids) = self.drill_parents.get_mut(&t.spec.name) {
            ids.retain(|&x| x != id);
            if ids.is_empty() {
                self.drill_parents.remove(&t.spec.name);
            }
        }
        if self.config.merge_output {
            // Its windows ending by then are handed out already, no later ones.
            self.merge.removed.push((id, self.closed_to));
        }
        // Every flow of its sets, not only those listed (the lists hold the
        // flows written in the epochs not yet swept): an idle flow must not
        // keep statistics or connection state for it either (as `install`,
        // one scan).
        let members: Vec<u32> = self
            .flows
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && e.set != NO_SET && self.sets[e.set as usize].triggers.contains(&id))
            .map(|(i, _)| i as u32)
            .collect();
        for i in members {
            let mut set = self.set_triggers(i);
            set.retain(|&x| x != id);
            self.migrate(i, set);
        }
        self.retune_epoch(None);
        Ok(t.spec)
    }

    /// Every trigger flow `entry` matched, shed or not.
    fn set_triggers(&self, entry: u32) -> Vec<TriggerId> {
        match self.flows.entries[entry as usize].set {
            NO_SET => Vec::new(),
            s => {
                let set = &self.sets[s as usize];
                match self.sets.get(set.full as usize) {
                    Some(full) if set.full != s => full.triggers.clone(),
                    _ => set.triggers.clone(),
                }
            }
        }
    }

    /// Moves a flow to the set of `triggers`, keeping the statistics both
    /// sets share, and lists it there for each epoch it brings.
    fn migrate(&mut self, entry: u32, triggers: Vec<TriggerId>) {
        let to = if triggers.is_empty() {
            NO_SET
        } else {
            self.intern(&triggers)
        };
        self.migrate_to(entry, to);
    }

    /// [`Monitor::migrate`] to set `to` (an interned set's id, or [`NO_SET`]).
    ///
    /// The flow's records of the epochs not yet swept move along (each
    /// keeping the statistics both sets share), so they are swept with the
    /// new set: the current epoch's, and that of a sweep in progress
    /// (between its steps) if not gathered yet, the new set then added to
    /// that sweep. A record the sweep has gathered stays where it is.
    fn migrate_to(&mut self, entry: u32, to: u32) {
        let old_set = self.flows.entries[entry as usize].set;
        if old_set == to {
            return;
        }
        let half_now = (self.epoch_seq & 1) as usize;
        let mut moved_now = false;
        if old_set != NO_SET {
            let mut halves = [(half_now, self.epoch_start, false); 2];
            let mut n = 1;
            if let Some(s) = self.sweep.as_ref() {
                halves[1] = (s.half, s.epoch_start, true);
                n = 2;
            }
            for &(half, epoch, swept) in &halves[..n] {
                let at = self.flows.entries[entry as usize].rec[half & 1];
                let old = &mut self.sets[old_set as usize];
                let Some(rec) = old.find(half, epoch, entry, at) else {
                    continue;
                };
                if !old.has_epoch(rec, half, epoch) {
                    // Gathered already by the sweep in progress: stays.
                    continue;
                }
                if to == NO_SET {
                    // No set keeps statistics for the flow now.
                    old.retire(rec, half);
                    continue;
                }
                let (dst, src) = pair_mut(&mut self.sets, to as usize, old_set as usize);
                let here = dst.move_from(half, entry, src, rec);
                self.flows.entries[entry as usize].rec[half & 1] = here;
                if !swept {
                    moved_now = true;
                    self.mark_active(to, half);
                } else if let Some(s) = self.sweep.as_mut() {
                    let set = &mut self.sets[to as usize];
                    if set.queued != s.epoch_start {
                        set.queued = s.epoch_start;
                        s.order.push(to);
                    }
                }
            }
            self.sets[old_set as usize].leave();
        }
        if to != NO_SET {
            self.sets[to as usize].join();
            if !moved_now {
                // Written in the epoch maybe, but with no record in the new
                // set: its next write there makes one (`Lookup::Known`).
                self.flows.entries[entry as usize].rec[half_now & 1] = NO_REC;
            }
        }
        let keeps_tcp = to != NO_SET && self.sets[to as usize].needs_tcp;
        let keeps_sent = to != NO_SET && self.sets[to as usize].needs_rtt;
        let e = &mut self.flows.entries[entry as usize];
        e.set = to;
        if !keeps_tcp {
            // Connection state not kept up to date must not be resumed later.
            self.flows.tcp.release(e.tcp);
            e.tcp = NO_TCP;
        } else if !keeps_sent {
            // Nothing reads `rtt` now; a later reader samples segments sent from then on.
            self.flows.tcp.forget_sent(e.tcp);
        }
    }

    /// Whether trigger `t` (installed) will likely write its own history:
    /// not when, at the current epoch, its windows are tested flow by flow,
    /// whose values go to the epoch arenas (`recent.rs`). Only decides what
    /// is reserved ahead: a history grows on demand either way.
    fn keeps_history(&self, t: TriggerId) -> bool {
        let per_flow = self.config.tuning.flow_windows
            && self
                .heads
                .get(t as usize)
                .is_some_and(|h| h.tested_per_flow(self.epoch_ns, true, self.tags_seen));
        let live = self.triggers.get(t as usize).is_some_and(Option::is_some);
        live && !per_flow
    }

    fn intern(&mut self, triggers: &[TriggerId]) -> u32 {
        if let Some(&s) = self.set_ids.get(triggers) {
            return s;
        }
        let id = self.intern_shed(triggers, &[]);
        if self.adapt.is_some() {
            self.build_chain(id);
        }
        id
    }

    /// The set measuring `triggers` for flows that matched `dropped` too
    /// (degraded mode's lighter states; a full set when `dropped` is empty).
    fn intern_shed(&mut self, triggers: &[TriggerId], dropped: &[TriggerId]) -> u32 {
        // A lighter state's key: its triggers, a separator no id reaches, what it dropped.
        let key: Vec<TriggerId> = if dropped.is_empty() {
            triggers.to_vec()
        } else {
            triggers
                .iter()
                .copied()
                .chain(std::iter::once(TriggerId::MAX))
                .chain(dropped.iter().copied())
                .collect()
        };
        if let Some(&s) = self.set_ids.get(&key) {
            return s;
        }
        let triggers = triggers.to_vec();
        // A trigger's first flow comes with a new set, as does each new
        // combination of triggers: reserve their histories here, so that a
        // new flow of a known set touches none of its triggers' (cold) lines.
        let keep = self.config.history_windows;
        let reserve: Vec<TriggerId> = triggers
            .iter()
            .copied()
            .filter(|&t| self.keeps_history(t))
            .collect();
        for t in reserve {
            if let Some(Some(trig)) = self.triggers.get_mut(t as usize) {
                trig.history.reserve(keep);
            }
        }
        let live: Vec<Option<&Trigger>> = triggers
            .iter()
            .map(|&t| self.triggers[t as usize].as_deref())
            .collect();
        let reads: Vec<&[(Expr, StatFlags)]> = live
            .iter()
            .map(|t| t.map_or(&[][..], |t| t.reads.as_slice()))
            .collect();
        let needs_tcp = live.iter().flatten().any(|t| t.spec.needs_connection_state());
        let mut set = MatchSet::new(triggers, &reads, needs_tcp, self.config.tuning.huge_pages);
        let id = self.sets.len() as u32;
        if let Some(a) = &self.adapt {
            set.cost_ns = shed::set_cost(&a.config.costs, set.update_words(), set.needs_tcp);
            if !dropped.is_empty() {
                set.dropped = dropped.to_vec();
                let mut all: Vec<TriggerId> = set.triggers.iter().chain(dropped).copied().collect();
                all.sort_unstable();
                set.full = self.set_ids.get(&all).copied().unwrap_or(id);
            }
        }
        if set.full == u32::MAX {
            set.full = id;
        }
        self.sets.push(set);
        self.set_ids.insert(key, id);
        id
    }

    /// Makes the epoch divide `interval_ns` too, whether or not an event of
    /// that interval is installed here: an event manager that may install
    /// one at a window boundary asks for it (drill-downs), so that the
    /// boundary is an epoch boundary when it comes. 0 asks for nothing.
    pub fn include_interval(&mut self, interval_ns: u64) {
        self.included_gcd = gcd(self.included_gcd, interval_ns);
        self.retune_epoch(Some((0, interval_ns)));
    }

    /// Epoch = gcd of the installed intervals (and of those included,
    /// [`Monitor::include_interval`]); a change waits for an aligned
    /// boundary. `installed`: the interval of a trigger just added and the
    /// gcd with its drill-downs' (the figures are updated from it, so
    /// installing n triggers is O(n), not O(n²)); `None` after a removal
    /// (recomputed).
    fn retune_epoch(&mut self, installed: Option<(u64, u64)>) {
        self.intervals = match installed {
            Some((i, d)) => (self.intervals.0.max(i), gcd(self.intervals.1, d)),
            None => self
                .triggers
                .iter()
                .flatten()
                .map(|t| (t.interval(), drill_gcd(&t.spec)))
                .fold((0, self.included_gcd), |(m, g), (i, d)| (m.max(i), gcd(g, d))),
        };
        let (longest, common) = self.intervals;
        self.max_interval_ns = longest.max(self.epoch_ns);
        let want = if common == 0 {
            self.config.default_epoch_ns.max(1)
        } else {
            common
        };
        if !self.started {
            self.epoch_ns = want;
            self.pending_epoch_ns = None;
        } else if want != self.epoch_ns {
            self.pending_epoch_ns = Some(want);
        } else {
            self.pending_epoch_ns = None;
        }
    }

    // ----- packet path ---------------------------------------------------

    /// Match and scatter one packet. Reports of windows that ended before it go to `out`.
    #[inline]
    pub fn process(&mut self, p: &PacketRecord, out: &mut Vec<Report>) {
        self.count(p, out);
        // Degraded mode: the key's hash tells a bypassed flow before the
        // table is read, and is the lookup's hint otherwise.
        let hint = if self.bypass.on() {
            let h = hash_key(&p.key);
            if self.bypassed(&p.key, h, NO_ENTRY) {
                self.note_bypassed();
                return;
            }
            Some((h, NO_ENTRY))
        } else {
            None
        };
        self.scatter(p, hint);
    }

    /// [`Monitor::process`] on each packet in turn, with the same results.
    /// With `tuning.batch_prefetch` it works in passes over up to
    /// [`BATCH`] packets, so that their cache misses overlap: hash every
    /// key and prefetch its flow-table slot; prefetch each likely entry;
    /// then process each packet, prefetching the statistics of the one
    /// two places ahead.
    pub fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) {
        if !self.config.tuning.batch_prefetch {
            for p in packets {
                self.process(p, out);
            }
            return;
        }
        let mut hashes = [0u64; BATCH];
        let mut entries = [NO_ENTRY; BATCH];
        for chunk in packets.chunks(BATCH) {
            // Packets of the previous packet's flow (bursts) reuse its hash
            // and need no prefetch: bit j set for such a packet j.
            let mut repeats: u64 = 0;
            let mut previous = 0;
            // Degraded mode: packets of flows bypassed (see `bypass.rs`),
            // bit j set for packet j: nothing of theirs is prefetched. The
            // share may change at an epoch's end inside the chunk: the mask
            // only spares prefetches, each packet is tested again below.
            let bypassing = self.bypass.on();
            let mut bypassed: u64 = 0;
            // Probes followed into a second slot line (`FOLLOW_FROM`).
            let follow = self.flows.len() >= FOLLOW_FLOWS;
            // Whether the whole chunk is in order and inside the running
            // epoch: then no packet moves the clock past an epoch's end, and
            // the per-packet clock and counters are kept once per chunk.
            let mut in_order = self.started;
            let mut last_ts = self.now;
            let mut bytes = 0;
            let mut flags = 0;
            for (j, (h, p)) in hashes.iter_mut().zip(chunk).enumerate() {
                in_order &= p.ts_ns >= last_ts;
                last_ts = p.ts_ns;
                bytes += u64::from(p.size);
                flags |= p.key.flags;
                if j > 0 && same_flow(&chunk[j - 1].key, &p.key) {
                    repeats |= 1 << j;
                    bypassed |= (bypassed >> (j - 1) & 1) << j;
                    *h = previous;
                    continue;
                }
                *h = hash_key(&p.key);
                previous = *h;
                if bypassing && self.bypass.takes(*h) {
                    bypassed |= 1 << j;
                    continue;
                }
                self.flows.prefetch_slot(*h, follow);
            }
            // So few flows that what a packet reads stays in the first
            // caches: prefetching it is only instructions.
            let ahead = self.flows.len() >= CACHED_FLOWS;
            for (j, (e, &h)) in entries.iter_mut().zip(&hashes[..chunk.len()]).enumerate() {
                if (repeats | bypassed) & (1 << j) != 0 {
                    *e = NO_ENTRY;
                    continue;
                }
                *e = match self.flows.prefetch_entry(h, follow) {
                    Some(i) => {
                        // A TCP flow's connection state is at its entry's
                        // number: loaded with the entry, not after it.
                        if chunk[j].key.proto == 6 && ahead {
                            self.flows.tcp.prefetch(i);
                        }
                        i
                    }
                    None => {
                        // Likely a new flow: the DoS filter will be read,
                        // and a TCP flow looks for its reverse flow.
                        self.dos.prefetch(h);
                        let key = &chunk[j].key;
                        if key.proto == 6 && ahead {
                            self.flows.prefetch_slot(hash_key(&key.reversed()), false);
                        }
                        NO_ENTRY
                    }
                };
            }
            let within = in_order && last_ts < self.epoch_start + self.epoch_ns;
            if within {
                let n = chunk.len() as u64;
                self.epoch_counts.packets += n;
                self.counters.packets += n;
                self.counters.bytes += bytes;
                self.tags_seen |= tags_of(flags);
            }
            let half = (self.epoch_seq & 1) as usize;
            let (set_ahead, stats_ahead) = if self.flows.len() >= FAR_FLOWS {
                FAR_AHEAD
            } else {
                NEAR_AHEAD
            };
            let entries = &entries[..chunk.len()];
            // The first packets' sets, records and states, which the loop
            // below would prefetch only from packets before the chunk: their
            // entries, prefetched first above, have had the longest to come.
            if ahead {
                for &i in entries.iter().take(set_ahead) {
                    self.prefetch_set(i);
                }
                for &i in entries.iter().take(stats_ahead) {
                    self.prefetch_stats(i, half);
                }
            }
            for (j, (p, &h)) in chunk.iter().zip(&hashes).enumerate() {
                // `set_ahead` ahead, the set's header (its address needs
                // only the entry); `stats_ahead` ahead, what it locates: the
                // flow's record in the epoch's log and the connection state.
                if ahead {
                    if let Some(&i) = entries.get(j + set_ahead) {
                        self.prefetch_set(i);
                    }
                    if let Some(&i) = entries.get(j + stats_ahead) {
                        self.prefetch_stats(i, half);
                    }
                }
                if within {
                    self.now = p.ts_ns;
                } else {
                    self.count(p, out);
                }
                if self.bypass.on() && self.bypassed(&p.key, h, entries[j]) {
                    self.note_bypassed();
                    continue;
                }
                self.scatter(p, Some((h, entries[j])));
            }
        }
    }

    /// Starts loading the header of entry `i`'s set (if `i` is an entry
    /// with one).
    #[inline(always)]
    fn prefetch_set(&self, i: u32) {
        let e = self.flows.entries.get(i as usize);
        if let Some(set) = e.and_then(|e| self.sets.get(e.set as usize)) {
            set.prefetch_for_packets();
        }
    }

    /// Starts loading what a packet of entry `i`'s flow writes: its record
    /// of the epoch (in log `half`) if it has one, else where its first
    /// write appends one (its connection state was, with its entry).
    #[inline(always)]
    fn prefetch_stats(&self, i: u32, half: usize) {
        let Some(e) = self.flows.entries.get(i as usize) else {
            return;
        };
        if let Some(set) = self.sets.get(e.set as usize) {
            if e.stats_epoch == self.epoch_seq as u32 {
                set.prefetch(e.rec[half & 1], half);
            } else {
                set.prefetch_tail(half);
            }
        }
    }

    /// The entry of the latest packet's flow, if `key` (entry form `ek`,
    /// wide if `wide`) is that flow's (`tuning.last_flow`).
    #[inline]
    fn cached_flow(&self, key: &FlowKey, ek: &EntryKey, wide: bool) -> Option<u32> {
        if !self.config.tuning.last_flow {
            return None;
        }
        let last = self.last_entry;
        self.flows.holds_as(last, key, ek, wide).then_some(last)
    }

    /// Moves the clock to packet `p` (closing the epoch it ends) and counts it.
    #[inline(always)]
    fn count(&mut self, p: &PacketRecord, out: &mut Vec<Report>) {
        self.observe(p.ts_ns, out);
        self.epoch_counts.packets += 1;
        self.counters.packets += 1;
        self.counters.bytes += u64::from(p.size);
        self.tags_seen |= tags_of(p.key.flags);
    }

    /// The rest of [`Monitor::process`], once the clock is at the packet and
    /// the packet is counted: find or insert its flow, update the flow's
    /// statistics. `hint` is the key's [`hash_key`] and the entry its probe
    /// most likely ends at ([`NO_ENTRY`] if none), when the batch loop has
    /// them. Inlined into the batch loop: the call's register saves cost
    /// ~20 instructions a packet.
    #[inline(always)]
    fn scatter(&mut self, p: &PacketRecord, hint: Option<(u64, u32)>) {
        let t = self.now;
        // A live entry with the packet's key is its flow's (keys are unique
        // in the table), however the table changed since the hint was taken.
        // The key's entry form, once for the three compares below.
        let (ek, wide) = EntryKey::of(&p.key);
        let hinted = hint.and_then(|(_, i)| self.flows.holds_as(i, &p.key, &ek, wide).then_some(i));
        let (found, h) = match hinted.or_else(|| self.cached_flow(&p.key, &ek, wide)) {
            Some(i) => (Some(i), 0),
            None => {
                let h = hint.map_or_else(|| hash_key(&p.key), |(h, _)| h);
                (self.flows.find_as(&p.key, &ek, wide, h), h)
            }
        };
        let mut first_in_epoch = true;
        let mut new_flow = false;
        let (idx, is_burst) = match found {
            Some(i) => {
                let e = &mut self.flows.entries[i as usize];
                let gap = t.saturating_sub(e.last_ts);
                let new_life = gap > self.config.flow_timeout_ns;
                if new_life {
                    // A new life of the flow: forget its connection state.
                    e.wscale = None;
                    self.flows.tcp.release(e.tcp);
                    e.tcp = NO_TCP;
                }
                first_in_epoch = e.stats_epoch != self.epoch_seq as u32;
                e.last_ts = t;
                e.stats_epoch = self.epoch_seq as u32;
                (i, !new_life && gap <= self.config.burst_gap_ns)
            }
            None if self.dos.blocks(h, p.size, self.epoch_seq) => {
                // Not yet above the DoS threshold this epoch: neither matched nor inserted.
                self.counters.packets_dos_filtered += 1;
                self.epoch_counts.untracked += 1;
                return;
            }
            None => match self.flows.insert(p.key, h, t, self.epoch_seq as u32) {
                Some(i) => {
                    self.on_new_flow(i, &p.key);
                    new_flow = true;
                    (i, false)
                }
                None => {
                    self.counters.packets_untracked += 1;
                    self.epoch_counts.untracked += 1;
                    return;
                }
            },
        };
        self.last_entry = idx;
        if self.adapt.is_some() {
            if first_in_epoch {
                self.apply_shed(idx);
            }
            self.note_packet(idx, new_flow, first_in_epoch);
        }
        let half = (self.epoch_seq & 1) as usize;
        let mut cx = FlowContext {
            is_burst,
            ..FlowContext::default()
        };
        // One checked borrow of the entry for the whole update (the fields
        // it reads beside it are other fields of the monitor).
        let Some(mut e) = self.flows.entries.get_mut(idx as usize) else {
            return;
        };
        // The packet's flow acknowledged itself (same addresses and ports
        // both ways): its RTT sample may have written its record already.
        let mut acked_self = false;
        if let Some(tcp) = &p.tcp {
            if tcp.flags & tcp_flags::SYN != 0 {
                e.wscale = tcp.wscale;
            }
            cx.wscale = e.wscale;
            let mut is_lost = false;
            // `snd_max` as the segment left it, if it went through the state.
            let mut sent_to = None;
            let set = if e.set == NO_SET {
                None
            } else {
                self.sets.get(e.set as usize)
            };
            if let Some(set) = set.filter(|s| s.needs_tcp) {
                let limit = if set.needs_rtt {
                    self.config.tcp_segment_limit
                } else {
                    0
                };
                let (st, sent) = self.flows.tcp.get_or_alloc(&mut e.tcp, idx, tcp.seq, limit > 0);
                if st.restarts(tcp) {
                    // A new connection on the same 5-tuple.
                    st.restart(sent, tcp.seq);
                }
                let seg = st.on_segment(sent, tcp, p.volume, t, limit);
                is_lost = seg.is_lost;
                sent_to = Some(seg.snd_max);
                self.counters.tcp_segments_unlisted += u64::from(seg.unlisted);
            }
            // Without a reverse flow there is nothing to acknowledge: skip the call.
            if tcp.flags & tcp_flags::ACK != 0 && e.rev.0 != NO_ENTRY {
                acked_self = e.rev.0 == idx;
                self.acknowledge(idx, tcp, p.volume, t, half);
                // The reverse flow may be this one (same addresses and ports).
                let Some(again) = self.flows.entries.get_mut(idx as usize) else {
                    return;
                };
                e = again;
            }
            cx.tcp = self.flows.tcp.get(e.tcp).map(|st| TcpValues {
                is_lost,
                seq: sent_to.unwrap_or(st.snd_max),
                ack: st.snd_una,
                dup: st.dup,
            });
        } else {
            cx.wscale = e.wscale;
        }
        let set = e.set;
        if set == NO_SET {
            return;
        }
        let Some(s) = self.sets.get_mut(set as usize) else {
            return;
        };
        // The flow's record of the epoch, appended on its first write.
        let lookup = match (first_in_epoch, acked_self) {
            (_, true) => Lookup::Unsure,
            (true, false) => Lookup::First,
            (false, false) => Lookup::Known,
        };
        let (rec, fresh) = s.write_packet(half, self.epoch_start, idx, e.rec[half & 1], lookup, p, cx, t);
        if fresh {
            e.rec[half & 1] = rec;
            if s.mark(half, self.epoch_start) {
                self.active_sets[half].push(set);
            }
        }
    }

    /// Lists set `s` for the sweep of the current epoch (in `half`), once.
    #[inline]
    fn mark_active(&mut self, s: u32, half: usize) {
        if self.sets[s as usize].mark(half, self.epoch_start) {
            self.active_sets[half].push(s);
        }
    }

    /// A segment of flow `from` acknowledges the data of its reverse flow,
    /// if that flow is alive and keeps connection state; an RTT sample joins
    /// the reverse flow's statistics.
    fn acknowledge(&mut self, from: u32, tcp: &clarion_wire::TcpInfo, payload: u32, t: u64, half: usize) {
        let (r, gen) = self.flows.entries[from as usize].rev;
        if r == NO_ENTRY {
            return;
        }
        let timeout = self.config.flow_timeout_ns;
        let e = &mut self.flows.entries[r as usize];
        if !e.live || e.gen != gen || t.saturating_sub(e.last_ts) > timeout {
            return;
        }
        let Some((st, sent)) = self.flows.tcp.get_mut_with_list(e.tcp) else {
            return;
        };
        let Some(rtt) = st.on_ack(sent, tcp, payload, t) else {
            return;
        };
        self.counters.rtt_samples += 1;
        // A flow acknowledging itself: the packet's own write (after
        // this) may have set `stats_epoch` without making a record yet.
        let lookup = match (r == from, e.stats_epoch != self.epoch_seq as u32) {
            (true, _) => Lookup::Unsure,
            (false, true) => Lookup::First,
            (false, false) => Lookup::Known,
        };
        e.stats_epoch = self.epoch_seq as u32;
        let (set, known) = (e.set, e.rec[half & 1]);
        let Some(s) = self.sets.get_mut(set as usize) else {
            return;
        };
        let (rec, fresh) = s.record(half, self.epoch_start, r, known, lookup);
        s.update_sample(rec, half, rtt, t);
        if fresh {
            self.flows.entries[r as usize].rec[half & 1] = rec;
            self.mark_active(set, half);
        }
    }

    /// Accounts for a frame that did not parse; it still advances the clock.
    pub fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) {
        self.observe(ts_ns, out);
        match why {
            Unparsed::Malformed => {
                self.counters.malformed += 1;
                self.epoch_counts.malformed += 1;
            }
            Unparsed::NotIp => {
                self.counters.not_ip += 1;
                self.epoch_counts.not_ip += 1;
            }
        }
    }

    /// Moves the health records of the epochs closed since the last call
    /// into `out`, oldest first (none unless `keep_health`).
    pub fn take_health(&mut self, out: &mut Vec<Health>) {
        out.append(&mut self.health);
    }

    /// Commits the memory the monitor will use now (`tuning.prefault`), so
    /// that packets and sweeps do not wait for the kernel to allocate and
    /// zero pages: the flow table's full capacity (measured: a 30 ms stall
    /// at the start of traffic without it), and, of the calling thread's
    /// heap, [`crate::HEAP_RESERVE`] plus the installed triggers' history
    /// rings, which histories, sets and slabs grow into over the first
    /// epochs (~2,600 page faults in a 5 M-packet `clarion-lab bench` run
    /// without it). Call it from the thread that will run the monitor,
    /// before traffic starts.
    pub fn prefault(&mut self) {
        if self.config.tuning.prefault {
            self.flows.populate();
            // Each trigger's history rings are reserved on its first flow.
            let histories = (0..self.triggers.len() as TriggerId)
                .filter(|&t| self.keeps_history(t))
                .count();
            let rings = histories * History::reserve_bytes(self.config.history_windows);
            crate::heap::reserve_heap(crate::heap::HEAP_RESERVE + rings);
        }
    }

    /// Advances the clock to `now_ns` without a packet, so that epochs end
    /// and are swept on time when traffic is quiet (live capture). It never
    /// moves the clock backwards. A driver must only tick to a time before
    /// which no packet can still arrive (a packet older than the clock is
    /// counted out of order and attributed to the current epoch).
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Report>) {
        if self.started && now_ns <= self.now {
            return;
        }
        self.observe(now_ns, out);
    }

    /// Counts `n` packets lost before they reached the monitor (kernel or
    /// ring drops, read by the driver) against the current epoch: the
    /// windows that contain it report them in their completeness.
    pub fn note_dropped(&mut self, n: u64) {
        self.counters.dropped += n;
        self.epoch_counts.dropped += n;
    }

    /// Notes that the input could not be seen in `[from_ns, to_ns)` (Unix
    /// ns; a live interface down or away): every window overlapping it is
    /// reported with `complete: false`, whatever it counted. A driver notes
    /// an ongoing outage again, with a later end, before each tick, so the
    /// windows it closes meanwhile know; spans that touch are joined.
    pub fn note_blind(&mut self, from_ns: u64, to_ns: u64) {
        self.blind.add(from_ns, to_ns);
        if self.config.merge_output {
            self.merge.blind.add(from_ns, to_ns);
        }
    }

    /// Nanoseconds of `[start_ns, end_ns)` noted blind and not yet
    /// forgotten (spans are kept back to the oldest open window).
    pub fn blind_ns(&self, start_ns: u64, end_ns: u64) -> u64 {
        self.blind.overlap_ns(start_ns, end_ns)
    }

    /// Entry `i` was just inserted for `key`. The key is given, not read
    /// back from the entry being written (reading it stalled on its lines).
    fn on_new_flow(&mut self, i: u32, key: &FlowKey) {
        self.counters.flows_created += 1;
        if key.proto == 6 {
            // Link the two directions once, so acknowledgements need no lookup per packet.
            let rk = key.reversed();
            if let Some(j) = self.flows.find(&rk, hash_key(&rk)) {
                let gen_i = self.flows.entries[i as usize].gen;
                let gen_j = self.flows.entries[j as usize].gen;
                self.flows.entries[i as usize].rev = (j, gen_j);
                self.flows.entries[j as usize].rev = (i, gen_i);
            }
        }
        let cached = if self.config.tuning.match_cache {
            self.match_cache.get(key)
        } else {
            None
        };
        let set = match cached {
            Some(set) => set,
            None => {
                let mut matched = std::mem::take(&mut self.scratch);
                self.index.lookup(key, &mut matched);
                let set = if matched.is_empty() {
                    NO_SET
                } else {
                    self.intern(&matched)
                };
                self.scratch = matched;
                if self.config.tuning.match_cache {
                    self.match_cache.put(key, set);
                }
                set
            }
        };
        if let Some(s) = self.sets.get(set as usize) {
            self.counters.triggers_matched += s.triggers.len() as u64;
            self.sets[set as usize].join();
            // Its first packet, next, appends its record (`MatchSet::record`).
            self.flows.entries[i as usize].set = set;
        }
    }

    /// Advances the clock to `ts` (never backwards) and starts the sweep of
    /// every epoch that ended.
    #[inline]
    fn observe(&mut self, ts: u64, out: &mut Vec<Report>) {
        if !self.started {
            self.started = true;
            self.now = ts;
            self.first_ts = ts;
            self.epoch_start = ts - ts % self.epoch_ns;
        } else if ts < self.now {
            self.counters.out_of_order += 1;
            self.epoch_counts.out_of_order += 1;
        } else {
            self.now = ts;
        }
        if self.now >= self.epoch_start + self.epoch_ns {
            self.advance(out);
        }
    }

    /// Once an epoch: out of line, so that the packet path it is reached
    /// from keeps its registers (inlined, the packet path took ~22 more
    /// instructions a packet once the sweep's start grew).
    #[cold]
    #[inline(never)]
    fn advance(&mut self, out: &mut Vec<Report>) {
        if self.sweep.is_some() {
            self.counters.sweeps_late += 1;
            self.sweep_step(usize::MAX, out);
            if self.config.dos_auto_raise {
                self.raise_dos_threshold();
            }
        }
        let ended_end = self.epoch_start + self.epoch_ns;
        if let Some(e) = self.pending_epoch_ns {
            if ended_end.is_multiple_of(e) {
                self.epoch_ns = e;
                self.pending_epoch_ns = None;
            }
        }
        let next = self.now - self.now % self.epoch_ns;
        self.begin_sweep(ended_end, Some(next));
        self.epoch_start = next;
        self.enter_bypass();
        if self.config.synchronous_sweep {
            self.sweep_step(usize::MAX, out);
        }
    }

    /// Raises the DoS threshold one step (see [`MonitorConfig::dos_auto_raise`]);
    /// the monitor calls it on a late sweep, and a driver that runs the
    /// sweep itself calls it when an epoch overran its time budget. Returns
    /// whether the threshold changed (false at the cap).
    pub fn raise_dos_threshold(&mut self) -> bool {
        let raised = self.dos.raise();
        if raised {
            self.counters.dos_threshold_raises += 1;
        }
        raised
    }

    fn begin_sweep(&mut self, epoch_end: u64, next_start: Option<u64>) {
        let order = self.active_order();
        let counts = std::mem::take(&mut self.epoch_counts);
        let mut completeness = counts;
        // Observed in full: the input neither started nor ended inside it,
        // nor was the driver blind during it.
        completeness.complete = next_start.is_some()
            && self.epoch_start >= self.first_ts
            && !self.blind.overlaps(self.epoch_start, epoch_end);
        self.epoch_log.push_back((self.epoch_start, counts));
        let health = Health {
            window: Window {
                start_ns: self.epoch_start,
                end_ns: epoch_end,
            },
            origin: Origin {
                host: self.host.clone(),
                worker: self.config.worker,
            },
            completeness: Completeness {
                degraded: self.adapt.is_some(),
                ..completeness
            },
            accuracy: Vec::new(),
        };
        // In degraded mode the record waits for the sweep's end, to carry
        // the accuracy of the windows it closes.
        let health = if !self.config.keep_health {
            None
        } else if self.adapt.is_some() {
            Some(health)
        } else {
            if !completeness.is_lossless() {
                self.health.push(health);
            }
            None
        };
        let spare = std::mem::take(&mut self.spare_sweep);
        let direct = Direct {
            tags_seen: self.tags_seen,
            completeness,
            kept: self.recent.open(Window {
                start_ns: self.epoch_start,
                end_ns: epoch_end,
            }),
            keep: self.config.history_windows > 0,
            accs: spare.accs,
            values: spare.values,
            scratch: spare.scratch,
        };
        self.sweep = Some(Sweep {
            epoch_start: self.epoch_start,
            epoch_end,
            half: (self.epoch_seq & 1) as usize,
            seq: self.epoch_seq,
            next_start,
            begun_ns: self.now,
            order,
            set_pos: 0,
            pos: 0,
            parts: spare.parts,
            opened: spare.opened,
            flow_lasts: spare.flow_lasts,
            reports: std::mem::take(&mut self.spare_reports),
            firings: std::mem::take(&mut self.spare_firings),
            origin: Origin {
                host: self.host.clone(),
                worker: self.config.worker,
            },
            direct,
            fired: spare.fired,
            first_look: spare.first_look,
            counts,
            merge: self.config.merge_output,
            report_triggers: Vec::new(),
            partials: Vec::new(),
            adapt: self.adapt.is_some(),
            bypassed_per_seen: self.bypass.ratio(self.epoch_start, epoch_end),
            loads: spare.loads,
            shed_parts: spare.shed_parts,
            direct_counts: Default::default(),
            direct_bypassed: Default::default(),
            seen_share: match counts.packets + counts.dropped {
                0 => 1.0,
                all => counts.packets as f64 / all as f64,
            },
            direct_scaled: Default::default(),
            scaled_weights: spare.scaled_weights,
            window_counts: Vec::new(),
            health,
        });
        self.epoch_seq += 1;
    }

    /// The sets written in the epoch being swept, each once (every set without `tuning.active_sweep`).
    fn active_order(&mut self) -> Vec<u32> {
        let half = (self.epoch_seq & 1) as usize;
        let active = std::mem::take(&mut self.active_sets[half]);
        if !self.config.tuning.active_sweep {
            self.active_sets[half] = active;
            self.active_sets[half].clear();
            return (0..self.sets.len() as u32).collect();
        }
        active
    }

    /// Ends the input: sweeps the current epoch and closes every open window
    /// (reported with `complete: false`). With `merge_output`, its partials
    /// are the worker's last ones, even if it observed nothing.
    pub fn finish(&mut self, out: &mut Vec<Report>) {
        if !self.started {
            if self.config.merge_output {
                // Nothing observed, but the merger must hear that this worker is done.
                let last = Partials {
                    worker: self.config.worker,
                    first_ns: None,
                    installed: std::mem::take(&mut self.merge.installed),
                    removed: std::mem::take(&mut self.merge.removed),
                    blind: self.merge.blind.take(),
                    epoch: None,
                    windows: Vec::new(),
                    reports: Vec::new(),
                    counts: Vec::new(),
                    watermark: u64::MAX,
                    last: true,
                };
                self.merge.ready.push(last);
            }
            return;
        }
        self.sweep_step(usize::MAX, out);
        let end = self.epoch_start + self.epoch_ns;
        self.begin_sweep(end, None);
        self.sweep_step(usize::MAX, out);
    }

    // ----- sweep ---------------------------------------------------------

    /// True while a sweep has work left.
    pub fn sweep_pending(&self) -> bool {
        self.sweep.is_some()
    }

    /// Runs the pending sweep for at most `budget` flow visits; returns true
    /// when it has finished (its reports are then in `out`).
    pub fn sweep_step(&mut self, budget: usize, out: &mut Vec<Report>) -> bool {
        let Some(mut s) = self.sweep.take() else {
            return true;
        };
        let mut budget = budget;
        if !self.gather_sets(&mut s, &mut budget) {
            self.sweep = Some(s);
            return false;
        }
        let kept = std::mem::take(&mut s.direct.kept);
        // The window of the triggers tested flow by flow, their firings'.
        let direct_window = kept.window();
        self.recent.close(kept, self.config.history_windows);
        for &tid in &s.flow_lasts {
            if let Some(Some(t)) = self.triggers.get_mut(tid as usize) {
                t.end_flow_epoch(s.epoch_start);
            }
        }
        self.estimate_direct(&mut s);
        self.close_windows(&mut s);
        if self.adapt.is_some() {
            self.end_epoch_load(&s.loads);
            self.recover(&s.loads);
            self.apply_deferred();
            let accuracy = self.adapt.as_mut().map(|a| std::mem::take(&mut a.accuracy));
            match s.health.take() {
                Some(mut h) => {
                    h.accuracy = accuracy.unwrap_or_default();
                    if !h.completeness.is_lossless() || !h.accuracy.is_empty() {
                        self.health.push(h);
                    }
                }
                // With a merger, it estimates the host's windows.
                None if !self.config.merge_output => self.keep_accuracy(accuracy.unwrap_or_default()),
                None => {}
            }
        }
        self.reclaim(s.seq);
        self.spare_sweep = sweep::Spares::keep(&mut s);
        self.counters.sweeps_completed += 1;
        if self.config.merge_output {
            self.hand_out(s);
            return true;
        }
        let reports = s.reports.len() + s.firings.len();
        self.counters.reports += reports as u64;
        // The vectors keep what a burst of reports grew them to only while
        // sweeps come near it (`decaying_peak.rs`).
        self.report_peak.note(reports);
        let cut = self
            .report_peak
            .cut(s.reports.capacity().max(s.firings.capacity()), 64);
        let first = out.len();
        if s.firings.len() == 0 {
            clarion_report::sort_reports_into(&mut s.reports, out);
        } else {
            let shared = firings::Shared {
                window: direct_window,
                origin: &s.origin,
                completeness: s.direct.completeness,
            };
            s.firings
                .report_into(&mut s.reports, &self.triggers, &shared, out);
        }
        self.apply_drill_downs(&out[first..], s.begun_ns);
        if let Some(keep) = cut {
            s.reports.shrink_to(keep);
            s.firings.shrink_to(keep);
        }
        self.spare_reports = s.reports;
        self.spare_firings = s.firings;
        true
    }

    /// Turns a finished sweep into partials for the merger (`merge_output`).
    fn hand_out(&mut self, s: Sweep) {
        let reports = s.report_triggers.into_iter().zip(s.reports).collect();
        let partials = Partials {
            worker: self.config.worker,
            first_ns: Some(self.first_ts),
            installed: std::mem::take(&mut self.merge.installed),
            removed: std::mem::take(&mut self.merge.removed),
            blind: self.merge.blind.take(),
            epoch: Some((s.epoch_start, s.counts)),
            windows: s.partials,
            reports,
            counts: s.window_counts,
            watermark: s.next_start.unwrap_or(u64::MAX),
            last: s.next_start.is_none(),
        };
        self.merge.ready.push(partials);
    }

    /// The partials of every sweep finished since the last call, oldest
    /// first (`merge_output`; always empty without it). Hand them to the
    /// host's [`crate::Merger`] in this order.
    pub fn take_partials(&mut self) -> Vec<Partials> {
        std::mem::take(&mut self.merge.ready)
    }

    fn close_windows(&mut self, s: &mut Sweep) {
        self.open_list.append(&mut s.opened);
        let mut still_open = Vec::with_capacity(self.open_list.len());
        for (i, &tid) in self.open_list.iter().enumerate() {
            if self.config.tuning.sweep_prefetch {
                let ahead = |k: usize| {
                    self.open_list
                        .get(i + k)
                        .and_then(|&t| self.triggers.get(t as usize))
                };
                if let Some(slot) = ahead(4) {
                    prefetch(slot);
                }
                if let Some(Some(t)) = ahead(2) {
                    t.prefetch_open();
                    prefetch(&t.history);
                }
            }
            let Some(trig) = self.triggers[tid as usize].as_mut() else {
                continue;
            };
            let Some(open) = trig.open() else { continue };
            let end = open.start_ns + trig.interval();
            let ended = match s.next_start {
                Some(next) if end <= next => true,
                Some(_) => {
                    still_open.push(tid);
                    continue;
                }
                None => false,
            };
            let Some(w) = trig.take_open() else { continue };
            if let Some(h) = self.heads.get_mut(tid as usize) {
                h.set_open(false);
            }
            if trig.exported {
                s.partials.push(trig.export(w, tid, end));
                continue;
            }
            // The traffic of every epoch of the window, on this monitor.
            let mut completeness = traffic(&self.epoch_log, w.start_ns, end);
            // Observed in full: the input neither started nor ended inside
            // it, nor was the driver blind during it.
            completeness.complete =
                ended && w.start_ns >= self.first_ts && !self.blind.overlaps(w.start_ns, end);
            let (measured, unmeasured) = (w.measured, w.unmeasured_total());
            trig.close(w, end, self.config.history_windows);
            let Some((window, groups)) = trig.history.newest() else {
                continue;
            };
            let first_report = s.reports.len();
            for (g, vals) in groups {
                if trig.fires(vals) {
                    s.reports
                        .push(trig.report(window, g, vals, &s.origin, completeness));
                }
            }
            if let Some(a) = self.adapt.as_mut() {
                let found = (s.reports.len() - first_report) as u64;
                if self.config.merge_output {
                    s.window_counts.push(crate::merge::WindowCounts {
                        trigger: tid,
                        window,
                        measured,
                        unmeasured,
                    });
                }
                let mona = a.estimate(tid, measured, unmeasured, found);
                // Drops, and groups of many flows: from the groups seen.
                let recall = trig.window_recall(mona, measured, unmeasured, found, &completeness);
                if let Some(r) = recall.filter(|_| recall != mona) {
                    a.note_recall(tid, r);
                }
                for r in &mut s.reports[first_report..] {
                    r.completeness.degraded = true;
                    r.completeness.flows_unmeasured = unmeasured;
                    r.completeness.recall_estimate = recall;
                }
                a.accuracy.push(clarion_report::EventAccuracy {
                    event: trig.spec.name.clone(),
                    window,
                    reports: found,
                    flows_measured: measured,
                    flows_unmeasured: unmeasured,
                    recall_estimate: recall.unwrap_or(f64::NAN),
                });
            }
            if self.config.merge_output || self.adapt.is_some() {
                s.report_triggers.resize(s.reports.len(), tid);
            }
            if self.config.history_windows == 0 {
                trig.history.clear();
            }
        }
        self.open_list = still_open;
        // Windows ending by the next epoch's start are closed; at the end of
        // input, all are.
        self.closed_to = s.next_start.unwrap_or(u64::MAX);
        let base = s.next_start.unwrap_or(s.epoch_end);
        let keep_from = base.saturating_sub(self.max_interval_ns);
        // Polls ask for the traffic of every kept window
        // (`window_values`): the log reaches back over them.
        let log_from = poll_log_from(base, self.max_interval_ns, self.config.history_windows);
        while self.epoch_log.front().is_some_and(|(e, _)| *e < log_from) {
            self.epoch_log.pop_front();
        }
        self.epochs_known_from = self.epochs_known_from.max(log_from);
        // At most `POLL_EPOCHS` beyond the windows still to close.
        while self.epoch_log.len() > POLL_EPOCHS
            && self.epoch_log.front().is_some_and(|(e, _)| *e < keep_from)
        {
            if let Some((e, _)) = self.epoch_log.pop_front() {
                self.epochs_known_from = self.epochs_known_from.max(e.saturating_add(1));
            }
        }
        // The swept epoch too: its driver may still ask for its blind time.
        self.blind.forget_to(keep_from.min(s.epoch_start));
    }

    /// Frees the entries of flows idle past the timeout whose statistics
    /// have all been swept (an RTT sample can write them after the flow's
    /// last packet). Semantics never depend on it as long as it frees only
    /// flows idle strictly longer than the timeout (such a flow is treated
    /// as new on its next packet either way); it only keeps the table from
    /// filling with dead flows.
    ///
    /// A clock hand over the entries, not a queue of every flow: each sweep
    /// reads the next entries in order, as many as the packet time since
    /// the last reclaim is of a quarter of the timeout (all of a table of
    /// [`RECLAIM_WHOLE`] entries or fewer), so that the hand goes round the
    /// entries ever used within a quarter of the timeout of packet time,
    /// however far apart the sweeps are: a flow idle past the timeout is
    /// freed within 1.25 timeouts. Beyond that pace it reads up to
    /// [`RECLAIM_SCAN_MIN`] entries, one per packet since the last reclaim,
    /// so that under load idle flows go soon after their timeout, while a
    /// sparse capture's sweeps (a few packets an epoch) read next to
    /// nothing: at one sweep in ~9 packets, 4,096 entries a sweep were a
    /// third of the sweeps' instructions on `pathspider_real`
    /// (docs/performance.md). The queue the hand replaces cost 16 bytes a
    /// flow and a push a new flow; sequential reads are what memory serves
    /// fastest.
    fn reclaim(&mut self, swept: u64) {
        let used = self.flows.entries.len();
        let packets = self.counters.packets;
        let elapsed = self.now.saturating_sub(self.reclaim_at.0);
        let arrived = packets.saturating_sub(self.reclaim_at.1);
        self.reclaim_at = (self.now, packets);
        if used == 0 {
            return;
        }
        let timeout = self.config.flow_timeout_ns;
        // A turn within `MAX_TURN_EPOCHS` epochs at most, whatever the timeout.
        let quarter = (timeout / 4)
            .min(MAX_TURN_EPOCHS.saturating_mul(self.epoch_ns.max(1)))
            .max(1);
        let budget = if used <= RECLAIM_WHOLE {
            used
        } else {
            let paced = (used as u128 * u128::from(elapsed.min(quarter))).div_ceil(u128::from(quarter));
            let busy = usize::try_from(arrived)
                .unwrap_or(usize::MAX)
                .min(RECLAIM_SCAN_MIN);
            (paced as usize).max(busy).min(used)
        };
        let (swept, now_epoch) = (swept as u32, self.epoch_seq as u32);
        let mut found = std::mem::take(&mut self.reclaim_found);
        let mut i = self.reclaim_hand.min(used);
        for _ in 0..budget {
            if i >= used {
                i = 0;
            }
            let e = &mut self.flows.entries[i];
            // Idle past the timeout means strictly more than it (as a
            // flow's packet after exactly the timeout continues its life);
            // statistics written in the swept epoch or before are swept.
            let swept_stats = swept.wrapping_sub(e.stats_epoch) as i32 >= 0;
            if e.live && e.last_ts.saturating_add(timeout) < self.now && swept_stats {
                self.flows.prefetch_removal(i as u32);
                found.push(i as u32);
                if found.len() == RECLAIM_BATCH {
                    self.free_entries(&mut found);
                }
            } else if now_epoch.wrapping_sub(e.stats_epoch) > STATS_EPOCH_AGE {
                // Kept within 2^30 epochs of now: still older than any
                // epoch not swept, never mistaken for the current one.
                e.stats_epoch = now_epoch.wrapping_sub(STATS_EPOCH_AGE);
            }
            i += 1;
        }
        self.free_entries(&mut found);
        self.reclaim_hand = i;
        self.reclaim_found = found;
    }

    /// Frees the entries of `found` (idle flows), emptying it.
    fn free_entries(&mut self, found: &mut Vec<u32>) {
        for &i in found.iter() {
            if let Some(set) = self
                .flows
                .entries
                .get(i as usize)
                .and_then(|e| self.sets.get_mut(e.set as usize))
            {
                set.leave();
            }
            self.flows.remove(i);
            self.counters.flows_evicted += 1;
        }
        found.clear();
    }

    // ----- queries -------------------------------------------------------

    /// Heap bytes the monitor's largest structures reserve, by part (a
    /// walk over the TCP states and the triggers: for diagnostics, not
    /// the packet path).
    pub fn memory(&self) -> crate::MemoryUse {
        let (flow_slots, flow_entries, tcp_states) = self.flows.heap_bytes();
        crate::MemoryUse {
            flow_slots: flow_slots as u64,
            flow_entries: flow_entries as u64,
            tcp_states: tcp_states as u64,
            epoch_logs: self.sets.iter().map(|s| s.log_bytes() as u64).sum(),
            histories: self
                .triggers
                .iter()
                .flatten()
                .map(|t| t.history.heap_bytes() as u64)
                .sum(),
            recent_values: self.recent.heap_bytes() as u64,
            sweep_reports: (self.spare_reports.capacity() * std::mem::size_of::<Report>()
                + self.spare_firings.heap_bytes()) as u64,
        }
    }

    pub fn counters(&self) -> Counters {
        Counters {
            flows_active: self.flows.len() as u64,
            ..self.counters
        }
    }

    /// The DoS filter's threshold in bytes now (0: off).
    pub fn dos_threshold(&self) -> u32 {
        self.dos.threshold()
    }

    /// Sets the DoS filter's threshold (0 turns it off; capped at
    /// [`crate::DOS_MAX_THRESHOLD`]). Flows already tracked stay tracked.
    pub fn set_dos_threshold(&mut self, bytes: u32) {
        self.dos.set_threshold(bytes);
    }

    /// True when the flow of `key` has an entry in the flow table (it is
    /// matched and its packets are measured).
    pub fn is_tracked(&self, key: &FlowKey) -> bool {
        self.flows.find(key, hash_key(key)).is_some()
    }

    /// The optimizations this monitor runs with.
    pub fn tuning(&self) -> Tuning {
        self.config.tuning
    }

    /// Current epoch length (gcd of installed intervals).
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// The monitor's packet time.
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Distinct filter mask patterns: the per-flow matching cost.
    pub fn patterns(&self) -> usize {
        self.index.patterns()
    }

    /// Windows ending at or before this time are closed, their values final
    /// ([`Monitor::window_values`] answers for them); `u64::MAX` once the
    /// input has finished.
    pub fn closed_to(&self) -> u64 {
        self.closed_to
    }

    /// Whether a trigger of this name is installed.
    pub fn has_event(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Ids and specs of installed triggers.
    pub fn triggers(&self) -> impl Iterator<Item = (TriggerId, &EventSpec)> {
        self.triggers
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (i as TriggerId, &t.spec)))
    }

    /// The start of an installed trigger's first window (an event installed
    /// while packets flow starts at the next window boundary).
    pub fn first_window_ns(&self, id: TriggerId) -> Option<u64> {
        self.triggers.get(id as usize)?.as_ref().map(|t| t.start_ns)
    }

    /// The values every group of a trigger had in the window starting at
    /// `window_start_ns`, if that window is among the last few kept.
    pub fn window_values(&self, id: TriggerId, window_start_ns: u64) -> Option<WindowValues> {
        let t = self.triggers.get(id as usize)?.as_ref()?;
        if t.exported {
            // Its values are the merger's (`Merger::window_values`).
            return None;
        }
        let granularity = &t.spec.granularity;
        let groups_of = |groups: &mut dyn Iterator<Item = (&FlowKey, &[f64])>| {
            let mut groups: Vec<(GroupKey, Vec<f64>)> = groups
                .map(|(g, v)| (report_group(g, granularity), v.to_vec()))
                .collect();
            groups.sort_by_key(|g| g.0);
            groups
        };
        let keep = self.config.history_windows;
        let tested = self.heads.get(id as usize).is_some_and(Head::tested);
        if let Some((window, mut groups)) = t.history.find(window_start_ns) {
            return Some(WindowValues {
                window,
                groups: groups_of(&mut groups),
                packets: self.window_packets(window),
            });
        }
        // Windows tested flow by flow are in the recent epochs (once swept).
        let recent = self
            .recent
            .find(window_start_ns)
            .filter(|e| tested && e.window().end_ns <= self.closed_to);
        if let Some(e) = recent {
            let groups = groups_of(&mut e.groups(id));
            if !groups.is_empty() {
                return Some(WindowValues {
                    window: e.window(),
                    groups,
                    packets: self.window_packets(e.window()),
                });
            }
        }
        // A closed window with no data (so not kept) since the oldest kept
        // one, in the history and, if it was tested per flow, in the recent
        // epochs: no groups.
        let i = t.interval();
        let end = window_start_ns.checked_add(i)?;
        let mut known_from = match t.history.oldest_start() {
            Some(oldest) if t.history.len() >= keep => oldest,
            _ => t.start_ns,
        };
        if tested {
            known_from = known_from.max(self.recent.full_from(keep).unwrap_or(0));
        }
        // A window that ended before the first packet was never observed: unknown, not empty.
        let observed = self.started && end > self.first_ts;
        let known = observed
            && window_start_ns.is_multiple_of(i)
            && window_start_ns >= known_from
            && window_start_ns < t.end_ns()
            && end <= self.closed_to;
        let window = Window {
            start_ns: window_start_ns,
            end_ns: end,
        };
        known.then(|| WindowValues {
            window,
            groups: Vec::new(),
            packets: self.window_packets(window),
        })
    }

    /// This monitor's packets in closed window `w`, while its epochs are
    /// still in the log.
    fn window_packets(&self, w: Window) -> Option<u64> {
        (w.start_ns >= self.epochs_known_from && w.end_ns <= self.closed_to)
            .then(|| traffic(&self.epoch_log, w.start_ns, w.end_ns).packets)
    }

    /// Records of flows kept for a trigger (some maybe moved away or
    /// gathered): both epoch logs of the sets it is in, the flows written
    /// in the epochs not yet swept, which the sweep walks for it.
    pub fn trigger_flows(&self, id: TriggerId) -> Option<usize> {
        self.triggers.get(id as usize)?.as_ref()?;
        let sets = self.sets.iter().filter(|s| s.position(id).is_some());
        Some(sets.map(|s| s.log_len(0) + s.log_len(1)).sum())
    }
}

/// Epochs whose traffic a monitor or merger keeps for polls, at most
/// (beyond those of windows still open): ~6 MB of counts, 655 s of 10 ms
/// epochs. A poll for an older window is answered without the count.
pub(crate) const POLL_EPOCHS: usize = 1 << 16;

/// How far back, from `to`, the epochs' traffic is kept for polls: over
/// every window of the longest interval that `history_windows` keeps, and
/// the one still open.
pub(crate) fn poll_log_from(to: u64, max_interval_ns: u64, history_windows: usize) -> u64 {
    let kept = history_windows.max(1) as u64 + 1;
    to.saturating_sub(max_interval_ns.saturating_mul(kept))
}

/// The traffic of the epochs of `log` (in start order) that start in
/// `[start_ns, end_ns)`, summed.
fn traffic(log: &VecDeque<(u64, Completeness)>, start_ns: u64, end_ns: u64) -> Completeness {
    let from = log.partition_point(|(e, _)| *e < start_ns);
    let mut c = Completeness::default();
    for (_, counts) in log.range(from..).take_while(|(e, _)| *e < end_ns) {
        c.add_counts(counts);
    }
    c
}

/// `a == b`, testing the ports first: consecutive packets of different
/// flows nearly always differ there, so the usual answer takes two compares.
#[inline(always)]
fn same_flow(a: &FlowKey, b: &FlowKey) -> bool {
    a.src_port == b.src_port && a.dst_port == b.dst_port && a == b
}

/// Mutable access to two distinct elements of a slice.
fn pair_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    if a < b {
        let (lo, hi) = v.split_at_mut(b);
        (&mut lo[a], &mut hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(a);
        (&mut hi[0], &mut lo[b])
    }
}

#[cfg(test)]
pub(crate) mod tests;
