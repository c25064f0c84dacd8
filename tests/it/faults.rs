//! Fault injection: every hostile or broken server behaviour we know of, through the measuring
//! client in-process (exact error kind and message) and through the real `bench` binary. Every
//! wait is bounded (a hang fails the test instead of stalling CI); nothing asserts speed.

use crate::common;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::scripted::{Behaviour, Fault, Scripted};
use common::{bench, measurements, records, run_dir, stderr};
use serde_json::Value;
use ttft_client::{ChatRequest, Client, ClientOptions, Exchange, Limits, Message};
use ttft_model::record::ErrorKind;
use ttft_model::spec::Api;

/// Generous bound on anything one fault may take; exceeding it means a hang.
const HANG: Duration = Duration::from_secs(90);

fn block_on<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async { tokio::time::timeout(HANG, f).await.expect("hung: the client did not give up") })
}

thread_local! {
    /// Whether the clients of the running test use the direct path (`on_both_paths`).
    static DIRECT: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Runs `test` once on each of the client's two paths: the direct one (plain HTTP's default) and
/// reqwest's (HTTPS, proxies). A fault must read the same on both.
fn on_both_paths(test: impl Fn()) {
    for direct in [true, false] {
        DIRECT.set(direct);
        eprintln!("on the {} path", if direct { "direct" } else { "reqwest" });
        test();
    }
}

fn client_with(url: &str, timeout: Duration, options: ClientOptions) -> Client {
    let options = ClientOptions { direct: DIRECT.get(), ..options };
    Client::new(url, Api::Openai, None, timeout, options).unwrap()
}

fn client(url: &str, timeout: Duration) -> Client {
    client_with(url, timeout, ClientOptions::default())
}

fn small_limits() -> ClientOptions {
    let limits = Limits {
        max_stream_bytes: 1 << 20,
        max_body_bytes: 1 << 20,
        max_call_bytes: 1 << 20,
        ..Limits::default()
    };
    ClientOptions { limits, ..ClientOptions::default() }
}

/// One measured-size chat request (max_tokens 32: the scripted faults apply to it).
async fn chat(client: &Client, stream: bool) -> Exchange {
    let req = ChatRequest {
        model: "m".into(),
        messages: vec![Message::new("user", "[nonce 000000000001] say something")],
        max_tokens: 32,
        stream,
        ..Default::default()
    };
    client.send(client.prepare(&req).unwrap()).await
}

fn faulty(fault: Fault) -> Scripted {
    Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, fault, ..Default::default() })
}

fn error_of(ex: &Exchange) -> (ErrorKind, String) {
    let e = ex.error.clone().expect("the fault must be recorded as an error");
    (e.kind, e.message)
}

// ---- streams ----

#[test]
fn an_unterminated_huge_sse_line_fails_at_the_line_cap() {
    on_both_paths(|| {
        let server = faulty(Fault::HugeLine(150 << 20));
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(60)), true));
        assert_eq!(
            error_of(&ex),
            (
                ErrorKind::Protocol,
                "an SSE line exceeds the 1 MiB cap (no line end within 1048576 bytes)".into()
            )
        );
    });
}

#[test]
fn an_endless_stream_fails_at_the_stream_cap() {
    on_both_paths(|| {
        let server =
            Scripted::start(Behaviour { token_ms: 0, fault: Fault::EndlessStream, ..Default::default() });
        let ex = block_on(chat(&client_with(&server.url, Duration::from_secs(60), small_limits()), true));
        assert_eq!(error_of(&ex), (ErrorKind::Protocol, "the stream exceeds the 1 MiB cap".into()));
        assert!(ex.ttft_ms.is_some(), "what arrived before the cap is kept");
    });
}

#[test]
fn a_firehose_stream_does_not_outlive_the_request_timeout() {
    on_both_paths(|| {
        // Data always ready: the deadline is checked between chunks, not only when the socket idles.
        let server =
            Scripted::start(Behaviour { token_ms: 0, fault: Fault::EndlessStream, ..Default::default() });
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(1)), true));
        assert_eq!(error_of(&ex), (ErrorKind::Timeout, "stream not finished within 1s".into()));
    });
}

#[test]
fn an_html_page_instead_of_a_stream_says_so() {
    on_both_paths(|| {
        let server = faulty(Fault::Html200);
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(30)), true));
        let (kind, message) = error_of(&ex);
        assert_eq!(kind, ErrorKind::Protocol);
        assert_eq!(
            message,
            "the server answered 200 with content-type text/html; charset=utf-8 instead of text/event-stream: \
             <!DOCTYPE html><html><head><title>Sign in</title></head><body>proxy login</body></html>"
        );
    });
}

#[test]
fn invalid_utf8_is_a_protocol_error_naming_the_byte() {
    on_both_paths(|| {
        let server = faulty(Fault::InvalidUtf8);
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(30)), true));
        let first = format!(
            "data: {}\n\n",
            serde_json::json!({"choices": [{"index": 0, "delta": {"content": "w0"}}]})
        );
        let at = first.len() + r#"data: {"choices":[{"index":0,"delta":{"content":"a"#.len();
        assert_eq!(error_of(&ex), (ErrorKind::Protocol, format!("invalid UTF-8 at byte {at} of the stream")));
        assert!(ex.ttft_ms.is_some(), "the token before the bad byte is kept");
    });
}

#[test]
fn a_reset_mid_body_says_reset_not_decoding() {
    on_both_paths(|| {
        let server = faulty(Fault::ResetMidBody);
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(30)), true));
        let (kind, message) = error_of(&ex);
        assert_eq!(kind, ErrorKind::StreamTruncated);
        assert!(
            message.starts_with("connection reset by the server while reading the body (after "),
            "{message}"
        );
        assert_eq!(ex.content, "w0 w1", "tokens before the reset are kept");
    });
}

#[test]
fn a_hang_after_headers_ends_at_the_timeout() {
    on_both_paths(|| {
        let server = faulty(Fault::HangAfterHeaders);
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(1)), true));
        assert_eq!(error_of(&ex), (ErrorKind::Timeout, "stream not finished within 1s".into()));
        assert!(ex.first_byte_ms.is_some());
    });
}

#[test]
fn a_slow_drip_under_the_timeout_is_measured_whole() {
    on_both_paths(|| {
        let server = faulty(Fault::SlowDrip { bytes: 5, every_ms: 1 });
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(60)), true));
        assert!(ex.error.is_none(), "{:?}", ex.error);
        assert_eq!(ex.usage.output_tokens, Some(32));
        assert_eq!(ex.delta_count, 32);
    });
}

#[test]
fn a_slow_drip_over_the_timeout_ends_at_the_timeout() {
    on_both_paths(|| {
        let server = faulty(Fault::SlowDrip { bytes: 5, every_ms: 100 });
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(1)), true));
        assert_eq!(error_of(&ex), (ErrorKind::Timeout, "stream not finished within 1s".into()));
    });
}

// ---- whole bodies and error bodies ----

#[test]
fn an_endless_whole_body_fails_at_the_body_cap() {
    on_both_paths(|| {
        let server = faulty(Fault::EndlessBody);
        let ex = block_on(chat(&client_with(&server.url, Duration::from_secs(60), small_limits()), false));
        assert_eq!(error_of(&ex), (ErrorKind::Protocol, "the response body exceeds the 1 MiB cap".into()));
    });
}

#[test]
fn a_huge_error_body_keeps_a_bounded_prefix() {
    on_both_paths(|| {
        let server = faulty(Fault::HugeErrorBody);
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(60)), true));
        let (kind, message) = error_of(&ex);
        assert_eq!(kind, ErrorKind::HttpStatus);
        assert!(message.starts_with("HTTP 500 Internal Server Error: overloaded overloaded"), "{message}");
        assert_eq!(message.chars().count(), "HTTP 500 Internal Server Error: ".len() + 2000);
        assert_eq!(ex.error.unwrap().http_status, Some(500));
    });
}

// ---- what is (not) sent again ----

#[test]
fn a_request_read_then_dropped_is_recorded_not_resent() {
    on_both_paths(|| {
        let server = faulty(Fault::DropAfterRead);
        let ex = block_on(chat(&client(&server.url, Duration::from_secs(30)), true));
        assert_eq!(
            error_of(&ex),
            (
                ErrorKind::Transport,
                "the server closed the connection after the request was sent, before answering (not re-sent: \
                 the server may have read and processed it)"
                    .into()
            )
        );
        assert_eq!(ex.attempts, 1);
        assert_eq!(server.measured_requests(), 1, "nothing was sent again");
    });
}

#[test]
fn a_refused_connect_is_tried_twice_and_says_so() {
    on_both_paths(|| {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port(); // now closed
        let ex = block_on(chat(&client(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5)), true));
        let (kind, message) = error_of(&ex);
        assert_eq!(kind, ErrorKind::Connect);
        // Both paths in the same words: where, and what the system said.
        assert_eq!(message, format!("cannot connect to 127.0.0.1:{port}: Connection refused (os error 111)"));
        assert_eq!(ex.attempts, 2, "a request that never left may be sent again, and the record counts it");
    });
}

/// A raw HTTP/1.1 server: `handle(stream, connection index)` per connection, each on a thread.
fn raw_server(handle: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let handle = handle.clone();
            std::thread::spawn(move || handle(stream, n));
        }
    });
    (url, connections)
}

/// Reads one request (headers and a content-length body); false at EOF.
fn read_request(s: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let Ok(n) = s.read(&mut buf) else { return false };
        if n == 0 {
            return false;
        }
        data.extend_from_slice(&buf[..n]);
        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if data.len() >= end + 4 + length {
            return true;
        }
    }
}

const WHOLE: &str = r#"{"choices":[{"message":{"content":"a b c d e"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#;

fn answer(s: &mut TcpStream, extra_header: &str) {
    let text = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra_header}\r\n{WHOLE}",
        WHOLE.len()
    );
    let _ = s.write_all(text.as_bytes());
}

/// llama.cpp's server (cpp-httplib) closes a connection after 5 s idle, a new one waiting for its
/// first request included. A request written just as it closes is read and lost; this server
/// makes that race certain: it reads a request on a connection idle longer than 600 ms (since it
/// was opened or last answered) and hangs up without answering. A client that drops idle
/// connections (spares opened ahead, kept-alive ones) sooner never meets it; one that keeps
/// them does, and then the failure is recorded, not hidden by a silent re-send.
#[test]
fn idle_connections_are_dropped_before_the_server_closes_them() {
    on_both_paths(|| {
        let (url, connections) = raw_server(|mut s, _| {
            let mut idle_since = std::time::Instant::now();
            while read_request(&mut s) {
                if idle_since.elapsed() > Duration::from_millis(600) {
                    return; // the close crossed the request
                }
                answer(&mut s, "");
                idle_since = std::time::Instant::now();
            }
        });
        let twice = |keep_alive_idle: Duration| {
            let options = ClientOptions { keep_alive_idle, ..ClientOptions::default() };
            let client = client_with(&url, Duration::from_secs(10), options);
            block_on(async {
                let first = chat(&client, false).await;
                tokio::time::sleep(Duration::from_millis(1000)).await;
                (first, chat(&client, false).await)
            })
        };
        let (first, second) = twice(Duration::from_millis(300));
        assert!(first.error.is_none() && second.error.is_none(), "{:?} {:?}", first.error, second.error);
        assert_eq!((first.attempts, second.attempts), (1, 1));
        // The direct path also opened a spare after each request (the first one's closed unused).
        assert!(
            (2..=4).contains(&connections.load(Ordering::SeqCst)),
            "the second request made its own connection"
        );

        let (first, second) = twice(Duration::from_secs(90));
        assert!(first.error.is_none());
        if DIRECT.get() {
            assert_eq!(error_of(&second).0, ErrorKind::Transport, "the race is real with a long idle");
            assert_eq!(second.attempts, 1);
        } else {
            // reqwest keeps no HTTP/1.1 connection of a chat request: nothing idles.
            assert!(second.error.is_none(), "{:?}", second.error);
        }
    });
}

#[test]
fn connection_close_is_honoured() {
    on_both_paths(|| {
        let (url, connections) = raw_server(|mut s, _| {
            if read_request(&mut s) {
                answer(&mut s, "connection: close\r\n");
            }
            // cpp-httplib sends this with its 100th response and with every error status, then closes.
        });
        let client = client(&url, Duration::from_secs(10));
        let (a, b) = block_on(async { (chat(&client, false).await, chat(&client, false).await) });
        assert!(a.error.is_none() && b.error.is_none(), "{:?} {:?}", a.error, b.error);
        assert_eq!((a.attempts, b.attempts), (1, 1));
        // Each on its own connection; the direct path may also have opened a spare for the next.
        assert!((2..=3).contains(&connections.load(Ordering::SeqCst)));
    });
}

// ---- small JSON calls (server.rs) ----

#[test]
fn calls_honour_the_request_timeout_and_their_caps() {
    use ttft_bench::server::{self, CallError};
    let (hang, _) = raw_server(|mut s, _| {
        read_request(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    let err =
        block_on(server::post_json(&client(&hang, Duration::from_millis(500)), "/tokenize", &Value::Null))
            .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.to_string(), "POST /tokenize: no complete answer within 500ms");

    let (endless, _) = raw_server(|mut s, _| {
        read_request(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n[");
        while s.write_all(&[b'1'; 65536]).is_ok() {}
    });
    let err =
        block_on(server::get_json(&client_with(&endless, Duration::from_secs(60), small_limits()), "/props"))
            .unwrap_err();
    assert_eq!(err, CallError::TooLarge { call: "GET /props".into(), cap: 1 << 20 });

    let (huge_error, _) = raw_server(|mut s, _| {
        read_request(&mut s);
        let _ = s.write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n");
        while s.write_all(&[b'e'; 65536]).is_ok() {}
    });
    let err =
        block_on(server::get_json(&client(&huge_error, Duration::from_secs(60)), "/v1/models")).unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(err.to_string(), format!("GET /v1/models: HTTP 503: {}", "e".repeat(2000)));

    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = block_on(server::get_json(
        &client(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5)),
        "/props",
    ))
    .unwrap_err();
    assert!(err.is_unreachable() && err.to_string().starts_with(server::UNREACHABLE), "{err}");
}

// ---- one verdict and one vocabulary on both paths ----

/// What each path (direct, then reqwest) records of a server that answers every request with
/// `response` and closes.
fn verdicts(response: &'static [u8]) -> [(ErrorKind, String); 2] {
    [true, false].map(|direct| {
        DIRECT.set(direct);
        let (url, _) = raw_server(move |mut s, _| {
            if read_request(&mut s) {
                let _ = s.write_all(response);
            }
        });
        error_of(&block_on(chat(&client(&url, Duration::from_secs(10)), true)))
    })
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n";

#[test]
fn lf_only_chunk_framing_is_refused_alike_on_both_paths() {
    // RFC 9112 section 7.1 ends every chunked-framing line with CRLF; hyper holds to it.
    let response = format!("{SSE_HEAD}transfer-encoding: chunked\r\n\r\n10\ndata: {{\"a\":1}}\n\n\n0\n\n");
    let [direct, reqwest] = verdicts(response.leak().as_bytes());
    for (kind, message) in [&direct, &reqwest] {
        assert_eq!(*kind, ErrorKind::StreamTruncated, "{message}");
        assert!(message.starts_with("the body's framing is broken (after 0 bytes): "), "{message}");
    }
}

#[test]
fn an_encoded_body_is_named_as_such_alike_on_both_paths() {
    let gzip = "\x1f\x08\x00\x00"; // bytes of no text, as compressed ones are
    let transfer = format!("{SSE_HEAD}transfer-encoding: gzip, chunked\r\n\r\n4\r\n{gzip}\r\n0\r\n\r\n");
    let content = format!("{SSE_HEAD}content-encoding: gzip\r\ncontent-length: 4\r\n\r\n{gzip}");
    for (response, coding) in [(transfer, "transfer-encoding gzip"), (content, "content-encoding gzip")] {
        let bytes: &'static [u8] = response.clone().leak().as_bytes();
        let [direct, reqwest] = verdicts(bytes);
        assert_eq!(direct, reqwest, "{response:?}");
        assert_eq!(direct.0, ErrorKind::Protocol, "{direct:?}");
        assert!(
            direct.1.starts_with(&format!("the response is encoded ({coding}), which bench did not ask for")),
            "{direct:?}"
        );
    }
}

#[test]
fn a_head_that_is_not_http_is_said_alike_on_both_paths() {
    let [direct, reqwest] = verdicts(b"SSH-2.0-OpenSSH_9.6\r\n\r\n");
    for (kind, message) in [&direct, &reqwest] {
        assert_eq!(*kind, ErrorKind::Transport, "{message}");
        assert!(message.starts_with("the response head is not valid HTTP/1.1: "), "{message}");
    }
}

// ---- a stray response ----

/// The scripted server's prefill for the stray tests: a reply sooner than this after its request
/// was sent cannot be that request's answer.
const STRAY_PREFILL_MS: u64 = 120;

/// The delays of a stray copy after its reply: 66 ms lands just after a request sent on the
/// connection after the old 60 ms watch, 150 ms well into its prefill.
const STRAY_DELAYS_MS: [u64; 2] = [66, 150];

fn strays_after(delay_ms: u64) -> Scripted {
    let fault = Fault::StrayAfterReply(delay_ms);
    Scripted::start(Behaviour { first_token_ms: STRAY_PREFILL_MS, token_ms: 1, fault, ..Default::default() })
}

#[test]
fn a_stray_copy_of_the_last_reply_is_never_the_next_answer() {
    on_both_paths(|| {
        for (delay_ms, stream) in STRAY_DELAYS_MS.into_iter().flat_map(|d| [(d, false), (d, true)]) {
            // After each measured reply the server writes a copy of it on the same connection,
            // `delay_ms` later and before it reads the next request; each request goes out as
            // soon as the one before it returns.
            let server = strays_after(delay_ms);
            let client = client(&server.url, Duration::from_secs(30));
            let exchanges = block_on(async {
                let mut all = Vec::new();
                for _ in 0..4 {
                    all.push(chat(&client, stream).await);
                }
                all
            });
            let case = format!("stray {delay_ms} ms after the reply, stream {stream}");
            for (i, ex) in exchanges.iter().enumerate() {
                assert!(ex.error.is_none(), "{case}, request {i}: {:?}", ex.error);
                let first = if stream { ex.ttft_ms } else { ex.first_byte_ms };
                let first = first.unwrap_or_else(|| panic!("{case}, request {i}: no first byte"));
                assert!(
                    first >= STRAY_PREFILL_MS as f64,
                    "{case}, request {i}: answered after {first} ms, before the server could: a stray"
                );
                assert_eq!(ex.usage.output_tokens, Some(32), "{case}, request {i}");
                assert!(ex.connection.is_some(), "{case}, request {i}: the exchange says how");
            }
            assert_eq!(server.measured_requests(), 4, "{case}");
        }
    });
}

// ---- through the real binary ----

fn sweep(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "sweep",
        "--server",
        url,
        "--out",
        out.to_str().unwrap(),
        "--contexts",
        "256",
        "--runs",
        "1",
        "--output-tokens",
        "32",
        "--thermal",
        "off",
    ];
    args.extend_from_slice(extra);
    assert_cmd::Command::cargo_bin("bench").unwrap().args(&args).timeout(HANG).output().unwrap()
}

fn only_error(out: &std::path::Path) -> (Value, Value) {
    let ms = measurements(&run_dir(out));
    assert_eq!(ms.len(), 1, "{ms:?}");
    (ms[0]["error"].clone(), ms[0].clone())
}

#[test]
fn sweep_records_each_fault_with_its_kind_and_finishes() {
    let cases: [(Fault, &[&str], &str, &str); 5] = [
        (Fault::HugeLine(150 << 20), &[], "protocol", "an SSE line exceeds the 1 MiB cap"),
        (
            Fault::EndlessBody,
            &["--modes", "non-streaming"],
            "protocol",
            "the response body exceeds the 64 MiB cap",
        ),
        (Fault::HangAfterHeaders, &["--request-timeout", "2s"], "timeout", "stream not finished within 2s"),
        (
            Fault::Html200,
            &[],
            "protocol",
            "content-type text/html; charset=utf-8 instead of text/event-stream",
        ),
        (Fault::DropAfterRead, &[], "transport", "not re-sent"),
    ];
    for (fault, extra, kind, text) in cases {
        let server = faulty(fault.clone());
        let dir = tempfile::tempdir().unwrap();
        let out = sweep(&server.url, dir.path(), extra);
        assert_eq!(out.status.code(), Some(1), "{fault:?}: {}", stderr(&out));
        let (error, m) = only_error(dir.path());
        assert_eq!(error["kind"], kind, "{fault:?}: {error}");
        assert!(error["message"].as_str().unwrap().contains(text), "{fault:?}: {error}");
        assert_eq!(m["attempts"], 1, "{fault:?}");
        assert_eq!(server.measured_requests(), 1, "{fault:?}: sent once, never again");
    }
}

/// Fails when the binary's two transports give a sweep different verdicts on the same bytes: the
/// record says the same (kind and words) over bench's direct path and over reqwest, and run.json
/// names the transport that read it.
#[test]
fn a_sweep_records_the_same_verdict_over_both_transports() {
    for fault in [Fault::Html200, Fault::InvalidUtf8, Fault::DropAfterRead] {
        let mut seen = Vec::new();
        for transport in ["direct", "reqwest"] {
            let server = faulty(fault.clone());
            let dir = tempfile::tempdir().unwrap();
            let out = assert_cmd::Command::cargo_bin("bench")
                .unwrap()
                .env("TTFT_BENCH_TRANSPORT", transport)
                .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap()])
                .args(["--contexts", "256", "--runs", "1", "--output-tokens", "32", "--thermal", "off"])
                .timeout(HANG)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1), "{fault:?} over {transport}: {}", stderr(&out));
            let (error, _) = only_error(dir.path());
            let meta: Value =
                serde_json::from_str(&std::fs::read_to_string(run_dir(dir.path()).join("run.json")).unwrap())
                    .unwrap();
            assert_eq!(meta["arrival_stamps"]["transport"], transport, "{fault:?}");
            seen.push(error);
        }
        assert_eq!(seen[0], seen[1], "{fault:?}: direct, then reqwest");
    }
}

/// The stream_burst flag of a record, when it has one.
fn burst_flag(m: &Value) -> Option<Value> {
    m["quality_flags"].as_array()?.iter().find(|f| f["flag"] == "stream_burst").cloned()
}

#[test]
fn a_stream_flushed_at_once_is_flagged_kept_out_of_statistics_and_explained_by_verify() {
    // The same sweep against a paced stream: one arrival per token, nothing flagged.
    let paced = Scripted::start(Behaviour { token_ms: 10, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&paced.url, dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = &measurements(&run_dir(dir.path()))[0];
    assert!(burst_flag(m).is_none() && m["quality_ok"] == true, "{m}");
    assert!(m["distinct_arrivals"].as_u64().is_some_and(|n| n > 4), "{m}");

    // Held back and flushed in one write: the server decoded for 62 ms, the client saw it at once.
    let server = faulty(Fault::Burst);
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--batch-sizes", "1,2"]);
    assert_eq!(out.status.code(), Some(1), "a failed quality gate is a finding: {}", stderr(&out));
    let run = run_dir(dir.path());
    let ms = measurements(&run);
    assert_eq!(ms.len(), 3, "batch 1 and a batch of 2");
    for m in &ms {
        assert_eq!(m["quality_ok"], false, "{m}");
        let flag = burst_flag(m).unwrap_or_else(|| panic!("no stream_burst flag: {m}"));
        assert_eq!(flag["fails_gate"], true, "{flag}");
        let reason = flag["reason"].as_str().unwrap();
        let arrivals = m["distinct_arrivals"].as_u64().unwrap();
        assert!(arrivals <= 2, "{m}");
        assert!(
            reason.starts_with(&format!("stream arrived in a burst (32 tokens in {arrivals} arrivals")),
            "{reason}"
        );
        assert!(
            reason.contains("the server decoded for") && reason.contains("decode not measurable"),
            "{reason}"
        );
    }
    kept_out_of_statistics_and_explained(&run, 64, "stream arrived in a burst (32 tokens in");
}

/// What a stream held back must get beyond its flag: the batch's averages hold none of its times
/// (its `total_tokens` still count), `bench verify` explains it in the flag's own words instead of
/// calling the decode impossible, and `bench report` keeps it out of every TTFT and decode statistic.
fn kept_out_of_statistics_and_explained(run: &std::path::Path, total_tokens: u64, explained: &str) {
    let group = records(run).into_iter().find(|r| r["record_type"] == "group").unwrap();
    assert!(group["avg_ttft_ms"].is_null() && group["per_request_tps"].is_null(), "{group}");
    assert_eq!(group["total_output_tokens"], total_tokens, "{group}");

    let run_arg = run.to_str().unwrap();
    let physics = ["--bandwidth-gbps", "32", "--tflops", "0.17", "--model-bytes", "1GB", "--params", "1B"];
    let mut args = vec!["verify", run_arg];
    args.extend_from_slice(&physics);
    let out = bench(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stream_burst"), "{text}");
    assert!(text.contains(explained), "{text}");
    assert!(text.contains("decode not measurable"), "{text}");
    assert!(!text.contains("decode_above_ceiling"), "{text}");

    let out = bench(&["report", run_arg, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = report["cells"].as_array().unwrap_or_else(|| panic!("{report}"));
    assert!(!cells.is_empty());
    for c in cells {
        assert_eq!(c["quality_ok"], 0, "{c}");
        assert_eq!(c["ttft_ms"]["n"], 0, "{c}");
        assert_eq!(c["decode_tps"]["n"], 0, "{c}");
    }
}

/// A sweep of 6 cold records in `mode` against `server`, on `transport` (`TTFT_BENCH_TRANSPORT`).
fn stray_sweep(
    server: &Scripted,
    out: &std::path::Path,
    mode: &str,
    transport: &str,
) -> std::process::Output {
    assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args(["sweep", "--server", &server.url, "--out", out.to_str().unwrap()])
        // A preset that keeps the connection open after a reply (llama.cpp's closes it).
        .args(["--preset", "openai", "--contexts", "256", "--output-tokens", "32", "--thermal", "off"])
        .args(["--cache-states", "cold", "--modes", mode, "--runs", "6"])
        .env("TTFT_BENCH_TRANSPORT", transport)
        .timeout(HANG)
        .output()
        .unwrap()
}

/// Fails when a stream whose first token came only with tokens decoded after it passes as good: a
/// buffering gateway forwarding 4 KB at a time (its first 16 tokens in one write, TTFT ~115 ms for
/// the server's 40) and a proxy holding the first 30 events, each against a server pacing 128
/// tokens 5 ms apart. Neither is a whole-stream flush: most tokens come after the first arrival,
/// over most of the server's decode time.
#[test]
fn a_stream_forwarded_in_lumps_is_flagged_kept_out_of_statistics_and_explained_by_verify() {
    for fault in [Fault::None, Fault::Lumps(4096), Fault::HoldFirst(30)] {
        let server = Scripted::start(Behaviour {
            first_token_ms: 40,
            token_ms: 5,
            fault: fault.clone(),
            ..Default::default()
        });
        let dir = tempfile::tempdir().unwrap();
        let out = assert_cmd::Command::cargo_bin("bench")
            .unwrap()
            .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap()])
            .args(["--contexts", "256", "--runs", "1", "--output-tokens", "128", "--thermal", "off"])
            .args(["--batch-sizes", "1,2"])
            .timeout(HANG)
            .output()
            .unwrap();
        let run = run_dir(dir.path());
        let ms = measurements(&run);
        assert_eq!(ms.len(), 3, "{fault:?}: batch 1 and a batch of 2");
        if fault == Fault::None {
            // The same server without a proxy: its first token alone, nothing flagged.
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            for m in &ms {
                assert!(burst_flag(m).is_none() && m["quality_ok"] == true, "{m}");
            }
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(1),
            "{fault:?}: a failed quality gate is a finding: {}",
            stderr(&out)
        );
        for m in &ms {
            assert_eq!(m["quality_ok"], false, "{fault:?}: {m}");
            let flag = burst_flag(m).unwrap_or_else(|| panic!("{fault:?}: no stream_burst flag: {m}"));
            assert_eq!(flag["fails_gate"], true, "{flag}");
            let reason = flag["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("stream arrived in lumps: its first arrival at"),
                "{fault:?}: {reason}"
            );
            assert!(reason.contains("of 128 deltas") && reason.contains("decode not measurable"), "{reason}");
            // Not a whole-stream flush: the stream came in many arrivals.
            assert!(m["distinct_arrivals"].as_u64().is_some_and(|n| n >= 4), "{fault:?}: {m}");
        }
        kept_out_of_statistics_and_explained(&run, 256, "stream arrived in lumps: its first arrival at");
    }
}

#[test]
fn a_sweep_never_measures_a_stray_copy_of_the_last_reply_on_either_transport() {
    for transport in ["direct", "reqwest"] {
        for delay_ms in STRAY_DELAYS_MS {
            for mode in ["non-streaming", "streaming"] {
                let case = format!("{transport}, stray {delay_ms} ms after each reply, {mode}");
                let server = strays_after(delay_ms);
                let dir = tempfile::tempdir().unwrap();
                let out = stray_sweep(&server, dir.path(), mode, transport);
                let run = run_dir(dir.path());
                let ms = measurements(&run);
                assert_eq!(ms.len(), 6, "{case}: {}", stderr(&out));
                for m in &ms {
                    // The server's own answer, or a record that fails by name: never a good
                    // record faster than the server.
                    let first = if mode == "streaming" { &m["ttft_ms"] } else { &m["first_byte_ms"] };
                    let honest = first.as_f64().is_some_and(|t| t >= STRAY_PREFILL_MS as f64);
                    let failed_by_name = m["quality_ok"] == false
                        && (!m["error"].is_null()
                            || !m["quality_flags"].as_array().is_none_or(Vec::is_empty));
                    assert!(honest || failed_by_name, "{case}: a stray measured as an answer: {m}");
                    // How the record was protected: a connection that carried no earlier reply.
                    let connection = m["connection"].as_str().unwrap_or_else(|| panic!("{case}: {m}"));
                    assert!(["new_before_window", "new_in_window"].contains(&connection), "{case}: {m}");
                }
                let all_good = ms.iter().all(|m| m["quality_ok"] == true);
                assert_eq!(out.status.code(), Some(if all_good { 0 } else { 1 }), "{case}: {}", stderr(&out));
                // verify --strict agrees: clean records pass, a failed one is named.
                let verified = bench(&["verify", "--strict", run.to_str().unwrap()]);
                assert_eq!(
                    verified.status.success(),
                    all_good,
                    "{case}: {}",
                    String::from_utf8_lossy(&verified.stdout)
                );
            }
        }
    }
}

#[test]
fn the_start_a_server_hint_comes_only_for_a_refused_local_connection() {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port(); // now closed
    let out = sweep(&format!("http://127.0.0.1:{port}"), dir.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("(is it running? `just server` starts a local llama-server)"),
        "{}",
        stderr(&out)
    );
    // A name that does not resolve is no local server that is not running.
    let out = sweep("http://no-such-host.invalid:8080", dir.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot reach the server"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("is it running?"), "{}", stderr(&out));
}

#[test]
fn an_unknown_transport_is_refused_naming_the_variable_and_its_values() {
    let server = faulty(Fault::None);
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap()])
        .args(["--contexts", "256", "--runs", "1", "--output-tokens", "32", "--thermal", "off"])
        .env("TTFT_BENCH_TRANSPORT", "foo")
        .timeout(HANG)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("TTFT_BENCH_TRANSPORT=foo") && err.contains("direct (the default), reqwest"),
        "{err}"
    );
    assert_eq!(server.measured_requests(), 0, "nothing was measured");
}

#[test]
fn a_signal_stops_a_sweep_stuck_on_a_firehose() {
    let server =
        Scripted::start(Behaviour { token_ms: 0, fault: Fault::EndlessStream, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap(), "--contexts", "256"])
        .args(["--runs", "1", "--output-tokens", "32", "--thermal", "off", "--request-timeout", "600s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + HANG;
    while server.measured_requests() == 0 {
        assert!(std::time::Instant::now() < deadline, "the measurement never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300)); // deep inside the firehose
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = rx.recv_timeout(HANG).expect("SIGINT did not stop the sweep").unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
}

/// A server that echoes request headers in a 401 (chat and preset actions): neither the API key
/// nor the preset's admin key may reach measurements.jsonl, run.json, stdout or stderr.
#[test]
fn echoed_keys_are_redacted_everywhere() {
    const API_KEY: &str = "sk-test-echoed-0123456789abcdef";
    const ADMIN_KEY: &str = "admin-test-echoed-9876543210";
    // The default preset meets the echo on the measured chat request (a record with the error);
    // agent-memory on its reset action, which carries the admin key, tried once in preflight
    // (exit 2 before anything is measured, the server's words on stderr).
    for (preset, code) in [("openai", 1), ("agent-memory", 2)] {
        let server = faulty(Fault::EchoHeaders);
        let dir = tempfile::tempdir().unwrap();
        let out = assert_cmd::Command::cargo_bin("bench")
            .unwrap()
            .env("TTFT_TEST_API_KEY", API_KEY)
            .env("AGENT_MEMORY_ADMIN_KEY", ADMIN_KEY)
            .args([
                "sweep",
                "--server",
                &server.url,
                "--out",
                dir.path().to_str().unwrap(),
                "--contexts",
                "256",
            ])
            .args(["--runs", "1", "--output-tokens", "32", "--thermal", "off"])
            .args(["--api-key-env", "TTFT_TEST_API_KEY", "--preset", preset])
            .timeout(HANG)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{preset}: {}", stderr(&out));
        // Whatever reached disk (a preflight stop may leave no run directory), stdout and stderr.
        let mut written = vec![String::from_utf8_lossy(&out.stdout).to_string(), stderr(&out)];
        let mut dirs = vec![dir.path().to_path_buf()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    written.push(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).to_string());
                }
            }
        }
        for text in &written {
            assert!(!text.contains(API_KEY) && !text.contains(ADMIN_KEY), "{preset}: a key leaked: {text}");
        }
        let message = if code == 1 {
            let m = &measurements(&run_dir(dir.path()))[0];
            assert_eq!(m["error"]["kind"], "http_status", "{preset}: {m}");
            m["error"]["message"].as_str().unwrap().to_string()
        } else {
            stderr(&out)
        };
        assert!(message.contains("HTTP 401") && message.contains("[redacted]"), "{preset}: {message}");
        // The server did get the keys (each where its preset sends it): the test would catch a leak.
        let log = server.log();
        let sent: Vec<String> = log.iter().flat_map(|l| l.headers.values().cloned()).collect();
        assert!(sent.iter().any(|v| v.contains(API_KEY)), "{preset}");
        if preset == "agent-memory" {
            let admin = log.iter().find(|l| l.method == "DELETE" && l.path == "/admin/caches");
            let admin = admin.unwrap_or_else(|| panic!("the reset action never reached the server"));
            assert_eq!(
                admin.headers.get("x-admin-key").map(String::as_str),
                Some(ADMIN_KEY),
                "{:?}",
                admin.headers
            );
        }
    }
}

/// The warm reload is inside the timed window, so its call must never take a stray either: a
/// server answering every slot action twice (a copy 20 ms later on the kept-alive connection)
/// while each restore takes 60 ms. Every warm record's reload is the restore's own answer (60 ms
/// or more), or the record fails by name; never a stray's instant "answer". Whether a reused
/// connection meets its stray depends on the time between evict and reload, so the test also
/// holds the cause: no preset action goes out on a connection that carried an earlier request.
#[test]
fn a_stray_copy_of_a_preset_action_s_answer_is_never_the_reload_s() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 20,
        token_ms: 1,
        fault: Fault::StrayAfterReply(20),
        slot_restore_ms: 60,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args([
            "sweep",
            "--server",
            &server.url,
            "--out",
            dir.path().to_str().unwrap(),
            "--preset",
            "llama.cpp",
        ])
        .args(["--contexts", "256", "--output-tokens", "24", "--thermal", "off", "--cache-states", "warm"])
        .args(["--runs", "8", "--modes", "non-streaming", "--reuse-primes", "false"])
        .timeout(HANG)
        .output()
        .unwrap();
    let ms = measurements(&run_dir(dir.path()));
    assert_eq!(ms.len(), 8, "{}", stderr(&out));
    let mut good = 0;
    for m in &ms {
        if !m["error"].is_null() {
            continue;
        }
        good += 1;
        let reload = m["reload_ms"].as_f64().unwrap_or_else(|| panic!("no reload_ms: {m}"));
        assert!(reload >= 60.0, "the reload took a stray for its answer: {m}");
    }
    assert!(good > 0, "{ms:#?}");
    // What makes it so whatever the timing: every preset action (save, erase, restore) went out on
    // a connection of its own, never one that had carried an earlier request and its answer.
    let log = server.log();
    let actions: Vec<_> = log.iter().filter(|l| l.path.starts_with("/slots/")).collect();
    assert!(actions.len() >= 8 * 2, "an evict and a reload per warm cell: {}", actions.len());
    for action in &actions {
        let connection = action.connection.expect("the scripted server logs a slot action's connection");
        let earlier = log.iter().filter(|l| l.at < action.at && l.connection == Some(connection)).count();
        assert_eq!(earlier, 0, "{} went out on a connection that had carried a request", action.path);
    }
}
