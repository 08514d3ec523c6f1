//! What stops a collector.

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("receiving: {0}")]
    Socket(std::io::Error),
    #[error("writing headers: {0}")]
    Write(std::io::Error),
}
