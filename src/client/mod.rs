//! The measuring HTTP client: one chat request, timed on a monotonic clock from the moment it is
//! handed to the socket.
//!
//! Timing rules (DESIGN.md): the body is serialized and the request built BEFORE the clock starts;
//! arrival times are stamped when bytes arrive, before any SSE or JSON parsing; TTFT is the first
//! delta with non-empty content or reasoning (role-only and empty chunks are events, not tokens).
//! Every failure becomes an `ErrorInfo` on the exchange — never a panic, never a silent success —
//! and whatever was measured before the failure is kept.

mod anthropic;
mod openai;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Serialize;

use crate::config::Api;
use crate::record::{ErrorInfo, ErrorKind};

/// How much of an error body is kept (enough to read the server's message, never megabytes).
const ERROR_BODY_CHARS: usize = 2000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message { role: role.to_string(), content: content.into() }
    }
}

/// What to send. `extra_body` and `headers` carry preset specifics (slot ids, session ids).
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    pub stream: bool,
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    pub headers: Vec<(String, String)>,
}

/// Token counts as the server reported them. `None` means the server did not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
}

/// One request/response as measured. Offsets are milliseconds since the request was sent.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    pub started_at: String,
    /// The instant the request was handed to the socket (all offsets count from here).
    pub start: Option<Instant>,
    pub first_byte_ms: Option<f64>,
    pub first_event_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub token_offsets_ms: Vec<f64>,
    pub delta_count: u64,
    pub content: String,
    pub reasoning: String,
    pub usage: Usage,
    pub finish_reason: Option<String>,
    /// llama.cpp's `timings` object.
    pub server_timings: Option<serde_json::Value>,
    pub http_status: Option<u16>,
    pub error: Option<ErrorInfo>,
}

impl Exchange {
    /// A content or reasoning delta arrived at `at_ms`. Empty text is not a token.
    fn on_text(&mut self, at_ms: f64, text: &str, reasoning: bool) {
        if text.is_empty() {
            return;
        }
        if self.ttft_ms.is_none() {
            self.ttft_ms = Some(at_ms);
        }
        self.token_offsets_ms.push(at_ms);
        self.delta_count += 1;
        if reasoning { self.reasoning.push_str(text) } else { self.content.push_str(text) }
    }

    fn fail(&mut self, kind: ErrorKind, message: impl Into<String>) {
        // The first failure is the cause; later ones are consequences.
        if self.error.is_none() {
            let mut e = ErrorInfo::new(kind, message);
            e.http_status = self.http_status.filter(|s| !(200..300).contains(s));
            self.error = Some(e);
        }
    }

    /// Reasoning first (it streamed first), then content.
    pub fn full_output(&self) -> String {
        if self.reasoning.is_empty() {
            self.content.clone()
        } else {
            format!("{}{}", self.reasoning, self.content)
        }
    }
}

/// What a dialect makes of one parsed stream event.
#[derive(Debug, PartialEq)]
enum EventOutcome {
    Continue,
    /// The server's end-of-stream marker.
    Done,
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    api: Api,
    api_key: Option<String>,
    timeout: Duration,
}

/// A request ready to go: everything that costs time is done before the clock starts.
pub struct Prepared {
    request: reqwest::Request,
    stream: bool,
}

impl Client {
    pub fn new(base: &str, api: Api, api_key: Option<String>, timeout: Duration) -> anyhow::Result<Client> {
        let http = reqwest::Client::builder()
            // Measurements must not share a pool slot with a dying connection, but must not pay a
            // connect either: keep-alive pool, no global timeout (ours is per request, below).
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()?;
        Ok(Client { http, base: base.trim_end_matches('/').to_string(), api, api_key, timeout })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Builds and serializes the request. Call before starting any clock.
    pub fn prepare(&self, req: &ChatRequest) -> anyhow::Result<Prepared> {
        let (path, body) = match self.api {
            Api::Openai => ("/v1/chat/completions", openai::body(req)),
            Api::Anthropic => ("/v1/messages", anthropic::body(req)),
        };
        let bytes = serde_json::to_vec(&body)?;
        let mut builder = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes);
        if req.stream {
            builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
        }
        builder = self.auth(builder);
        for (k, v) in &req.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        Ok(Prepared { request: builder.build()?, stream: req.stream })
    }

    /// Adds credentials. The key lives only in memory and in this header.
    pub fn auth(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let builder = match self.api {
            Api::Anthropic => builder.header("anthropic-version", "2023-06-01"),
            Api::Openai => builder,
        };
        match (&self.api_key, self.api) {
            (Some(key), Api::Openai) => builder.bearer_auth(key),
            (Some(key), Api::Anthropic) => builder.header("x-api-key", key),
            (None, _) => builder,
        }
    }

    /// Sends a prepared request and measures it. Never fails: errors land in `Exchange::error`.
    pub async fn send(&self, prepared: Prepared) -> Exchange {
        let mut ex = Exchange { started_at: crate::meta::now_rfc3339(), ..Default::default() };
        let spare = prepared.request.try_clone();
        let mut start = Instant::now();
        let mut deadline = tokio::time::Instant::from_std(start + self.timeout);
        let mut sent = tokio::time::timeout_at(deadline, self.http.execute(prepared.request)).await;
        // A pooled keep-alive connection the server has just closed (llama.cpp's HTTP server ends a
        // connection after a few requests) fails before anything is processed. That is the client's
        // artefact, not the server's: send once more on a fresh connection, with a fresh clock.
        if let (Ok(Err(e)), Some(again)) = (&sent, spare)
            && stale_connection(e)
        {
            start = Instant::now();
            deadline = tokio::time::Instant::from_std(start + self.timeout);
            sent = tokio::time::timeout_at(deadline, self.http.execute(again)).await;
        }
        ex.start = Some(start);
        let response = match sent {
            Err(_) => {
                ex.fail(ErrorKind::Timeout, format!("no response headers within {:?}", self.timeout));
                return ex;
            }
            Ok(Err(e)) => {
                let kind = if e.is_connect() { ErrorKind::Connect } else { ErrorKind::Transport };
                ex.fail(kind, error_chain(&e));
                return ex;
            }
            Ok(Ok(r)) => r,
        };
        ex.first_byte_ms = Some(ms_since(start));
        let status = response.status();
        ex.http_status = Some(status.as_u16());
        if !status.is_success() {
            let body = read_body(response, deadline).await.unwrap_or_default();
            ex.e2e_ms = Some(ms_since(start));
            let text: String = String::from_utf8_lossy(&body).chars().take(ERROR_BODY_CHARS).collect();
            ex.fail(ErrorKind::HttpStatus, format!("HTTP {status}: {text}"));
            return ex;
        }
        if prepared.stream {
            self.read_stream(response, start, deadline, &mut ex).await;
        } else {
            self.read_whole(response, start, deadline, &mut ex).await;
        }
        ex
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        start: Instant,
        deadline: tokio::time::Instant,
        ex: &mut Exchange,
    ) {
        // Arrival of the newest chunk, in ns since start. An event is complete only when its last
        // byte has arrived, so the newest chunk's arrival is the event's arrival.
        let arrived_ns = Arc::new(AtomicU64::new(0));
        let stamp = arrived_ns.clone();
        let bytes = response.bytes_stream().map(move |chunk| {
            stamp.store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            chunk
        });
        let mut events = bytes.eventsource();
        let mut done = false;
        loop {
            let next = match tokio::time::timeout_at(deadline, events.next()).await {
                Err(_) => {
                    ex.fail(ErrorKind::Timeout, format!("stream not finished within {:?}", self.timeout));
                    break;
                }
                Ok(next) => next,
            };
            let Some(event) = next else { break };
            let at_ms = arrived_ns.load(Ordering::Relaxed) as f64 / 1e6;
            let event = match event {
                Ok(ev) => ev,
                Err(e) => {
                    ex.fail(ErrorKind::StreamTruncated, format!("stream broke: {e}"));
                    break;
                }
            };
            if ex.first_event_ms.is_none() {
                ex.first_event_ms = Some(at_ms);
            }
            let outcome = match self.api {
                Api::Openai => openai::on_event(&event.data, at_ms, ex),
                Api::Anthropic => anthropic::on_event(&event.event, &event.data, at_ms, ex),
            };
            if outcome == EventOutcome::Done {
                done = true;
                break;
            }
        }
        // E2E ends with the last byte of the response (the end marker), not the last token.
        let last_ms = arrived_ns.load(Ordering::Relaxed) as f64 / 1e6;
        ex.e2e_ms = Some(if last_ms > 0.0 { last_ms } else { ms_since(start) });
        if !done && ex.error.is_none() {
            ex.fail(
                ErrorKind::StreamTruncated,
                "stream ended without its end marker ([DONE] / message_stop)",
            );
        }
    }

    async fn read_whole(
        &self,
        response: reqwest::Response,
        start: Instant,
        deadline: tokio::time::Instant,
        ex: &mut Exchange,
    ) {
        let body = match read_body(response, deadline).await {
            Ok(b) => b,
            Err(BodyError::Timeout) => {
                ex.fail(ErrorKind::Timeout, format!("body not finished within {:?}", self.timeout));
                return;
            }
            Err(BodyError::Transport(msg)) => {
                ex.fail(ErrorKind::StreamTruncated, format!("body broke: {msg}"));
                return;
            }
        };
        ex.e2e_ms = Some(ms_since(start));
        let value: serde_json::Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                let text: String = String::from_utf8_lossy(&body).chars().take(ERROR_BODY_CHARS).collect();
                ex.fail(ErrorKind::Protocol, format!("response is not JSON ({e}): {text}"));
                return;
            }
        };
        match self.api {
            Api::Openai => openai::on_whole(&value, ex),
            Api::Anthropic => anthropic::on_whole(&value, ex),
        }
    }
}

enum BodyError {
    Timeout,
    Transport(String),
}

async fn read_body(
    response: reqwest::Response,
    deadline: tokio::time::Instant,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(None) => return Ok(body),
            Ok(Some(Err(e))) => return Err(BodyError::Transport(error_chain(&e))),
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
        }
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// The request failed while being sent on an existing connection (not a refused connect, not a
/// timeout): the kind of failure a closed keep-alive connection gives.
pub fn stale_connection(e: &reqwest::Error) -> bool {
    e.is_request() && !e.is_connect() && !e.is_timeout()
}

/// reqwest's top-level message hides the cause ("error sending request"); keep the whole chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Reads an unsigned count from a JSON value that may be missing or null.
fn count(value: Option<&serde_json::Value>) -> Option<u64> {
    value.and_then(serde_json::Value::as_u64)
}

/// The message of an `{"error": ...}` object, whatever its shape.
fn error_message(error: &serde_json::Value) -> String {
    error.get("message").and_then(|m| m.as_str()).map(str::to_string).unwrap_or_else(|| error.to_string())
}
