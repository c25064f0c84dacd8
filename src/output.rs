//! Primary output (tables, JSON, paths) goes through here, not `println!`.
//!
//! `println!` panics when stdout is closed early (`bench verify | head -1`). A closed pipe means
//! the reader has what it wanted, so, like ripgrep, bench stops writing and exits 0 quietly.

use std::io::{self, Write};

/// Writes `text` to stdout. A broken pipe ends the process with exit 0 (the reader went away);
/// any other failure is returned.
pub fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
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
