//! The completion endpoints: OpenAI chat and text completions in the dialect of the server
//! imitated (`dialect.rs`: llama.cpp with `timings` and slots, vLLM, SGLang, the OpenAI API) and
//! Anthropic messages, whole or streamed. Streams are paced by deadlines from the moment the
//! request was admitted (`Behaviour::max_concurrent`), so a token interval below the timer's
//! 1 ms tick still averages out exactly; every content chunk's hand-over is traced.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;

use super::dialect::{Counts, Dialect, Endpoint, Timings, Wire, anthropic, sse_response, unix_now};
use super::request::{self, Api};
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

/// A message's (or a prompt's) text: a string, or the text parts of a content array as the
/// openai SDK, AIPerf and GuideLLM send them.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The first message's text (a text completion's prompt): where the harness puts its nonce.
fn first_text(body: &Value) -> String {
    match body.get("messages") {
        Some(m) => text_of(&m[0]["content"]),
        None => text_of(&body["prompt"]),
    }
}

/// The prompt as a word list: every message's words plus the template tokens (a text
/// completion's prompt: its words alone).
fn prompt_words(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if body.get("messages").is_none() {
        return words(&text_of(&body["prompt"]));
    }
    for m in body["messages"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for _ in 0..TEMPLATE_TOKENS {
            out.push(format!("<{}>", m["role"].as_str().unwrap_or("")));
        }
        out.extend(words(&text_of(&m["content"])));
    }
    out
}

/// One frame of a stream, sent `delay` after the previous one.
struct Event {
    delay: Duration,
    frame: Bytes,
    content: bool,
    /// The frame holds `TIMINGS_MARK`, filled with the stream's measured timings when sent.
    late: bool,
}

impl Event {
    fn named(delay: Duration, name: &str, data: impl std::fmt::Display, content: bool) -> Event {
        Event { delay, frame: Bytes::from(format!("event: {name}\ndata: {data}\n\n")), content, late: false }
    }
}

/// A stream being served: its events, the deadline of the next one, its trace, and the serving
/// slot it holds until it ends.
struct Paced {
    events: std::vec::IntoIter<Event>,
    due: tokio::time::Instant,
    trace: Trace,
    first_sent: Option<(FirstSent, String)>,
    /// `Fault::CloseAfterStream` and `Fault::StrayAfterReply`: once the last event is out, the
    /// connection is marked with what happens to it this long after.
    close_after: Option<AfterStream>,
    /// `Fault::StrayAfterReply`: every frame as sent, when, and whether it held content.
    sent: Vec<(Instant, Bytes, bool)>,
    /// llama.cpp's timings, measured on the stream as it is sent.
    timings: Option<LateTimings>,
    /// `Behaviour::catch_up`: overdue events go at once, back on the schedule.
    catch_up: bool,
    _permit: Option<OwnedSemaphorePermit>,
}

/// The timings a paced stream reports: its prefill from admission to the first content chunk,
/// its decode from there to the last, as this server really sent them. A stream the machine
/// delayed then reports the delay as the server's own, as llama.cpp's timings would, and a
/// client's burst check compares its arrivals with what was sent, not with a plan.
struct LateTimings {
    planned: Timings,
    admitted: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    interval: Duration,
}

impl LateTimings {
    fn measured(&self) -> Timings {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (Some(first), Some(last)) = (self.first, self.last) else { return self.planned };
        // The first token's own decode step is inside the prefill here; llama.cpp counts it in
        // `predicted_ms`, one interval.
        Timings {
            prompt_ms: ms(first.saturating_duration_since(self.admitted)),
            predicted_ms: ms(last.saturating_duration_since(first) + self.interval),
            ..self.planned
        }
    }
}

/// Where to mark a connection once its stream has ended, after how long, and with what.
struct AfterStream {
    kills: net::Kills,
    peer: net::Peer,
    after: Duration,
    then: AfterStreamKill,
}

enum AfterStreamKill {
    /// `net::Kill::Deaf`.
    Deaf,
    /// `net::Kill::Stray` with a copy of the stream (`Paced::sent`).
    Stray,
}

impl AfterStream {
    fn new(s: &AppState, peer: net::Peer, ms: u64, then: AfterStreamKill) -> AfterStream {
        AfterStream { kills: s.kills.clone(), peer, after: Duration::from_millis(ms), then }
    }

    /// Marks the connection, the stream's frames (`Paced::sent`) copied for a stray.
    fn mark(self, sent: &[(Instant, Bytes, bool)]) {
        let at = tokio::time::Instant::now() + self.after;
        let kill = match self.then {
            AfterStreamKill::Deaf => net::Kill::Deaf(at),
            AfterStreamKill::Stray => {
                let first = sent.iter().find(|f| f.2).or(sent.first()).map(|f| f.0);
                let at_gaps: Vec<_> = sent
                    .iter()
                    .map(|(t, frame, _)| {
                        (first.map_or(Duration::ZERO, |f| t.saturating_duration_since(f)), frame.clone())
                    })
                    .collect();
                net::Kill::Stray(at, std::sync::Arc::new(faults::stray_copy_of_stream(&at_gaps)))
            }
        };
        lock(&self.kills).insert(self.peer.0, kill);
    }
}

fn paced(p: Paced) -> Response {
    let frames = stream::unfold(p, |mut p| async move {
        let Some(event) = p.events.next() else {
            p.trace.completed();
            if let Some(after) = p.close_after.take() {
                after.mark(&p.sent);
            }
            return None;
        };
        p.due += event.delay;
        let now = tokio::time::Instant::now();
        if p.due > now {
            tokio::time::sleep_until(p.due).await;
        } else if !p.catch_up {
            // Late: this event goes now, and the next keeps its delay after it.
            p.due = now;
        }
        if event.content {
            let now = Instant::now();
            p.trace.content(now);
            if let Some((map, key)) = p.first_sent.take() {
                lock(&map).entry(key).or_insert(now);
            }
            if let Some(t) = &mut p.timings {
                t.first.get_or_insert(now);
                t.last = Some(now);
            }
        }
        let frame = match (&p.timings, event.late) {
            (Some(t), true) => Bytes::from(t.measured().fill(&String::from_utf8_lossy(&event.frame))),
            _ => event.frame,
        };
        if p.close_after.as_ref().is_some_and(|a| matches!(a.then, AfterStreamKill::Stray)) {
            p.sent.push((Instant::now(), frame.clone(), event.content));
        }
        Some((Ok::<_, Infallible>(frame), p))
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
    let nonce = nonce_of(&first_text(body));
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

/// A reply's id, unique on this server, with the prefix its dialect uses.
fn reply_id(s: &AppState, prefix: &str) -> String {
    let n = s.replies.fetch_add(1, Ordering::Relaxed);
    // splitmix64 of the server's clock origin and the reply's number: ids look random, never repeat.
    let mut x = s.clock.origin_ns ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(prefix.len() + 32);
    out.push_str(prefix);
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for _ in 0..4 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        for i in 0..8 {
            out.push(ALPHABET[((z >> (i * 8)) & 0xff) as usize % ALPHABET.len()] as char);
        }
    }
    out
}

/// Anthropic messages: whole JSON, or streamed as the API streams (message_start with the message
/// and its usage, content_block_start, ping, text deltas, content_block_stop, message_delta with
/// the final usage, message_stop). The prompt is served from the shared prefix cache; its cache
/// reads are reported as the server imitated reports them (`dialect::anthropic`).
pub(super) async fn messages(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let read_at = Instant::now();
    let b = lock(&s.behaviour).clone();
    let body = match request::parse(&body, Api::Messages) {
        Ok(body) => body,
        Err(why) => return request::refusal(b.dialect, Api::Messages, &why),
    };
    s.record("POST", "/v1/messages", &headers, &body);
    let (mut trace, permit, start) = admit(&s, "/v1/messages", &body, read_at).await;
    let prompt = prompt_words(&body);
    let input = prompt.len() as u64;
    // bare: this server's old messages, which never reached its cache (or its counters).
    let held = match b.dialect {
        Dialect::Bare => 0,
        _ => lock(&s.slots).serve(None, None, &prompt, true),
    };
    let cached = b.dialect.reported_cached(input, held);
    let n_out = u64::from(request::output_tokens(&body));
    let counts = Counts { input, cached, output: n_out };
    let interval = b.token_interval();
    let id = reply_id(&s, "msg_");
    if body["stream"].as_bool() != Some(true) {
        tokio::time::sleep_until(start + Duration::from_millis(b.first_token_ms) + interval * n_out as u32)
            .await;
        trace.content(Instant::now());
        trace.completed();
        let content = json!([{"type": "text", "text": output_text(n_out as u32)}]);
        let usage = anthropic::usage(b.dialect, counts, n_out);
        return axum::Json(anthropic::message(&id, content, json!("max_tokens"), usage)).into_response();
    }
    let mut events = vec![
        Event::named(
            Duration::ZERO,
            "message_start",
            anthropic::message_start(b.dialect, &id, counts),
            false,
        ),
        Event::named(Duration::ZERO, "content_block_start", anthropic::content_block_start(), false),
        Event::named(Duration::ZERO, "ping", json!({"type": "ping"}), false),
    ];
    for i in 0..n_out {
        let delay = if i == 0 { Duration::from_millis(b.first_token_ms) } else { interval };
        events.push(Event::named(
            delay,
            "content_block_delta",
            anthropic::text_delta(&token(i as u32)),
            true,
        ));
    }
    events.push(Event::named(Duration::ZERO, "content_block_stop", anthropic::content_block_stop(), false));
    events.push(Event::named(
        Duration::ZERO,
        "message_delta",
        anthropic::message_delta(b.dialect, "max_tokens", counts),
        false,
    ));
    events.push(Event::named(Duration::ZERO, "message_stop", json!({"type": "message_stop"}), false));
    let key = trace.timing.nonce.clone();
    paced(Paced {
        events: events.into_iter(),
        due: start,
        trace,
        first_sent: key.map(|k| (s.first_sent.clone(), k)),
        close_after: None,
        sent: Vec::new(),
        timings: None,
        catch_up: b.catch_up,
        _permit: permit,
    })
}

pub(super) async fn chat(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<net::Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    complete(s, peer, headers, body, Endpoint::Chat).await
}

/// The legacy text completions (`/v1/completions`): the chat endpoint's timing, cache and faults,
/// with a `prompt` instead of messages and `text_completion` chunks.
pub(super) async fn completions(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<net::Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    complete(s, peer, headers, body, Endpoint::Completions).await
}

async fn complete(
    s: AppState,
    peer: net::Peer,
    headers: HeaderMap,
    body: Bytes,
    endpoint: Endpoint,
) -> Response {
    let read_at = Instant::now();
    let (path, api) = match endpoint {
        Endpoint::Chat => ("/v1/chat/completions", Api::Chat),
        Endpoint::Completions => ("/v1/completions", Api::Completions),
    };
    let b = lock(&s.behaviour).clone();
    let body = match request::parse(&body, api) {
        Ok(body) => body,
        Err(why) => return request::refusal(b.dialect, api, &why),
    };
    s.record_from(Some(peer), "POST", path, &headers, &body);
    // Faults (and other quirks) hit only measured-size requests, so prompt calibration (max_tokens 1) and the
    // warm-up (8) get through and the sweep reaches its measurements. A server without a tokenizer and
    // without usage has no usage for calibration either: that is the point of scripting it.
    let max_tokens = request::output_tokens(&body);
    let b = if max_tokens < 20 {
        let usage = b.usage || b.tokenizer;
        Behaviour {
            first_token_ms: b.first_token_ms,
            token_ms: b.token_ms,
            token_interval_us: b.token_interval_us,
            max_concurrent: b.max_concurrent,
            dialect: b.dialect,
            cache_report: b.cache_report,
            catch_up: b.catch_up,
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
    let (mut trace, permit, start) = admit(&s, path, &body, read_at).await;
    trace.timing.tokens_per_chunk = b.tokens_per_chunk.max(1);
    let prompt = prompt_words(&body);
    // Cache evidence like the server imitated: llama.cpp slot, agent-memory session, or vLLM prefix.
    let agent = headers.get("x-session-id").and_then(|v| v.to_str().ok());
    // llama.cpp's `cache_prompt: false`: the request reuses nothing its slot held.
    let reuse = body["cache_prompt"].as_bool() != Some(false);
    let held = lock(&s.slots).serve(body["id_slot"].as_u64(), agent, &prompt, reuse);
    let input = prompt.len() as u64;
    let cached = b.dialect.reported_cached(input, held);
    let n_out = b.force_output_tokens.unwrap_or(max_tokens);
    let diverge = max_tokens >= 20 && {
        let mut slots = lock(&s.slots);
        slots.measured_requests += 1;
        b.diverge_after.is_some_and(|n| slots.measured_requests > n)
    };
    let token = |i: u32| if diverge && i == 1 { " wX".to_string() } else { token(i) };
    // Prefill time scales with what is not cached, like a real server.
    let uncached_share = if input == 0 { 1.0 } else { (input - held) as f64 / input as f64 };
    let first = Duration::from_millis((b.first_token_ms as f64 * uncached_share).round() as u64);
    let interval = b.token_interval();
    let counts = Counts { input, cached, output: u64::from(n_out) };
    let wire = Wire {
        dialect: b.dialect,
        endpoint,
        id: reply_id(&s, if endpoint == Endpoint::Chat { "chatcmpl-" } else { "cmpl-" }),
        created: unix_now(),
        include_usage: b.usage
            && (b.dialect == Dialect::Bare
                || body["stream_options"]["include_usage"].as_bool() == Some(true)),
        continuous_usage: body["stream_options"]["continuous_usage_stats"].as_bool() == Some(true),
        cache_report: b.cache_report,
    };
    // What the server planned: the prefill, then one interval a token. A paced stream's timings are
    // measured as it is sent instead (`LateTimings`).
    let planned = Timings {
        cache_n: held,
        prompt_n: input - held,
        prompt_ms: first.as_secs_f64() * 1000.0,
        predicted_n: u64::from(n_out),
        predicted_ms: (interval * n_out).as_secs_f64() * 1000.0,
    };
    if body["stream"].as_bool() != Some(true) {
        tokio::time::sleep_until(start + first + interval * n_out).await;
        let text: String = (0..n_out).map(token).collect();
        let reply = wire.whole(&text, "length", counts, b.usage, &planned);
        trace.content(Instant::now());
        trace.completed();
        if let Fault::StrayAfterReply(ms) = b.fault {
            // The copy is marked as the reply goes out: the write follows within microseconds.
            let copy = faults::stray_copy_of_body(&serde_json::to_vec(&reply).unwrap_or_default());
            let at = tokio::time::Instant::now() + Duration::from_millis(ms);
            lock(&s.kills).insert(peer.0, net::Kill::Stray(at, std::sync::Arc::new(copy)));
        }
        return axum::Json(reply).into_response();
    }
    let keep_alive = if b.fault == Fault::KeepAlive { ": keep-alive\n\n" } else { "" };
    let data = |delay, data: String, content| Event {
        delay,
        frame: Bytes::from(format!("{keep_alive}data: {data}\n\n")),
        content,
        late: false,
    };
    let per_token = b.dialect == Dialect::LlamaCpp && body["timings_per_token"].as_bool() == Some(true);
    let mut events: Vec<Event> = Vec::new();
    if b.role_chunk
        && let Some(role) = wire.role_chunk()
    {
        events.push(data(Duration::ZERO, role, false));
    }
    let mut produced = 0u32;
    while produced < n_out {
        let k = b.tokens_per_chunk.max(1).min(n_out - produced);
        let mut text: String = (0..k).map(|i| token(produced + i)).collect();
        if produced == 0
            && let Some(echo) = faults::completion_echo(&b.fault, &headers, &body, &b.server_args)
        {
            text.insert_str(0, &echo);
        }
        let delay = if produced == 0 { first } else { interval * k };
        let so_far = Counts { output: u64::from(produced + k), ..counts };
        let timings = per_token.then(|| Timings {
            predicted_n: so_far.output,
            predicted_ms: (interval * (produced + k)).as_secs_f64() * 1000.0,
            ..planned
        });
        events.push(data(delay, wire.content_chunk(&text, so_far, timings.as_ref()), true));
        if produced == 0 && b.fault == Fault::ErrorInStream {
            let error = json!({"error": {"message": "scripted failure", "code": 500}});
            events.push(data(Duration::from_millis(1), error.to_string(), false));
            break;
        }
        produced += k;
    }
    if b.fault != Fault::ErrorInStream && b.fault != Fault::Truncate {
        let mut finish = data(Duration::ZERO, wire.finish_chunk("length", counts), false);
        finish.late = !wire.include_usage;
        events.push(finish);
        if wire.include_usage {
            let mut usage = data(Duration::ZERO, wire.usage_chunk(counts), false);
            usage.late = true;
            events.push(usage);
        }
        events.push(data(Duration::ZERO, "[DONE]".to_string(), false));
    }
    // Streams not paced here are sent as planned, timings included.
    let planned_frames = |events: Vec<Event>| -> Vec<Bytes> {
        events
            .into_iter()
            .map(|e| match e.late {
                true => Bytes::from(planned.fill(&String::from_utf8_lossy(&e.frame))),
                false => e.frame,
            })
            .collect()
    };
    if b.fault == Fault::Burst {
        let due = start + events.iter().map(|e| e.delay).sum::<Duration>();
        let all = Bytes::from(planned_frames(events).concat());
        let held = stream::once(async move {
            tokio::time::sleep_until(due).await;
            Ok::<_, Infallible>(all)
        });
        return sse_response(Body::from_stream(held));
    }
    if matches!(b.fault, Fault::Lumps(_) | Fault::HoldFirst(_)) {
        // A buffering proxy between this server and the client: each frame made when it is due
        // (its deadline from admission, as a paced stream's), forwarded when the proxy lets it go.
        let mut due = start;
        let schedule: Vec<_> = events
            .iter()
            .map(|e| {
                due += e.delay;
                due
            })
            .collect();
        let frames = schedule.into_iter().zip(planned_frames(events)).collect();
        let writes = stream::iter(faults::forwarded(&b.fault, frames)).then(|(due, bytes)| async move {
            tokio::time::sleep_until(due).await;
            Ok::<_, Infallible>(bytes)
        });
        return sse_response(Body::from_stream(writes));
    }
    if let Fault::SlowDrip { bytes, every_ms } = b.fault {
        let pieces = stream::iter(faults::drip(planned_frames(events), bytes, every_ms)).then(
            |(delay, piece)| async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                Ok::<_, Infallible>(piece)
            },
        );
        return sse_response(Body::from_stream(pieces));
    }
    let key = trace
        .timing
        .nonce
        .clone()
        .or_else(|| first_text(&body).split_whitespace().nth(1).map(str::to_string));
    paced(Paced {
        events: events.into_iter(),
        due: start,
        trace,
        first_sent: key.map(|k| (s.first_sent.clone(), k)),
        close_after: match b.fault {
            Fault::CloseAfterStream(ms) => Some(AfterStream::new(&s, peer, ms, AfterStreamKill::Deaf)),
            Fault::StrayAfterReply(ms) => Some(AfterStream::new(&s, peer, ms, AfterStreamKill::Stray)),
            _ => None,
        },
        sent: Vec::new(),
        timings: Some(LateTimings { planned, admitted: start.into_std(), first: None, last: None, interval }),
        catch_up: b.catch_up,
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
