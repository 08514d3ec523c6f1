//! `clarion exports`: a live host's export policies through its control
//! API (add, list, show, rm), as `clarion events` does for its events.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use clarion_control::ExportInfo;

use crate::events::ApiArgs;
use crate::failure::io;
use crate::Failure;

pub const AFTER_HELP: &str =
    "On a running host (clarion run -i ... --api ADDR, clarion agent -i ... --api ADDR) or a manager:
  clarion exports --api http://127.0.0.1:8701 add web.clarion   # every export block of the file
  clarion exports --api http://127.0.0.1:8701 list              # name, packets taken, installed
  clarion exports --api http://127.0.0.1:8701 show web          # and its source
  clarion exports --api http://127.0.0.1:8701 rm web

Policies are installed on every worker between its batches; removing one
closes its files and sends its pending headers. Destinations other
policies still use (a collector, a mirror) keep going. A policy added
again writes new files (POLICY-RUN-r2-NNNNNN.pcapng, ...). The token is
found as for clarion events (--token, --token-file, ~/.config/clarion/api-token).
On a manager (clarion manager --api ADDR) the policies go to every agent
(replays and live), now and as they register; list and show count no
packets there (each host's own API does).";

#[derive(Args, Debug)]
pub struct ExportsArgs {
    /// A live host's control API (its --api).
    #[command(flatten)]
    pub api: ApiArgs,

    #[command(subcommand)]
    pub action: ExportsAction,
}

#[derive(Subcommand, Debug)]
pub enum ExportsAction {
    /// Install every export policy of a file (all or none; `-` reads standard input).
    Add {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// List the installed export policies.
    List,
    /// Show one policy: its packets taken so far and its source.
    Show {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Remove a policy (its files are closed, its headers sent).
    #[command(alias = "remove")]
    Rm {
        #[arg(value_name = "NAME")]
        name: String,
    },
}

fn print_export(out: &mut impl Write, x: &ExportInfo) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: {} packets taken, installed {}",
        x.name, x.matched, x.added
    )
}

pub fn exports(a: &ExportsArgs) -> Result<ExitCode, Failure> {
    let (client, failure) = a.api.client()?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &a.action {
        ExportsAction::Add { file } => {
            let text = crate::events::read_events(file)?;
            for x in client
                .add_exports(&text)
                .map_err(|e| crate::events::in_file(failure(e), file))?
            {
                write!(out, "installed ").map_err(io)?;
                print_export(&mut out, &x).map_err(io)?;
            }
        }
        ExportsAction::List => {
            let list = client.exports().map_err(&failure)?;
            if list.is_empty() {
                eprintln!("clarion: no export policy is installed (clarion exports add FILE)");
            }
            for x in list {
                print_export(&mut out, &x).map_err(io)?;
            }
        }
        ExportsAction::Show { name } => {
            let x = client.show_export(name).map_err(&failure)?;
            print_export(&mut out, &x).map_err(io)?;
            writeln!(out, "\n{}", x.source).map_err(io)?;
        }
        ExportsAction::Rm { name } => {
            let x = client.remove_export(name).map_err(&failure)?;
            write!(out, "removed ").map_err(io)?;
            print_export(&mut out, &x).map_err(io)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
