//! A bounded Server-Sent Events decoder (the WHATWG "event stream interpretation").
//!
//! Why our own and not eventsource-stream: that crate appends every chunk to one String and
//! re-parses the whole buffer on each chunk, inside a single `poll_next` that keeps pulling chunks
//! until an event completes. An unterminated line therefore costs quadratic CPU and unbounded
//! memory without ever returning to the caller (a 150 MiB line took 31 s against a 5 s timeout,
//! deaf to Ctrl-C). This decoder looks at each byte once, holds at most one line and one event,
//! and returns after every chunk, so the caller can check its deadline between bounded steps.
//! It never sees the clock: arrival is stamped by the caller when a chunk arrives, before it is
//! fed here.
//!
//! Caps (`Limits::max_line_bytes`, `max_event_bytes`; 1 MiB and 16 MiB by default): a line is one
//! JSON chunk of a completion stream, a few hundred bytes (a usage chunk with llama.cpp's timings
//! is under 1 KiB, a logprobs chunk a few KiB), so 1 MiB is a thousand times the largest honest
//! line; an event joins its data lines, and servers send one data line per event, so 16 MiB leaves
//! room for exotic multi-line events while keeping a hostile server far from a sweep's memory.

use std::collections::VecDeque;

use super::Limits;

/// The largest event buffer kept for reuse: token events are a few hundred bytes.
const KEPT_BYTES: usize = 64 << 10;

/// One dispatched event: its `event:` name ("message" when none was given) and its joined data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an SSE line exceeds the {} cap (no line end within {} bytes)", size(*cap), cap)]
    LineTooLong { cap: usize },
    #[error("an SSE event exceeds the {} cap (no blank line within {} bytes of data)", size(*cap), cap)]
    EventTooLarge { cap: usize },
    #[error("invalid UTF-8 at byte {offset} of the stream")]
    InvalidUtf8 { offset: u64 },
}

/// `1 MiB`, `16 MiB`, `512 KiB`, `100 bytes`: caps as people say them.
pub fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

#[derive(Debug, Default)]
pub struct Decoder {
    max_line: usize,
    max_event: usize,
    /// The unfinished line (only used when a line spans chunks).
    line: Vec<u8>,
    /// Stream offset of the first byte of the unfinished line.
    line_start: u64,
    /// Bytes consumed so far.
    offset: u64,
    /// The previous chunk ended in `\r`: a `\n` opening this one belongs to that line end.
    after_cr: bool,
    data: String,
    has_data: bool,
    event: String,
    ready: VecDeque<Event>,
    /// A handled event's buffers, given back by `recycle` for the next one: at hundreds of
    /// thousands of tokens a second, building each event's data in a fresh string (grown a few
    /// times over) was a good part of a lane's allocations.
    spare: Option<Event>,
    failed: Option<SseError>,
}

impl Decoder {
    pub fn new(limits: &Limits) -> Decoder {
        Decoder { max_line: limits.max_line_bytes, max_event: limits.max_event_bytes, ..Default::default() }
    }

    /// Consumes one chunk; complete events become available through `next_event`. Work is
    /// proportional to the chunk. After an error the decoder stays failed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed_inner(chunk);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    pub fn next_event(&mut self) -> Option<Event> {
        self.ready.pop_front()
    }

    /// Gives a handled event's buffers back, emptied, for the next event to be built in. A buffer
    /// grown past `KEPT_BYTES` by an unusually large event is let go, not held for the stream's life.
    pub fn recycle(&mut self, mut event: Event) {
        if event.data.capacity() > KEPT_BYTES {
            return;
        }
        event.event.clear();
        event.data.clear();
        self.spare = Some(event);
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn feed_inner(&mut self, mut chunk: &[u8]) -> Result<(), SseError> {
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
            self.offset += 1;
            self.line_start = self.offset;
        }
        self.after_cr = false;
        while !chunk.is_empty() {
            let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) else {
                if self.line.len() + chunk.len() > self.max_line {
                    return Err(SseError::LineTooLong { cap: self.max_line });
                }
                self.line.extend_from_slice(chunk);
                self.offset += chunk.len() as u64;
                return Ok(());
            };
            if self.line.len() + end > self.max_line {
                return Err(SseError::LineTooLong { cap: self.max_line });
            }
            // A line inside one chunk is parsed in place; only a line spanning chunks is copied.
            if self.line.is_empty() {
                self.on_line(&chunk[..end], self.line_start)?;
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&chunk[..end]);
                self.on_line(&line, self.line_start)?;
                line.clear();
                self.line = line;
            }
            let mut consumed = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(end + 1) {
                    Some(b'\n') => consumed += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            self.offset += consumed as u64;
            self.line_start = self.offset;
            chunk = &chunk[consumed..];
        }
        Ok(())
    }

    fn on_line(&mut self, line: &[u8], start: u64) -> Result<(), SseError> {
        let mut line = match std::str::from_utf8(line) {
            Ok(text) => text,
            Err(e) => return Err(SseError::InvalidUtf8 { offset: start + e.valid_up_to() as u64 }),
        };
        if start == 0 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch();
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(()); // comment (keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_event {
                    return Err(SseError::EventTooLarge { cap: self.max_event });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            _ => {} // id, retry and unknown fields mean nothing to a one-shot stream
        }
        Ok(())
    }

    fn dispatch(&mut self) {
        if !self.has_data {
            self.event.clear();
            return;
        }
        let mut out = self.spare.take().unwrap_or_default();
        // The spare's emptied buffers stay here for the next event.
        std::mem::swap(&mut out.data, &mut self.data);
        if self.event.is_empty() {
            out.event.push_str("message");
        } else {
            std::mem::swap(&mut out.event, &mut self.event);
        }
        self.ready.push_back(out);
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event buffer grown past KEPT_BYTES is not held on to; a small one is.
    #[test]
    fn only_small_buffers_are_kept_for_reuse() {
        let mut d = Decoder::new(&Limits::default());
        let big = format!("data: {}\n\ndata: x\n\n", "y".repeat(KEPT_BYTES + 1));
        d.feed(big.as_bytes()).unwrap();
        let (first, second) = (d.next_event().unwrap(), d.next_event().unwrap());
        d.recycle(first);
        assert!(d.spare.is_none(), "a {} byte buffer was kept", KEPT_BYTES + 1);
        d.recycle(second);
        assert!(d.spare.is_some());
    }

    /// Buffers given back are reused, and nothing of an earlier event leaks into a later one.
    #[test]
    fn recycled_events_carry_nothing_over() {
        let mut d = Decoder::new(&Limits::default());
        let mut seen = Vec::new();
        for chunk in [&b"event: a\ndata: 111111\n\ndata: 2\n\n"[..], b"event: b\ndata: 3\n\ndata: 4\n\n"] {
            d.feed(chunk).unwrap();
            while let Some(e) = d.next_event() {
                seen.push((e.event.clone(), e.data.clone()));
                d.recycle(e);
            }
        }
        let pairs: Vec<(&str, &str)> = seen.iter().map(|(e, d)| (e.as_str(), d.as_str())).collect();
        assert_eq!(pairs, [("a", "111111"), ("message", "2"), ("b", "3"), ("message", "4")]);
    }

    fn decode(chunks: &[&[u8]], limits: Limits) -> (Vec<Event>, Result<(), SseError>) {
        let mut d = Decoder::new(&limits);
        let mut events = Vec::new();
        for c in chunks {
            let r = d.feed(c);
            while let Some(e) = d.next_event() {
                events.push(e);
            }
            if r.is_err() {
                return (events, r);
            }
        }
        (events, Ok(()))
    }

    fn ev(event: &str, data: &str) -> Event {
        Event { event: event.into(), data: data.into() }
    }

    #[test]
    fn events_split_anywhere_decode_the_same() {
        let text = b"\xEF\xBB\xBFdata: {\"a\":1}\r\n\r\n: keep-alive\n\nevent: ping\ndata:x\rdata: y\r\r\ndata: [DONE]\n\n";
        let expected = vec![ev("message", "{\"a\":1}"), ev("ping", "x\ny"), ev("message", "[DONE]")];
        for split in 0..text.len() {
            let (events, r) = decode(&[&text[..split], &text[split..]], Limits::default());
            assert_eq!(r, Ok(()));
            assert_eq!(events, expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(decode(&bytes, Limits::default()).0, expected);
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        let (events, r) = decode(&[b"data: a\n\ndata: b\n"], Limits::default());
        assert_eq!(r, Ok(()));
        assert_eq!(events, vec![ev("message", "a")]);
    }

    #[test]
    fn a_line_over_the_cap_fails_naming_the_cap() {
        let limits = Limits { max_line_bytes: 1024, max_event_bytes: 4096, ..Limits::default() };
        let long = vec![b'x'; 600];
        let (_, r) = decode(&[b"data: ", &long, &long], limits);
        assert_eq!(r, Err(SseError::LineTooLong { cap: 1024 }));
        assert_eq!(
            r.unwrap_err().to_string(),
            "an SSE line exceeds the 1 KiB cap (no line end within 1024 bytes)"
        );
        // Exactly at the cap is fine.
        let exact = vec![b'x'; 1024 - 6];
        let (events, r) = decode(&[b"data: ", &exact, b"\n\n"], limits);
        assert_eq!((r, events.len()), (Ok(()), 1));
    }

    #[test]
    fn an_event_over_the_cap_fails_naming_the_cap() {
        let limits = Limits { max_line_bytes: 100, max_event_bytes: 250, ..Limits::default() };
        let line = format!("data: {}\n", "y".repeat(90));
        let chunks: Vec<&[u8]> = vec![line.as_bytes(); 3];
        let (_, r) = decode(&chunks, limits);
        assert_eq!(r, Err(SseError::EventTooLarge { cap: 250 }));
    }

    #[test]
    fn invalid_utf8_names_its_stream_offset() {
        let (events, r) = decode(&[b"data: ok\n\n", b"data: a\xFFb\n\n"], Limits::default());
        assert_eq!(events.len(), 1);
        assert_eq!(r, Err(SseError::InvalidUtf8 { offset: 10 + 7 }));
        // A character split across chunks is not an error.
        let (events, r) = decode(&[b"data: \xC3", b"\xA9\n\n"], Limits::default());
        assert_eq!((r, events), (Ok(()), vec![ev("message", "é")]));
    }

    #[test]
    fn sizes_read_like_people_say_them() {
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(16 << 20), "16 MiB");
        assert_eq!(size(1536), "1536 bytes");
        assert_eq!(size(512 << 10), "512 KiB");
    }
}
