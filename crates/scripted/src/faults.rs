//! Hostile and broken answers of the scripted chat endpoint (`Fault`), each one thing a real
//! server, proxy or network has done to a benchmark.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};

use super::dialect::sse_response;
use super::lock;
use super::net::{Kill, Kills, Peer, StrayPiece};

#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    None,
    /// Respond with this status and body.
    Status(u16, &'static str),
    /// 200 stream that carries an error object after the first token.
    ErrorInStream,
    /// Stream ends after the tokens without usage and without [DONE].
    Truncate,
    /// Never answer (for timeouts).
    Hang,
    /// Keep-alive comments between events.
    KeepAlive,
    /// 200 SSE whose first line (`data: xxx...`) never ends: this many bytes, then silence.
    HugeLine(usize),
    /// 200 SSE of valid content deltas that never ends, one every `Behaviour::token_ms` (0: as
    /// fast as the socket takes them).
    EndlessStream,
    /// 200 application/json whose body never ends.
    EndlessBody,
    /// 500 whose body never ends.
    HugeErrorBody,
    /// 200 text/html (a proxy's login page) to a streaming request.
    Html200,
    /// A stream whose second event holds a byte that is not UTF-8.
    InvalidUtf8,
    /// 200 SSE headers, then nothing.
    HangAfterHeaders,
    /// 401 whose body echoes the request's headers (keys included), on chat and preset actions.
    EchoHeaders,
    /// The normal stream, cut into `bytes`-byte pieces sent `every_ms` apart.
    SlowDrip {
        bytes: usize,
        every_ms: u64,
    },
    /// The normal stream, held back until its last token is due, then flushed in one write: what a
    /// buffering proxy does, and a llama-server under load did to 12 of 36 streams. The `timings`
    /// say how long the server decoded (`predicted_ms`), as llama.cpp's do.
    Burst,
    /// A buffering gateway: the normal stream, each event held until this many bytes are held, then
    /// all of them forwarded in one write (the rest when the stream ends). The first token comes
    /// only with the ones decoded after it, and so does every later lump.
    Lumps(usize),
    /// A proxy that holds the stream's first this many events (frames: a role chunk counts) and
    /// flushes them in one write when the last of them is due, then forwards each event on time.
    HoldFirst(usize),
    /// Read the request, then close the connection without answering.
    DropAfterRead,
    /// Two content chunks, then a TCP reset.
    ResetMidBody,
    /// llama-server's way with every streamed response: the stream ends properly (its last chunk,
    /// no `Connection: close` announced), then the server reads nothing more on that connection
    /// and closes it. llama-server closes within tens of microseconds (cpp-httplib ends a
    /// connection whose chunked content provider returns false, and llama-server's returns false
    /// after its last chunk); here the connection stays open, deaf, for this many ms, so a
    /// request a client writes onto it right after the stream is lost every time, not now and then.
    CloseAfterStream(u64),
    /// This many ms after each measured reply has gone out (streamed or whole), a copy of that
    /// reply on the same kept-alive connection, written before the server reads the
    /// connection's next request: what a proxy or server that answers a request twice does. The
    /// copy is the reply as sent (same id, text and usage), a stream's events at their original
    /// gaps from its first token on, so nothing in it but its timing tells it from an answer: a
    /// client that sent its next request on that connection meanwhile reads the copy as that
    /// request's answer, sooner than the server could have answered it.
    StrayAfterReply(u64),
    /// The request's key (bearer, Basic credentials or x-api-key) said back in another form.
    EchoKey(EchoKey),
}

/// How `Fault::EchoKey` says the key back: each a way echoed keys got past literal redaction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EchoKey {
    /// 401 whose JSON body escapes `/` as `\/` (PHP's json_encode, some Java encoders).
    Escaped,
    /// The normal stream, its first content chunk starting with the key.
    Completion,
    /// 401 whose body puts the key across the 2000th character, where error quotes are cut.
    AtCut,
    /// Every credential the server was given, said back in the shapes a gateway or a server's own
    /// JSON writer gives it: `/v1/models` and `/props` list the request's headers (a gateway that
    /// echoes Authorization), `/props` the server's own arguments (`Behaviour::server_args`, as
    /// SGLang's server info lists them), and the streamed completion (not a whole one, so a soak's
    /// serial reference differs from it) opens with each credential plain, escaped as Gson
    /// escapes `=`, `<`, `>`, `&` and `'` (`\u003d`), and percent-encoded in lowercase (`%2f`).
    Shapes,
}

/// The credential a request carried: the bearer token, the Basic credentials (base64) or x-api-key.
fn key_of(headers: &HeaderMap) -> String {
    let auth = headers.get("authorization").or_else(|| headers.get("x-api-key"));
    let value = auth.and_then(|v| v.to_str().ok()).unwrap_or("");
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("Basic ")).unwrap_or(value).to_string()
}

/// Text to put before the first content token, for `EchoKey::Completion` and `EchoKey::Shapes`.
pub fn completion_echo(
    fault: &Fault,
    headers: &HeaderMap,
    body: &Value,
    server_args: &[String],
) -> Option<String> {
    match fault {
        Fault::EchoKey(EchoKey::Completion) => Some(format!("your key is {} ", key_of(headers))),
        Fault::EchoKey(EchoKey::Shapes) => {
            let mut text = String::from("your keys are");
            for credential in credentials(headers, body, server_args) {
                text.push_str(&format!(
                    " {credential} {} {}",
                    gson_escaped(&credential),
                    percent_lower(&credential)
                ));
            }
            text.push(' ');
            Some(text)
        }
        _ => None,
    }
}

/// What `EchoKey::Shapes` says back in a completion: the request's key, the value of every
/// `x-` header (a gateway's token), the body's `api_key`, and the values of the server's own
/// arguments that are not flags.
fn credentials(headers: &HeaderMap, body: &Value, server_args: &[String]) -> Vec<String> {
    let mut out = vec![key_of(headers)];
    let gateway =
        headers.iter().filter(|(name, _)| name.as_str().starts_with("x-") && name.as_str() != "x-api-key");
    out.extend(gateway.filter_map(|(_, v)| v.to_str().ok().map(str::to_string)));
    out.extend(body["api_key"].as_str().map(str::to_string));
    out.extend(server_args.iter().filter(|a| !a.starts_with('-')).cloned());
    out.retain(|c| !c.is_empty());
    out
}

/// The request's headers as a JSON object, as a gateway that echoes them writes them.
pub fn headers_echo(headers: &HeaderMap) -> Value {
    headers
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or(""))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// `text` as Gson writes it inside a JSON string: `=`, `<`, `>`, `&` and `'` as `\u00XX` (lowercase
/// hex), everything else as it is.
fn gson_escaped(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '=' | '<' | '>' | '&' | '\'' => format!("\\u{:04x}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

/// Every byte but the unreserved ones as `%xx`, in lowercase hex (as some URL encoders write it).
fn percent_lower(text: &str) -> String {
    text.bytes()
        .map(|b| match b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            true => (b as char).to_string(),
            false => format!("%{b:02x}"),
        })
        .collect()
}

/// The 401 of `EchoKey::Escaped` and `EchoKey::AtCut`.
fn echo_key(how: EchoKey, headers: &HeaderMap) -> Option<Response> {
    let key = key_of(headers);
    let body = match how {
        EchoKey::Escaped => {
            let escaped = json!(key).to_string().replace('/', "\\/");
            format!("{{\"error\":{{\"message\":\"invalid key\",\"key\":{escaped}}}}}")
        }
        EchoKey::AtCut => format!("{}{key} is invalid", "x".repeat(ttft_client::body::QUOTED_CHARS - 8)),
        EchoKey::Completion | EchoKey::Shapes => return None,
    };
    Some(with_type(StatusCode::UNAUTHORIZED, "application/json", Body::from(body)))
}

/// The copy of a whole (non-streamed) JSON reply, as one write.
pub fn stray_copy_of_body(body: &[u8]) -> Vec<StrayPiece> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    vec![(Duration::ZERO, Bytes::from([head.as_bytes(), body].concat()))]
}

/// The copy of a stream: its frames, each sent this long after the stream's first content frame
/// (frames before it go at once), chunked as the original was.
pub fn stray_copy_of_stream(frames: &[(Duration, Bytes)]) -> Vec<StrayPiece> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let mut pieces = vec![(Duration::ZERO, Bytes::from_static(head.as_bytes()))];
    for (at, frame) in frames {
        let chunk = [format!("{:x}\r\n", frame.len()).as_bytes(), frame, b"\r\n"].concat();
        pieces.push((*at, Bytes::from(chunk)));
    }
    let end = pieces.last().map_or(Duration::ZERO, |p| p.0);
    pieces.push((end, Bytes::from_static(b"0\r\n\r\n")));
    pieces
}

fn sse(stream: impl futures_util::Stream<Item = Bytes> + Send + 'static) -> Response {
    sse_response(Body::from_stream(stream.map(Ok::<_, Infallible>)))
}

fn with_type(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn delta(text: &str) -> Bytes {
    Bytes::from(format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": text}}]})))
}

/// Never yields: the connection stays open and silent.
fn forever() -> impl futures_util::Stream<Item = Bytes> + Send + 'static {
    stream::pending()
}

/// The same chunk forever, as fast as the client reads.
fn endless(chunk: Bytes) -> impl futures_util::Stream<Item = Bytes> + Send + 'static {
    stream::repeat(chunk)
}

/// The answer of a fault that replaces the whole response; `None` for the others.
pub fn respond(
    fault: &Fault,
    headers: &HeaderMap,
    peer: Peer,
    kills: &Kills,
    token_ms: u64,
) -> Option<Response> {
    let response = match fault {
        Fault::HugeLine(n) => {
            let n = *n;
            let chunk = Bytes::from(vec![b'x'; 64 << 10]);
            let body = stream::once(async { Bytes::from_static(b"data: ") })
                .chain(endless(chunk.clone()).take(n.div_ceil(chunk.len())))
                .chain(forever());
            sse(body)
        }
        Fault::EndlessStream => sse(stream::iter(0u64..).then(move |i| async move {
            if token_ms > 0 {
                tokio::time::sleep(Duration::from_millis(token_ms)).await;
            }
            delta(&format!(" w{i}"))
        })),
        Fault::EndlessBody => {
            let body =
                stream::once(async { Bytes::from_static(b"{\"choices\":[{\"message\":{\"content\":\"") })
                    .chain(endless(Bytes::from(vec![b'x'; 64 << 10])));
            with_type(StatusCode::OK, "application/json", Body::from_stream(body.map(Ok::<_, Infallible>)))
        }
        Fault::HugeErrorBody => {
            let body = endless(Bytes::from("overloaded ".repeat(6000)));
            let body = Body::from_stream(body.map(Ok::<_, Infallible>));
            with_type(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", body)
        }
        Fault::Html200 => with_type(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Body::from(
                "<!DOCTYPE html><html><head><title>Sign in</title></head><body>proxy login</body></html>",
            ),
        ),
        Fault::InvalidUtf8 => {
            let mut bad = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a".to_vec();
            bad.extend_from_slice(b"\xFF\xFE\"}}]}\n\n");
            sse(stream::iter([delta("w0"), Bytes::from(bad)]).chain(forever()))
        }
        Fault::HangAfterHeaders => sse(forever()),
        Fault::EchoHeaders => {
            let echoed: serde_json::Map<String, Value> =
                headers.iter().map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or("")))).collect();
            let body = json!({"error": {"message": "unauthorized", "your_headers": echoed}});
            (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
        }
        Fault::DropAfterRead => {
            lock(kills).insert(peer.0, Kill::Drop);
            (StatusCode::OK, "never delivered").into_response()
        }
        Fault::ResetMidBody => {
            let kills = kills.clone();
            let head = stream::iter([delta("w0"), delta(" w1")]);
            let tail = stream::once(async move {
                // Let the client read the first chunks, then reset at the next write.
                tokio::time::sleep(Duration::from_millis(200)).await;
                lock(&kills).insert(peer.0, Kill::Reset);
                delta(" w2")
            });
            sse(head.chain(tail).chain(forever()))
        }
        Fault::EchoKey(how) => return echo_key(*how, headers),
        _ => return None,
    };
    Some(response)
}

/// What a buffering proxy (`Fault::Lumps`, `Fault::HoldFirst`) forwards of a stream whose frames
/// are each due at their instant: the writes it makes, when and what. Every frame is forwarded
/// once, in order, never before it is due; another fault forwards each frame as it comes.
pub fn forwarded<T: Copy>(fault: &Fault, frames: Vec<(T, Bytes)>) -> Vec<(T, Bytes)> {
    let mut writes = Vec::new();
    let mut held = Vec::new();
    let count = frames.len();
    for (i, (due, frame)) in frames.into_iter().enumerate() {
        held.extend_from_slice(&frame);
        let forward = match fault {
            Fault::Lumps(bytes) => held.len() >= *bytes,
            Fault::HoldFirst(events) => i + 1 >= *events,
            _ => true,
        };
        if forward || i + 1 == count {
            writes.push((due, Bytes::from(std::mem::take(&mut held))));
        }
    }
    writes
}

/// `frames` cut into `bytes`-byte pieces, one every `every_ms`.
pub fn drip(frames: Vec<Bytes>, bytes: usize, every_ms: u64) -> Vec<(u64, Bytes)> {
    let all: Vec<u8> = frames.concat();
    all.chunks(bytes.max(1)).map(|c| (every_ms, Bytes::copy_from_slice(c))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffering_proxy_forwards_every_frame_once_in_order_when_it_lets_it_go() {
        let frames: Vec<(u32, Bytes)> = (0..7).map(|i| (i, Bytes::from(format!("f{i}.")))).collect();
        let all: Vec<u8> = frames.iter().flat_map(|(_, b)| b.to_vec()).collect();
        // 3 bytes a frame: a write once 7 are held (the third frame), and the rest at the end.
        let lumps = forwarded(&Fault::Lumps(7), frames.clone());
        assert_eq!(lumps.iter().map(|w| w.0).collect::<Vec<_>>(), vec![2, 5, 6]);
        assert_eq!(lumps.iter().flat_map(|w| w.1.to_vec()).collect::<Vec<_>>(), all);
        // The first 4 in one write when the fourth is due, then each on its own.
        let held = forwarded(&Fault::HoldFirst(4), frames.clone());
        assert_eq!(held.iter().map(|w| w.0).collect::<Vec<_>>(), vec![3, 4, 5, 6]);
        assert_eq!(&held[0].1[..], b"f0.f1.f2.f3.");
        assert_eq!(forwarded(&Fault::None, frames).len(), 7);
    }
}
