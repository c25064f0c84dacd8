//! Why a response body stopped before its end, in the same words on both transports (reqwest's
//! and the direct HTTP/1.1 path). Below the body reader and the framing parser alike: both name a
//! broken body, neither knows the other.

/// Why a body stopped before its end, after `read` payload bytes. The same words on both
/// transports; they land in records (`error.message`): keep them.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Broken {
    #[error("connection reset by the server while reading the body (after {read} bytes)")]
    Reset { read: u64 },
    #[error("the server closed the connection before the body was complete (after {read} bytes)")]
    ClosedEarly { read: u64 },
    /// The body's framing (chunked encoding) broke the rules; `why` is the parser's own account
    /// (h1.rs or hyper's).
    #[error("the body's framing is broken (after {read} bytes): {why}")]
    Framing { read: u64, why: String },
    #[error("the body could not be read (after {read} bytes): {why}")]
    Unreadable { read: u64, why: String },
}

/// The connection was reset or closed under the reader.
pub(crate) fn ended(io: &std::io::Error) -> bool {
    use std::io::ErrorKind as Io;
    matches!(io.kind(), Io::ConnectionReset | Io::UnexpectedEof | Io::ConnectionAborted | Io::BrokenPipe)
}

/// What a failed read of a socket means, after `read` bytes of the body.
pub(crate) fn broken_io(io: &std::io::Error, read: u64) -> Broken {
    match io.kind() {
        std::io::ErrorKind::ConnectionReset => Broken::Reset { read },
        _ if ended(io) => Broken::ClosedEarly { read },
        _ => Broken::Unreadable { read, why: io.to_string() },
    }
}
