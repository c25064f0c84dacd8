//! The direct path's HTTP/1.1 framing (`ttft_client::replay_response`): interim 1xx heads,
//! a head, then a chunked, fixed-length or to-close body with trailers. No panic on any bytes,
//! and the same outcome however the bytes are cut into reads.

use ttft_client::{Unframed, replay_response};

/// Read lengths 1..=64 from the project's generator seeded by the input's first byte.
fn cut(data: &[u8]) -> Vec<&[u8]> {
    let mut rng = ttft_model::stats::Rng::new(u64::from(data.first().copied().unwrap_or(0)));
    let mut rest = data;
    let mut pieces = Vec::new();
    while !rest.is_empty() {
        let n = rng.below(64) + 1;
        let (head, tail) = rest.split_at(n.min(rest.len()));
        pieces.push(head);
        rest = tail;
    }
    pieces
}

/// What must not depend on the cuts. An error's words may quote what had arrived when it was
/// found, so only what it is (before the first colon) is compared.
type Outcome = (Option<u16>, Vec<u8>, bool, bool, Option<String>);

fn outcome(u: &Unframed) -> Outcome {
    let error = u.error.as_deref().map(|e| e.split(':').next().unwrap_or("").to_string());
    (u.status, u.payload.clone(), u.ended, u.reusable, error)
}

pub fn check(data: &[u8]) {
    let whole = replay_response([data]);
    assert!(whole.payload.len() <= data.len(), "the payload is never longer than the bytes");
    assert!(!whole.reusable || whole.ended, "a connection is reused only after its body's end");
    assert!(whole.error.is_none() || !whole.reusable, "a refused response leaves no connection to reuse");
    let expected = outcome(&whole);
    assert_eq!(outcome(&replay_response(cut(data))), expected, "cut at random");
    assert_eq!(outcome(&replay_response(data.chunks(1))), expected, "byte by byte");
}
