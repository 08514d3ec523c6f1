//! How the commands fail, and the signals that stop them: helpers every
//! command's module takes, so this module takes from none of them.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::anyhow;

use crate::Failure;

pub fn runtime(e: impl Into<anyhow::Error>) -> Failure {
    Failure::Runtime(e.into())
}

/// A write to standard output failed: a closed pipe ends quietly.
pub fn io(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::BrokenPipe
    } else {
        Failure::Runtime(e.into())
    }
}

/// The API's token (see [`clarion_control::token`]); an unusable one is bad usage.
pub fn token_failure(e: clarion_control::TokenError) -> Failure {
    if e.is_usage() {
        Failure::Usage(format!("clarion: {e}"))
    } else {
        Failure::Runtime(e.into())
    }
}

/// Stop flag set by SIGINT/SIGTERM; a second signal exits at once (status 1).
pub fn stop_flag() -> Result<Arc<AtomicBool>, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop)))
            .map_err(|e| runtime(anyhow!(e).context("cannot install the signal handlers")))?;
    }
    Ok(stop)
}
