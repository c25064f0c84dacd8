//! The chat endpoints: OpenAI chat completions (llama.cpp flavoured: `timings`, slots) and
//! Anthropic messages, whole or streamed. Streams are paced by deadlines from the moment the
//! request was admitted (`Behaviour::max_concurrent`), so a token interval below the timer's
//! 1 ms tick still averages out exactly; every content chunk's hand-over is traced.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;

use super::routes::{record, record_from};
use super::trace::{Trace, nonce_of};
use super::{AppState, Behaviour, Fault, FirstSent, TEMPLATE_TOKENS, faults, lock, net};

/// The i-th output token: distinct words, so quality checks (repetition) see plausible prose.
pub fn token(i: u32) -> String {
    if i == 0 { "w0".to_string() } else { format!(" w{i}") }
}

/// All `n` output tokens as one text.
pub fn output_text(n: u32) -> String {
    (0..n).map(token).collect()
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// The prompt as a word list: every message's words plus the template tokens.
fn prompt_words(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for _ in 0..TEMPLATE_TOKENS {
            out.push(format!("<{}>", m["role"].as_str().unwrap_or("")));
        }
        out.extend(words(m["content"].as_str().unwrap_or("")));
    }
    out
}

pub(super) fn sse_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response
}

/// One frame of a stream, sent `delay` after the previous one.
struct Event {
    delay: Duration,
    frame: Bytes,
    content: bool,
}

impl Event {
    fn named(delay: Duration, name: &str, data: impl std::fmt::Display, content: bool) -> Event {
        Event { delay, frame: Bytes::from(format!("event: {name}\ndata: {data}\n\n")), content }
    }
}

/// A stream being served: its events, the deadline of the next one, its trace, and the serving
/// slot it holds until it ends.
struct Paced {
    events: std::vec::IntoIter<Event>,
    due: tokio::time::Instant,
    trace: Trace,
    first_sent: Option<(FirstSent, String)>,
    /// `Fault::CloseAfterStream` and `Fault::StrayAfterStream`: once the last event is out, the
    /// connection is marked with what happens to it this long after.
    close_after: Option<AfterStream>,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Where to mark a connection once its stream has ended, after how long, and with what.
type AfterStream = (net::Kills, net::Peer, Duration, fn(tokio::time::Instant) -> net::Kill);

fn paced(p: Paced) -> Response {
    let frames = stream::unfold(p, |mut p| async move {
        let Some(event) = p.events.next() else {
            p.trace.completed();
            if let Some((kills, peer, after, kill)) = p.close_after.take() {
                let at = tokio::time::Instant::now() + after;
                lock(&kills).insert(peer.0, kill(at));
            }
            return None;
        };
        p.due += event.delay;
        if p.due > tokio::time::Instant::now() {
            tokio::time::sleep_until(p.due).await;
        }
        if event.content {
            let now = Instant::now();
            p.trace.content(now);
            if let Some((map, key)) = p.first_sent.take() {
                lock(&map).entry(key).or_insert(now);
            }
        }
        Some((Ok::<_, Infallible>(event.frame), p))
    });
    sse_response(Body::from_stream(frames))
}

/// A request's trace and its place in the serving queue (waits while `max_concurrent` are served).
async fn admit(
    s: &AppState,
    path: &str,
    body: &Value,
    read_at: Instant,
) -> (Trace, Option<OwnedSemaphorePermit>, tokio::time::Instant) {
    let nonce = body["messages"][0]["content"].as_str().and_then(nonce_of);
    let mut trace = Trace::new(s.clock, s.sink.clone(), path, nonce, read_at);
    trace.timing.stream = body["stream"].as_bool() == Some(true);
    let queue = lock(&s.admission).clone();
    let permit = match queue {
        Some(q) => q.acquire_owned().await.ok(),
        None => None,
    };
    let now = Instant::now();
    trace.admitted(now);
    (trace, permit, tokio::time::Instant::from_std(now))
}

/// Anthropic messages: whole JSON, or streamed as message_start (usage), text deltas, message_delta, stop.
pub(super) async fn messages(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let read_at = Instant::now();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "POST", "/v1/messages", &headers, &body);
    let b = lock(&s.behaviour).clone();
    let (mut trace, permit, start) = admit(&s, "/v1/messages", &body, read_at).await;
    let input = prompt_words(&body).len() as u64;
    let n_out = body["max_tokens"].as_u64().unwrap_or(16);
    let interval = b.token_interval();
    if body["stream"].as_bool() != Some(true) {
        tokio::time::sleep_until(start + Duration::from_millis(b.first_token_ms) + interval * n_out as u32)
            .await;
        trace.content(Instant::now());
        trace.completed();
        return axum::Json(
            json!({"type": "message", "content": [{"type": "text", "text": output_text(n_out as u32)}],
            "stop_reason": "max_tokens", "usage": {"input_tokens": input, "output_tokens": n_out}}),
        )
        .into_response();
    }
    let start_event = json!({"type": "message_start", "message": {"usage": {"input_tokens": input,
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 1}}});
    let mut events = vec![Event::named(Duration::ZERO, "message_start", start_event, false)];
    for i in 0..n_out {
        let delay = if i == 0 { Duration::from_millis(b.first_token_ms) } else { interval };
        let delta = json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": token(i as u32)}});
        events.push(Event::named(delay, "content_block_delta", delta, true));
    }
    let end = json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": n_out}});
    events.push(Event::named(Duration::ZERO, "message_delta", end, false));
    events.push(Event::named(Duration::ZERO, "message_stop", json!({"type": "message_stop"}), false));
    let key = trace.timing.nonce.clone();
    paced(Paced {
        events: events.into_iter(),
        due: start,
        trace,
        first_sent: key.map(|k| (s.first_sent.clone(), k)),
        close_after: None,
        _permit: permit,
    })
}

pub(super) async fn chat(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<net::Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let read_at = Instant::now();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record_from(&s, Some(peer.0), "POST", "/v1/chat/completions", &headers, &body);
    serve(s, peer, headers, body, read_at, false).await
}

/// OpenAI legacy completions: the prompt string served as one user message without a chat
/// template, answered with `choices[].text` (no role chunk).
pub(super) async fn completions(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<net::Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let read_at = Instant::now();
    let mut body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record_from(&s, Some(peer.0), "POST", "/v1/completions", &headers, &body);
    let prompt = body["prompt"].as_str().unwrap_or("").to_string();
    if let Some(fields) = body.as_object_mut() {
        fields.insert("messages".into(), json!([{"role": "user", "content": prompt}]));
    }
    serve(s, peer, headers, body, read_at, true).await
}

async fn serve(
    s: AppState,
    peer: net::Peer,
    headers: HeaderMap,
    body: Value,
    read_at: Instant,
    completions: bool,
) -> Response {
    let b = lock(&s.behaviour).clone();
    // Faults (and other quirks) hit only measured-size requests, so prompt calibration (max_tokens 1) and the
    // warm-up (8) get through and the sweep reaches its measurements. A server without a tokenizer and
    // without usage has no usage for calibration either: that is the point of scripting it.
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16) as u32;
    let b = if max_tokens < 20 {
        let usage = b.usage || b.tokenizer;
        Behaviour {
            first_token_ms: b.first_token_ms,
            token_ms: b.token_ms,
            token_interval_us: b.token_interval_us,
            max_concurrent: b.max_concurrent,
            usage,
            ..Behaviour::default()
        }
    } else {
        b
    };
    match &b.fault {
        Fault::Status(code, text) => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return (status, text.to_string()).into_response();
        }
        Fault::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        other => {
            if let Some(response) = faults::respond(other, &headers, peer, &s.kills, b.token_ms) {
                return response;
            }
        }
    }
    let path = if completions { "/v1/completions" } else { "/v1/chat/completions" };
    let (mut trace, permit, start) = admit(&s, path, &body, read_at).await;
    trace.timing.tokens_per_chunk = b.tokens_per_chunk.max(1);
    let prompt = if completions { words(body["prompt"].as_str().unwrap_or("")) } else { prompt_words(&body) };
    // Cache evidence like the server imitated: llama.cpp slot, agent-memory session, or vLLM prefix.
    let agent = headers.get("x-session-id").and_then(|v| v.to_str().ok());
    let cached = lock(&s.slots).serve(body["id_slot"].as_u64(), agent, &prompt);
    let input = prompt.len() as u64;
    let n_out = b.force_output_tokens.unwrap_or(max_tokens);
    let diverge = max_tokens >= 20 && {
        let mut slots = lock(&s.slots);
        slots.measured_requests += 1;
        b.diverge_after.is_some_and(|n| slots.measured_requests > n)
    };
    let token = |i: u32| if diverge && i == 1 { " wX".to_string() } else { token(i) };
    // Prefill time scales with what is not cached, like a real server.
    let uncached_share = if input == 0 { 1.0 } else { (input - cached) as f64 / input as f64 };
    let first = Duration::from_millis((b.first_token_ms as f64 * uncached_share).round() as u64);
    let interval = b.token_interval();
    let usage = json!({"prompt_tokens": input, "completion_tokens": n_out, "total_tokens": input + n_out as u64,
                       "prompt_tokens_details": {"cached_tokens": cached}});
    let mut timings = json!({"cache_n": cached, "prompt_n": input - cached});
    if b.fault == Fault::Burst {
        timings["prompt_ms"] = json!(first.as_secs_f64() * 1000.0);
        timings["predicted_n"] = json!(n_out);
        timings["predicted_ms"] = json!((interval * n_out).as_secs_f64() * 1000.0);
    }
    if body["stream"].as_bool() != Some(true) {
        tokio::time::sleep_until(start + first + interval * n_out).await;
        let text: String = (0..n_out).map(token).collect();
        let choice = if completions {
            json!({"index": 0, "text": text, "finish_reason": "length"})
        } else {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
        };
        let mut resp = json!({"choices": [choice], "timings": timings});
        if b.usage {
            resp["usage"] = usage;
        }
        trace.content(Instant::now());
        trace.completed();
        return axum::Json(resp).into_response();
    }
    let keep_alive = if b.fault == Fault::KeepAlive { ": keep-alive\n\n" } else { "" };
    let data = |delay, data: String, content| Event {
        delay,
        frame: Bytes::from(format!("{keep_alive}data: {data}\n\n")),
        content,
    };
    let mut events: Vec<Event> = Vec::new();
    if b.role_chunk && !completions {
        let role = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]});
        events.push(data(Duration::ZERO, role.to_string(), false));
    }
    let mut produced = 0u32;
    while produced < n_out {
        let k = b.tokens_per_chunk.max(1).min(n_out - produced);
        let mut text: String = (0..k).map(|i| token(produced + i)).collect();
        if produced == 0
            && let Some(echo) = faults::completion_echo(&b.fault, &headers)
        {
            text.insert_str(0, &echo);
        }
        let delay = if produced == 0 { first } else { interval * k };
        let chunk = if completions {
            json!({"choices": [{"index": 0, "text": text}]})
        } else {
            json!({"choices": [{"index": 0, "delta": {"content": text}}]})
        };
        events.push(data(delay, chunk.to_string(), true));
        if produced == 0 && b.fault == Fault::ErrorInStream {
            let error = json!({"error": {"message": "scripted failure", "code": 500}});
            events.push(data(Duration::from_millis(1), error.to_string(), false));
            break;
        }
        produced += k;
    }
    if b.fault != Fault::ErrorInStream && b.fault != Fault::Truncate {
        let finish = if completions {
            json!({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        } else {
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        };
        events.push(data(Duration::ZERO, finish.to_string(), false));
        if b.usage {
            events.push(data(
                Duration::ZERO,
                json!({"choices": [], "usage": usage, "timings": timings}).to_string(),
                false,
            ));
        }
        events.push(data(Duration::ZERO, "[DONE]".to_string(), false));
    }
    if b.fault == Fault::Burst {
        let due = start + events.iter().map(|e| e.delay).sum::<Duration>();
        let all = Bytes::from(events.into_iter().map(|e| e.frame).collect::<Vec<_>>().concat());
        let held = stream::once(async move {
            tokio::time::sleep_until(due).await;
            Ok::<_, Infallible>(all)
        });
        return sse_response(Body::from_stream(held));
    }
    if let Fault::SlowDrip { bytes, every_ms } = b.fault {
        let frames = events.into_iter().map(|e| e.frame).collect();
        let pieces = stream::iter(faults::drip(frames, bytes, every_ms)).then(|(delay, piece)| async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok::<_, Infallible>(piece)
        });
        return sse_response(Body::from_stream(pieces));
    }
    let key = trace.timing.nonce.clone().or_else(|| {
        let first = body["messages"][0]["content"].as_str().unwrap_or("");
        first.split_whitespace().nth(1).map(str::to_string)
    });
    paced(Paced {
        events: events.into_iter(),
        due: start,
        trace,
        first_sent: key.map(|k| (s.first_sent.clone(), k)),
        close_after: match b.fault {
            Fault::CloseAfterStream(ms) => {
                Some((s.kills.clone(), peer, Duration::from_millis(ms), net::Kill::Deaf))
            }
            Fault::StrayAfterStream(ms) => {
                Some((s.kills.clone(), peer, Duration::from_millis(ms), net::Kill::Stray))
            }
            _ => None,
        },
        _permit: permit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_counts_its_words_and_the_template_of_each_message() {
        let body = json!({"messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": "one two three"}]});
        assert_eq!(prompt_words(&body).len() as u64, 2 * TEMPLATE_TOKENS + 5);
    }
}
