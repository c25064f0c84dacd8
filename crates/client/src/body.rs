//! Reading response bodies: bounded in size and in time, with messages that say what happened.
//!
//! Every loop here does bounded work per chunk and checks the request's deadline between chunks,
//! so neither a huge body nor a server that never stops sending outlives `--request-timeout`, and
//! the task yields now and then so a signal handler beside it gets its turn even when the socket
//! always has data ready.

use super::broken::{Broken, broken_io, ended};
use super::sse;
use super::stream::StreamState;
use super::{Api, Exchange, Limits, Window, anthropic, ms_since, openai};
use ttft_model::record::ErrorKind;

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

/// A response body as it is read: its pieces in order, each with the instant it arrived, in ms
/// since the request's window opened. Two sources: reqwest (`Fetched`, stamped when a piece is
/// handed over) and the direct path (direct.rs, stamped with the kernel's arrival time).
pub(crate) trait Body {
    fn content_type(&self) -> Option<String>;
    /// The response's Location header (redirects).
    fn location(&self) -> Option<String>;
    /// A coding of the response that bench did not ask for (h1::unasked_coding).
    fn coding(&self) -> Option<String>;
    /// The next piece, `None` at the body's end, `Err(why)` when it broke (with the bytes read
    /// so far).
    async fn next(&mut self) -> Option<Result<(&[u8], f64), Broken>>;
}

/// A body read through reqwest.
pub(crate) struct Fetched {
    response: reqwest::Response,
    piece: bytes::Bytes,
    start: std::time::Instant,
    read: u64,
}

impl Fetched {
    pub fn new(response: reqwest::Response, start: std::time::Instant) -> Fetched {
        Fetched { response, piece: bytes::Bytes::new(), start, read: 0 }
    }
}

impl Body for Fetched {
    fn content_type(&self) -> Option<String> {
        let ct = self.response.headers().get(reqwest::header::CONTENT_TYPE)?;
        Some(String::from_utf8_lossy(ct.as_bytes()).to_string())
    }

    fn location(&self) -> Option<String> {
        super::failure::location_of(&self.response)
    }

    fn coding(&self) -> Option<String> {
        let values = |name| {
            self.response.headers().get_all(name).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>()
        };
        let (transfer, content) =
            (values(reqwest::header::TRANSFER_ENCODING), values(reqwest::header::CONTENT_ENCODING));
        super::h1::unasked_coding(transfer, content)
    }

    async fn next(&mut self) -> Option<Result<(&[u8], f64), Broken>> {
        let next = self.response.chunk().await;
        // Stamped before anything looks at the bytes.
        let at_ms = ms_since(self.start);
        match next {
            Ok(None) => None,
            Err(e) => Some(Err(broken_body(&e, self.read))),
            Ok(Some(piece)) => {
                self.read += piece.len() as u64;
                self.piece = piece;
                Some(Ok((&self.piece, at_ms)))
            }
        }
    }
}

/// Reads a whole body of at most `cap` bytes before `deadline`.
pub async fn read_capped(
    response: reqwest::Response,
    cap: usize,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, BodyError> {
    read_capped_from(&mut Fetched::new(response, std::time::Instant::now()), cap, deadline).await
}

pub(crate) async fn read_capped_from(
    source: &mut impl Body,
    cap: usize,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    let mut since_yield = 0;
    loop {
        if tokio::time::Instant::now() >= deadline {
            return Err(BodyError::Timeout);
        }
        match tokio::time::timeout_at(deadline, source.next()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(None) => return Ok(body),
            Ok(Some(Err(why))) => return Err(BodyError::Broken(why.to_string())),
            Ok(Some(Ok((chunk, _)))) => {
                if body.len() + chunk.len() > cap {
                    return Err(BodyError::TooLarge { cap });
                }
                body.extend_from_slice(chunk);
                since_yield += chunk.len();
            }
        }
        if since_yield >= YIELD_EVERY_BYTES {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
}

/// The first `cap` bytes of a body, or whatever arrived before it broke or the deadline passed.
/// Reading stops at the cap: the rest of an endless error body is never read.
pub async fn read_prefix(response: reqwest::Response, cap: usize, deadline: tokio::time::Instant) -> Vec<u8> {
    read_prefix_from(&mut Fetched::new(response, std::time::Instant::now()), cap, deadline).await
}

pub(crate) async fn read_prefix_from(
    source: &mut impl Body,
    cap: usize,
    deadline: tokio::time::Instant,
) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < cap && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, source.next()).await {
            Ok(Some(Ok((chunk, _)))) => {
                let take = chunk.len().min(cap - body.len());
                body.extend_from_slice(&chunk[..take]);
            }
            _ => break,
        }
    }
    body
}

/// At most `QUOTED_CHARS` characters of `bytes`, lossily decoded, redacted before the cut (a
/// key cut in half no longer matches its secret).
pub fn quote(bytes: &[u8]) -> String {
    ttft_model::secrets::redact_prefix(&String::from_utf8_lossy(bytes), QUOTED_CHARS)
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
pub(crate) fn broken_body(e: &reqwest::Error, read: u64) -> Broken {
    for cause in causes(e) {
        if let Some(io) = cause.downcast_ref::<std::io::Error>().filter(|io| ended(io)) {
            return broken_io(io, read);
        }
        // hyper's body decoder says so of framing it refuses (a chunk-size line, a trailer).
        if let Some(io) = cause.downcast_ref::<std::io::Error>().filter(|io| {
            matches!(io.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData)
        }) {
            return Broken::Framing { read, why: io.to_string() };
        }
        if cause.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message) {
            return Broken::ClosedEarly { read };
        }
    }
    Broken::Unreadable { read, why: super::error_chain(e) }
}

/// Reads the answer to a request whose response head said `status`: an error status becomes an
/// error quoting the start of the body; a success is read as a stream or as one JSON body. Both
/// transports (mod.rs, direct.rs) end here.
pub(crate) async fn read_answer(
    api: Api,
    limits: &Limits,
    status: u16,
    stream: bool,
    source: &mut impl Body,
    window: Window,
    ex: &mut Exchange,
) {
    ex.http_status = Some(status);
    if let Some(coding) = source.coding().filter(|_| (200..300).contains(&status)) {
        ex.e2e_ms = Some(ms_since(window.start));
        ex.fail(ErrorKind::Protocol, super::h1::encoded(&coding));
    } else if !(200..300).contains(&status) {
        let prefix = read_prefix_from(source, limits.max_error_read_bytes, window.deadline).await;
        ex.e2e_ms = Some(ms_since(window.start));
        // "500 Internal Server Error": the code with its standard reason phrase.
        let said = reqwest::StatusCode::from_u16(status).map_or(status.to_string(), |s| s.to_string());
        let why = super::failure::not_followed(status, source.location().as_deref())
            .unwrap_or_else(|| quote(&prefix));
        ex.fail(ErrorKind::HttpStatus, format!("HTTP {said}: {why}"));
    } else if stream {
        read_stream(api, limits, source, window, ex).await;
    } else {
        read_whole(api, limits, source, window, ex).await;
    }
}

/// Reads an SSE response into `ex`. An event's arrival is that of the piece that completed it.
async fn read_stream(api: Api, limits: &Limits, source: &mut impl Body, window: Window, ex: &mut Exchange) {
    let Window { start, deadline, timeout } = window;
    // A missing content type is tolerated (the body decides); a different one is not a stream.
    if let Some(ct) =
        source.content_type().filter(|ct| !ct.trim().to_ascii_lowercase().starts_with("text/event-stream"))
    {
        let prefix = read_prefix_from(source, limits.max_error_read_bytes, deadline).await;
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
    let mut state = StreamState::new(api, limits);
    let mut since_yield = 0;
    let mut last_ms = None;
    let too_late = || format!("stream not finished within {}", humantime::format_duration(timeout));
    loop {
        if tokio::time::Instant::now() >= deadline {
            ex.fail(ErrorKind::Timeout, too_late());
            break;
        }
        let (chunk, at_ms) = match tokio::time::timeout_at(deadline, source.next()).await {
            Err(_) => {
                ex.fail(ErrorKind::Timeout, too_late());
                break;
            }
            Ok(None) => break,
            Ok(Some(Err(why))) => {
                ex.fail(ErrorKind::StreamTruncated, why.to_string());
                break;
            }
            Ok(Some(Ok(piece))) => piece,
        };
        last_ms = Some(at_ms);
        since_yield += chunk.len();
        if !state.on_chunk(chunk, at_ms, ex) {
            break;
        }
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
async fn read_whole(api: Api, limits: &Limits, source: &mut impl Body, window: Window, ex: &mut Exchange) {
    let Window { start, deadline, timeout } = window;
    let body = match read_capped_from(source, limits.max_body_bytes, deadline).await {
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
        Api::Openai | Api::OpenaiCompletions => openai::on_whole(&value, ex),
        Api::Anthropic => anthropic::on_whole(&value, ex),
    }
}
