use thiserror::Error;

/// Why a host stopped: its pipeline (a worker thread, the merger, a sink:
/// [`clarion_pipeline::Error`], said the same), its live sources, or a setting.
#[derive(Debug, Error)]
pub enum HostError {
    /// An event could not be installed on a worker.
    #[error(transparent)]
    Engine(#[from] clarion_engine::EngineError),
    #[error(transparent)]
    Network(#[from] clarion_network::NetworkError),
    /// A worker thread could not be started or ended without finishing,
    /// the merger refused a worker's statistics, or a sink of records or
    /// GPVs failed: the run ends rather than drop what it made.
    #[error(transparent)]
    Pipeline(#[from] clarion_pipeline::Error),
    /// A setting the user must change (exit status 2 at the command line).
    #[error("{0}")]
    Usage(String),
    /// A live source could not be set up (no such interface, no permission, ...).
    #[error(transparent)]
    Setup(clarion_live::LiveError),
    /// A live worker failed while capturing.
    #[error("worker {worker} failed")]
    Live {
        worker: u32,
        #[source]
        source: clarion_live::LiveError,
    },
}

impl HostError {
    /// Worker `worker` `what` (could not start, stopped, ...).
    pub(crate) fn worker(worker: u32, what: impl Into<String>) -> HostError {
        HostError::Pipeline(clarion_pipeline::Error::Worker {
            worker,
            what: what.into(),
        })
    }
}
