//! Files on disk: the append-only `measurements.jsonl` (`records`), atomically replaced JSON
//! documents (`atomic`), the lock that keeps one writer per run directory (`lock`), and numbers a
//! reading verb sets aside on disk while it reads (`spill`).
//!
//! A record is flushed and fsync'd as it is appended, so a crash or `kill -9` loses at most the
//! record being measured. Documents (run.json, canonical merged files) go to a temp file that is
//! fsync'd and renamed, so readers see either the old or the new file, never half of one. Every
//! write error names the file it failed on.

mod atomic;
mod bodies;
mod direct;
mod lock;
mod placed;
mod records;
mod spill;

pub use atomic::{
    WriteError, interrupted, stop_writes_on_signal, write_atomic, write_atomic_with, write_json_atomic,
};
pub use bodies::{BODIES_FILE, BodyLine, BodyLog};
pub use lock::{KILLED, LOCK_FILE, LockError, RunLock, holder_gone};
pub use placed::{Document, Placed};
pub use records::{
    LineError, RecordWriter, has_records, json_message, parse_record, read_records, read_records_at,
    read_records_from, read_records_with, shown, start_run,
};
pub use spill::Spill;

pub const MEASUREMENTS_FILE: &str = "measurements.jsonl";
pub const RUN_FILE: &str = "run.json";

/// A problem in an input file, located precisely enough to fix it by hand.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct InputError {
    pub file: String,
    /// 1-based; 0 when the problem is the file as a whole.
    pub line: usize,
    pub message: String,
}

impl InputError {
    pub fn new(file: &str, line: usize, message: impl Into<String>) -> InputError {
        InputError { file: file.to_string(), line, message: message.into() }
    }
}

/// How `read_records` treats a torn final line (one without its newline).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TornTail {
    /// Skip it with a warning: resuming after a crash.
    Skip,
    /// Refuse the file: merging must not silently drop data.
    Reject,
}
