//! `clarion apps`: metric apps (*Flow) on a GPV file, as a host runs them
//! on its GPVs with `--app` (the same report from the same GPVs).

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use clarion_gpv::{GpvReader, APP_NAMES};

use crate::exports::{app_runtime, write_app_report};
use crate::Failure;

pub const AFTER_HELP: &str = "Apps:
  profiler    packet gaps between a flow's packets, per source host (log2 histogram)
  classifier  per flow: sizes and gaps of the first 8 packets, their means and deviations
  microburst  the flows that sent in the last millisecond before the latest packet, by bytes

Examples:
  clarion run --pcap trace.pcap --gpv trace.gpv
  clarion apps run profiler --gpv trace.gpv
  clarion apps run classifier microburst --gpv trace.gpv --output apps.json

The report is one JSON object (schema clarion.apps/1) keyed by app name.";

#[derive(Args, Debug)]
pub struct AppsArgs {
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
}

pub fn apps(a: &AppsArgs) -> Result<ExitCode, Failure> {
    match &a.command {
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
                for g in clarion_parquet::read_gpvs(gpv).map_err(|e| anyhow!(e))? {
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
