//! Documented exit codes (also listed in `bench --help` and the README): what a verb returns
//! (`Outcome`) or fails with (`Failure`), each mapped to its code by one exhaustive match, as
//! nextest does; `main` applies them and nothing else picks a code.

/// Everything asked for was done and nothing was found wrong.
pub const SUCCESS: u8 = 0;
/// Done, but with findings: verify errors, failed measurements in a sweep, an incomplete merge.
pub const FINDINGS: u8 = 1;
/// Unusable input: bad flags, unreadable or malformed files. Nothing was measured or written.
pub const USAGE: u8 = 2;
/// The server could not be reached or stopped answering: before the first cell (nothing measured),
/// or mid-sweep (every record measured so far is kept; `--resume` finishes).
pub const SERVER: u8 = 3;
/// Results could not be written (disk full, permissions).
pub const IO: u8 = 4;
/// An unexpected failure inside bench itself (a bug: please report it with the message).
pub const INTERNAL: u8 = 5;
/// Interrupted (Ctrl-C / SIGTERM); every record measured so far is on disk.
pub const INTERRUPTED: u8 = 130;

/// How a verb ended that ran to an end of its own: what it returns instead of an exit code, so
/// that `main` holds the only map from outcomes and failures to codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything asked for was done and nothing was found wrong.
    Clean,
    /// Done, with findings (verify errors, failed measurements, an incomplete merge, regressions).
    Findings,
    /// The server went away mid-run and could not be restarted; what was measured is kept.
    ServerGone,
    /// Stopped by a signal; what was measured is kept.
    Interrupted,
}

impl Outcome {
    /// `Findings` when `found`, else `Clean`.
    pub fn findings_if(found: bool) -> Outcome {
        if found { Outcome::Findings } else { Outcome::Clean }
    }

    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Clean => SUCCESS,
            Outcome::Findings => FINDINGS,
            Outcome::ServerGone => SERVER,
            Outcome::Interrupted => INTERRUPTED,
        }
    }
}

/// An error that knows which exit code it deserves. Anything else reaching `main` is `INTERNAL`.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Bad flags, scenario, preset or result files (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The server is unreachable, refuses, or stopped answering (exit 3).
    #[error("{0}")]
    Server(String),
    /// A result file could not be written (exit 4).
    #[error("{0}")]
    Io(String),
    /// Something bench did not expect (exit 5).
    #[error("{0}")]
    Internal(String),
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::Usage(message.into())
    }
    pub fn server(message: impl Into<String>) -> Failure {
        Failure::Server(message.into())
    }
    pub fn io(message: impl Into<String>) -> Failure {
        Failure::Io(message.into())
    }
    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::Internal(message.into())
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => USAGE,
            Failure::Server(_) => SERVER,
            Failure::Io(_) => IO,
            Failure::Internal(_) => INTERNAL,
        }
    }
}

/// A failure the verb has already told the user about, with what it left behind and how to go
/// on: `main` maps it to its exit code without printing it again.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Reported(pub Failure);

/// The exit code of an error that reached `main`: a `Failure` says its own; anything else is a
/// failure nobody planned for, which is not the user's bad input.
pub fn code_of(err: &anyhow::Error) -> u8 {
    if let Some(Reported(failure)) = err.downcast_ref::<Reported>() {
        return failure.exit_code();
    }
    err.downcast_ref::<Failure>().map_or(INTERNAL, Failure::exit_code)
}

/// Whether `main` still has to print the error (a `Reported` one was printed where it happened).
pub fn needs_printing(err: &anyhow::Error) -> bool {
    err.downcast_ref::<Reported>().is_none()
}
