//! Documented exit codes (also listed in `bench --help` and the README): what a verb returns
//! (`Outcome`) or fails with (`Failure`), each mapped to its code by one exhaustive match, as
//! nextest does; `main` applies them and nothing else picks a code.
//!
//! The crates below (the record model, the client, the result files) return errors of their own
//! and know neither flags nor exit codes: each of their errors converts to its `Failure` here,
//! once, with the flag it came from where the user gave it.

/// What to do about a run that did not finish, in the flags' words: the result files' readers say
/// the run was interrupted or killed (they know no verb), the verbs that show it add this.
pub(crate) const RESUME_ADVICE: &str = "finish it with bench sweep --resume";

/// Everything asked for was done and nothing was found wrong.
pub const SUCCESS: u8 = 0;
/// Done, but with findings: verify errors, failed measurements in a sweep, an incomplete merge.
pub(crate) const FINDINGS: u8 = 1;
/// Unusable input: bad flags, unreadable or malformed files. Nothing was measured or written.
pub(crate) const USAGE: u8 = 2;
/// The server could not be reached or stopped answering: before the first cell (nothing measured),
/// or mid-sweep (every record measured so far is kept; `--resume` finishes).
pub(crate) const SERVER: u8 = 3;
/// Results could not be written (disk full, permissions).
pub(crate) const IO: u8 = 4;
/// An unexpected failure inside bench itself (a bug: please report it with the message).
pub(crate) const INTERNAL: u8 = 5;
/// Interrupted (Ctrl-C / SIGTERM); every record measured so far is on disk.
pub(crate) const INTERRUPTED: u8 = 130;

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
    pub(crate) fn findings_if(found: bool) -> Outcome {
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
pub(crate) struct Reported(pub Failure);

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

/// A client that cannot be set up: a bad `--ca-cert` file or transport setting is the user's
/// input; a lane that cannot start is bench's own failure.
impl From<ttft_client::SetupError> for Failure {
    fn from(e: ttft_client::SetupError) -> Failure {
        use ttft_client::SetupError;
        match e {
            SetupError::CaCert { .. } => Failure::Usage(format!("--ca-cert {e}")),
            SetupError::Transport(why) => Failure::Usage(why),
            SetupError::Start(why) => Failure::Internal(why),
        }
    }
}

/// A hardware or model description that cannot be used came from a flag or a file the user gave:
/// the message names each input by the flag that gives it (the physics crate knows no flags).
impl From<ttft_results::physics::PhysicsError> for Failure {
    fn from(e: ttft_results::physics::PhysicsError) -> Failure {
        Failure::Usage(e.describe(&physics_flag))
    }
}

/// The flag that gives each physics input (`bench sweep`, `load`, `soak` and `verify` alike).
fn physics_flag(input: ttft_results::physics::PhysicsInput) -> &'static str {
    use ttft_results::physics::PhysicsInput;
    match input {
        PhysicsInput::Hardware => "--hardware",
        PhysicsInput::BandwidthGbps => "--bandwidth-gbps",
        PhysicsInput::Tflops => "--tflops",
        PhysicsInput::ModelFile => "--model-file",
        PhysicsInput::ModelBytes => "--model-bytes",
        PhysicsInput::Params => "--params",
    }
}

/// A result file that cannot be read is the user's input, named by file and line.
impl From<ttft_results::store::InputError> for Failure {
    fn from(e: ttft_results::store::InputError) -> Failure {
        Failure::Usage(e.to_string())
    }
}

/// An input without records, refused unless `--allow-empty` accepts it.
impl From<ttft_results::results::sources::EmptyInput> for Failure {
    fn from(e: ttft_results::results::sources::EmptyInput) -> Failure {
        Failure::Usage(format!("{e} (use --allow-empty to accept inputs without records)"))
    }
}

/// A result file that cannot be written: the output's fault (a full disk, permissions: exit 4), or
/// the input's when what it copies from an input changed since it was read (a located record's
/// text: exit 2).
impl From<ttft_results::store::WriteError> for Failure {
    fn from(e: ttft_results::store::WriteError) -> Failure {
        match ttft_results::results::text::InputFault::of(&e.source) {
            Some(fault) => Failure::Usage(fault.to_string()),
            None => Failure::Io(e.to_string()),
        }
    }
}

/// A run another bench process holds is the user's to wait for; a lock that cannot be written
/// is a write failure like any other.
impl From<ttft_results::store::LockError> for Failure {
    fn from(e: ttft_results::store::LockError) -> Failure {
        match e {
            ttft_results::store::LockError::Held { .. } => Failure::Usage(e.to_string()),
            ttft_results::store::LockError::Io { .. } => Failure::Io(e.to_string()),
        }
    }
}

/// A `--dataset` that cannot be used.
impl From<crate::dataset::DatasetError> for Failure {
    fn from(e: crate::dataset::DatasetError) -> Failure {
        Failure::Usage(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_client::SetupError;

    /// Each lower crate's error reaches the user with the exit code of its kind, and a bad
    /// certificate file names the flag it came from.
    #[test]
    fn lower_crates_errors_map_to_their_exit_codes() {
        let ca = Failure::from(SetupError::CaCert {
            path: "ca.pem".into(),
            why: "holds no PEM certificate".into(),
        });
        assert_eq!(
            (ca.exit_code(), ca.to_string().as_str()),
            (USAGE, "--ca-cert ca.pem: holds no PEM certificate")
        );
        assert_eq!(Failure::from(SetupError::Transport("x".into())).exit_code(), USAGE);
        assert_eq!(Failure::from(SetupError::Start("lane".into())).exit_code(), INTERNAL);
        let input = Failure::from(ttft_results::store::InputError::new("r.jsonl", 3, "not JSON"));
        assert_eq!((input.exit_code(), input.to_string().as_str()), (USAGE, "r.jsonl:3: not JSON"));
        let empty = Failure::from(ttft_results::results::sources::EmptyInput { path: "run".into() });
        assert_eq!(empty.exit_code(), USAGE);
        assert!(empty.to_string().starts_with("no records in run (use --allow-empty"), "{empty}");
        assert_eq!(Failure::from(ttft_results::physics::PhysicsError::NoTensors).exit_code(), USAGE);
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert_eq!(
            Failure::from(ttft_results::store::WriteError::new("r.json".as_ref(), "write", full)).exit_code(),
            IO
        );
        let held = ttft_results::store::LockError::Held { path: "run/bench.lock".into(), pid: Some(7) };
        assert_eq!(Failure::from(held).exit_code(), USAGE);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let unwritable = ttft_results::store::LockError::Io { path: "run/bench.lock".into(), source: denied };
        assert_eq!(Failure::from(unwritable).exit_code(), IO);
    }
}
