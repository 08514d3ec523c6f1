use thiserror::Error;

/// Why a pipeline stopped: its head's threads or merger, or a sink.
#[derive(Debug, Error)]
pub enum Error {
    /// The merger refused a worker's statistics (a bug, not bad input).
    #[error("cannot merge worker {worker}'s statistics")]
    Merge {
        worker: u32,
        #[source]
        source: clarion_engine::EngineError,
    },
    /// A worker thread could not be started, or ended without finishing.
    #[error("worker {worker} {what}")]
    Worker { worker: u32, what: String },
    /// A flow record sink failed (a collector, a file): the run ends
    /// rather than drop records.
    #[error(transparent)]
    Records(clarion_sinks::SinkError),
    /// A GPV sink failed: the run ends rather than drop GPVs.
    #[error(transparent)]
    Gpvs(clarion_sinks::SinkError),
}
