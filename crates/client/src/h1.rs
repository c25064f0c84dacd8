//! HTTP/1.1 on the wire, for the client's direct path (direct.rs): a request's bytes, a response's
//! head, and its body's framing. Pure functions over bytes: no socket, no clock, so every case is
//! a unit test.

use std::ops::Range;

/// A request ready to be written as it is: head and body in one buffer.
#[derive(Clone, Debug)]
pub struct Wire {
    /// `host:port`, as `tokio::net::lookup_host` takes it (an IPv6 host keeps its brackets).
    pub authority: String,
    pub bytes: Vec<u8>,
    /// The request asks the server to close the connection after answering.
    pub close: bool,
}

/// Proxy variables reqwest honours. With any of them set, requests go through reqwest, which
/// knows how to reach a proxy; the direct path only talks to the server itself.
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// The bytes of `request`, when it can go out on the direct path: plain `http://`, no proxy, a
/// body already in memory. `None` sends it through reqwest (HTTPS, proxies).
pub fn wire(request: &reqwest::Request) -> Option<Wire> {
    let url = request.url();
    let proxied = PROXY_VARS.iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    if url.scheme() != "http" || proxied {
        return None;
    }
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
    let mut close = false;
    for (name, value) in headers {
        if name == reqwest::header::HOST || name == reqwest::header::CONTENT_LENGTH {
            continue;
        }
        if name == reqwest::header::CONNECTION {
            close |= value.to_str().is_ok_and(|v| has_token(v, "close"));
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
    let port = url.port_or_known_default()?;
    Some(Wire { authority: format!("{host}:{port}"), bytes, close })
}

/// Whether a comma-separated header value holds `token` (case-insensitive).
fn has_token(value: &str, token: &str) -> bool {
    value.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The most headers a response may carry; hyper's own limit is 100.
const MAX_HEADERS: usize = 100;

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
/// head and its length in bytes.
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let used = match response.parse(buf) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(super::failure::bad_head(&e.to_string(), &super::quote(buf))),
    };
    let status = response.code.unwrap_or(0);
    let mut keep_alive = response.version == Some(1);
    let (mut content_type, mut length, mut chunked, mut encoded) = (None, None, false, false);
    let mut location = None;
    let (mut transfer_codings, mut content_codings) = (Vec::new(), Vec::new());
    for h in response.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        if h.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_string());
        } else if h.name.eq_ignore_ascii_case("location") {
            location = Some(value.trim().to_string());
        } else if h.name.eq_ignore_ascii_case("connection") {
            if has_token(&value, "close") {
                keep_alive = false;
            } else if has_token(&value, "keep-alive") {
                keep_alive = true;
            }
        } else if h.name.eq_ignore_ascii_case("content-encoding") {
            content_codings.push(value.to_string());
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_codings.push(value.to_string());
            encoded = true;
            chunked =
                value.rsplit(',').next().is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = value.trim().parse::<u64>().map_err(|_| format!("bad content-length: {value}"))?;
            if length.is_some_and(|m| m != n) {
                return Err(format!("two different content-length headers: {} and {n}", length.unwrap_or(0)));
            }
            length = Some(n);
        }
    }
    let framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked
    } else if encoded {
        Framing::ToClose
    } else {
        length.map_or(Framing::ToClose, Framing::Length)
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
pub struct Step {
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
    pub fn step(&mut self, input: &[u8]) -> Result<Step, String> {
        let mut used = 0;
        while used < input.len() {
            let rest = &input[used..];
            match self.state {
                State::Done => break,
                State::ToClose => {
                    return Ok(Step { used: input.len(), data: Some(used..input.len()) });
                }
                State::Data { left, chunked } => {
                    let take = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let left = left - take as u64;
                    self.state = match (left, chunked) {
                        (0, true) => State::ChunkEnd,
                        (0, false) => State::Done,
                        _ => State::Data { left, chunked },
                    };
                    return Ok(Step { used: used + take, data: Some(used..used + take) });
                }
                State::Size | State::ChunkEnd | State::Trailers => {
                    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                        self.keep(rest)?;
                        used = input.len();
                        break;
                    };
                    self.keep(&rest[..end])?;
                    used += end + 1;
                    let line = std::mem::take(&mut self.line);
                    self.on_line(&line)?;
                }
            }
        }
        Ok(Step { used, data: None })
    }

    fn keep(&mut self, part: &[u8]) -> Result<(), String> {
        if self.line.len() + part.len() > MAX_FRAMING_LINE {
            return Err(format!("a chunked-encoding line exceeds {MAX_FRAMING_LINE} bytes"));
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    /// A whole framing line, up to its LF. RFC 9112 section 7.1 ends every line of chunked
    /// framing with CRLF, and hyper (the reqwest path) holds to it: so does this, so that both
    /// transports give one verdict on every framing.
    fn on_line(&mut self, raw: &[u8]) -> Result<(), String> {
        let line = match raw.strip_suffix(b"\r") {
            Some(line) if !line.contains(&b'\r') => line,
            _ => return Err(format!("a chunked-encoding line does not end in CRLF: {}", super::quote(raw))),
        };
        self.state = match self.state {
            State::Size => match chunk_size(line)? {
                0 => State::Trailers,
                size => State::Data { left: size, chunked: true },
            },
            State::ChunkEnd if line.is_empty() => State::Size,
            State::ChunkEnd => return Err(format!("a chunk runs past its size: {}", super::quote(line))),
            State::Trailers if line.is_empty() => {
                trailers_are_fields(&self.trailers)?;
                State::Done
            }
            State::Trailers => {
                if self.trailers.len() + raw.len() + 1 > MAX_FRAMING_LINE {
                    return Err(format!("the chunked body's trailers exceed {MAX_FRAMING_LINE} bytes"));
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
fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let after_blanks = &rest[rest.iter().take_while(|&&b| b == b' ' || b == b'\t').count()..];
    if digits == 0 || !(after_blanks.is_empty() || after_blanks[0] == b';') {
        return Err(format!("bad chunk size line: {}", super::quote(line)));
    }
    let hex = std::str::from_utf8(&line[..digits]).unwrap_or("");
    // Leading zeros are no overflow.
    let hex = hex.trim_start_matches('0');
    if hex.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(hex, 16).map_err(|_| format!("a chunk size overflows: {}", super::quote(line)))
}

/// The trailer section (its lines, each ending in CRLF) is header fields.
fn trailers_are_fields(trailers: &[u8]) -> Result<(), String> {
    if trailers.is_empty() {
        return Ok(());
    }
    let mut section = trailers.to_vec();
    section.extend_from_slice(b"\r\n");
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(&section, &mut fields) {
        Ok(httparse::Status::Complete(_)) => Ok(()),
        _ => Err(format!("the chunked body's trailers are not header fields: {}", super::quote(trailers))),
    }
}

/// What the direct path makes of a response's bytes (`replay`).
#[derive(Clone, Debug, PartialEq)]
pub struct Unframed {
    /// The final (non-1xx) status, once its head was read.
    pub status: Option<u16>,
    /// The body's payload, framing taken off, up to the end or the first error.
    pub payload: Vec<u8>,
    /// The body ended by its framing (not by running out of bytes).
    pub ended: bool,
    /// The connection could carry another request: kept alive, ended, nothing after the body.
    pub reusable: bool,
    /// Why the bytes were refused, when they were.
    pub error: Option<String>,
}

/// Feeds a response (interim 1xx heads, a head, a body) to the direct path's head parser and
/// unframer in `pieces`, as reads would bring them: for the fuzz target and the tests, which hold
/// that the pieces never change the outcome.
pub fn replay<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Unframed {
    let mut out = Unframed { status: None, payload: Vec::new(), ended: false, reusable: false, error: None };
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
                        out.error = Some(why);
                        return out;
                    }
                    Ok(None) => break,
                    Ok(Some((head, used))) if (100..200).contains(&head.status) => {
                        held.drain(..used);
                    }
                    Ok(Some((head, used))) => {
                        out.status = Some(head.status);
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
                    out.error = Some(why);
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
    if let Some((unframe, keep_alive)) = body {
        out.ended = unframe.is_done();
        out.reusable = keep_alive && out.ended && !after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payload of `body` unframed, fed in pieces of `cut` bytes; and whether it ended.
    fn unframe(framing: Framing, body: &[u8], cut: usize) -> Result<(Vec<u8>, bool), String> {
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
        let err =
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").unwrap_err();
        assert!(err.contains("two different content-length"), "{err}");
        assert!(
            parse_head(b"SSH-2.0-OpenSSH\r\n\r\n")
                .unwrap_err()
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
        assert!(written.close);
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
