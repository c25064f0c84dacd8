//! Why a client could not be set up. The client knows neither the command line nor exit codes:
//! the layer above says which flag a bad certificate came from and which exit code each case
//! deserves (bad input, or a failure inside bench).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The CA certificate file the user gave cannot be used: unreadable, not PEM, no certificate,
    /// or refused by TLS.
    #[error("{}: {why}", path.display())]
    CaCert { path: PathBuf, why: String },
    /// `TTFT_BENCH_TRANSPORT` names no transport.
    #[error("{0}")]
    Transport(String),
    /// Something the client needs could not start (a lane's thread or runtime, the HTTP client).
    #[error("{0}")]
    Start(String),
}

impl SetupError {
    pub(crate) fn ca_cert(path: &std::path::Path, why: impl std::fmt::Display) -> SetupError {
        SetupError::CaCert { path: path.to_path_buf(), why: why.to_string() }
    }
}
