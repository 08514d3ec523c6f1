//! `clarion completions SHELL`: a completion script for the shell, made by
//! `clap_complete` from the same command definition that parses the flags,
//! so it never falls behind them.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use clap_complete::Shell;

use crate::Failure;

pub const AFTER_HELP: &str = "Examples:
  clarion completions bash > /etc/bash_completion.d/clarion
  clarion completions zsh > \"${fpath[1]}/_clarion\"
  clarion completions fish > ~/.config/fish/completions/clarion.fish

The Debian package installs the bash, zsh and fish scripts already.";

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `cli`: the command definition (the binary's root holds it).
pub fn completions(a: &CompletionsArgs, mut cli: clap::Command) -> Result<ExitCode, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cli, "clarion", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::BrokenPipe),
        Err(e) => Err(anyhow::Error::new(e)
            .context("cannot write the completion script")
            .into()),
    }
}
