//! Monitor configuration and the counters an operator reads.

/// How a monitor is sized and identified.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    /// Most flows tracked at once; beyond it new flows are counted as untracked.
    pub flow_capacity: usize,
    /// A flow idle for longer than this starts afresh (and its entry may be reclaimed).
    pub flow_timeout_ns: u64,
    /// Closed windows whose values each trigger keeps for later queries
    /// ([`crate::Monitor::window_values`]: an event manager's polls); for
    /// windows tested flow by flow (`Tuning::flow_windows`), the last this
    /// many swept epochs' (whether the trigger had groups in them or not).
    /// 0 by default: a monitor nobody polls keeps none, where 16 epochs of
    /// per-flow values were most of the sweep and of the memory at a
    /// million flows (docs/performance.md). Hosts a manager polls keep
    /// [`POLLED_HISTORY_WINDOWS`] or what their `--history-windows` says.
    pub history_windows: usize,
    /// Epoch used while no trigger is installed.
    pub default_epoch_ns: u64,
    /// Run each sweep to completion at the epoch boundary (files). When
    /// false, the caller drives the sweep with [`crate::Monitor::sweep_step`].
    pub synchronous_sweep: bool,
    /// `is_burst`: a packet at most this long after its flow's previous one.
    pub burst_gap_ns: u64,
    /// First transmissions a flow's TCP state lists at most (for RTT samples).
    pub tcp_segment_limit: usize,
    /// DoS filter threshold in bytes (IP length): a new flow is matched and
    /// inserted only once it has sent more than this in one epoch; 0 turns
    /// the filter off. See `dos_filter.rs`.
    pub dos_threshold_bytes: u32,
    /// Raise the DoS threshold (double it; from one bare TCP segment when
    /// off) each time a sweep is found unfinished as the next epoch ends.
    pub dos_auto_raise: bool,
    /// Counters in the DoS filter table (rounded up to a power of two; 4
    /// bytes each, allocated only once the filter is on). Fewer slots mean
    /// more small flows admitted early (false positives), never later.
    pub dos_filter_slots: usize,
    pub host: String,
    pub worker: u32,
    /// One worker among several whose results a host-level [`crate::Merger`]
    /// combines: each sweep's closed windows leave as partial statistics
    /// ([`crate::Partials`], taken with [`crate::Monitor::take_partials`])
    /// and no report goes to `out`. Off, nothing changes. See `merge.rs`.
    pub merge_output: bool,
    /// Keep a [`clarion_report::Health`] record of every epoch not seen in
    /// full, for [`crate::Monitor::take_health`] (the health stream). Off,
    /// nothing is kept.
    pub keep_health: bool,
    /// With `merge_output`: the driver spreads flows over the workers by
    /// their 5-tuple alone, both directions together, as
    /// [`crate::fanout_worker`] does. Then every group of a trigger that
    /// keeps the whole 5-tuple lives on one worker, so such triggers are
    /// tested here and only their reports go to the merger. Leave it off
    /// for any other fanout (every trigger then leaves as partials).
    pub five_tuple_fanout: bool,
    /// Which optimizations run (all by default). None changes a result.
    pub tuning: Tuning,
    /// Degraded mode (MONA, `--adapt`): shed measurement work per flow
    /// when told the time per packet is short, and estimate each event's
    /// recall. `None` (the default): every flow is measured for every
    /// event it matches, and reports are exact. See `monitor/shed.rs`.
    pub adapt: Option<AdaptConfig>,
}

/// Degraded mode's settings: the cost of the monitor's operations (the
/// model that decides how much to shed) and the recall estimator's.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptConfig {
    pub costs: StateCosts,
    /// Windows of per-flow results the recall estimator averages (MONA's q).
    pub recall_windows: usize,
    /// The estimator's Chebyshev factor λ when results vary widely.
    pub recall_lambda: f64,
    /// Accuracy control (MONA Alg. 2): while shedding, move flows from
    /// events whose estimated recall is above this (plus a headroom) to
    /// those below it, at constant processing time. `None`: off.
    pub accuracy_threshold: Option<f64>,
    /// The share of the time available that decisions plan to fill: the
    /// rest absorbs the model's errors, a forecast short of a rising
    /// load, and bursts of new flows (a new flow's packet costs the time
    /// of a dozen others). At 1, a decision fills the time exactly and
    /// any error fills the ring (docs/performance.md, "Overload").
    pub utilization: f64,
}

impl Default for AdaptConfig {
    fn default() -> Self {
        AdaptConfig {
            costs: StateCosts::default(),
            recall_windows: 10,
            recall_lambda: 3.0,
            accuracy_threshold: Some(0.75),
            utilization: 0.9,
        }
    }
}

/// What the monitor's operations cost, in nanoseconds: MONA §IV-A's
/// offline profile. `clarion-lab profile-states` measures them on a
/// machine (docs/performance.md, "Monitoring-state costs"). The defaults
/// are round figures of the cost model of `cost.rs` on this project's VM;
/// live, a calibration (measured over predicted busy time) scales them
/// by one factor, so their ratios matter more than their scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StateCosts {
    /// Finding a known flow's entry (MONA's T_r).
    pub lookup_ns: f64,
    /// A new flow: insertion and matching (MONA's T_i, beyond the lookup).
    pub insert_ns: f64,
    /// Updating a flow's statistics: a fixed part, and one per 64-bit word kept.
    pub update_ns: f64,
    pub per_word_ns: f64,
    /// Keeping TCP connection state, per packet of a flow that needs it.
    pub tcp_ns: f64,
    /// The sweep's work per flow and event per epoch (a flow-trigger pair).
    pub pair_ns: f64,
    /// A packet of a bypassed flow: its hash tested, nothing looked up
    /// (`monitor/bypass.rs`).
    pub bypass_ns: f64,
}

impl Default for StateCosts {
    fn default() -> Self {
        StateCosts {
            lookup_ns: 25.0,
            insert_ns: 700.0,
            update_ns: 14.0,
            per_word_ns: 1.5,
            tcp_ns: 30.0,
            pair_ns: 10.0,
            bypass_ns: 8.0,
        }
    }
}

/// The optimizations of the packet path and the sweep, each switchable so
/// its contribution can be measured (`clarion-lab bench --ablation`). Results
/// are the same with any of them off; only speed changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// [`crate::Monitor::process_batch`] works in three passes over up to
    /// 32 packets (hash and prefetch the flow slots, prefetch the entries,
    /// process), so their cache misses overlap; off, it processes packets
    /// one by one.
    pub batch_prefetch: bool,
    /// The loop that feeds the monitor prefetches each frame's first line
    /// some frames before it parses it, as a poll loop prefetches the
    /// headers of its next burst (Trumpet's "prefetching packet headers").
    /// Read by that loop (`clarion-lab bench`), not by the monitor.
    pub header_prefetch: bool,
    /// The sweep prefetches the sets, flow entries, statistics and
    /// triggers a few sets ahead, and within a set's list the entries and
    /// statistics of the flows a few visits ahead.
    pub sweep_prefetch: bool,
    /// A packet of the same flow as the previous one skips the lookup.
    pub last_flow: bool,
    /// The flow table, connection states and epoch logs are advised to the
    /// kernel for transparent huge pages.
    pub huge_pages: bool,
    /// The sweep visits only the match sets some flow wrote statistics to
    /// in the swept epoch (listed at its first record), not every set.
    pub active_sweep: bool,
    /// Triggers whose window is one epoch, grouped per 5-tuple, with only
    /// aggregates, are tested flow by flow during the gather (no window is
    /// opened, merged and closed for them).
    pub flow_windows: bool,
    /// [`crate::Monitor::prefault`] commits memory before traffic: the flow
    /// table's pages and, of the calling thread's heap,
    /// [`crate::HEAP_RESERVE`] plus the installed triggers' history rings,
    /// so that the first epochs take no page faults.
    pub prefault: bool,
    /// A new flow's matched set is looked up by the bits of its key that
    /// any filter reads (`match_cache.rs`) before the tuple-space search.
    pub match_cache: bool,
}

impl Tuning {
    /// Every optimization on (the default).
    pub const ALL: Tuning = Tuning {
        batch_prefetch: true,
        header_prefetch: true,
        sweep_prefetch: true,
        last_flow: true,
        huge_pages: true,
        active_sweep: true,
        flow_windows: true,
        prefault: true,
        match_cache: true,
    };
    /// Every optimization off: the naive baseline.
    pub const NONE: Tuning = Tuning {
        batch_prefetch: false,
        header_prefetch: false,
        sweep_prefetch: false,
        last_flow: false,
        huge_pages: false,
        active_sweep: false,
        flow_windows: false,
        prefault: false,
        match_cache: false,
    };
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::ALL
    }
}

/// Closed windows kept for polls by a host an event manager polls, unless
/// configured otherwise (`MonitorConfig::history_windows`).
pub const POLLED_HISTORY_WINDOWS: usize = 16;

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            flow_capacity: 1 << 20,
            flow_timeout_ns: 60_000_000_000,
            history_windows: 0,
            default_epoch_ns: 10_000_000,
            synchronous_sweep: true,
            burst_gap_ns: 1_000_000,
            tcp_segment_limit: 1024,
            dos_threshold_bytes: 0,
            dos_auto_raise: false,
            dos_filter_slots: 1 << 18,
            host: "localhost".into(),
            worker: 0,
            merge_output: false,
            keep_health: false,
            five_tuple_fanout: false,
            tuning: Tuning::ALL,
            adapt: None,
        }
    }
}

/// Heap bytes reserved by the monitor's largest structures
/// ([`crate::Monitor::memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// The flow table's slots (and its free list).
    pub flow_slots: u64,
    /// The flow entries, reserved to the table's capacity.
    pub flow_entries: u64,
    /// TCP connection states and their segment lists.
    pub tcp_states: u64,
    /// The match sets' epoch logs (statistics of the flows written in the
    /// last two epochs).
    pub epoch_logs: u64,
    /// The triggers' histories of closed windows.
    pub histories: u64,
    /// The values of per-flow tests of the recent epochs (`recent.rs`).
    pub recent_values: u64,
    /// The report vector kept from sweep to sweep.
    pub sweep_reports: u64,
}

/// Running totals since the monitor started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// IP packets processed.
    pub packets: u64,
    /// Sum of their IP lengths (`size`).
    pub bytes: u64,
    pub malformed: u64,
    pub not_ip: u64,
    pub out_of_order: u64,
    /// Packets lost before reaching the monitor, as its driver counted them
    /// ([`crate::Monitor::note_dropped`]: kernel or ring drops).
    pub dropped: u64,
    pub flows_created: u64,
    /// Idle flows whose entries were reclaimed.
    pub flows_evicted: u64,
    /// Packets of flows that could not be tracked (table full).
    pub packets_untracked: u64,
    /// Degraded mode: packets of flows bypassed (counted only, not looked
    /// up: `monitor/bypass.rs`).
    pub packets_bypassed: u64,
    /// Packets of unknown flows kept out of the flow table by the DoS
    /// filter (their flows had not yet sent more than the threshold).
    pub packets_dos_filtered: u64,
    /// Times the DoS threshold was raised because a sweep was unfinished.
    pub dos_threshold_raises: u64,
    /// Flows currently in the table.
    pub flows_active: u64,
    /// Sum over new flows of the triggers each matched.
    pub triggers_matched: u64,
    pub sweeps_completed: u64,
    /// Sweeps not finished before the next epoch began.
    pub sweeps_late: u64,
    pub reports: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
    /// First transmissions not listed because the flow's list was full (no RTT sample for them).
    pub tcp_segments_unlisted: u64,
    /// Drill-down instances installed (`then install`), and extended.
    pub drill_downs_installed: u64,
    pub drill_downs_extended: u64,
    /// Instances installed after their first window had begun (a sweep
    /// ran late): they start at the next window instead.
    pub drill_downs_late: u64,
}
impl Counters {
    /// Adds another worker's totals (the host's view of several workers).
    pub fn add(&mut self, o: &Counters) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.malformed += o.malformed;
        self.not_ip += o.not_ip;
        self.out_of_order += o.out_of_order;
        self.dropped += o.dropped;
        self.flows_created += o.flows_created;
        self.flows_evicted += o.flows_evicted;
        self.packets_untracked += o.packets_untracked;
        self.packets_dos_filtered += o.packets_dos_filtered;
        self.dos_threshold_raises += o.dos_threshold_raises;
        self.flows_active += o.flows_active;
        self.triggers_matched += o.triggers_matched;
        self.sweeps_completed += o.sweeps_completed;
        self.sweeps_late += o.sweeps_late;
        self.reports += o.reports;
        self.rtt_samples += o.rtt_samples;
        self.tcp_segments_unlisted += o.tcp_segments_unlisted;
        self.drill_downs_installed += o.drill_downs_installed;
        self.drill_downs_extended += o.drill_downs_extended;
        self.drill_downs_late += o.drill_downs_late;
    }
}
