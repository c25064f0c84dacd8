//! The scripted server itself: its timing trace (nonce, body read, first content, every chunk),
//! its serving queue (`Behaviour::max_concurrent`), and `bench-scripted-server` as a process.
//! Orderings of the server's own instants are exact; nothing here asserts a speed.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::scripted::{Behaviour, RequestTiming, Scripted, TraceLine};
use futures_util::future::join_all;
use ttft_bench::prompt::document;
use ttft_client::{ChatRequest, Client, ClientOptions, Exchange, Message};
use ttft_model::spec::Api;

fn request(nonce: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::new("user", document(1, nonce, 30))],
        max_tokens,
        stream: true,
        ..Default::default()
    }
}

/// `n` streamed requests at once (nonces 1..=n), each waiting for the previous to be sent.
fn send_all(url: &str, n: usize, max_tokens: u32) -> Vec<Exchange> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client =
        Client::new(url, Api::Openai, None, Duration::from_secs(60), ClientOptions::default()).unwrap();
    rt.block_on(async {
        let sends = (1..=n).map(|i| {
            let prepared = client.prepare(&request(&format!("{i:012}"), max_tokens)).unwrap();
            let client = &client;
            async move {
                // Staggered by a little, so arrival order is the nonce order.
                tokio::time::sleep(Duration::from_millis(15 * i as u64)).await;
                client.send(prepared).await
            }
        });
        tokio::time::timeout(Duration::from_secs(60), join_all(sends)).await.expect("requests finish")
    })
}

/// The timings of the chat requests, once every one of them has been submitted.
fn timings(server: &Scripted, n: usize) -> Vec<RequestTiming> {
    for _ in 0..200 {
        let all = server.timings();
        if all.len() >= n {
            return all;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the server traced {} of {n} requests", server.timings().len());
}

#[test]
fn every_content_chunk_is_traced_under_the_prompts_nonce() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let ex = send_all(&server.url, 1, 24).remove(0);
    assert!(ex.error.is_none(), "{:?}", ex.error);
    let t = timings(&server, 1).remove(0);
    assert_eq!(t.nonce.as_deref(), Some("000000000001"));
    assert!(t.stream && t.completed);
    assert_eq!(t.chunk_ns.len(), 24, "one instant per content chunk");
    assert_eq!(t.first_content_ns, Some(t.chunk_ns[0]));
    assert!(t.chunk_ns.windows(2).all(|w| w[0] <= w[1]));
    assert!(t.body_read_ns <= t.admitted_ns && t.admitted_ns <= t.chunk_ns[0] && t.chunk_ns[23] <= t.end_ns);
    // The client's arrival stamp is on the same clock, after the server's write.
    let arrived = ex.start.unwrap() + Duration::from_secs_f64(ex.ttft_ms.unwrap() / 1000.0);
    assert!(server.clock.offset_ns(arrived, server.clock.origin_ns) >= t.chunk_ns[0] as i64);
}

#[test]
fn one_serving_slot_serves_requests_one_after_another_in_arrival_order() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 10,
        token_ms: 1,
        max_concurrent: Some(1),
        ..Default::default()
    });
    let exchanges = send_all(&server.url, 4, 20);
    assert!(exchanges.iter().all(|e| e.error.is_none()));
    let mut all = timings(&server, 4);
    // First come, first served: the order of admission is the order the server read the requests.
    // (Not the nonce order the client meant: on a loaded machine a send staggered 15 ms later
    // may still reach the server first, and then it is rightly served first.)
    let mut arrived = all.clone();
    arrived.sort_by_key(|t| t.body_read_ns);
    all.sort_by_key(|t| t.admitted_ns);
    let nonces =
        |ts: &[RequestTiming]| ts.iter().map(|t| t.nonce.clone().unwrap_or_default()).collect::<Vec<_>>();
    assert_eq!(nonces(&all), nonces(&arrived), "first come, first served");
    let mut queued = 0;
    for pair in all.windows(2) {
        assert!(pair[1].admitted_ns >= pair[0].end_ns, "admitted only once the previous one ended");
        if pair[1].body_read_ns < pair[0].end_ns {
            assert!(pair[1].admitted_ns > pair[1].body_read_ns, "it arrived while one was served: it waited");
            queued += 1;
        }
    }
    // Each request is served for at least 10 + 19 ms and the sends are 15 ms apart: some queue.
    assert!(queued > 0, "no request met a busy slot, so nothing was queued: {all:?}");
}

#[test]
fn at_most_max_concurrent_requests_are_served_at_once() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 10,
        token_ms: 1,
        max_concurrent: Some(2),
        ..Default::default()
    });
    send_all(&server.url, 6, 20);
    let all = timings(&server, 6);
    for t in &all {
        let serving =
            all.iter().filter(|o| o.admitted_ns <= t.admitted_ns && t.admitted_ns < o.end_ns).count();
        assert!(serving <= 2, "{serving} served at once at {}", t.admitted_ns);
    }
}

#[test]
fn the_binary_prints_its_url_and_logs_timings_as_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("timings.jsonl");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("bench-scripted-server"))
        .args(["--port", "0", "--first-token-ms", "5", "--token-ms", "0.5", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let url = url.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let ex = send_all(&url, 2, 20);
    assert!(ex.iter().all(|e| e.error.is_none() && e.token_offsets_ms.len() == 20));
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.wait().unwrap().success(), "SIGTERM is a clean stop");
    let lines: Vec<TraceLine> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        matches!(&lines[0], TraceLine::Clock { clock, origin_ns, .. } if clock == "CLOCK_MONOTONIC" && *origin_ns > 0)
    );
    let mut nonces: Vec<String> = lines[1..]
        .iter()
        .map(|l| match l {
            TraceLine::Request(t) => {
                assert_eq!(t.chunk_ns.len(), 20);
                t.nonce.clone().unwrap_or_default()
            }
            other => panic!("a second clock line: {other:?}"),
        })
        .collect();
    nonces.sort();
    assert_eq!(nonces, ["000000000001", "000000000002"]);
}

/// The server's trace joins a request to its record by the nonce the harness's prompt carries.
#[test]
fn nonce_is_read_from_the_prompt_the_harness_builds() {
    let doc = document(1, "000000000042", 20);
    assert_eq!(ttft_scripted::trace::nonce_of(&doc).as_deref(), Some("000000000042"));
    assert_eq!(ttft_scripted::trace::nonce_of("no nonce here"), None);
    assert_eq!(ttft_scripted::trace::nonce_of("[ref 12x]"), None);
}

/// A server process, killed when the test ends (a failed assertion included).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `bench-scripted-server` on a free port with `args`; its address (from the first stdout line).
fn spawn_server_binary(args: &[&str]) -> (Killed, String) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("bench-scripted-server"))
        .args(["--port", "0", "--first-token-ms", "1", "--token-ms", "0.5"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    (Killed(child), url.trim().trim_start_matches("http://").to_string())
}

/// One HTTP/1.0 exchange of raw bytes (the server closes when done): status and body. The read
/// is bounded: a server busy growing a reply for a huge request fails the test, never hangs it.
fn raw_post(addr: &str, path: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).unwrap();
    socket.write_all(body).unwrap();
    let mut reply = Vec::new();
    socket.read_to_end(&mut reply).unwrap_or_else(|e| panic!("no whole answer to {path}: {e}"));
    let reply = String::from_utf8_lossy(&reply).to_string();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{reply}"));
    (head.split_whitespace().nth(1).unwrap().parse().unwrap(), body.to_string())
}

/// Fails when one request can take the binary server down: an output budget beyond what it
/// serves (the issue's 3e8 grew it by gigabytes until the allocator aborted) or a body that is
/// not a request must be answered 400, at once, in the error shape of the server imitated
/// (OpenAI's `error.message`/`param`, llama.cpp's `error.code`, Anthropic's `type: error`), and
/// the next request is served as usual.
#[test]
fn the_binary_answers_400_to_a_request_it_cannot_serve_and_keeps_serving() {
    let cap = ttft_scripted::MAX_OUTPUT_TOKENS;
    let chat = |max_tokens: u64| {
        serde_json::json!({"model": "m", "stream": true, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "one two three"}]})
        .to_string()
    };
    let (openai, addr) = spawn_server_binary(&["--dialect", "openai"]);
    for max_tokens in [cap + 1, 300_000_000] {
        let (status, body) = raw_post(&addr, "/v1/chat/completions", chat(max_tokens).as_bytes());
        assert_eq!(status, 400, "max_tokens {max_tokens}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["error"]["param"], "max_tokens", "{error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(&max_tokens.to_string()), "{error}");
    }
    let invalid: [&[u8]; 4] =
        [b"{\"messages\": [", b"", b"[1, 2]", br#"{"messages": [], "max_tokens": "many"}"#];
    for body in invalid {
        let (status, reply) = raw_post(&addr, "/v1/chat/completions", body);
        assert_eq!(status, 400, "{:?}: {reply}", String::from_utf8_lossy(body));
        let error: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert!(error["error"]["message"].is_string(), "{reply}");
    }
    let (status, body) = raw_post(&addr, "/v1/completions", br#"{"prompt": 7, "max_tokens": 4}"#);
    assert_eq!(
        (status, serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"]["param"].clone()),
        (400, "prompt".into())
    );
    // Still serving: a request within the cap streams every token it asked for.
    let (status, body) = raw_post(&addr, "/v1/chat/completions", chat(5).as_bytes());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(" w4") && body.trim_end().ends_with("data: [DONE]"), "{body}");
    drop(openai);

    let (llama, addr) = spawn_server_binary(&[]);
    let (status, body) = raw_post(&addr, "/v1/chat/completions", chat(300_000_000).as_bytes());
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, &error["error"]["code"]),
        (400, &serde_json::json!(400)),
        "llama.cpp's shape: {body}"
    );
    let (status, body) = raw_post(&addr, "/v1/messages", chat(300_000_000).as_bytes());
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, &error["type"]), (400, &serde_json::json!("error")), "Anthropic's shape: {body}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{body}");
    let (status, body) = raw_post(&addr, "/tokenize", b"{\"content\": ");
    assert_eq!(status, 400, "{body}");
    let (status, body) = raw_post(&addr, "/tokenize", br#"{"content": "a b c"}"#);
    assert_eq!(status, 200, "{body}");
    drop(llama);
}
