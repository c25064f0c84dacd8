//! The measuring client's lanes (crates/client/src/lanes.rs), seen from the scripted server: requests sent
//! one after another keep one keep-alive connection, a batch is read in full over connections of
//! its own, and an abandoned request stops being read. Every wait is bounded; nothing asserts speed.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::scripted::{Behaviour, Scripted};
use futures_util::future::join_all;
use ttft_bench::prompt::document;
use ttft_client::{ChatRequest, Client, ClientOptions, Message};
use ttft_model::record::ConnectionUse;
use ttft_model::spec::Api;

const BOUND: Duration = Duration::from_secs(60);

fn client(url: &str) -> Client {
    Client::new(url, Api::Openai, None, Duration::from_secs(30), ClientOptions::default()).unwrap()
}

fn request(nonce: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        model: "scripted".into(),
        messages: vec![Message::new("user", document(1, nonce, 30))],
        max_tokens,
        stream: true,
        ..Default::default()
    }
}

/// The connections (client ports) chat requests came on, in arrival order.
fn chat_peers(server: &Scripted) -> Vec<u16> {
    let log = server.log();
    log.iter().filter(|l| l.path == "/v1/chat/completions").filter_map(|l| l.peer.map(|p| p.port())).collect()
}

#[test]
fn requests_sent_one_after_another_each_take_a_connection_opened_before_their_window() {
    let server = Scripted::start(Behaviour { first_token_ms: 5, token_ms: 1, ..Default::default() });
    let client = client(&server.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for i in 0..4 {
        let prepared = client.prepare(&request(&format!("{i:012}"), 24)).unwrap();
        let ex = rt
            .block_on(async { tokio::time::timeout(BOUND, client.send(prepared)).await })
            .expect("answered");
        assert!(ex.error.is_none(), "{:?}", ex.error);
        assert_eq!(ex.token_offsets_ms.len(), 24);
        // A connect inside the window would be in TTFT; a reused connection could hand over a
        // stray copy of the last reply.
        assert_eq!(ex.connection, Some(ConnectionUse::NewBeforeWindow), "request {i}");
    }
    let peers = chat_peers(&server);
    assert_eq!(peers.len(), 4);
    assert_eq!(peers.iter().collect::<HashSet<_>>().len(), 4, "each on its own connection: {peers:?}");
}

#[test]
fn a_batch_released_together_is_read_in_full_each_on_its_own_connection() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 2, ..Default::default() });
    let client = client(&server.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = 16;
    let batch: Vec<_> = (0..n).map(|i| client.prepare(&request(&format!("{i:012}"), 48)).unwrap()).collect();
    let exchanges = rt
        .block_on(async {
            tokio::time::timeout(BOUND, join_all(batch.into_iter().map(|p| client.send(p)))).await
        })
        .expect("answered");
    for ex in &exchanges {
        assert!(ex.error.is_none(), "{:?}", ex.error);
        assert_eq!(ex.token_offsets_ms.len(), 48, "every token of every stream");
        assert!(ex.token_offsets_ms.windows(2).all(|w| w[0] <= w[1]));
        assert!(ex.ttft_ms.is_some_and(|t| t >= 20.0), "stamped after the server's first token");
    }
    let peers: HashSet<u16> = chat_peers(&server).into_iter().collect();
    assert_eq!(peers.len(), n, "one connection per request in flight");
}

#[test]
fn an_abandoned_request_is_no_longer_read_and_its_lane_serves_the_next() {
    let server = Scripted::start(Behaviour { first_token_ms: 5, token_ms: 20, ..Default::default() });
    let client = client(&server.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let long = client.prepare(&request("000000000001", 500)).unwrap();
    // 500 tokens at 20 ms would take 10 s; the caller gives up after 200 ms.
    let gave_up =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(200), client.send(long)).await });
    assert!(gave_up.is_err());
    // The lane dropped the stream: the server sees its connection gone long before the 500th token.
    let mut ended = None;
    for _ in 0..300 {
        if let Some(t) = server.timings().into_iter().find(|t| t.nonce.as_deref() == Some("000000000001")) {
            ended = Some(t);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let t = ended.expect("the server ended the abandoned stream within 3 s");
    assert!(!t.completed, "not read to its end");
    assert!(t.chunk_ns.len() < 200, "stopped early: {} chunks", t.chunk_ns.len());
    let next = client.prepare(&request("000000000002", 8)).unwrap();
    let ex = rt.block_on(async { tokio::time::timeout(BOUND, client.send(next)).await }).expect("answered");
    assert!(ex.error.is_none(), "{:?}", ex.error);
    assert_eq!(ex.token_offsets_ms.len(), 8);
}
