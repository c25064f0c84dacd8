//! Documented exit codes (also listed in `bench --help` and the README).

use std::process::ExitCode;

/// Everything asked for was done and nothing was found wrong.
pub const SUCCESS: u8 = 0;
/// Done, but with findings: verify errors, failed measurements in a sweep, an incomplete merge.
pub const FINDINGS: u8 = 1;
/// Unusable input: bad flags, unreadable or malformed files. Nothing was measured or written.
pub const USAGE: u8 = 2;
/// The server could not be reached (or refused the model) before anything was measured.
pub const SERVER: u8 = 3;
/// Results could not be written (disk full, permissions).
pub const IO: u8 = 4;
/// Interrupted (Ctrl-C / SIGTERM); every record measured so far is on disk.
pub const INTERRUPTED: u8 = 130;

/// An error that knows which exit code it deserves.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: USAGE, message: message.into() }
    }
    pub fn server(message: impl Into<String>) -> Failure {
        Failure { code: SERVER, message: message.into() }
    }
    pub fn io(message: impl Into<String>) -> Failure {
        Failure { code: IO, message: message.into() }
    }
}

pub fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}
