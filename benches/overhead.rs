//! Harness overhead: how much later than the server's write does `bench` stamp the first token?
//!
//! The scripted server runs in this process and records the Instant it hands each stream's first
//! content chunk to the transport; the client records the Instant that chunk's bytes arrive. Both
//! are the same monotonic clock, so the difference is the whole client-side cost (loopback, HTTP,
//! SSE framing, our stamping) — what a Python harness inflates by 30-55 ms at 64 streams here.
//! Measured over plain HTTP and over TLS (the same server behind rustls, a test CA trusted with
//! `ClientOptions::ca_cert`): the TLS rows show what encryption adds to the stamp.
//! Run with `just bench` (release build). Reports ratios, never asserts speed.

// A benchmark's table on stdout is its output.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use futures_util::future::join_all;
use ttft_bench::prompt::{Nonces, document};
use ttft_client::{ChatRequest, Client, ClientOptions, Message};
use ttft_model::spec::Api;
use ttft_scripted::{Behaviour, Scripted};

/// Median TTFT overhead that Python anchors add at 64 concurrent streams on this machine class.
const PYTHON_ANCHOR_MS: f64 = 30.0;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

async fn round(client: &Client, server: &Scripted, nonces: &Nonces, streams: usize) -> Vec<f64> {
    let mut prepared = Vec::new();
    let mut keys = Vec::new();
    for _ in 0..streams {
        let nonce = nonces.next();
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![Message::new("user", document(1, &nonce, 400))],
            max_tokens: 64,
            stream: true,
            ..Default::default()
        };
        prepared.push(client.prepare(&req).unwrap());
        keys.push(nonce);
    }
    let exchanges = join_all(prepared.into_iter().map(|p| client.send(p))).await;
    let sent = server.first_sent.lock().unwrap().clone();
    let mut overhead = Vec::new();
    for (ex, key) in exchanges.iter().zip(&keys) {
        assert!(ex.error.is_none(), "{:?}", ex.error);
        let arrived = ex.start.unwrap() + Duration::from_secs_f64(ex.ttft_ms.unwrap() / 1000.0);
        let written = sent[key.as_str()];
        overhead.push(arrived.saturating_duration_since(written).as_secs_f64() * 1000.0);
    }
    overhead
}

fn main() {
    let behaviour = Behaviour { first_token_ms: 200, token_ms: 5, catch_up: true, ..Default::default() };
    let plain = Scripted::start(behaviour.clone());
    let tls = Scripted::start_tls(behaviour);
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), tls.ca_pem.as_ref().unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let nonces = Nonces::new();
    println!("harness TTFT overhead (client arrival stamp - server write), ms");
    println!(
        "{:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  median vs Python anchor",
        "", "streams", "median", "p95", "max", "n"
    );
    for (label, server, options) in [
        ("http", &plain, ClientOptions::default()),
        ("https", &tls, ClientOptions { ca_cert: Some(ca.path().to_path_buf()), ..Default::default() }),
    ] {
        let client = Client::new(&server.url, Api::Openai, None, Duration::from_secs(60), options).unwrap();
        for streams in [1usize, 8, 64] {
            let mut all = Vec::new();
            rt.block_on(async {
                round(&client, server, &nonces, streams).await; // warm the connection pool
                for _ in 0..5 {
                    all.extend(round(&client, server, &nonces, streams).await);
                }
            });
            all.sort_by(f64::total_cmp);
            let median = percentile(&all, 0.5);
            println!(
                "{label:>6} {streams:>8} {median:>8.3} {:>8.3} {:>8.3} {:>8}  {:.4}x of {PYTHON_ANCHOR_MS} ms",
                percentile(&all, 0.95),
                all[all.len() - 1],
                all.len(),
                median / PYTHON_ANCHOR_MS
            );
        }
    }
}
