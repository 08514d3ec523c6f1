//! The monitor's configuration, built in one place from the flags `clarion
//! run` and `clarion agent` share (`MonitorArgs`, heading "Monitor"), so
//! the two commands cannot drift apart (issue 34): a capture replayed, a
//! network of hosts, merged workers and live workers all get it from
//! [`config`]. What differs per command comes beside the flags, as a
//! [`Role`].

use clarion_engine::{AdaptConfig, MonitorConfig, DOS_MAX_THRESHOLD};

use crate::args::MonitorArgs;

/// What a command's monitor has that the shared flags do not say.
pub struct Role {
    /// The host name put in every report.
    pub host: String,
    /// Keep a health record of every epoch not seen in full (`run --health`).
    pub keep_health: bool,
    /// Closed windows each trigger keeps for a manager's polls (0: nobody polls).
    pub history_windows: usize,
}

/// The monitor configuration the flags describe, for `role`.
pub fn config(m: &MonitorArgs, role: Role) -> MonitorConfig {
    MonitorConfig {
        flow_capacity: m.flow_capacity,
        flow_timeout_ns: m.flow_timeout,
        burst_gap_ns: m.burst_gap,
        tcp_segment_limit: m.tcp_segment_limit,
        dos_threshold_bytes: m.dos_threshold.min(DOS_MAX_THRESHOLD),
        dos_auto_raise: m.dos_auto_raise,
        host: role.host,
        keep_health: role.keep_health,
        history_windows: role.history_windows,
        adapt: m.adapt.then(AdaptConfig::default),
        ..MonitorConfig::default()
    }
}

/// The first monitor flag a capture file cannot use, as a usage error
/// naming it (`None`: every flag given applies). A file is read as fast as
/// the monitor goes and each sweep finishes before its next packet is
/// read: there is no overload to shed (`--adapt`) and no late sweep to
/// raise the DoS threshold on (`--dos-auto-raise`).
pub fn file_refusal(m: &MonitorArgs) -> Option<String> {
    if m.adapt {
        return Some(
            "clarion: --adapt sheds work when live traffic outruns the monitor; a file is read as fast as \
             the monitor goes: give -i IFACE (to study overload on a file: clarion-lab overload)"
                .into(),
        );
    }
    if m.dos_auto_raise {
        return Some(
            "clarion: --dos-auto-raise raises the DoS threshold when a sweep is late; a file's sweeps \
             finish before its next packet is read: give -i IFACE (to study it on a file: \
             clarion-lab bench --dos-auto-raise)"
                .into(),
        );
    }
    None
}
