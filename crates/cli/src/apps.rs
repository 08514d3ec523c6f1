//! `clarion apps`: metric apps (*Flow) on a GPV file, as a host runs them
//! on its GPVs with `--app` (the same report from the same GPVs).

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use clarion_gpv::{GpvReader, APP_NAMES};

use std::io::Write;

use crate::events::ApiArgs;
use crate::exports::{app_runtime, write_app_report};
use crate::failure::io;
use crate::Failure;

pub const AFTER_HELP: &str = "Apps:
  profiler    packet gaps between a flow's packets, per source host (log2 histogram)
  classifier  per flow: sizes and gaps of the first 8 packets, their means and deviations
  microburst  the flows that sent in the last millisecond before the latest packet, by bytes

Examples:
  clarion run --pcap trace.pcap --gpv trace.gpv
  clarion apps run profiler --gpv trace.gpv
  clarion apps run classifier microburst --gpv trace.gpv --output apps.json

On a running host (clarion run -i ... --api ADDR with --gpv FILE or --app NAME):
  clarion apps --api http://127.0.0.1:8701 add profiler     # from now on
  clarion apps --api http://127.0.0.1:8701 running
  clarion apps --api http://127.0.0.1:8701 show profiler    # its report so far
  clarion apps --api http://127.0.0.1:8701 rm profiler      # stops it; its last report

The report is one JSON object (schema clarion.apps/1) keyed by app name;
show and rm print the one app's report. The token is found as for
clarion events (--token, --token-file, ~/.config/clarion/api-token).";

#[derive(Args, Debug)]
pub struct AppsArgs {
    /// A live host's control API, for add, running, show and rm.
    #[command(flatten)]
    pub api: ApiArgs,

    #[command(subcommand)]
    pub command: AppsCommand,
}

#[derive(Subcommand, Debug)]
pub enum AppsCommand {
    /// Run apps over a GPV file and print their report.
    Run {
        /// Apps to run (profiler, classifier, microburst).
        #[arg(required = true, value_name = "APP")]
        apps: Vec<String>,
        /// The GPV file (written by `clarion run --gpv FILE.gpv` or `FILE.parquet`).
        #[arg(long, value_name = "FILE")]
        gpv: PathBuf,
        /// Write the report to FILE instead of standard output.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// List the apps.
    List,
    /// Start an app on a running host's GPVs (its --api).
    Add {
        #[arg(value_name = "APP")]
        name: String,
    },
    /// The apps running on a host.
    Running,
    /// A running app's report so far.
    Show {
        #[arg(value_name = "APP")]
        name: String,
    },
    /// Stop an app on a host; prints its last report.
    #[command(alias = "remove")]
    Rm {
        #[arg(value_name = "APP")]
        name: String,
    },
}

pub fn apps(a: &AppsArgs) -> Result<ExitCode, Failure> {
    let print = |v: &dyn std::fmt::Display| writeln!(std::io::stdout(), "{v}").map_err(io);
    match &a.command {
        AppsCommand::Add { name } => {
            let (client, failure) = a.api.client()?;
            let info = client.add_app(name).map_err(failure)?;
            print(&format!("started {name}; running: {}", info.running.join(", ")))?;
            Ok(ExitCode::SUCCESS)
        }
        AppsCommand::Running => {
            let (client, failure) = a.api.client()?;
            for name in client.apps().map_err(failure)?.running {
                print(&name)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        AppsCommand::Show { name } => {
            let (client, failure) = a.api.client()?;
            print(&client.show_app(name).map_err(failure)?)?;
            Ok(ExitCode::SUCCESS)
        }
        AppsCommand::Rm { name } => {
            let (client, failure) = a.api.client()?;
            print(&client.remove_app(name).map_err(failure)?)?;
            Ok(ExitCode::SUCCESS)
        }
        AppsCommand::List => {
            for name in APP_NAMES {
                println!("{name}");
            }
            Ok(ExitCode::SUCCESS)
        }
        AppsCommand::Run { apps, gpv, output } => {
            let mut runtime = app_runtime(apps)?;
            if gpv.extension().is_some_and(|e| e == "parquet") {
                // Parquet GPVs (`run --gpv FILE.parquet`) are read whole.
                for g in read_parquet_gpvs(gpv)? {
                    runtime.on_gpv(&g);
                }
            } else {
                let file =
                    File::open(gpv).map_err(|e| anyhow!("cannot read GPV file {}: {e}", gpv.display()))?;
                let reader = GpvReader::new(BufReader::new(file))
                    .map_err(|e| anyhow!("cannot read GPV file {}: {e}", gpv.display()))?;
                runtime
                    .run(reader)
                    .map_err(|e| anyhow!("GPV file {}: {e}", gpv.display()))?;
            }
            write_app_report(&mut runtime, output.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(feature = "parquet")]
fn read_parquet_gpvs(path: &std::path::Path) -> Result<Vec<clarion_gpv::Gpv>, Failure> {
    clarion_parquet::read_gpvs(path).map_err(|e| Failure::Runtime(anyhow!(e)))
}

/// Refused as the registry refuses writing one, naming the feature.
#[cfg(not(feature = "parquet"))]
fn read_parquet_gpvs(path: &std::path::Path) -> Result<Vec<clarion_gpv::Gpv>, Failure> {
    Err(Failure::Usage(format!(
        "clarion: {}: this clarion was built without Parquet output (cargo feature `parquet`); \
         build it with `--features parquet`, or the default features",
        path.display()
    )))
}
