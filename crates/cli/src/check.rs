//! `clarion check`: validate an events file (or a file of export
//! policies) and print its canonical form.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context;
use clarion_engine::cost;
use clarion_lang::spec::EventSpec;

use crate::args::{CheckArgs, When};
use crate::Failure;

pub fn check(a: &CheckArgs) -> Result<ExitCode, Failure> {
    let name = a.file.display().to_string();
    let color = match a.color {
        When::Always => true,
        When::Never => false,
        When::Auto => std::io::stderr().is_terminal(),
    };
    let bytes = std::fs::read(&a.file)
        .with_context(|| format!("cannot read events file {name}"))
        .map_err(|e| Failure::Usage(format!("clarion: {e:#}")))?;
    let src = &events_text(&name, bytes, color)?;
    let file = clarion_lang::parse(src).map_err(|d| Failure::Usage(d.render(&name, src, color)))?;
    if file.events.is_empty() && !file.exports.is_empty() {
        // A file of export policies (`--exports`): checked as such.
        clarion_lang::check_exports(src).map_err(|d| Failure::Usage(d.render(&name, src, color)))?;
        return print_canonical(&file, a.quiet);
    }
    let specs = clarion_lang::lower(&file).map_err(|d| Failure::Usage(d.render(&name, src, color)))?;
    if a.cost {
        eprintln!("clarion: note: {name}: {}", cost::predict(&specs).note());
    }
    if a.quiet {
        return Ok(ExitCode::SUCCESS);
    }
    warn_cost(&a.file, &specs, 1, false);
    print_canonical(&file, false)?;
    for s in specs.iter() {
        let pending = s.unsupported_variables();
        if !pending.is_empty() {
            let names: Vec<String> = pending.iter().map(ToString::to_string).collect();
            eprintln!(
                "clarion: note: event `{}` is valid but uses {}, which `clarion run` does not compute yet",
                s.name,
                names.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the file's canonical form (unless `quiet`).
fn print_canonical(file: &clarion_lang::ast::File, quiet: bool) -> Result<ExitCode, Failure> {
    if quiet {
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    let text = file.to_string();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::BrokenPipe),
        Err(e) => Err(Failure::Runtime(
            anyhow::Error::new(e).context("cannot write to standard output"),
        )),
    }
}

/// Warns on standard error when the events of `path` are predicted to
/// cost more than `workers` can pay for (`clarion_engine::cost`): a
/// warning, not an error, since the traffic may be kinder than the worst case.
pub fn warn_cost(path: &std::path::Path, specs: &[EventSpec], workers: u32, quiet: bool) {
    if quiet {
        return;
    }
    if let Some(w) = cost::predict(specs).warning(workers) {
        eprintln!("clarion: warning: {}: {w}", path.display());
    }
}

/// [`clarion_host_api::read_events_file`], its refusal a usage failure.
pub fn read_events_file(path: &std::path::Path) -> Result<String, Failure> {
    clarion_host_api::read_events_file(path).map_err(Failure::Usage)
}

/// [`clarion_host_api::events_text`], its refusal a usage failure.
pub fn events_text(name: &str, bytes: Vec<u8>, color: bool) -> Result<String, Failure> {
    clarion_host_api::events_text(name, bytes, color).map_err(Failure::Usage)
}
