//! The direct path's HTTP/1.1 framing against hyper's (the reqwest path's): the same random
//! responses (interim 1xx heads, chunked or fixed-length bodies, chunk extensions, blanks, upper
//! and lower hex, leading zeros, trailers, and now and then a bare LF, an overrun chunk or a
//! trailer that is no header field) through `client::replay_response` and through hyper's client
//! over an in-memory pipe must give the same payload, the same verdict and the same reuse decision.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Body;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use ttft_bench::stats::Rng;

/// hyper's I/O traits over tokio's in-memory pipe.
struct Io(DuplexStream);

impl hyper::rt::Read for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: tokio's ReadBuf writes only initialized bytes into the cursor's spare room and
        // reports how many; the cursor is advanced by exactly that many.
        let n = unsafe {
            let mut room = tokio::io::ReadBuf::uninit(buf.as_mut());
            match tokio::io::AsyncRead::poll_read(Pin::new(&mut self.0), cx, &mut room) {
                Poll::Ready(Ok(())) => room.filled().len(),
                other => return other,
            }
        };
        // SAFETY: n bytes were just written.
        unsafe { buf.advance(n) };
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
    let u = ttft_bench::client::replay_response([bytes]);
    match (u.error, u.ended) {
        (None, true) => Outcome::Ended { payload: u.payload, reusable: u.reusable },
        _ => Outcome::Refused,
    }
}

async fn through_hyper(bytes: Vec<u8>) -> Outcome {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, String>(Io(client)).await.unwrap();
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
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
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
