//! Monitor configuration and the counters an operator reads.

/// How a monitor is sized and identified.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    /// Most flows tracked at once; beyond it new flows are counted as untracked.
    pub flow_capacity: usize,
    /// A flow idle for longer than this starts afresh (and its entry may be reclaimed).
    pub flow_timeout_ns: u64,
    /// Closed windows whose values each trigger keeps for later queries.
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
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            flow_capacity: 1 << 20,
            flow_timeout_ns: 60_000_000_000,
            history_windows: 16,
            default_epoch_ns: 10_000_000,
            synchronous_sweep: true,
            burst_gap_ns: 1_000_000,
            tcp_segment_limit: 1024,
            dos_threshold_bytes: 0,
            dos_auto_raise: false,
            dos_filter_slots: 1 << 18,
            host: "localhost".into(),
            worker: 0,
        }
    }
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
    pub flows_created: u64,
    /// Idle flows whose entries were reclaimed.
    pub flows_evicted: u64,
    /// New flows refused because the table was full.
    pub flows_untracked: u64,
    /// Packets of flows that could not be tracked (table full).
    pub packets_untracked: u64,
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
}
