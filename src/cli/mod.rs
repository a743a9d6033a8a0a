//! The subcommands that run a tool rather than the proxy: each parses its
//! own flags and calls into [`tokenclock::tools`].

pub mod demo;
pub mod load;
pub mod sim;

use std::{
    io::{ErrorKind, Write},
    process::ExitCode,
};

/// Writes a command's output to stdout: `ok` when it was written, or when
/// the reader went first (`report … | head`: a closed pipe is the reader's
/// choice, so the command ends quietly with success, as `git log | head`
/// does), `1` with one line on stderr for any other failed write (a full
/// disk). `print!` would panic there, exit 101 with a backtrace.
pub fn emit(text: &str, ok: ExitCode) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ok,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => ok,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "tokenclock: writing the output: {e}");
            ExitCode::from(1)
        }
    }
}
