//! The scripted server itself: its timing trace (nonce, body read, first content, every chunk),
//! its serving queue (`Behaviour::max_concurrent`), and `bench-scripted-server` as a process.
//! Orderings of the server's own instants are exact; nothing here asserts a speed.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::scripted::{Behaviour, RequestTiming, Scripted, TraceLine};
use futures_util::future::join_all;
use ttft_bench::client::{ChatRequest, Client, ClientOptions, Exchange, Message};
use ttft_bench::prompt::document;
use ttft_bench::spec::Api;

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
    let doc = ttft_bench::prompt::document(1, "000000000042", 20);
    assert_eq!(ttft_scripted::trace::nonce_of(&doc).as_deref(), Some("000000000042"));
    assert_eq!(ttft_scripted::trace::nonce_of("no nonce here"), None);
    assert_eq!(ttft_scripted::trace::nonce_of("[ref 12x]"), None);
}
