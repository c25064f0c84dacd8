//! The direct path's HTTP/1.1 framing against hyper's (the reqwest path's): the same random
//! responses (interim 1xx heads, chunked or fixed-length bodies, chunk extensions, blanks, upper
//! and lower hex, leading zeros, trailers, and now and then a bare LF, an overrun chunk or a
//! trailer that is no header field) through `client::replay_response` and through hyper's client
//! over an in-memory pipe must give the same payload, the same verdict and the same reuse decision.
//!
//! And a table of named responses (`the_same_responses_read_the_same_however_the_reads_cut_them`),
//! each served whole, byte by byte and in random cuts (fixed seed) to both, read as each
//! transport reads it: the same final status, content type, Location, unasked coding, payload
//! and reuse decision; and the responses both must refuse, refused by both.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Body;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use ttft_model::stats::Rng;

/// hyper's I/O traits over tokio's in-memory pipe. Each read takes at most the next of `cuts`
/// bytes (all it can when none are left), so hyper sees the reads the direct path is fed.
struct Io(DuplexStream, VecDeque<usize>);

impl Io {
    fn whole(stream: DuplexStream) -> Io {
        Io(stream, VecDeque::new())
    }
}

impl hyper::rt::Read for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: tokio's ReadBuf writes only initialized bytes into the cursor's spare room and
        // reports how many; the cursor is advanced by exactly that many.
        let cut = self.1.front().copied().unwrap_or(usize::MAX);
        let n = unsafe {
            let spare = buf.as_mut();
            let len = spare.len().min(cut);
            let mut room = tokio::io::ReadBuf::uninit(&mut spare[..len]);
            match tokio::io::AsyncRead::poll_read(Pin::new(&mut self.0), cx, &mut room) {
                Poll::Ready(Ok(())) => room.filled().len(),
                other => return other,
            }
        };
        // SAFETY: n bytes were just written.
        unsafe { buf.advance(n) };
        if let Some(left) = self.1.front_mut() {
            // A cut the pipe could not fill at once goes on in the next read.
            *left -= n.min(*left);
            if *left == 0 {
                self.1.pop_front();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        tokio::io::AsyncWrite::poll_write(Pin::new(&mut self.0), cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tokio::io::AsyncWrite::poll_flush(Pin::new(&mut self.0), cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tokio::io::AsyncWrite::poll_shutdown(Pin::new(&mut self.0), cx)
    }
}

/// What a client made of a response: its payload when the body ended cleanly, whether the
/// connection could carry another request; or that it refused the response.
#[derive(Debug, PartialEq)]
enum Outcome {
    Ended { payload: Vec<u8>, reusable: bool },
    Refused,
}

fn pick(rng: &mut Rng, one_in: usize) -> bool {
    rng.below(one_in) == 0
}

/// A line end: CRLF, and now and then a bare LF.
fn eol(rng: &mut Rng) -> &'static str {
    if pick(rng, 10) { "\n" } else { "\r\n" }
}

fn response(rng: &mut Rng) -> Vec<u8> {
    let mut out = String::new();
    if pick(rng, 3) {
        out.push_str("HTTP/1.1 100 Continue\r\n\r\n");
    }
    out.push_str("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n");
    if pick(rng, 4) {
        out.push_str("connection: close\r\n");
    }
    let data = |rng: &mut Rng| -> String {
        let len = rng.below(24) + 1;
        (0..len).map(|_| char::from(b'a' + rng.below(26) as u8)).collect()
    };
    if pick(rng, 4) {
        let body = data(rng);
        out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        return out.into_bytes();
    }
    out.push_str("transfer-encoding: chunked\r\n\r\n");
    let size_line = |rng: &mut Rng, size: usize| -> String {
        let zeros = "0".repeat(rng.below(3));
        let hex = if pick(rng, 2) { format!("{size:x}") } else { format!("{size:X}") };
        let blanks = [" ", "\t", ""][rng.below(3)];
        let ext = if pick(rng, 3) { ";name=value" } else { "" };
        format!("{zeros}{hex}{}{ext}{}", if ext.is_empty() && pick(rng, 2) { "" } else { blanks }, eol(rng))
    };
    for _ in 0..rng.below(4) {
        let chunk = data(rng);
        out.push_str(&size_line(rng, chunk.len()));
        out.push_str(&chunk);
        out.push_str(if pick(rng, 15) { "x\r\n" } else { eol(rng) });
    }
    out.push_str(&size_line(rng, 0));
    for _ in 0..rng.below(3) {
        out.push_str(if pick(rng, 8) { "not a field" } else { "x-trailer: 1" });
        out.push_str(eol(rng));
    }
    out.push_str(eol(rng));
    out.into_bytes()
}

fn direct(bytes: &[u8]) -> Outcome {
    let u = ttft_client::replay_response([bytes]);
    match (u.error, u.ended) {
        (None, true) => Outcome::Ended { payload: u.payload, reusable: u.reusable },
        _ => Outcome::Refused,
    }
}

async fn through_hyper(bytes: Vec<u8>) -> Outcome {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, String>(Io::whole(client)).await.unwrap();
    let driver = tokio::spawn(conn);
    let serve = tokio::spawn(async move {
        let mut request = [0u8; 4096];
        let _ = server.read(&mut request).await;
        server.write_all(&bytes).await.unwrap();
        // Open until the client is done: a close must not decide anything here.
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(server);
    });
    let request = hyper::Request::post("/v1/chat/completions").body(String::from("{}")).unwrap();
    let outcome = async {
        let Ok(response) = sender.send_request(request).await else { return Outcome::Refused };
        let mut body = response.into_body();
        let mut payload = Vec::new();
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            match frame {
                Ok(frame) => payload.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d.as_ref())),
                Err(_) => return Outcome::Refused,
            }
        }
        let reusable =
            matches!(tokio::time::timeout(Duration::from_millis(200), sender.ready()).await, Ok(Ok(())));
        Outcome::Ended { payload, reusable }
    };
    // A response hyper waits on for more bytes is one the direct path must not have ended either.
    let outcome = tokio::time::timeout(Duration::from_secs(2), outcome).await.unwrap_or(Outcome::Refused);
    driver.abort();
    serve.abort();
    outcome
}

#[test]
fn random_framings_read_the_same_through_the_direct_path_and_hyper() {
    // Paused time: the in-memory exchange runs to where it waits, and only then do its timeouts
    // (200 ms for reuse, 1-2 s in all) fire, so a loaded machine that stalls this thread cannot
    // turn a slow read into a verdict.
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let mut rng = Rng::new(0x5eed_f1a3);
    let (mut ended, mut refused) = (0, 0);
    for case in 0..300 {
        let bytes = response(&mut rng);
        let ours = direct(&bytes);
        let theirs = runtime.block_on(through_hyper(bytes.clone()));
        assert_eq!(ours, theirs, "case {case}: {:?}", String::from_utf8_lossy(&bytes));
        if matches!(ours, Outcome::Ended { .. }) { ended += 1 } else { refused += 1 }
    }
    assert!(ended > 50 && refused > 50, "both verdicts are exercised: {ended} ended, {refused} refused");
}

/// What a client made of a response, read as its transport reads it (body.rs `Fetched` and
/// `failure::location_of` on the reqwest path; `client::replay_response` on the direct path).
#[derive(Debug, PartialEq)]
enum Verdict {
    Read {
        status: u16,
        content_type: Option<String>,
        location: Option<String>,
        coding: Option<String>,
        payload: Vec<u8>,
        reusable: bool,
    },
    Refused,
    /// Neither an end nor an error: still waiting for bytes.
    Waiting,
}

/// `bytes` cut into pieces of the given lengths (the last piece takes the rest).
fn cut<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut rest = bytes;
    let mut pieces = Vec::new();
    for &n in cuts {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(n.min(rest.len()));
        pieces.push(piece);
        rest = tail;
    }
    if !rest.is_empty() {
        pieces.push(rest);
    }
    pieces
}

fn direct_verdict(bytes: &[u8], cuts: &[usize], closes: bool) -> Verdict {
    let pieces = cut(bytes, cuts);
    let u = match closes {
        true => ttft_client::replay_response_then_close(pieces),
        false => ttft_client::replay_response(pieces),
    };
    match (u.error, u.ended, u.status) {
        (Some(_), _, _) => Verdict::Refused,
        (None, true, Some(status)) => Verdict::Read {
            status,
            content_type: u.content_type,
            location: u.location,
            coding: u.coding,
            payload: u.payload,
            reusable: u.reusable,
        },
        _ => Verdict::Waiting,
    }
}

async fn hyper_verdict(bytes: Vec<u8>, cuts: Vec<usize>, closes: bool) -> Verdict {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, String>(Io(client, cuts.into())).await.unwrap();
    let driver = tokio::spawn(conn);
    let serve = tokio::spawn(async move {
        let mut request = [0u8; 4096];
        let _ = server.read(&mut request).await;
        let _ = server.write_all(&bytes).await;
        if !closes {
            // Open until the client is done: only a case's own close may decide anything.
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        drop(server);
    });
    let request = hyper::Request::post("/v1/chat/completions").body(String::from("{}")).unwrap();
    let read = async {
        let Ok(response) = sender.send_request(request).await else { return Verdict::Refused };
        let headers = response.headers();
        let first = |name| {
            headers
                .get(name)
                .map(|v: &hyper::header::HeaderValue| String::from_utf8_lossy(v.as_bytes()).to_string())
        };
        let all = |name| headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>();
        let status = response.status().as_u16();
        let content_type = first(hyper::header::CONTENT_TYPE);
        let location = first(hyper::header::LOCATION).map(|l| l.trim().to_string());
        let coding = ttft_client::unasked_coding(
            all(hyper::header::TRANSFER_ENCODING),
            all(hyper::header::CONTENT_ENCODING),
        );
        let mut body = response.into_body();
        let mut payload = Vec::new();
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            match frame {
                Ok(frame) => payload.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d.as_ref())),
                Err(_) => return Verdict::Refused,
            }
        }
        let reusable =
            matches!(tokio::time::timeout(Duration::from_millis(200), sender.ready()).await, Ok(Ok(())));
        Verdict::Read { status, content_type, location, coding, payload, reusable }
    };
    let verdict = tokio::time::timeout(Duration::from_secs(1), read).await.unwrap_or(Verdict::Waiting);
    driver.abort();
    serve.abort();
    verdict
}

/// A response of the table: what the server sends, whether it then closes the connection, and
/// what both clients must make of it (`None`: refused).
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    closes: bool,
    expect: Option<(u16, &'static [u8], bool)>,
}

fn case(name: &'static str, text: &str, closes: bool, expect: Option<(u16, &'static [u8], bool)>) -> Case {
    Case { name, bytes: text.as_bytes().to_vec(), closes, expect }
}

fn table() -> Vec<Case> {
    const SSE: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
    let sse_chunked = {
        let (a, b) = SSE.split_at(20);
        format!("{:x}\r\n{a}\r\n{:X}\r\n{b}\r\n0\r\n\r\n", a.len(), b.len())
    };
    let mut many = String::from("HTTP/1.1 200 OK\r\n");
    for i in 0..101 {
        many.push_str(&format!("x-field-{i}: {i}\r\n"));
    }
    many.push_str("content-length: 0\r\n\r\n");
    let huge = format!("HTTP/1.1 200 OK\r\nx-huge: {}\r\ncontent-length: 0\r\n\r\n", "a".repeat(500_000));
    vec![
        case(
            "content-length, kept alive",
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n{\"ok\": true}",
            false,
            Some((200, b"{\"ok\": true}", true)),
        ),
        case(
            "content-length, then connection: close",
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\nabc",
            true,
            Some((200, b"abc", false)),
        ),
        case(
            "a close is not undone by a later keep-alive",
            "HTTP/1.1 200 OK\r\nconnection: close\r\nconnection: keep-alive\r\ncontent-length: 3\r\n\r\nabc",
            false,
            Some((200, b"abc", false)),
        ),
        case(
            "HTTP/1.0 kept alive when it says so",
            "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok",
            false,
            Some((200, b"ok", true)),
        ),
        case(
            "HTTP/1.0 closes by default",
            "HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
            false,
            Some((200, b"ok", false)),
        ),
        case(
            "equal content-lengths, one a list",
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\ncontent-length: 3\r\n\r\nabc",
            false,
            Some((200, b"abc", true)),
        ),
        case(
            "chunked, with extensions, blanks, hex case, leading zeros and trailers",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;name=value;x\r\nhello\r\n6 \t;y=\"q\"\r\n world\r\n\
             000A\r\n, chunked!\r\n0;last\r\nx-trailer: 1\r\nx-other: two\r\n\r\n",
            false,
            Some((200, b"hello world, chunked!", true)),
        ),
        case(
            "transfer-encoding wins over a content-length",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: nonsense\r\n\r\n2\r\nab\r\n0\r\n\r\n",
            false,
            Some((200, b"ab", true)),
        ),
        case(
            "an SSE stream, chunked",
            &format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{sse_chunked}"
            ),
            false,
            Some((200, SSE.as_bytes(), true)),
        ),
        case(
            "an SSE stream read until the server closes",
            &format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{SSE}"),
            true,
            Some((200, SSE.as_bytes(), false)),
        ),
        case(
            "interim heads before the answer",
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n\
             HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            false,
            Some((200, b"ok", true)),
        ),
        case("204 has no body", "HTTP/1.1 204 No Content\r\n\r\n", false, Some((204, b"", true))),
        case(
            "304 has no body, whatever its content-length says",
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n",
            false,
            Some((304, b"", true)),
        ),
        case(
            "the first of two content types",
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-type: text/html\r\ncontent-length: 0\r\n\r\n",
            false,
            Some((200, b"", true)),
        ),
        case(
            "a redirect's Location",
            "HTTP/1.1 307 Temporary Redirect\r\nlocation:  http://elsewhere/v1 \r\nlocation: /second\r\ncontent-length: 0\r\n\r\n",
            false,
            Some((307, b"", true)),
        ),
        case(
            "an error status with its body",
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{\"e\": 1}\n",
            false,
            Some((500, b"{\"e\": 1}\n", true)),
        ),
        case(
            "gzip, chunked: unframed, the gzip named and left as it is",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n3\r\n\x1f\x08z\r\n0\r\n\r\n",
            false,
            Some((200, b"\x1f\x08z", true)),
        ),
        case(
            "chunked, gzip: not chunked last, so read until the close",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n2\r\nab\r\n0\r\n\r\n",
            true,
            Some((200, b"2\r\nab\r\n0\r\n\r\n", false)),
        ),
        case(
            "a content coding bench did not ask for",
            "HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 2\r\n\r\n\x0b\x00",
            false,
            Some((200, b"\x0b\x00", true)),
        ),
        case(
            "101 is final: no body, no reuse",
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            false,
            Some((101, b"", false)),
        ),
        // Refused by both.
        case(
            "a chunk size that is no hex",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
            false,
            None,
        ),
        case(
            "a signed chunk size",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n+2\r\nab\r\n0\r\n\r\n",
            false,
            None,
        ),
        case(
            "a chunk size that overflows",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1ffffffffffffffff\r\nab\r\n0\r\n\r\n",
            false,
            None,
        ),
        case(
            "a chunk past its size",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            false,
            None,
        ),
        case(
            "a bare LF in the chunked framing",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n",
            false,
            None,
        ),
        case(
            "trailers that are no header fields",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nnot a field\r\n\r\n",
            false,
            None,
        ),
        case(
            "a chunked body cut by the close",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            true,
            None,
        ),
        case(
            "fewer bytes than the content-length",
            "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
            true,
            None,
        ),
        case(
            "two different content-lengths",
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabc",
            false,
            None,
        ),
        case(
            "a content-length list that differs",
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\nabc",
            false,
            None,
        ),
        case("a signed content-length", "HTTP/1.1 200 OK\r\ncontent-length: +3\r\n\r\nabc", false, None),
        case(
            "a content-length that is no number",
            "HTTP/1.1 200 OK\r\ncontent-length: 3 bytes\r\n\r\nabc",
            false,
            None,
        ),
        case(
            "transfer-encoding on HTTP/1.0",
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
            false,
            None,
        ),
        case("a status under 100", "HTTP/1.1 099 Odd\r\ncontent-length: 0\r\n\r\n", false, None),
        case("a head that is not HTTP", "SSH-2.0-OpenSSH_9.6\r\n\r\n", false, None),
        case("a head cut by the close", "HTTP/1.1 200 OK\r\ncontent-le", true, None),
        case("over 100 header fields", &many, false, None),
        case("a head too large", &huge, false, None),
    ]
}

/// The cuts each case is served in: whole, byte by byte, and random lengths of 1-16 bytes.
fn cuttings(len: usize, rng: &mut Rng) -> Vec<(String, Vec<usize>)> {
    let mut out = vec![("whole".to_string(), vec![]), ("byte by byte".to_string(), vec![1; len])];
    for i in 0..6 {
        out.push((format!("random cut {i}"), (0..len).map(|_| rng.below(16) + 1).collect()));
    }
    out
}

#[test]
fn the_same_responses_read_the_same_however_the_reads_cut_them() {
    // Paused time: the in-memory exchange runs to where it waits, and only then do its timeouts
    // (200 ms for reuse, 1-2 s in all) fire, so a loaded machine that stalls this thread cannot
    // turn a slow read into a verdict.
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let mut rng = Rng::new(0x7ab1_e5ed);
    // Every case that differs, so that one run names them all.
    let mut wrong = Vec::new();
    for case in table() {
        // A head too large to cut fine: hyper parses it again after each read.
        let cuts = match case.bytes.len() > 100_000 {
            true => vec![("whole".to_string(), vec![])],
            false => cuttings(case.bytes.len(), &mut rng),
        };
        for (how, cuts) in cuts {
            let ours = direct_verdict(&case.bytes, &cuts, case.closes);
            let theirs = runtime.block_on(hyper_verdict(case.bytes.clone(), cuts, case.closes));
            let expected = match (case.expect, &ours) {
                (None, Verdict::Refused) => true,
                (Some((status, body, reusable)), Verdict::Read { status: s, payload, reusable: r, .. }) => {
                    (status, body, reusable) == (*s, payload.as_slice(), *r)
                }
                _ => false,
            };
            if ours != theirs || !expected {
                let expect = case.expect.map(|(s, body, r)| (s, String::from_utf8_lossy(body), r));
                wrong.push(format!(
                    "{} ({how}): expected {expect:?}\n  direct: {ours:?}\n  hyper:  {theirs:?}",
                    case.name
                ));
                // One cutting of a case says enough.
                break;
            }
        }
    }
    assert!(wrong.is_empty(), "{} cases differ:\n{}", wrong.len(), wrong.join("\n"));
}

/// What bench's client records of a server that answers one request with `response` and closes,
/// on the direct path or on reqwest's.
fn recorded(response: &'static [u8], direct: bool) -> (Option<u16>, ttft_model::record::ErrorKind, String) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else { return };
        let (mut seen, mut buf) = (Vec::new(), [0u8; 4096]);
        // The whole request: its head, then the JSON body that ends it.
        while !(seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.ends_with(b"}")) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(response);
    });
    let options = ttft_client::ClientOptions { direct, ..Default::default() };
    let client =
        ttft_client::Client::new(&url, ttft_model::spec::Api::Openai, None, Duration::from_secs(10), options)
            .unwrap();
    let request = ttft_client::ChatRequest {
        model: "m".into(),
        messages: vec![ttft_client::Message::new("user", "say something")],
        max_tokens: 8,
        stream: true,
        ..Default::default()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ex = runtime.block_on(client.send(client.prepare(&request).unwrap()));
    let error = ex.error.expect("the response is recorded as an error");
    (ex.http_status, error.kind, error.message)
}

#[test]
fn a_101_is_an_http_status_error_alike_on_both_transports() {
    let response = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n";
    let direct = recorded(response, true);
    assert_eq!(direct, recorded(response, false), "the direct path, then reqwest's");
    assert_eq!(direct.0, Some(101));
    assert_eq!(direct.1, ttft_model::record::ErrorKind::HttpStatus, "{direct:?}");
    assert!(direct.2.starts_with("HTTP 101 Switching Protocols"), "{direct:?}");
}
