//! The measuring HTTP client: one chat request, timed on a monotonic clock from the moment it is
//! handed to the socket.
//!
//! Timing rules (docs/sweep.md, "Timing"): the body is serialized and the request built BEFORE the clock
//! starts; arrival times are stamped when bytes arrive, before any SSE or JSON parsing; TTFT is the
//! first delta with non-empty content or reasoning (role-only and empty chunks are events, not
//! tokens). Every failure becomes an `ErrorInfo` on the exchange — never a panic, never a silent
//! success — and whatever was measured before the failure is kept. A request is sent again only
//! when it provably never reached the server (`send_at_most_twice`), and the record says so.

mod anthropic;
pub mod body;
mod broken;
#[cfg(unix)]
mod catch_up;
#[cfg(unix)]
mod direct;
mod failure;
mod h1;
mod lanes;
mod openai;
mod options;
mod setup_error;
#[cfg(unix)]
mod socket;
pub mod sse;
mod stream;
mod trust;

use std::time::{Duration, Instant};

use serde::Serialize;

use ttft_model::record::{ConnectionUse, ErrorInfo, ErrorKind};
use ttft_model::spec::Api;

pub use body::{causes, quote};
use failure::{DROPPED_AFTER_SEND, never_sent, no_response_headers};
pub use failure::{answered_in_plain_http, connect_failure, error_chain, send_failure, tls_problem};
pub use failure::{location_of, not_followed};
pub use h1::{
    Unframed, replay as replay_response, replay_then_close as replay_response_then_close, unasked_coding,
};
pub use options::{ClientOptions, KEEP_ALIVE_IDLE, Limits, default_http};
pub use setup_error::SetupError;
pub use stream::replay_stream;

/// The direct path's reads so far in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadCounts {
    /// Stamped with the kernel's arrival time.
    pub kernel_stamped: u64,
    /// Stamped when the read returned (no kernel stamp).
    pub stamped_on_return: u64,
    /// Peeks at a socket's queue by a lane behind, to read its events one at a time.
    pub peeks_while_behind: u64,
    /// Reads that found nothing to read (the socket was reported readable, and was not).
    pub found_empty: u64,
}

impl ReadCounts {
    /// The reads between `before` and these counts.
    pub fn since(self, before: ReadCounts) -> ReadCounts {
        ReadCounts {
            kernel_stamped: self.kernel_stamped.saturating_sub(before.kernel_stamped),
            stamped_on_return: self.stamped_on_return.saturating_sub(before.stamped_on_return),
            peeks_while_behind: self.peeks_while_behind.saturating_sub(before.peeks_while_behind),
            found_empty: self.found_empty.saturating_sub(before.found_empty),
        }
    }
}

/// Reads of the direct path so far in this process: how they were stamped, and how often a lane
/// behind peeked to read events one at a time. See socket.rs.
pub fn read_counts() -> ReadCounts {
    #[cfg(unix)]
    return socket::read_counts();
    #[cfg(not(unix))]
    ReadCounts::default()
}

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

/// What the user adds to every request (`--extra-body`, `--temperature`, `--header`), applied
/// by `Client::prepare` to every request the client sends: measured, calibration and probe alike.
#[derive(Clone, Debug, Default)]
pub struct RequestKnobs {
    /// Merged into the body where neither bench nor the preset set the key (the config refuses
    /// bench's own keys; a preset's session fields win, since the cache state depends on them).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// None: bench's greedy 0.
    pub temperature: Option<f64>,
    pub headers: Vec<(String, String)>,
}

/// Token counts as the server reported them. `None` means the server did not say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// Anthropic API: the response's own `usage.input_tokens`, as sent. By Anthropic's meaning
    /// the prompt's tokens after its cache; a server whose count is the whole prompt
    /// (`ClientOptions::anthropic_input_tokens_total`) has it become `input_tokens`.
    pub anthropic_input_tokens: Option<u64>,
}

/// One request/response as measured. Offsets are milliseconds since the request was sent.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    pub started_at: String,
    /// The instant the request was handed to the socket (all offsets count from here).
    pub start: Option<Instant>,
    /// When the request's last byte went to the kernel, ms after `start` (direct path only): the
    /// client's own part of the time to first token before the server has the request.
    pub request_written_ms: Option<f64>,
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
    /// Times the request was handed to the transport: 1, or 2 when the first connect failed
    /// (0 when it was never sent).
    pub attempts: u32,
    /// A spare connection held bytes before any request was written on it (a server that
    /// spoke first): it was closed, and nothing was read from it as an answer. The direct path
    /// says so.
    pub unexpected_bytes_dropped: bool,
    /// The connection the request went out on (None when it went out on none): never one that
    /// has carried an earlier response, whose stray could be read as this request's answer.
    pub connection: Option<ConnectionUse>,
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

/// The timed window of one request: the clock's zero, and when it gives up.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start: Instant,
    pub deadline: tokio::time::Instant,
    pub timeout: Duration,
}

impl Window {
    fn open(timeout: Duration) -> Window {
        let start = Instant::now();
        Window { start, deadline: deadline_after(start, timeout), timeout }
    }

    /// A window opening now that gives up at `deadline`, set before a connect outside it: the
    /// request's one timeout covers both.
    #[cfg(unix)]
    fn open_by(deadline: tokio::time::Instant, timeout: Duration) -> Window {
        Window { start: Instant::now(), deadline, timeout }
    }
}

/// `timeout` after `start`. A timeout too large for the clock (validated upstream; never panic
/// here) means "none".
fn deadline_after(start: Instant, timeout: Duration) -> tokio::time::Instant {
    let deadline = start.checked_add(timeout).unwrap_or(start + Duration::from_secs(100 * 365 * 86400));
    tokio::time::Instant::from_std(deadline)
}

/// The outcome of handing a request to the transport.
pub struct Sent {
    pub attempts: u32,
    pub window: Window,
    /// `Err(())`: no response headers before the deadline.
    pub result: Result<Result<reqwest::Response, reqwest::Error>, ()>,
}

/// Sends `request`, and once more only when the first try provably never reached the server: the
/// connection could not be opened (refused, unreachable; not a certificate problem, which a second
/// try does not cure). A request written to a connection that then closed or reset may have been
/// read, processed and cached by the server, so it is never re-sent: re-sending it would measure
/// a cache the first attempt warmed and hide a server fault. (hyper itself re-sends only a
/// request it never began to write, when a pooled connection turned out closed at checkout.)
/// Each try opens a fresh window: a failed connect is not inside the measured time.
pub async fn send_at_most_twice(
    http: &reqwest::Client,
    request: reqwest::Request,
    timeout: Duration,
) -> Sent {
    let mut request = request;
    let mut attempts = 0;
    loop {
        let spare = request.try_clone();
        attempts += 1;
        let window = Window::open(timeout);
        let result = tokio::time::timeout_at(window.deadline, http.execute(request)).await.map_err(|_| ());
        match (&result, spare) {
            (Ok(Err(e)), Some(again)) if attempts < 2 && never_sent(e) => request = again,
            _ => return Sent { attempts, window, result },
        }
    }
}

pub struct Client {
    /// For calls outside a measurement (presets, metrics, /tokenize), on the caller's runtime.
    http: reqwest::Client,
    /// Where chat requests run (`send`): see lanes.rs.
    lanes: lanes::Lanes,
    base: String,
    api: Api,
    api_key: Option<String>,
    timeout: Duration,
    options: ClientOptions,
    knobs: RequestKnobs,
}

/// A request ready to go: everything that costs time is done before the clock starts.
pub struct Prepared {
    request: reqwest::Request,
    stream: bool,
    /// The same request as bytes, when it can go out on the direct path (lanes.rs).
    wire: Option<h1::Wire>,
}

impl Prepared {
    /// The request's path (`/v1/chat/completions`) and the body bytes it sends, exactly.
    pub fn path_and_body(&self) -> (&str, &[u8]) {
        let body = self.request.body().and_then(reqwest::Body::as_bytes).unwrap_or_default();
        (self.request.url().path(), body)
    }
}

/// Preflight calls (is the server there at all?) wait at most this long, or the request timeout
/// when that is shorter: a wrong --server should cost seconds, not the request timeout.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(15);

impl Client {
    /// A client for `base`. The API key is registered as a secret here, so no message built from
    /// a server's answer (which may echo it) carries it.
    pub fn new(
        base: &str,
        api: Api,
        api_key: Option<String>,
        timeout: Duration,
        options: ClientOptions,
    ) -> Result<Client, SetupError> {
        if let Some(key) = &api_key {
            ttft_model::secrets::register(key);
        }
        options::check_transport_env()?;
        let http = options::http_client(&options)?;
        let lanes = lanes::Lanes::start(&options, api, timeout)?;
        Ok(Client {
            http,
            lanes,
            base: base.trim_end_matches('/').to_string(),
            api,
            api_key,
            timeout,
            options,
            knobs: RequestKnobs::default(),
        })
    }

    /// What every request of this client carries besides bench's own fields.
    pub fn set_knobs(&mut self, knobs: RequestKnobs) {
        self.knobs = knobs;
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The request timeout (`--request-timeout`): every call of this client honours it.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The shorter timeout of preflight calls: min(15 s, the request timeout).
    pub fn preflight_timeout(&self) -> Duration {
        self.timeout.min(PREFLIGHT_TIMEOUT)
    }

    pub fn limits(&self) -> &Limits {
        &self.options.limits
    }

    /// Whether certificate verification is off (`--insecure`); run.json should say so.
    pub fn insecure(&self) -> bool {
        self.options.insecure
    }

    /// Builds and serializes the request. Call before starting any clock.
    pub fn prepare(&self, req: &ChatRequest) -> anyhow::Result<Prepared> {
        let (path, mut body) = match self.api {
            Api::Openai => ("/v1/chat/completions", openai::body(req)),
            Api::Anthropic => ("/v1/messages", anthropic::body(req)),
            Api::OpenaiCompletions => ("/v1/completions", openai::completions_body(req)),
        };
        if let Some(fields) = body.as_object_mut() {
            if let Some(t) = self.knobs.temperature {
                fields.insert("temperature".into(), serde_json::json!(t));
            }
            for (k, v) in &self.knobs.extra_body {
                fields.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let bytes = serde_json::to_vec(&body)?;
        let mut builder = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes);
        if req.stream {
            builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
            if self.options.close_after_stream {
                builder = builder.header(reqwest::header::CONNECTION, "close");
            }
        }
        builder = self.identify(builder);
        for (k, v) in &req.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let mut request = builder.build()?;
        let wire = if cfg!(unix) && self.options.direct { h1::wire(&request) } else { None };
        if wire.is_none() {
            // Through reqwest, no chat request reuses a connection that carried an earlier reply,
            // whose stray it could read as its own answer: HTTP/1.1 closes each (HTTP/2 drops the
            // header). The direct path never reuses one (direct.rs) and asks nothing.
            let close = reqwest::header::HeaderValue::from_static("close");
            request.headers_mut().insert(reqwest::header::CONNECTION, close);
        }
        Ok(Prepared { request, stream: req.stream, wire })
    }

    /// Adds what every call to the server carries, measured or not (preflight, /props,
    /// /tokenize, /metrics, preset actions): the credentials and the user's `--header` lines. A
    /// server behind a gateway that wants an `api-key` or `X-Api-Key` header refuses any call
    /// without it, so none may go without.
    pub fn identify(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let mut builder = self.auth(builder);
        for (k, v) in &self.knobs.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        builder
    }

    /// Adds credentials. The key lives only in memory and in this header.
    fn auth(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let builder = match self.api {
            Api::Anthropic => builder.header("anthropic-version", "2023-06-01"),
            Api::Openai | Api::OpenaiCompletions => builder,
        };
        match (&self.api_key, self.api) {
            (Some(key), Api::Openai | Api::OpenaiCompletions) => builder.bearer_auth(key),
            (Some(key), Api::Anthropic) => builder.header("x-api-key", key),
            (None, _) => builder,
        }
    }

    /// Opens `n` spare connections ahead of `n` requests about to be sent together (a batch's
    /// release), spread over the lanes as those requests will be, so that none connects between
    /// the release and its write. Only the direct path can (a connection reqwest makes is its
    /// own); there and elsewhere a request without a spare makes its own connection.
    pub async fn preconnect(&self, n: usize) {
        #[cfg(unix)]
        if self.options.direct
            && let Ok(url) = reqwest::Url::parse(&self.base)
            && let Some(authority) = h1::direct_authority(&url)
        {
            self.lanes.preconnect(&authority, n).await;
        }
        let _ = n;
    }

    /// Sends a prepared request and measures it, on one of the client's lanes (lanes.rs). Never
    /// fails: errors land in `Exchange::error`.
    pub async fn send(&self, prepared: Prepared) -> Exchange {
        let mut ex = self.lanes.send(prepared).await;
        if self.api == Api::Anthropic && self.options.anthropic_input_tokens_total {
            ex.usage.input_tokens = ex.usage.anthropic_input_tokens.or(ex.usage.input_tokens);
        }
        ex
    }
}

/// One timed exchange on `http`: sent (at most twice), its answer read and stamped.
async fn exchange(
    http: &reqwest::Client,
    api: Api,
    limits: &Limits,
    timeout: Duration,
    prepared: Prepared,
) -> Exchange {
    let mut ex = Exchange { started_at: ttft_model::clock::now_rfc3339(), ..Default::default() };
    let sent = send_at_most_twice(http, prepared.request, timeout).await;
    let window = sent.window;
    ex.attempts = sent.attempts;
    ex.start = Some(window.start);
    let response = match sent.result {
        Err(()) => {
            ex.fail(ErrorKind::Timeout, no_response_headers(timeout));
            return ex;
        }
        Ok(Err(e)) if e.is_connect() => {
            ex.fail(ErrorKind::Connect, connect_failure(&e));
            return ex;
        }
        Ok(Err(e)) => {
            ex.fail(ErrorKind::Transport, send_failure(&e));
            return ex;
        }
        Ok(Ok(r)) => r,
    };
    ex.first_byte_ms = Some(ms_since(window.start));
    // Every chat request on this path asks `Connection: close` (`Client::prepare`), so hyper
    // returns no HTTP/1.1 connection of a lane to its pool: each request has its own, made inside
    // the window. HTTP/2 drops that header and ties each reply to its request's stream.
    ex.connection = Some(match response.version() {
        reqwest::Version::HTTP_2 | reqwest::Version::HTTP_3 => ConnectionUse::Http2Stream,
        _ => ConnectionUse::NewInWindow,
    });
    let status = response.status().as_u16();
    let mut source = body::Fetched::new(response, window.start);
    body::read_answer(api, limits, status, prepared.stream, &mut source, window, &mut ex).await;
    ex
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// Reads an unsigned count from a JSON value that may be missing or null.
fn count(value: Option<&serde_json::Value>) -> Option<u64> {
    value.and_then(serde_json::Value::as_u64)
}

/// The message of an `{"error": ...}` object, whatever its shape.
fn error_message(error: &serde_json::Value) -> String {
    error.get("message").and_then(|m| m.as_str()).map(str::to_string).unwrap_or_else(|| error.to_string())
}
