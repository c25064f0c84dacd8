//! Reading response bodies: bounded in size and in time, with messages that say what happened.
//!
//! Every loop here does bounded work per chunk and checks the request's deadline between chunks,
//! so neither a huge body nor a server that never stops sending outlives `--request-timeout`, and
//! the task yields now and then so a signal handler beside it gets its turn even when the socket
//! always has data ready.

use futures_util::StreamExt;

use super::sse;
use super::stream::StreamState;
use super::{Api, Exchange, Limits, Window, anthropic, ms_since, openai};
use crate::record::ErrorKind;

/// How much of an error body (or of a body that is not what was asked for) a message quotes.
pub const QUOTED_CHARS: usize = 2000;

/// Bytes read between two voluntary yields of the task (a firehose never returns Pending).
const YIELD_EVERY_BYTES: usize = 1 << 20;

#[derive(Debug)]
pub enum BodyError {
    Timeout,
    TooLarge {
        cap: usize,
    },
    /// Why the body broke, said plainly (reset, closed early, ...).
    Broken(String),
}

/// Reads a whole body of at most `cap` bytes before `deadline`.
pub async fn read_capped(
    response: reqwest::Response,
    cap: usize,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let mut since_yield = 0;
    loop {
        if tokio::time::Instant::now() >= deadline {
            return Err(BodyError::Timeout);
        }
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(None) => return Ok(body),
            Ok(Some(Err(e))) => return Err(BodyError::Broken(broken_body(&e, body.len() as u64))),
            Ok(Some(Ok(chunk))) => {
                if body.len() + chunk.len() > cap {
                    return Err(BodyError::TooLarge { cap });
                }
                body.extend_from_slice(&chunk);
                since_yield += chunk.len();
                if since_yield >= YIELD_EVERY_BYTES {
                    since_yield = 0;
                    tokio::task::yield_now().await;
                }
            }
        }
    }
}

/// The first `cap` bytes of a body, or whatever arrived before it broke or the deadline passed.
/// Reading stops at the cap: the rest of an endless error body is never read.
pub async fn read_prefix(response: reqwest::Response, cap: usize, deadline: tokio::time::Instant) -> Vec<u8> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < cap && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                let take = chunk.len().min(cap - body.len());
                body.extend_from_slice(&chunk[..take]);
            }
            _ => break,
        }
    }
    body
}

/// At most `QUOTED_CHARS` characters of `bytes`, lossily decoded.
pub fn quote(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(QUOTED_CHARS).collect()
}

/// Every cause of `e`, including the error inside an `io::Error` (whose `source()` skips it).
pub fn causes<'a>(e: &'a (dyn std::error::Error + 'static)) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        out.push(cause);
        // An io::Error's source() is its inner error's source: step into the inner error itself.
        next = match cause.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => cause.source(),
        };
    }
    out
}

/// What a failed body read means, in words that point the right way (reqwest says "error
/// decoding response body" for a reset connection).
pub fn broken_body(e: &reqwest::Error, read: u64) -> String {
    use std::io::ErrorKind as Io;
    for cause in causes(e) {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                Io::ConnectionReset => {
                    return format!(
                        "connection reset by the server while reading the body (after {read} bytes)"
                    );
                }
                Io::UnexpectedEof | Io::ConnectionAborted | Io::BrokenPipe => return closed_early(read),
                _ => {}
            }
        }
        if cause.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message) {
            return closed_early(read);
        }
    }
    format!("the body could not be read (after {read} bytes): {}", super::error_chain(e))
}

fn closed_early(read: u64) -> String {
    format!("the server closed the connection before the body was complete (after {read} bytes)")
}

/// Reads an SSE response into `ex`. Arrival is stamped when a chunk arrives, before any parsing;
/// an event's arrival is that of the chunk that completed it.
pub async fn read_stream(
    api: Api,
    limits: &Limits,
    response: reqwest::Response,
    window: Window,
    ex: &mut Exchange,
) {
    let Window { start, deadline, timeout } = window;
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string());
    // A missing content type is tolerated (the body decides); a different one is not a stream.
    if let Some(ct) =
        content_type.filter(|ct| !ct.trim().to_ascii_lowercase().starts_with("text/event-stream"))
    {
        let prefix = read_prefix(response, limits.max_error_read_bytes, deadline).await;
        ex.e2e_ms = Some(ms_since(start));
        let status = ex.http_status.unwrap_or(200);
        ex.fail(
            ErrorKind::Protocol,
            format!(
                "the server answered {status} with content-type {ct} instead of text/event-stream: {}",
                quote(&prefix)
            ),
        );
        return;
    }
    let mut chunks = response.bytes_stream();
    let mut state = StreamState::new(api, limits);
    let mut since_yield = 0;
    let mut last_ms = None;
    loop {
        if tokio::time::Instant::now() >= deadline {
            let within = humantime::format_duration(timeout);
            ex.fail(ErrorKind::Timeout, format!("stream not finished within {within}"));
            break;
        }
        let next = tokio::time::timeout_at(deadline, chunks.next()).await;
        // Stamped before anything looks at the bytes.
        let at_ms = ms_since(start);
        let chunk = match next {
            Err(_) => {
                let within = humantime::format_duration(timeout);
                ex.fail(ErrorKind::Timeout, format!("stream not finished within {within}"));
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                ex.fail(ErrorKind::StreamTruncated, broken_body(&e, state.bytes()));
                break;
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        last_ms = Some(at_ms);
        if !state.on_chunk(&chunk, at_ms, ex) {
            break;
        }
        since_yield += chunk.len();
        if since_yield >= YIELD_EVERY_BYTES {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
    // E2E ends with the last byte of the response (the end marker), not the last token.
    ex.e2e_ms = Some(last_ms.unwrap_or_else(|| ms_since(start)));
    state.finish(ex);
}

/// Reads a whole JSON response into `ex`.
pub async fn read_whole(
    api: Api,
    limits: &Limits,
    response: reqwest::Response,
    window: Window,
    ex: &mut Exchange,
) {
    let Window { start, deadline, timeout } = window;
    let body = match read_capped(response, limits.max_body_bytes, deadline).await {
        Ok(b) => b,
        Err(BodyError::Timeout) => {
            ex.fail(
                ErrorKind::Timeout,
                format!("body not finished within {}", humantime::format_duration(timeout)),
            );
            return;
        }
        Err(BodyError::TooLarge { cap }) => {
            ex.fail(ErrorKind::Protocol, format!("the response body exceeds the {} cap", sse::size(cap)));
            return;
        }
        Err(BodyError::Broken(msg)) => {
            ex.fail(ErrorKind::StreamTruncated, msg);
            return;
        }
    };
    ex.e2e_ms = Some(ms_since(start));
    let value: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            ex.fail(ErrorKind::Protocol, format!("response is not JSON ({e}): {}", quote(&body)));
            return;
        }
    };
    match api {
        Api::Openai => openai::on_whole(&value, ex),
        Api::Anthropic => anthropic::on_whole(&value, ex),
    }
}
