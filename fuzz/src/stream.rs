//! The stream path (`ttft_client::replay_stream`): no panic on any bytes, sane timing
//! fields, and the same outcome however the bytes are cut into chunks.

use ttft_client::{Exchange, Limits, replay_stream};
use ttft_model::spec::Api;

/// Caps small enough that fuzz inputs reach them.
pub fn limits() -> Limits {
    Limits { max_line_bytes: 200, max_event_bytes: 600, max_stream_bytes: 3000, ..Limits::default() }
}

/// Chunk lengths 1..=64 from the project's generator seeded by the input's first byte.
fn cut(data: &[u8]) -> Vec<&[u8]> {
    let mut rng = ttft_model::stats::Rng::new(u64::from(data.first().copied().unwrap_or(0)));
    let mut rest = data;
    let mut chunks = Vec::new();
    while !rest.is_empty() {
        let n = rng.below(64) + 1;
        let (head, tail) = rest.split_at(n.min(rest.len()));
        chunks.push(head);
        rest = tail;
    }
    chunks
}

/// What must not depend on chunking (times do, by design: each chunk has its own arrival).
fn outcome(ex: &Exchange) -> impl PartialEq + std::fmt::Debug {
    (
        ex.content.clone(),
        ex.reasoning.clone(),
        ex.usage.clone(),
        ex.finish_reason.clone(),
        ex.delta_count,
        ex.server_timings.clone(),
        ex.error.as_ref().map(|e| (e.kind, e.message.clone())),
        ex.ttft_ms.is_some(),
        ex.first_event_ms.is_some(),
    )
}

fn sane(ex: &Exchange) {
    assert_eq!(ex.delta_count as usize, ex.token_offsets_ms.len());
    assert_eq!(ex.ttft_ms, ex.token_offsets_ms.first().copied());
    assert!(ex.token_offsets_ms.windows(2).all(|w| w[0] <= w[1]), "token offsets go back in time");
    if let (Some(first_event), Some(ttft)) = (ex.first_event_ms, ex.ttft_ms) {
        assert!(first_event <= ttft, "a token before the first event");
    }
}

pub fn check(api: Api, data: &[u8]) {
    let limits = limits();
    let whole = replay_stream(api, &limits, &[(data, 1.0)]);
    let pieces: Vec<(&[u8], f64)> =
        cut(data).into_iter().enumerate().map(|(i, c)| (c, (i + 1) as f64)).collect();
    let split = replay_stream(api, &limits, &pieces);
    sane(&whole);
    sane(&split);
    assert_eq!(outcome(&whole), outcome(&split), "the outcome depends on chunking");
}
