//! Primary output (tables, JSON, paths) goes through here, not `println!`.
//!
//! `println!` panics when stdout is closed early (`bench verify | head -1`). A closed pipe means
//! the reader has what it wanted: bench stops writing to it, but the verb's verdict stands. The
//! exit code is the verb's own (findings stay 1), never 0 for having lost its reader: under
//! `set -o pipefail` a CI gate would otherwise pass a run with errors. No writer here ends the
//! process; `main` maps every verb's result to its code.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found stdout closed; later writes are skipped.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout. A broken pipe (the reader went away) is not an error: the text is
/// dropped, as is everything printed after it (`closed` says so); any other failure is returned.
pub fn print(text: &str) -> io::Result<()> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}

/// `print` with a trailing newline.
pub fn println(text: &str) -> io::Result<()> {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    print(&line)
}

/// Whether stdout was found closed: what was printed from then on never reached a reader.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// The width tables are laid out for (report, compare): a terminal's, wide enough for every column.
pub const TERMINAL_WIDTH: u16 = 100;

/// A number for a table cell, in few significant digits: tables are for reading; CSV and JSON carry
/// full precision.
pub fn short(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        // Beyond any real time or rate (a corrupt file): keep the column narrow.
        Some(x) if x.abs() >= 1e9 => format!("{x:.2e}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}
