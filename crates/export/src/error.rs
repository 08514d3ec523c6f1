//! What can go wrong when an exporter is built or runs.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("export policies: {0}")]
    Classify(#[from] clarion_classify::ClassifyError),
    #[error("export policy `{policy}` writes pcapng files but no export directory is set (--export-dir)")]
    NoExportDir { policy: String },
    #[error("export policy `{policy}` sends packets to pcapng twice; one `send ... to pcapng` per policy")]
    TwoFileSends { policy: String },
    #[error("export directory {path}: {error}")]
    ExportDir { path: PathBuf, error: std::io::Error },
    #[error("export policy `{policy}` cannot write its files: {}: {error}", path.display())]
    Unwritable {
        policy: String,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("collector {addr}: {error}")]
    Socket {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("VXLAN mirror to {addr}: {error}")]
    Mirror {
        addr: std::net::SocketAddr,
        error: clarion_mirror::MirrorError,
    },
    #[error("header stream: {0}")]
    Headers(#[from] clarion_headers::HeadersError),
    #[error("export policy `{policy}`: cannot send {what}")]
    Unsupported { policy: String, what: String },
    #[error("export policy `{policy}` takes packets of interface `{interface}`, which this host does not capture on ({})", if known.is_empty() { "a capture file has no interfaces".to_string() } else { format!("its interfaces: {}", known.join(", ")) })]
    UnknownInterface {
        policy: String,
        interface: String,
        known: Vec<String>,
    },
    #[error("two export policies are named `{0}`")]
    DuplicatePolicy(String),
    #[error("export CPU budget {0} is not a fraction of one core in (0, 1] (--export-cpu)")]
    Budget(f64),
    #[error("the export sampling interval must be longer than zero")]
    Interval,
    #[error("export sampling must time at least one exported packet in N (N >= 1)")]
    TimeEvery,
}
