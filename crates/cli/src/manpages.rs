//! `clarion man --out-dir DIR`: the manual pages, made by `clap_mangen`
//! from the command definition (so they say what `--help` says): clarion(1)
//! and one page per command, `clarion-run(1)` and so on, as `git` names
//! its commands' pages.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion man --out-dir /usr/local/share/man/man1 && mandb -q
  clarion man --out-dir /tmp/man && man -l /tmp/man/clarion-run.1

Writes clarion.1 and clarion-COMMAND.1 for every command (subcommands of
commands too, e.g. clarion-events-add.1). The Debian package installs them.";

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Where to write the pages (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
}

/// `cmd`: the command definition (the binary's root holds it).
pub fn man(a: &ManArgs, mut cmd: clap::Command) -> Result<ExitCode, Failure> {
    std::fs::create_dir_all(&a.out_dir).with_context(|| format!("cannot create {}", a.out_dir.display()))?;
    cmd.build();
    let written = write_pages(&cmd, "clarion", &a.out_dir)?;
    eprintln!("clarion: wrote {written} manual pages to {}", a.out_dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes `name.1` for `cmd` and recurses into its subcommands (but
/// `help`); returns the number of pages written.
fn write_pages(cmd: &clap::Command, name: &str, dir: &Path) -> anyhow::Result<usize> {
    // The page's title is its file name, as `man` shows it; every page
    // carries the program's version (subcommands have none of their own).
    let page = cmd
        .clone()
        .name(name.to_string())
        .version(env!("CARGO_PKG_VERSION"));
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut roff)
        .with_context(|| format!("cannot render the page of {name}"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))?;
    let mut written = 1;
    for sub in cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        written += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(written)
}
