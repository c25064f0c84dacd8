//! Scope: plain HTTP/1.1 POSTs whose body is in memory; never TLS, HTTP/2 or a proxy (reqwest's).
//!
//! Why our own and not hyper's client here: the direct path stamps each read with the kernel's
//! receive time of its last byte (`SO_TIMESTAMPNS`, socket.rs), which needs the socket's reads in
//! bench's hands; hyper's client owns its reads and hands over decoded bodies, stamped only when
//! the task runs. What is kept hand-written is held to hyper's verdicts byte for byte by the
//! differential test (tests/it/h1_differential.rs) and fuzzed (`just fuzz`).
//!
//! HTTP/1.1 on the wire, for the client's direct path (direct.rs): a request's bytes, a response's
//! head, and its body's framing. Pure functions over bytes: no socket, no clock, so every case is
//! a unit test.
//!
//! A response is read as hyper (the reqwest path) reads it, so both transports give one verdict
//! (tests/it/h1_differential.rs serves the same bytes to both):
//! - interim 1xx heads are skipped; a 101 is final, with no body and no reuse (hyper's upgrade);
//! - 204, 304 and 101 have no body; `Transfer-Encoding` wins over `Content-Length`; a chunked
//!   body is chunked only when `chunked` is the last coding (`gzip, chunked` is unframed, and its
//!   gzip named as an unasked coding, never read as text); any other transfer coding, or neither
//!   header, is read until the server closes (and the connection is not reused);
//! - `Connection: close` anywhere in the head closes the connection after the response, even
//!   beside a `keep-alive`; HTTP/1.0 closes unless it says `keep-alive`.
//!
//! Refused, each as an error naming what was wrong (never a silent misread): a head that is not
//! HTTP/1.1 (httparse), a status under 100, over 100 header fields, a head over 64 KiB,
//! `Transfer-Encoding` on HTTP/1.0, a `Content-Length` that is not digits or two that differ, a
//! chunk-size line that is no hex size, a line not ended by CRLF, a chunk longer than its size, a
//! framing line or trailer section over 4 KiB, trailers that are not header fields, and a body cut
//! short by the server closing the connection. The limits are tighter than hyper's (a head of
//! about 400 KiB, chunk extensions and trailers of 16 KiB each): between the two, only the direct
//! path refuses.

use std::ops::Range;

/// A request ready to be written as it is: head and body in one buffer.
#[derive(Clone, Debug)]
pub struct Wire {
    /// `host:port`, as `tokio::net::lookup_host` takes it (an IPv6 host keeps its brackets).
    pub authority: String,
    pub bytes: Vec<u8>,
}

/// Proxy variables reqwest honours. With any of them set, requests go through reqwest, which
/// knows how to reach a proxy; the direct path only talks to the server itself.
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// The bytes of `request`, when it can go out on the direct path: plain `http://`, no proxy, a
/// body already in memory. `None` sends it through reqwest (HTTPS, proxies).
pub fn wire(request: &reqwest::Request) -> Option<Wire> {
    let url = request.url();
    let authority = direct_authority(url)?;
    let host = url.host_str()?;
    let body = match request.body() {
        Some(body) => body.as_bytes()?,
        None => &[],
    };
    let mut target = url.path().to_string();
    if let Some(query) = url.query() {
        target.push('?');
        target.push_str(query);
    }
    // The Host header names the port only when the URL did, as hyper writes it.
    let host_header = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let head = format!("{} {target} HTTP/1.1\r\nhost: {host_header}\r\n", request.method());
    let mut bytes = Vec::with_capacity(head.len() + 512 + body.len());
    bytes.extend_from_slice(head.as_bytes());
    let headers = request.headers();
    for (name, value) in headers {
        if name == reqwest::header::HOST || name == reqwest::header::CONTENT_LENGTH {
            continue;
        }
        for part in [name.as_str().as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            bytes.extend_from_slice(part);
        }
    }
    // reqwest sends `accept: */*` when the request names none.
    if !headers.contains_key(reqwest::header::ACCEPT) {
        bytes.extend_from_slice(b"accept: */*\r\n");
    }
    bytes.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    bytes.extend_from_slice(body);
    Some(Wire { authority, bytes })
}

/// The `host:port` a request to `url` connects to on the direct path; None where it goes through
/// reqwest (not plain `http://`, or a proxy is set).
pub fn direct_authority(url: &reqwest::Url) -> Option<String> {
    let proxied = PROXY_VARS.iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    if url.scheme() != "http" || proxied {
        return None;
    }
    Some(format!("{}:{}", url.host_str()?, url.port_or_known_default()?))
}

/// Whether a comma-separated header value holds `token` (case-insensitive).
fn has_token(value: &str, token: &str) -> bool {
    value.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The most headers a response may carry; hyper's own limit is 100.
const MAX_HEADERS: usize = 100;

/// The longest response head read (interim heads each count on their own): the direct path reads
/// the head into one buffer of this size (direct.rs).
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Why a response head was refused. The words land in records (`error.message`): keep them.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum HeadError {
    /// httparse's verdict, and the start of what came (quoted, redacted).
    #[error("{}", super::failure::bad_head(&.why.to_string(), .came))]
    Invalid { why: httparse::Error, came: String },
    /// hyper refuses a status under 100 ("invalid HTTP status-code parsed").
    #[error("{}", super::failure::bad_head(&format!("status code {status:03} is not 100-999"), ""))]
    Status { status: u16 },
    #[error("the response head exceeds {} KiB", MAX_HEAD_BYTES >> 10)]
    TooLarge,
    /// RFC 9112 section 6.1: transfer codings are HTTP/1.1's; an HTTP/1.0 response with one was
    /// likely passed on by something that did not unframe it.
    #[error("{}", super::failure::bad_head("an HTTP/1.0 response with Transfer-Encoding", ""))]
    TransferEncodingOnHttp10,
    #[error("bad content-length: {value}")]
    BadLength { value: String },
    #[error("two different content-length headers: {first} and {second}")]
    TwoLengths { first: u64, second: u64 },
}

/// Why a body's chunked framing was refused. The words land in records: keep them.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FramingError {
    #[error("a chunked-encoding line exceeds {MAX_FRAMING_LINE} bytes")]
    LineTooLong,
    #[error("a chunked-encoding line does not end in CRLF: {line}")]
    NoCrlf { line: String },
    #[error("bad chunk size line: {line}")]
    BadSize { line: String },
    #[error("a chunk size overflows: {line}")]
    SizeOverflows { line: String },
    #[error("a chunk runs past its size: {extra}")]
    PastSize { extra: String },
    #[error("the chunked body's trailers exceed {MAX_FRAMING_LINE} bytes")]
    TrailersTooLong,
    #[error("the chunked body's trailers are not header fields: {trailers}")]
    TrailersNotFields { trailers: String },
}

/// A response head, as far as the client needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    /// Where a redirect points (never followed: failure.rs).
    pub location: Option<String>,
    pub framing: Framing,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
    /// A content or transfer coding bench did not ask for (`unasked_coding`).
    pub coding: Option<String>,
}

impl Head {
    /// An interim head (100 Continue, 103 Early Hints): the final one follows. A 101 is final:
    /// the server switched protocols, and no HTTP answer follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

/// The codings of a response that bench cannot read and never asked for (it sends no
/// Accept-Encoding): a transfer coding besides `chunked`, a content coding besides `identity`.
/// Both transports name them so, rather than reading compressed bytes as a stream.
pub fn unasked_coding<'v>(
    transfer_encoding: impl IntoIterator<Item = &'v str>,
    content_encoding: impl IntoIterator<Item = &'v str>,
) -> Option<String> {
    let unasked = |values: &mut dyn Iterator<Item = &'v str>, ignored: &str| {
        let codings: Vec<String> = values
            .flat_map(|v| v.split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != ignored)
            .collect();
        (!codings.is_empty()).then(|| codings.join(", "))
    };
    let transfer =
        unasked(&mut transfer_encoding.into_iter(), "chunked").map(|c| format!("transfer-encoding {c}"));
    let content =
        unasked(&mut content_encoding.into_iter(), "identity").map(|c| format!("content-encoding {c}"));
    match (transfer, content) {
        (Some(t), Some(c)) => Some(format!("{t}; {c}")),
        (t, c) => t.or(c),
    }
}

/// What the client says of a response in an unasked-for coding.
pub fn encoded(coding: &str) -> String {
    format!(
        "the response is encoded ({coding}), which bench did not ask for (it sends no \
         Accept-Encoding) and does not decode"
    )
}

/// How the body's end is known (RFC 9112 section 6.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Framing {
    Length(u64),
    Chunked,
    /// Until the server closes the connection.
    ToClose,
}

/// Parses a response head from the start of `buf`: `Ok(None)` while it is incomplete, else the
/// head and its length in bytes. Framing as hyper decides it (`Client::decoder`): the status
/// first, then Transfer-Encoding, then Content-Length, else until the server closes.
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let used = match response.parse(buf) {
        Ok(httparse::Status::Complete(used)) if used <= MAX_HEAD_BYTES => used,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Ok(None),
        Ok(_) => return Err(HeadError::TooLarge),
        Err(why) => return Err(HeadError::Invalid { why, came: super::quote(buf) }),
    };
    let status = response.code.unwrap_or(0);
    if status < 100 {
        return Err(HeadError::Status { status });
    }
    let http11 = response.version == Some(1);
    let (mut content_type, mut location) = (None, None);
    let (mut close, mut keep_alive_token) = (false, false);
    let (mut transfer_codings, mut content_codings) = (Vec::new(), Vec::new());
    let mut lengths: Vec<&[u8]> = Vec::new();
    for h in response.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        // The first of a repeated field, as `HeaderMap::get` gives it on the reqwest path.
        if h.name.eq_ignore_ascii_case("content-type") {
            content_type.get_or_insert_with(|| value.to_string());
        } else if h.name.eq_ignore_ascii_case("location") {
            location.get_or_insert_with(|| value.trim().to_string());
        } else if h.name.eq_ignore_ascii_case("connection") {
            // A close anywhere holds: a later keep-alive does not undo it.
            close |= has_token(&value, "close");
            keep_alive_token |= has_token(&value, "keep-alive");
        } else if h.name.eq_ignore_ascii_case("content-encoding") {
            content_codings.push(value.to_string());
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_codings.push(value.to_string());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            lengths.push(h.value);
        }
    }
    let mut keep_alive = !close && (http11 || keep_alive_token);
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        // A 101 hands the connection to another protocol: nothing after it is HTTP.
        keep_alive &= status != 101;
        Framing::Length(0)
    } else if let Some(last) = transfer_codings.last() {
        if !http11 {
            return Err(HeadError::TransferEncodingOnHttp10);
        }
        // Only the last field's last coding says chunked (RFC 9112 section 6.3), as hyper reads it.
        match last.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked")) {
            true => Framing::Chunked,
            false => Framing::ToClose,
        }
    } else if lengths.is_empty() {
        Framing::ToClose
    } else {
        Framing::Length(content_length(&lengths)?)
    };
    if framing == Framing::ToClose {
        keep_alive = false;
    }
    let coding = unasked_coding(
        transfer_codings.iter().map(String::as_str),
        content_codings.iter().map(String::as_str),
    );
    Ok(Some((Head { status, content_type, location, framing, keep_alive, coding }, used)))
}

/// The length all Content-Length fields agree on: each a comma-separated list of decimal digits
/// (no sign, no blank inside), all the same number.
fn content_length(fields: &[&[u8]]) -> Result<u64, HeadError> {
    let mut length: Option<u64> = None;
    for field in fields {
        for part in field.split(|&b| b == b',') {
            let digits = part.trim_ascii();
            let n = (!digits.is_empty() && digits.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(digits).ok()?.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| HeadError::BadLength { value: String::from_utf8_lossy(field).to_string() })?;
            match length {
                Some(first) if first != n => return Err(HeadError::TwoLengths { first, second: n }),
                _ => length = Some(n),
            }
        }
    }
    length.ok_or(HeadError::BadLength { value: String::new() })
}

/// The longest chunk-size line or trailer line accepted.
const MAX_FRAMING_LINE: usize = 4096;

/// Takes a body's framing off the bytes as they come, handing out the payload in place.
#[derive(Debug)]
pub struct Unframe {
    state: State,
    /// A chunk-size or trailer line cut by the end of a read.
    line: Vec<u8>,
    /// The trailer lines so far, checked as header fields at the body's end.
    trailers: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Payload bytes left (a fixed length, or the current chunk).
    Data {
        left: u64,
        chunked: bool,
    },
    ToClose,
    Size,
    /// The CRLF after a chunk's payload.
    ChunkEnd,
    Trailers,
    Done,
}

/// What one step of `Unframe::step` did with its input.
#[derive(Debug, PartialEq)]
pub struct Consumed {
    /// Input bytes used up.
    pub used: usize,
    /// Payload among them (a range of the input).
    pub data: Option<Range<usize>>,
}

impl Unframe {
    pub fn new(framing: Framing) -> Unframe {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(left) => State::Data { left, chunked: false },
            Framing::Chunked => State::Size,
            Framing::ToClose => State::ToClose,
        };
        Unframe { state, line: Vec::new(), trailers: Vec::new() }
    }

    /// The whole body has been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The body ends when the server closes the connection.
    pub fn ends_at_close(&self) -> bool {
        self.state == State::ToClose
    }

    /// Uses bytes from the start of `input` until it has payload to hand out, reaches the end of
    /// the body, or runs out of input. Call again with the rest.
    /// On success nothing is allocated once the first line cut by a read has been held: a
    /// framing line whole in `input` is read in place.
    pub fn step(&mut self, input: &[u8]) -> Result<Consumed, FramingError> {
        let mut used = 0;
        while used < input.len() {
            let rest = &input[used..];
            match self.state {
                State::Done => break,
                State::ToClose => {
                    return Ok(Consumed { used: input.len(), data: Some(used..input.len()) });
                }
                State::Data { left, chunked } => {
                    let take = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let left = left - take as u64;
                    self.state = match (left, chunked) {
                        (0, true) => State::ChunkEnd,
                        (0, false) => State::Done,
                        _ => State::Data { left, chunked },
                    };
                    return Ok(Consumed { used: used + take, data: Some(used..used + take) });
                }
                State::Size | State::ChunkEnd | State::Trailers => {
                    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                        self.keep(rest)?;
                        used = input.len();
                        break;
                    };
                    used += end + 1;
                    if self.line.is_empty() {
                        if end > MAX_FRAMING_LINE {
                            return Err(FramingError::LineTooLong);
                        }
                        self.on_line(&rest[..end])?;
                    } else {
                        self.keep(&rest[..end])?;
                        // Taken and put back, so that its room is used again.
                        let mut line = std::mem::take(&mut self.line);
                        let done = self.on_line(&line);
                        line.clear();
                        self.line = line;
                        done?;
                    }
                }
            }
        }
        Ok(Consumed { used, data: None })
    }

    fn keep(&mut self, part: &[u8]) -> Result<(), FramingError> {
        if self.line.len() + part.len() > MAX_FRAMING_LINE {
            return Err(FramingError::LineTooLong);
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    /// A whole framing line, up to its LF. RFC 9112 section 7.1 ends every line of chunked
    /// framing with CRLF, and hyper (the reqwest path) holds to it: so does this, so that both
    /// transports give one verdict on every framing.
    fn on_line(&mut self, raw: &[u8]) -> Result<(), FramingError> {
        let line = match raw.strip_suffix(b"\r") {
            Some(line) if !line.contains(&b'\r') => line,
            _ => return Err(FramingError::NoCrlf { line: super::quote(raw) }),
        };
        self.state = match self.state {
            State::Size => match chunk_size(line)? {
                0 => State::Trailers,
                size => State::Data { left: size, chunked: true },
            },
            State::ChunkEnd if line.is_empty() => State::Size,
            State::ChunkEnd => return Err(FramingError::PastSize { extra: super::quote(line) }),
            State::Trailers if line.is_empty() => {
                trailers_are_fields(&self.trailers)?;
                State::Done
            }
            State::Trailers => {
                if self.trailers.len() + raw.len() + 1 > MAX_FRAMING_LINE {
                    return Err(FramingError::TrailersTooLong);
                }
                self.trailers.extend_from_slice(raw);
                self.trailers.push(b'\n');
                State::Trailers
            }
            other => other,
        };
        Ok(())
    }
}

/// The size of a chunk-size line (RFC 9112 section 7.1): hex digits, then optional blanks and an
/// extension after `;`, which is ignored.
fn chunk_size(line: &[u8]) -> Result<u64, FramingError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let after_blanks = &rest[rest.iter().take_while(|&&b| b == b' ' || b == b'\t').count()..];
    if digits == 0 || !(after_blanks.is_empty() || after_blanks[0] == b';') {
        return Err(FramingError::BadSize { line: super::quote(line) });
    }
    let hex = std::str::from_utf8(&line[..digits]).unwrap_or("");
    // Leading zeros are no overflow.
    let hex = hex.trim_start_matches('0');
    if hex.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(hex, 16).map_err(|_| FramingError::SizeOverflows { line: super::quote(line) })
}

/// The trailer section (its lines, each ending in CRLF) is header fields.
fn trailers_are_fields(trailers: &[u8]) -> Result<(), FramingError> {
    if trailers.is_empty() {
        return Ok(());
    }
    let mut section = trailers.to_vec();
    section.extend_from_slice(b"\r\n");
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(&section, &mut fields) {
        Ok(httparse::Status::Complete(_)) => Ok(()),
        _ => Err(FramingError::TrailersNotFields { trailers: super::quote(trailers) }),
    }
}

/// What the direct path makes of a response's bytes (`replay`).
#[derive(Clone, Debug, PartialEq)]
pub struct Unframed {
    /// The final (non-interim) status, once its head was read.
    pub status: Option<u16>,
    /// The final head's fields the client reads: its content type, Location and unasked coding.
    pub content_type: Option<String>,
    pub location: Option<String>,
    pub coding: Option<String>,
    /// The body's payload, framing taken off, up to the end or the first error.
    pub payload: Vec<u8>,
    /// The body ended: by its framing, or by the close that ends a body read until the close.
    pub ended: bool,
    /// The connection could carry another request: kept alive, ended, nothing after the body.
    pub reusable: bool,
    /// Why the bytes were refused, when they were.
    pub error: Option<String>,
}

/// Feeds a response (interim 1xx heads, a head, a body) to the direct path's head parser and
/// unframer in `pieces`, as reads would bring them, the connection staying open after them: for
/// the fuzz target and the tests, which hold that the pieces never change the outcome.
pub fn replay<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Unframed {
    replay_on(pieces, false)
}

/// `replay`, then the server closes the connection: what ends a body read until the close, and
/// cuts any other short, as direct.rs says it.
pub fn replay_then_close<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Unframed {
    replay_on(pieces, true)
}

fn replay_on<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, closes: bool) -> Unframed {
    let mut out = Unframed {
        status: None,
        content_type: None,
        location: None,
        coding: None,
        payload: Vec::new(),
        ended: false,
        reusable: false,
        error: None,
    };
    let mut held: Vec<u8> = Vec::new();
    let mut body: Option<(Unframe, bool)> = None;
    let mut after = false;
    for piece in pieces {
        let mut input = piece;
        if body.is_none() {
            held.extend_from_slice(piece);
            loop {
                match parse_head(&held) {
                    Err(why) => {
                        out.error = Some(why.to_string());
                        return out;
                    }
                    Ok(None) => break,
                    Ok(Some((head, used))) if head.is_interim() => {
                        held.drain(..used);
                    }
                    Ok(Some((head, used))) => {
                        out.status = Some(head.status);
                        (out.content_type, out.location, out.coding) =
                            (head.content_type, head.location, head.coding);
                        held.drain(..used);
                        body = Some((Unframe::new(head.framing), head.keep_alive));
                        break;
                    }
                }
            }
            if body.is_none() {
                continue;
            }
            input = &held;
        }
        let Some((unframe, _)) = body.as_mut() else { continue };
        let mut at = 0;
        while at < input.len() {
            if unframe.is_done() {
                after = true;
                break;
            }
            match unframe.step(&input[at..]) {
                Err(why) => {
                    out.error = Some(why.to_string());
                    return out;
                }
                Ok(step) => {
                    if let Some(data) = step.data {
                        out.payload.extend_from_slice(&input[at + data.start..at + data.end]);
                    }
                    at += step.used;
                }
            }
        }
        held.clear();
    }
    match body {
        Some((unframe, keep_alive)) => {
            out.ended = unframe.is_done() || (closes && unframe.ends_at_close());
            out.reusable = keep_alive && unframe.is_done() && !after && !closes;
            if closes && !out.ended {
                out.error =
                    Some(super::broken::Broken::ClosedEarly { read: out.payload.len() as u64 }.to_string());
            }
        }
        None if closes && held.is_empty() => out.error = Some(super::DROPPED_AFTER_SEND.to_string()),
        None if closes => out.error = Some(super::failure::CLOSED_IN_HEAD.to_string()),
        None => {}
    }
    out
}

/// Counts each test thread's own allocations, so that a test can hold a loop to allocating
/// nothing (other threads' allocations are not counted).
#[cfg(test)]
mod counted {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    }

    struct Counting;

    // SAFETY: every call goes to the system allocator as it is; counting touches a const-initialized
    // thread-local with no destructor, which allocates nothing.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// This thread's allocations so far.
    pub fn allocations() -> u64 {
        ALLOCATIONS.with(Cell::get)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload of `body` unframed, fed in pieces of `cut` bytes; and whether it ended.
    fn unframe(framing: Framing, body: &[u8], cut: usize) -> Result<(Vec<u8>, bool), String> {
        unframe_typed(framing, body, cut).map_err(|e| e.to_string())
    }

    fn unframe_typed(framing: Framing, body: &[u8], cut: usize) -> Result<(Vec<u8>, bool), FramingError> {
        let mut u = Unframe::new(framing);
        let mut out = Vec::new();
        for piece in body.chunks(cut) {
            let mut at = 0;
            while at < piece.len() && !u.is_done() {
                let step = u.step(&piece[at..])?;
                if let Some(r) = step.data {
                    out.extend_from_slice(&piece[at + r.start..at + r.end]);
                }
                at += step.used;
            }
        }
        Ok((out, u.is_done()))
    }

    #[test]
    fn chunked_bodies_unframe_the_same_however_they_are_cut() {
        let body = b"5;ext=1\r\nhello\r\n1\r\n \r\nC\r\nworld, again\r\n0\r\nx-trailer: 1\r\n\r\n";
        for cut in [1, 2, 3, 7, body.len()] {
            assert_eq!(
                unframe(Framing::Chunked, body, cut),
                Ok((b"hello world, again".to_vec(), true)),
                "{cut}"
            );
        }
        // Bare LF line ends are refused, as hyper refuses them (RFC 9112 section 7.1: CRLF).
        for body in [&b"2\nab\r\n0\r\n\r\n"[..], b"2\r\nab\n0\r\n\r\n", b"2\r\nab\r\n0\r\n\n"] {
            let err = unframe(Framing::Chunked, body, 1).unwrap_err();
            assert!(err.starts_with("a chunked-encoding line does not end in CRLF"), "{err}");
        }
        // Blanks after the size, as hyper takes them; a sign or leading blank is no size.
        assert_eq!(unframe(Framing::Chunked, b"2 \t;x\r\nab\r\n0\r\n\r\n", 3), Ok((b"ab".to_vec(), true)));
        for bad in [&b"+2\r\nab\r\n0\r\n\r\n"[..], b" 2\r\nab\r\n0\r\n\r\n", b"2 3\r\n"] {
            assert!(unframe(Framing::Chunked, bad, 64).unwrap_err().starts_with("bad chunk size line"));
        }
        let err = unframe(Framing::Chunked, b"2\r\nab\r\n0\r\nnot a field\r\n\r\n", 5).unwrap_err();
        assert!(err.starts_with("the chunked body's trailers are not header fields"), "{err}");
        // Not yet ended: the last chunk has not come.
        assert_eq!(unframe(Framing::Chunked, b"2\r\nab\r\n", 4), Ok((b"ab".to_vec(), false)));
    }

    #[test]
    fn broken_chunked_framing_is_an_error_that_says_what() {
        let err = unframe(Framing::Chunked, b"zz\r\n", 64).unwrap_err();
        assert!(err.starts_with("bad chunk size line: zz"), "{err}");
        let err = unframe(Framing::Chunked, b"2\r\nabc\r\n", 64).unwrap_err();
        assert!(err.starts_with("a chunk runs past its size: c"), "{err}");
        let err = unframe(Framing::Chunked, &[b'1'; 5000], 64).unwrap_err();
        assert_eq!(err, "a chunked-encoding line exceeds 4096 bytes");
        // Typed, whether the line is cut by reads or whole in one.
        for cut in [3, 8000] {
            let mut long = vec![b'1'; 5000];
            long.extend_from_slice(b"\r\n");
            assert_eq!(unframe_typed(Framing::Chunked, &long, cut), Err(FramingError::LineTooLong), "{cut}");
        }
        assert_eq!(
            unframe_typed(Framing::Chunked, b"1ffffffffffffffff\r\n", 64),
            Err(FramingError::SizeOverflows { line: "1ffffffffffffffff".into() })
        );
    }

    #[test]
    fn refused_heads_say_why_in_the_records_words() {
        let err = |head: &str| parse_head(head.as_bytes()).unwrap_err();
        let e = err("HTTP/1.1 200 OK\r\ncontent-length: +3\r\n\r\n");
        assert_eq!(e, HeadError::BadLength { value: "+3".into() });
        assert_eq!(e.to_string(), "bad content-length: +3");
        let e = err("HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\n");
        assert_eq!(e.to_string(), "two different content-length headers: 3 and 4");
        let e = err("HTTP/1.1 099 Odd\r\n\r\n");
        assert_eq!(e.to_string(), "the response head is not valid HTTP/1.1: status code 099 is not 100-999");
        let e = err("HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(e, HeadError::TransferEncodingOnHttp10);
        let e = err(&format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES)));
        assert_eq!(e.to_string(), "the response head exceeds 64 KiB");
        assert!(matches!(err("SSH-2.0-OpenSSH\r\n\r\n"), HeadError::Invalid { .. }));
        // A content-length beside a transfer coding is not read, as hyper does not read it.
        let head = parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: x\r\n\r\n");
        assert_eq!(head.unwrap().unwrap().0.framing, Framing::Chunked);
    }

    /// The read loop's hot path: a chunked stream unframed allocates nothing per chunk, whether
    /// its framing lines come whole in a read (read in place) or cut by reads (one held buffer,
    /// kept): 1000 chunks cost what 10 do (the trailers' check, a cut line's buffer: once per
    /// body). Before, each chunk cost two allocations (its size line, the CRLF after its data).
    #[test]
    fn unframing_a_chunked_stream_allocates_nothing_per_chunk() {
        let allocations = |chunks: usize, cut: usize| {
            let mut body = "1b\r\ndata: {\"x\":\"hello world\"}\n\n\r\n".repeat(chunks).into_bytes();
            body.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
            let mut u = Unframe::new(Framing::Chunked);
            let (before, mut payload) = (counted::allocations(), 0);
            for piece in body.chunks(cut) {
                let mut at = 0;
                while at < piece.len() && !u.is_done() {
                    let step = u.step(&piece[at..]).unwrap();
                    payload += step.data.map_or(0, |r| r.len());
                    at += step.used;
                }
            }
            let allocations = counted::allocations() - before;
            assert!(u.is_done() && payload == 27 * chunks, "{chunks} chunks cut every {cut} bytes");
            allocations
        };
        for cut in [1 << 20, 7, 1] {
            assert_eq!(
                allocations(1000, cut),
                allocations(10, cut),
                "1000 chunks, then 10, cut every {cut} bytes"
            );
        }
    }

    #[test]
    fn length_and_close_framing() {
        assert_eq!(unframe(Framing::Length(3), b"abc", 1), Ok((b"abc".to_vec(), true)));
        assert_eq!(unframe(Framing::Length(0), b"", 1), Ok((vec![], true)));
        assert_eq!(unframe(Framing::ToClose, b"abc", 2), Ok((b"abc".to_vec(), false)));
    }

    #[test]
    fn heads_say_framing_and_reuse() {
        let parse = |text: &str| parse_head(text.as_bytes()).unwrap().unwrap().0;
        let head =
            parse("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(head.content_type.as_deref(), Some("text/event-stream"));
        assert_eq!((head.status, head.framing, head.keep_alive), (200, Framing::Chunked, true));
        let head =
            parse("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\nConnection: close\r\n\r\n");
        assert_eq!((head.status, head.framing, head.keep_alive), (500, Framing::Length(4), false));
        let head = parse("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n");
        assert!(!head.keep_alive, "HTTP/1.0 closes unless it says keep-alive");
        let head = parse("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((head.framing, head.keep_alive), (Framing::ToClose, false));
        let head = parse("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!(head.framing, Framing::Length(0));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le"), Ok(None));
        let err = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("two different content-length"), "{err}");
        assert!(
            parse_head(b"SSH-2.0-OpenSSH\r\n\r\n")
                .unwrap_err()
                .to_string()
                .starts_with("the response head is not valid HTTP/1.1")
        );
    }

    #[test]
    fn a_request_is_written_as_hyper_would_and_only_plain_http_goes_direct() {
        let http = crate::default_http().unwrap();
        let request = http
            .post("http://127.0.0.1:8080/v1/chat/completions?x=1")
            .header("accept", "text/event-stream")
            .header("connection", "close")
            .body("{}")
            .build()
            .unwrap();
        let written = wire(&request).unwrap();
        assert_eq!(written.authority, "127.0.0.1:8080");
        assert_eq!(
            String::from_utf8(written.bytes).unwrap(),
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\naccept: text/event-stream\r\n\
             connection: close\r\ncontent-length: 2\r\n\r\n{}"
        );
        let plain = wire_of(&http, "http://[::1]/x");
        assert_eq!(plain.authority, "[::1]:80");
        assert!(String::from_utf8(plain.bytes).unwrap().contains("host: [::1]\r\naccept: */*\r\n"));
        assert!(wire(&http.post("https://example.com/x").body("{}").build().unwrap()).is_none());
    }

    fn wire_of(http: &reqwest::Client, url: &str) -> Wire {
        wire(&http.post(url).body("{}").build().unwrap()).unwrap()
    }
}
