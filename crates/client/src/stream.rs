//! The synchronous half of reading a stream: the stream cap, SSE decoding and the dialect's event
//! handling, one chunk at a time, with no clock and no socket. `body::read_stream` drives it from
//! the network (stamping each chunk's arrival before handing it here); `replay_stream` drives it
//! from bytes, for fuzzing and tests, so both exercise the same code.

use super::sse::{self, Decoder};
use super::{Api, EventOutcome, Exchange, Limits, anthropic, openai};
use ttft_model::record::ErrorKind;

pub struct StreamState {
    api: Api,
    decoder: Decoder,
    total: u64,
    max_stream: u64,
    done: bool,
}

impl StreamState {
    pub fn new(api: Api, limits: &Limits) -> StreamState {
        StreamState {
            api,
            decoder: Decoder::new(limits),
            total: 0,
            max_stream: limits.max_stream_bytes,
            done: false,
        }
    }

    /// One chunk that arrived at `at_ms`. Returns false once the stream is over: its end marker
    /// arrived, or an error is recorded in `ex`. Work is proportional to the chunk.
    ///
    /// The outcome does not depend on how the bytes were cut into chunks: events completed before
    /// a cap or a bad byte are handled first, and a chunk crossing the stream cap is read up to it.
    pub fn on_chunk(&mut self, chunk: &[u8], at_ms: f64, ex: &mut Exchange) -> bool {
        let room = self.max_stream.saturating_sub(self.total);
        let over = chunk.len() as u64 > room;
        let take = if over { room as usize } else { chunk.len() };
        self.total += take as u64;
        let fed = self.decoder.feed(&chunk[..take]);
        while let Some(event) = self.decoder.next_event() {
            if ex.first_event_ms.is_none() {
                ex.first_event_ms = Some(at_ms);
            }
            let outcome = match self.api {
                Api::Openai | Api::OpenaiCompletions => openai::on_event(&event.data, at_ms, ex),
                Api::Anthropic => anthropic::on_event(&event.event, &event.data, at_ms, ex),
            };
            if outcome == EventOutcome::Done {
                self.done = true;
                return false;
            }
            self.decoder.recycle(event);
        }
        if let Err(e) = fed {
            ex.fail(ErrorKind::Protocol, e.to_string());
            return false;
        }
        if over {
            let cap = usize::try_from(self.max_stream).unwrap_or(usize::MAX);
            ex.fail(ErrorKind::Protocol, format!("the stream exceeds the {} cap", sse::size(cap)));
            return false;
        }
        ex.error.is_none()
    }

    /// The stream is over: without its end marker (and without another error) it was truncated.
    pub fn finish(&self, ex: &mut Exchange) {
        if !self.done && ex.error.is_none() {
            ex.fail(
                ErrorKind::StreamTruncated,
                "stream ended without its end marker ([DONE] / message_stop)",
            );
        }
    }
}

/// Runs `chunks` (bytes and arrival in ms) through the stream path as if they came off a socket.
pub fn replay_stream(api: Api, limits: &Limits, chunks: &[(&[u8], f64)]) -> Exchange {
    let mut ex = Exchange::default();
    let mut state = StreamState::new(api, limits);
    for (chunk, at_ms) in chunks {
        ex.e2e_ms = Some(*at_ms);
        if !state.on_chunk(chunk, *at_ms, &mut ex) {
            break;
        }
    }
    state.finish(&mut ex);
    ex
}

/// A dialect's in-place reading and its `Value` reading of one event gave the same tokens (the
/// tests of openai.rs and anthropic.rs).
#[cfg(test)]
pub(super) fn read_alike(quick: &Exchange, reference: &Exchange, data: &str) {
    assert_eq!(
        (&quick.content, &quick.reasoning, &quick.token_offsets_ms, &quick.finish_reason),
        (&reference.content, &reference.reasoning, &reference.token_offsets_ms, &reference.finish_reason),
        "{data}"
    );
}
