use thiserror::Error;

#[derive(Debug, Error)]
pub enum NatsError {
    #[error("cannot connect to the NATS server at {url}: {message}")]
    Connect { url: String, message: String },
    #[error("NATS: {0}")]
    Nats(String),
    /// A `nats://…/STREAM` destination wrong or unusable; the message names it.
    #[error("{0}")]
    Destination(String),
    #[error("a message on {subject} is not a valid Clarion message: {message}")]
    Decode { subject: String, message: String },
    /// Why the name cannot be a host's on the bus.
    #[error("{0}")]
    HostName(String),
    #[error("no manager answered on clarion.register within {0:?}; start `clarion manager` on the same NATS server, or raise --register-timeout")]
    NoManager(std::time::Duration),
    #[error(
        "the NATS server refused what host {host} sent or asked for ({refused}): the credentials given are \
         not {host}'s; give the key `clarion credentials` made for {host} (--nats-nkey), or run as the host they are for"
    )]
    NotThisHost { host: String, refused: String },
    #[error("the manager refused host {host}: {reason}")]
    Refused { host: String, reason: String },
    #[error("event {event}: {message}")]
    Install { event: String, message: String },
    #[error(transparent)]
    Store(#[from] clarion_store::StoreError),
    /// The OS error is in the message, not a source: said once.
    #[error("cannot start the NATS client's runtime: {0}")]
    Runtime(std::io::Error),
}

impl From<std::io::Error> for NatsError {
    fn from(e: std::io::Error) -> Self {
        NatsError::Runtime(e)
    }
}
