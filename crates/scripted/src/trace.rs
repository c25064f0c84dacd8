//! The scripted server's own timing of every chat request, so a client in another process can
//! compare what it measured with what the server did.
//!
//! Instants are nanoseconds since one origin on CLOCK_MONOTONIC, the clock `std::time::Instant`
//! reads on Linux and that every process of a host shares. The origin is reported once (the
//! first line of the JSONL log, and `Scripted::clock`): a client turns its own `Instant` into the
//! same scale with `Clock::offset_ns`, so the two sides subtract without any synchronisation.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{ScriptedError, lock};

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the pointer it is given, which is valid.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` and the CLOCK_MONOTONIC reading taken with it: converts instants of this
/// process into nanoseconds on the host's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub origin: Instant,
    /// CLOCK_MONOTONIC at `origin`, nanoseconds.
    pub origin_ns: u64,
}

impl Clock {
    pub fn now() -> Clock {
        Clock { origin: Instant::now(), origin_ns: monotonic_ns() }
    }

    /// `at` as nanoseconds since this clock's origin (0 for an instant before it).
    pub fn since_origin_ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// `at` (an instant of this process) on another process's scale: nanoseconds since the
    /// CLOCK_MONOTONIC reading `their_origin_ns`; negative when `at` is before it.
    pub fn offset_ns(&self, at: Instant, their_origin_ns: u64) -> i64 {
        let mine = match at.checked_duration_since(self.origin) {
            Some(d) => self.origin_ns as i128 + d.as_nanos() as i128,
            None => self.origin_ns as i128 - self.origin.duration_since(at).as_nanos() as i128,
        };
        (mine - their_origin_ns as i128) as i64
    }
}

/// One line of the JSONL log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "record_type", rename_all = "snake_case")]
pub enum TraceLine {
    /// The first line: the origin every `*_ns` of the requests counts from.
    Clock {
        clock: String,
        origin_ns: u64,
        pid: u32,
    },
    Request(RequestTiming),
}

/// What the server did with one chat request, in nanoseconds since the clock origin.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RequestTiming {
    /// The prompt's nonce (`[ref NNNNNNNNNNNN]` of src/prompt), when it carries one.
    pub nonce: Option<String>,
    pub path: String,
    pub stream: bool,
    /// The whole request body had been read.
    pub body_read_ns: u64,
    /// A serving slot was free (`Behaviour::max_concurrent`); equal to `body_read_ns` without a limit.
    pub admitted_ns: u64,
    /// The first content chunk was handed to the connection for writing.
    pub first_content_ns: Option<u64>,
    /// Every content chunk (the first included), when it was handed to the connection.
    pub chunk_ns: Vec<u64>,
    /// Content tokens in each chunk (`Behaviour::tokens_per_chunk`; the last may hold fewer).
    pub tokens_per_chunk: u32,
    /// The response ended (last byte handed over, or the client went away).
    pub end_ns: u64,
    /// False when the stream was dropped before its last event (client gone, fault).
    pub completed: bool,
}

/// Where finished request timings go.
#[derive(Clone)]
pub enum Sink {
    None,
    /// Kept in memory (the in-process test server): `Scripted::timings`.
    Memory(Arc<Mutex<Vec<RequestTiming>>>),
    /// Sent to a writer thread that appends JSONL to a file.
    File(mpsc::Sender<RequestTiming>),
}

impl Sink {
    pub fn submit(&self, timing: RequestTiming) {
        match self {
            Sink::None => {}
            Sink::Memory(all) => lock(all).push(timing),
            // A closed channel means the server is shutting down: nothing left to log to.
            Sink::File(tx) => drop(tx.send(timing)),
        }
    }
}

/// Opens `path` (truncated), writes the clock line, and starts the writer thread. The thread
/// flushes whenever the channel runs dry, so the file is current a moment after each response.
pub fn file_sink(path: &Path, clock: &Clock) -> Result<(Sink, std::thread::JoinHandle<()>), ScriptedError> {
    let io = |source| ScriptedError::Log { path: path.display().to_string(), source };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    let first = TraceLine::Clock {
        clock: "CLOCK_MONOTONIC".into(),
        origin_ns: clock.origin_ns,
        pid: std::process::id(),
    };
    write_line(&mut out, &first).map_err(io)?;
    out.flush().map_err(io)?;
    let (tx, rx) = mpsc::channel::<RequestTiming>();
    let shown = path.display().to_string();
    let handle = std::thread::spawn(move || {
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            while let Some(t) = next {
                if let Err(e) = write_line(&mut out, &TraceLine::Request(t)) {
                    eprintln!("bench-scripted-server: writing {shown}: {e}; timing log stopped");
                    return;
                }
                next = rx.try_recv().ok();
            }
            if let Err(e) = out.flush() {
                eprintln!("bench-scripted-server: writing {shown}: {e}; timing log stopped");
                return;
            }
        }
    });
    Ok((Sink::File(tx), handle))
}

fn write_line(out: &mut impl Write, line: &TraceLine) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")
}

/// A request being served: submitted to the sink when dropped, so a stream the client abandons
/// is logged too (`completed: false`).
pub struct Trace {
    clock: Clock,
    sink: Sink,
    pub timing: RequestTiming,
}

impl Trace {
    pub fn new(clock: Clock, sink: Sink, path: &str, nonce: Option<String>, body_read: Instant) -> Trace {
        let at = clock.since_origin_ns(body_read);
        let timing = RequestTiming {
            nonce,
            path: path.into(),
            body_read_ns: at,
            admitted_ns: at,
            tokens_per_chunk: 1,
            ..RequestTiming::default()
        };
        Trace { clock, sink, timing }
    }

    pub fn admitted(&mut self, at: Instant) {
        self.timing.admitted_ns = self.clock.since_origin_ns(at);
    }

    pub fn content(&mut self, at: Instant) {
        let ns = self.clock.since_origin_ns(at);
        self.timing.first_content_ns.get_or_insert(ns);
        self.timing.chunk_ns.push(ns);
    }

    pub fn completed(&mut self) {
        self.timing.completed = true;
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.timing.end_ns = self.clock.since_origin_ns(Instant::now());
        self.sink.submit(std::mem::take(&mut self.timing));
    }
}

/// The nonce of a prompt made by src/prompt (`[ref NNNNNNNNNNNN] Notes: ...`).
pub fn nonce_of(text: &str) -> Option<String> {
    let rest = &text[text.find("[ref ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!digits.is_empty() && rest[digits.len()..].starts_with(']')).then_some(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_maps_onto_another_origin_exactly() {
        let clock = Clock::now();
        let later = clock.origin + std::time::Duration::from_micros(1500);
        assert_eq!(clock.offset_ns(later, clock.origin_ns), 1_500_000);
        assert_eq!(clock.offset_ns(later, clock.origin_ns + 2_000_000), -500_000);
        assert_eq!(clock.since_origin_ns(later), 1_500_000);
    }
}
