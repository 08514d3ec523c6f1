//! `clarion credentials`: an nkey per host of an inventory and one for the
//! manager, and the nats-server authorization that lets each host speak
//! only as itself (`clarion_nats::credentials`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use clarion_manager::Inventory;
use clarion_nats::credentials::{new_key, server_authorization, UserKey};

use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion credentials --inventory hosts.txt --out-dir creds
  nats-server -c creds/nats-server.conf
  clarion manager --inventory hosts.txt --nats-nkey creds/manager.nk ...
  clarion agent --host web-1 --nats-nkey creds/web-1.nk ...   (on web-1, with only its own file)

Writes, into a new or empty directory: NAME.nk for each host (its nkey seed,
mode 0600: copy it to that host only), manager.nk, and nats-server.conf, whose
authorization block lets each host publish only as itself (its own
clarion.up.NAME subject and registrations, and its own flow records and
reports to a JetStream stream: clarion.records.NAME, clarion.reports.NAME,
a stream looked up but not created), answer only the polls it receives, and
read only its own subjects and replies; the manager may do anything. Add the server's own settings (listen, TLS, JetStream) to that file,
or `include` it. The server then refuses a host that publishes as another,
and the manager refuses a registration whose reply is not the named host's.
No existing file is overwritten.";

#[derive(Args, Debug)]
pub struct CredentialsArgs {
    /// The hosts, one per line: a name, then its prefixes (as for the manager).
    #[arg(long, value_name = "FILE")]
    pub inventory: PathBuf,
    /// Where to write the keys and the server's configuration (created; must be empty if it exists).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
    /// The manager's key is named after this (manager.nk by default).
    #[arg(long, default_value = "manager", value_name = "NAME")]
    pub manager_name: String,
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn credentials(a: &CredentialsArgs) -> Result<ExitCode, Failure> {
    let text = std::fs::read_to_string(&a.inventory)
        .map_err(|e| Failure::Usage(format!("clarion: cannot read {}: {e}", a.inventory.display())))?;
    let inventory = Inventory::parse(&text)
        .map_err(|e| Failure::Usage(format!("clarion: {}: {e}", a.inventory.display())))?;
    let names: Vec<String> = inventory.hosts().iter().map(|h| h.name.clone()).collect();
    for n in &names {
        clarion_nats::protocol::check_host_name(n).map_err(|e| Failure::Usage(format!("clarion: {e}")))?;
    }
    if names.contains(&a.manager_name) {
        return Err(Failure::Usage(format!(
            "clarion: the manager's key would be named like host `{}`; choose another --manager-name",
            a.manager_name
        )));
    }
    empty_dir(&a.out_dir)?;
    let key = |n: &str| new_key(n).map_err(|e| Failure::Runtime(anyhow::anyhow!(e)));
    let manager = key(&a.manager_name)?;
    let hosts = names
        .iter()
        .map(|n| key(n))
        .collect::<Result<Vec<UserKey>, _>>()?;
    for k in std::iter::once(&manager).chain(&hosts) {
        write_new(
            &a.out_dir.join(format!("{}.nk", k.name)),
            &format!("{}\n", k.seed),
            0o600,
        )?;
    }
    let conf = a.out_dir.join("nats-server.conf");
    write_new(&conf, &server_authorization(&manager, &hosts), 0o644)?;
    if !a.quiet {
        eprintln!(
            "clarion: credentials for {} host(s) and the manager in {}; start the server with `nats-server -c {}`, give each agent only its own NAME.nk (--nats-nkey)",
            hosts.len(),
            a.out_dir.display(),
            conf.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates `dir`, or checks that it is an empty directory.
fn empty_dir(dir: &Path) -> Result<(), Failure> {
    let fail = |why: String| Failure::Usage(format!("clarion: {}: {why}", dir.display()));
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(fail(
                    "is not empty; keys are never overwritten: choose a new directory".into(),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))
        }
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Writes a file that must not exist yet, created with `mode`.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::Runtime(anyhow::anyhow!("cannot write {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    f.write_all(text.as_bytes()).map_err(fail)?;
    f.sync_all().map_err(fail)
}
