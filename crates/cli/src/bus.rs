//! What `clarion agent` and `clarion manager` share: how to reach the NATS server.

use std::path::PathBuf;

use clap::Args;
use clarion_nats::{Auth, Security};

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

    /// Require TLS and trust this CA certificate (PEM) for the server's certificate.
    #[arg(long, value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) to a server that verifies clients (with --nats-key).
    #[arg(long, value_name = "FILE", requires = "nats_key")]
    pub nats_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "nats_cert")]
    pub nats_key: Option<PathBuf>,
}

impl NatsArgs {
    pub fn security(&self) -> Result<Security, Failure> {
        for p in [&self.nats_ca, &self.nats_cert, &self.nats_key]
            .into_iter()
            .flatten()
        {
            if !p.is_file() {
                return Err(Failure::Usage(format!(
                    "clarion: {} is not a readable file",
                    p.display()
                )));
            }
        }
        Ok(Security {
            auth: self.auth()?,
            ca: self.nats_ca.clone(),
            client_cert: self.nats_cert.clone().zip(self.nats_key.clone()),
        })
    }

    fn auth(&self) -> Result<Auth, Failure> {
        if let Some(t) = &self.nats_token {
            return Ok(Auth::Token(t.clone()));
        }
        if let Some(p) = &self.nats_nkey {
            let seed = clarion_nats::stream_sink::read_nkey_seed(p)
                .map_err(|e| Failure::Usage(format!("clarion: {e}")))?;
            return Ok(Auth::NkeySeed(seed));
        }
        Ok(Auth::None)
    }
}
