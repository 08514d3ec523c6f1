//! How a command fails, and the exit status and message each failure gives.

use std::process::ExitCode;

/// How a command failed, which decides the exit status.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage (for `clarion`, also an invalid events file): exit 2. The
    /// message is already rendered, with the program's prefix.
    Usage(String),
    /// Runtime failure: exit 1.
    Runtime(anyhow::Error),
    /// Standard output was closed by the reader (`| head`): exit 0 quietly.
    BrokenPipe,
}

/// Any error `anyhow` takes is a runtime failure, so `?` works on it.
impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Runtime(e.into())
    }
}

/// The exit status of a command's result. A failure is reported on standard
/// error first: a usage message as rendered, a runtime error as one line
/// `PROGRAM: error: cause: …`; a broken pipe quietly.
pub fn exit(program: &str, result: Result<ExitCode, Failure>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprint!("{msg}");
            if !msg.ends_with('\n') {
                eprintln!();
            }
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("{program}: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The exit status of a command line the parser did not accept: clap prints
/// help and version to standard output with exit 0, and usage errors to
/// standard error with exit 2.
pub fn parse_exit(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    ExitCode::from(if e.use_stderr() { 2 } else { 0 })
}
