use thiserror::Error;

/// Why a host's pipeline stopped.
#[derive(Debug, Error)]
pub enum HostError {
    /// An event could not be installed on a worker.
    #[error(transparent)]
    Engine(#[from] clarion_engine::EngineError),
    #[error(transparent)]
    Network(#[from] clarion_network::NetworkError),
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
    /// A setting the user must change (exit status 2 at the command line).
    #[error("{0}")]
    Usage(String),
    /// A live source could not be set up (no such interface, no permission, ...).
    #[error(transparent)]
    Setup(clarion_live::LiveError),
    /// A flow record sink failed (a collector, a file): the run ends
    /// rather than drop records.
    #[error(transparent)]
    Records(clarion_sinks::SinkError),
    /// A GPV sink failed: the run ends rather than drop GPVs.
    #[error(transparent)]
    Gpvs(clarion_sinks::SinkError),
    /// A live worker failed while capturing.
    #[error("worker {worker} failed")]
    Live {
        worker: u32,
        #[source]
        source: clarion_live::LiveError,
    },
}

/// A stage's failure as the host's: the same variants, the same words.
impl From<clarion_pipeline::Error> for HostError {
    fn from(e: clarion_pipeline::Error) -> HostError {
        use clarion_pipeline::Error;
        match e {
            Error::Merge { worker, source } => HostError::Merge { worker, source },
            Error::Worker { worker, what } => HostError::Worker { worker, what },
            Error::Usage(msg) => HostError::Usage(msg),
            Error::Records(e) => HostError::Records(e),
            Error::Gpvs(e) => HostError::Gpvs(e),
        }
    }
}
