//! Reading a connection so that each event keeps its own arrival stamp, even when the lane reading
//! it has fallen behind.
//!
//! A read carries the kernel's stamp of its *last* byte (socket.rs). Two events waiting in a
//! socket keep their own stamps there, but one read that takes both reports only the later one,
//! so the earlier token would be stamped one interval late. (The kernel itself merges waiting
//! packets only once it has acknowledged the earlier one: during a connection's first quick
//! acknowledgements, and past about 536 unacknowledged bytes; docs/client-lanes.md.) So a lane
//! that is behind first peeks at what a socket holds, then takes it one event per read. Measured
//! there: one stall of a lane's core used to cost a token pair on every stream of the lane; now
//! on the first stream read after it.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::time::Duration;

use super::socket;

/// A read whose last byte arrived longer ago than this means its lane is behind the arrivals.
const BEHIND: Duration = Duration::from_micros(250);

thread_local! {
    /// The lane (a lane is one thread) is behind: its sockets may each hold several events.
    static LANE_BEHIND: Cell<bool> = const { Cell::new(false) };
}

/// One connection's reads: the lengths of the events a peek saw waiting and not yet read, the
/// next one last.
#[derive(Default)]
pub(super) struct EventReads {
    queued: Vec<usize>,
}

impl EventReads {
    /// Reads into `room` without blocking: the byte count and how long ago its last byte arrived,
    /// when the kernel said. While the lane is behind, one event per read.
    pub fn read(&mut self, fd: RawFd, room: &mut [u8]) -> std::io::Result<(usize, Option<Duration>)> {
        // The first read of what the socket holds says how far behind the lane is; the events a
        // peek saw waiting after it say nothing more (the last may be fresh while other sockets
        // still hold old ones), so they leave the flag as it is.
        let first = self.queued.is_empty();
        if first && LANE_BEHIND.get() {
            let held = socket::peek(fd, room)?;
            event_lengths(&room[..held], &mut self.queued);
        }
        let want = self.queued.pop().map_or(room.len(), |len| len.min(room.len()));
        let (n, age) = socket::recv(fd, &mut room[..want])?;
        if n < want {
            self.queued.clear(); // not what the peek saw: take the rest as it comes
        }
        if first {
            LANE_BEHIND.set(age.is_some_and(|age| age > BEHIND));
        }
        Ok((n, age))
    }
}

/// Splits what a socket holds into the events it begins with, each ending after a blank line
/// ("\n\n" or "\r\n\r\n"; a response head ends so too), and the rest: their lengths into
/// `queued`, the first one last. Framing between events (a chunk's size line) goes with the event
/// after it, so each piece's last byte is its event's last.
fn event_lengths(held: &[u8], queued: &mut Vec<usize>) {
    queued.clear();
    let mut from = 0;
    for i in memchr::memchr_iter(b'\n', held) {
        let blank = (i >= 1 && held[i - 1] == b'\n') || (i >= 3 && &held[i - 3..i] == b"\r\n\r");
        if blank {
            queued.push(i + 1 - from);
            from = i + 1;
        }
    }
    if from < held.len() {
        queued.push(held.len() - from);
    }
    queued.reverse();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peek_splits_into_events_with_the_framing_before_each_going_with_it() {
        let event = |text: &str| {
            let data = format!("data: {text}\n\n");
            format!("{:x}\r\n{data}\r\n", data.len())
        };
        let mut queued = Vec::new();
        let held = format!("HTTP/1.1 200 OK\r\nx: y\r\n\r\n{}{}da", event("{\"a\":1}"), event("{\"b\":2}"));
        event_lengths(held.as_bytes(), &mut queued);
        let mut pieces = Vec::new();
        let mut from = 0;
        while let Some(len) = queued.pop() {
            pieces.push(&held[from..from + len]);
            from += len;
        }
        assert_eq!(from, held.len());
        assert_eq!(pieces.len(), 4, "{pieces:?}");
        assert!(pieces[0].ends_with("\r\n\r\n") && pieces[1].ends_with("1}\n\n"));
        assert!(pieces[2].starts_with("\r\n") && pieces[2].ends_with("\n\n") && pieces[3] == "\r\nda");
    }
}
