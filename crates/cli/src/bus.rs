//! What `clarion agent` and `clarion manager` share: how to reach the NATS server.

use std::path::PathBuf;

use clap::Args;
use clarion_nats::Auth;

use crate::Failure;

#[derive(Args, Debug, Clone)]
pub struct NatsArgs {
    /// The NATS server (or a comma-separated list of a cluster's servers).
    #[arg(
        long = "nats",
        env = "CLARION_NATS_URL",
        default_value = "nats://127.0.0.1:4222",
        value_name = "URL"
    )]
    pub url: String,

    /// Authenticate with this token (the server's `authorization { token: ... }`).
    #[arg(
        long,
        env = "CLARION_NATS_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        conflicts_with = "nats_nkey"
    )]
    pub nats_token: Option<String>,

    /// Authenticate with the nkey seed in this file (`SU...`, as `nk -gen user` writes it).
    #[arg(long, value_name = "FILE")]
    pub nats_nkey: Option<PathBuf>,
}

impl NatsArgs {
    pub fn auth(&self) -> Result<Auth, Failure> {
        if let Some(t) = &self.nats_token {
            return Ok(Auth::Token(t.clone()));
        }
        if let Some(p) = &self.nats_nkey {
            let seed = std::fs::read_to_string(p).map_err(|e| {
                Failure::Usage(format!("clarion: cannot read nkey seed {}: {e}", p.display()))
            })?;
            let seed = seed
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with('S'))
                .ok_or_else(|| {
                    Failure::Usage(format!(
                        "clarion: {} holds no nkey seed (a line starting with `S`, e.g. `SUAB...`)",
                        p.display()
                    ))
                })?;
            return Ok(Auth::NkeySeed(seed.to_string()));
        }
        Ok(Auth::None)
    }
}
