//! A scripted OpenAI/llama.cpp-like server (axum, 127.0.0.1:0) for exact timings and faults.
//!
//! Tokens are whitespace-separated words; the chat template costs `TEMPLATE_TOKENS` per message.
//! Slots remember the last prompt (word list) so `timings.cache_n` behaves like llama.cpp's:
//! erase forgets, save/restore copy to and from named files. Every request is logged (tests count
//! them). Served over plain HTTP or TLS (`start_tls`, a CA generated per server); faults in
//! `scripted/faults.rs`, sockets in `scripted/net.rs`.

#![allow(dead_code)]

#[path = "scripted/faults.rs"]
mod faults;
#[path = "scripted/net.rs"]
pub mod net;

pub use faults::Fault;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};

pub const TEMPLATE_TOKENS: u64 = 7;

/// What the chat endpoint does. One behaviour per server; tests pick it.
#[derive(Clone, Debug)]
pub struct Behaviour {
    /// Delay before the first content token (prefill), per request.
    pub first_token_ms: u64,
    /// Delay between tokens.
    pub token_ms: u64,
    /// Send a role-only chunk (content null) right away, before the prefill delay.
    pub role_chunk: bool,
    /// Tokens per content chunk (multi-token chunks).
    pub tokens_per_chunk: u32,
    pub usage: bool,
    pub fault: Fault,
    /// Ignore max_tokens and produce this many tokens (the seed's 253 of 64).
    pub force_output_tokens: Option<u32>,
    /// Serve POST /tokenize (llama.cpp, vLLM do; hosted APIs do not).
    pub tokenizer: bool,
    /// Answer slot actions like a llama-server started without `--slot-save-path`.
    pub no_slot_save_path: bool,
    /// After this many measured-size requests, the output changes (its second word): a server
    /// whose greedy text is not what it was alone.
    pub diverge_after: Option<usize>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            first_token_ms: 50,
            token_ms: 2,
            role_chunk: true,
            tokens_per_chunk: 1,
            usage: true,
            fault: Fault::None,
            force_output_tokens: None,
            tokenizer: true,
            no_slot_save_path: false,
            diverge_after: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
    pub at: std::time::Instant,
}

/// What the server has cached, per kind of server it imitates:
/// - llama.cpp slots (`id_slot` in the body): a slot holds its last prompt; erase/save/restore;
/// - agent-memory sessions (`X-Session-ID` header): an agent holds its last prompt in memory or, once
///   evicted (`?evict_only=true`), on disk, from where the next request of the session reloads it;
///   `DELETE /admin/caches` wipes every agent, in memory and on disk;
/// - vLLM/SGLang automatic prefix caching (neither): every prompt is remembered in 16-token blocks,
///   shared by all requests; `/reset_prefix_cache` and `/flush_cache` wipe it.
#[derive(Default)]
struct Slots {
    live: HashMap<u64, Vec<String>>,
    files: HashMap<String, Vec<String>>,
    agents: HashMap<String, Vec<String>>,
    agents_on_disk: HashMap<String, Vec<String>>,
    prefixes: Vec<Vec<String>>,
    /// llama.cpp's /metrics counters: prompt tokens computed, and served from the cache.
    computed_total: u64,
    cached_total: u64,
    /// Measured-size chat requests so far (for `Behaviour::diverge_after`).
    measured_requests: usize,
}

/// vLLM's default KV block size: only whole blocks are shared between prompts.
pub const PREFIX_BLOCK: usize = 16;

fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Slots {
    /// Prompt tokens served from the cache for this request, and the cache updated with it.
    fn serve(&mut self, slot: Option<u64>, agent: Option<&str>, prompt: &[String]) -> u64 {
        let cached = self.lookup(slot, agent, prompt);
        self.cached_total += cached;
        self.computed_total += prompt.len() as u64 - cached;
        cached
    }

    fn lookup(&mut self, slot: Option<u64>, agent: Option<&str>, prompt: &[String]) -> u64 {
        let keep_last = |n: usize| n.min(prompt.len().saturating_sub(1)) as u64;
        if let Some(id) = slot {
            let held = self.live.insert(id, prompt.to_vec()).unwrap_or_default();
            return keep_last(common_prefix(&held, prompt));
        }
        if let Some(agent) = agent {
            let held = match self.agents.remove(agent) {
                Some(live) => live,
                None => self.agents_on_disk.remove(agent).unwrap_or_default(),
            };
            self.agents.insert(agent.to_string(), prompt.to_vec());
            return keep_last(common_prefix(&held, prompt));
        }
        let best = self.prefixes.iter().map(|p| common_prefix(p, prompt)).max().unwrap_or(0);
        self.prefixes.push(prompt.to_vec());
        keep_last(best / PREFIX_BLOCK * PREFIX_BLOCK)
    }

    /// The admin and agent endpoints of agent-memory and the cache resets of vLLM and SGLang.
    /// Returns None for a path this server does not know.
    fn admin(&mut self, method: &str, path: &str) -> Option<StatusCode> {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        match (method, route) {
            ("DELETE", "/admin/caches") => {
                self.agents.clear();
                self.agents_on_disk.clear();
                self.prefixes.clear();
            }
            ("POST", "/reset_prefix_cache" | "/flush_cache") => self.prefixes.clear(),
            ("DELETE", r) if r.starts_with("/v1/agents/oai_") => {
                let agent = &r["/v1/agents/oai_".len()..];
                let live = self.agents.remove(agent);
                if query.contains("evict_only=true") {
                    self.agents_on_disk.insert(agent.to_string(), live?);
                } else if live.is_none() && self.agents_on_disk.remove(agent).is_none() {
                    return Some(StatusCode::NOT_FOUND);
                }
            }
            _ => return None,
        }
        Some(StatusCode::OK)
    }
}

/// When the server handed each stream's first content chunk to the transport, keyed by the
/// first word of the first message (the harness puts a unique nonce there).
pub type FirstSent = Arc<Mutex<HashMap<String, std::time::Instant>>>;

#[derive(Clone)]
struct AppState {
    behaviour: Arc<Mutex<Behaviour>>,
    log: Arc<Mutex<Vec<Logged>>>,
    slots: Arc<Mutex<Slots>>,
    first_sent: FirstSent,
    kills: net::Kills,
}

pub struct Scripted {
    pub url: String,
    /// The CA certificate (PEM) of a TLS server.
    pub ca_pem: Option<String>,
    pub first_sent: FirstSent,
    behaviour: Arc<Mutex<Behaviour>>,
    log: Arc<Mutex<Vec<Logged>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Scripted {
    pub fn start(behaviour: Behaviour) -> Scripted {
        Scripted::start_with(behaviour, None)
    }

    /// The same server over https, with a certificate for 127.0.0.1 signed by a fresh test CA.
    pub fn start_tls(behaviour: Behaviour) -> Scripted {
        Scripted::start_with(behaviour, Some(net::TestCa::generate()))
    }

    fn start_with(behaviour: Behaviour, ca: Option<net::TestCa>) -> Scripted {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let state = AppState {
            behaviour: Arc::new(Mutex::new(behaviour)),
            log: Arc::new(Mutex::new(Vec::new())),
            slots: Arc::new(Mutex::new(Slots::default())),
            first_sent: Arc::new(Mutex::new(HashMap::new())),
            kills: Arc::new(Mutex::new(HashMap::new())),
        };
        let app = Router::new()
            .route("/v1/models", get(models))
            .route("/props", get(props))
            .route("/tokenize", post(tokenize))
            .route("/metrics", get(metrics))
            .route("/slots/{id}", post(slot_action))
            .route("/v1/chat/completions", post(chat))
            .route("/v1/messages", post(messages))
            .fallback(anything)
            .with_state(state.clone());
        let tcp = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr: SocketAddr = tcp.local_addr().unwrap();
        let listener = net::Listener::new(tcp, ca.as_ref(), state.kills.clone());
        runtime.spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<net::Peer>()).await.unwrap();
        });
        let scheme = if ca.is_some() { "https" } else { "http" };
        Scripted {
            url: format!("{scheme}://{addr}"),
            ca_pem: ca.map(|c| c.ca_pem),
            first_sent: state.first_sent,
            behaviour: state.behaviour,
            log: state.log,
            _runtime: runtime,
        }
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }

    pub fn clear_log(&self) {
        self.log.lock().unwrap().clear();
    }

    /// Chat requests of measured size (max_tokens >= 20: not calibration, not warm-up) received.
    pub fn measured_requests(&self) -> usize {
        self.log()
            .iter()
            .filter(|l| l.path.starts_with("/v1/") && l.body["max_tokens"].as_u64().is_some_and(|m| m >= 20))
            .count()
    }
}

fn record(state: &AppState, method: &str, path: &str, headers: &HeaderMap, body: Value) {
    let headers =
        headers.iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string())).collect();
    state.log.lock().unwrap().push(Logged {
        method: method.into(),
        path: path.into(),
        headers,
        body,
        at: std::time::Instant::now(),
    });
}

async fn models(State(s): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    record(&s, "GET", "/v1/models", &headers, Value::Null);
    axum::Json(json!({"object": "list", "data": [{"id": "scripted-model", "object": "model"}]}))
}

/// llama.cpp's Prometheus page (the two counters the llama.cpp preset reads).
async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    record(&s, "GET", "/metrics", &headers, Value::Null);
    let slots = s.slots.lock().unwrap();
    format!(
        "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {}\n\
         # TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total {}\n",
        slots.computed_total, slots.cached_total
    )
}

async fn props(State(s): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    record(&s, "GET", "/props", &headers, Value::Null);
    axum::Json(json!({"total_slots": 2, "build_info": "scripted"}))
}

/// Any other call (preset actions of other servers): logged; the cache endpoints of agent-memory,
/// vLLM and SGLang act on the cache (`Slots::admin`); anything else is answered 200 `{"ok": true}`.
async fn anything(State(s): State<AppState>, req: axum::extract::Request) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, &method, &path, &headers, body);
    let fault = s.behaviour.lock().unwrap().fault.clone();
    if fault == Fault::EchoHeaders {
        return faults::respond(&fault, &headers, net::Peer(([0, 0, 0, 0], 0).into()), &s.kills, 0).unwrap();
    }
    match s.slots.lock().unwrap().admin(&method, &path) {
        Some(StatusCode::OK) | None => axum::Json(json!({"ok": true})).into_response(),
        Some(status) => (status, "no such agent").into_response(),
    }
}

/// Anthropic messages: whole JSON, or streamed as message_start (usage), text deltas, message_delta, stop.
async fn messages(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "POST", "/v1/messages", &headers, body.clone());
    let b = s.behaviour.lock().unwrap().clone();
    let input = prompt_words(&body).len() as u64;
    let n_out = body["max_tokens"].as_u64().unwrap_or(16);
    if body["stream"].as_bool() != Some(true) {
        tokio::time::sleep(Duration::from_millis(b.first_token_ms + b.token_ms * n_out)).await;
        return axum::Json(
            json!({"type": "message", "content": [{"type": "text", "text": output_text(n_out as u32)}],
            "stop_reason": "max_tokens", "usage": {"input_tokens": input, "output_tokens": n_out}}),
        )
        .into_response();
    }
    let mut events: Vec<(u64, &'static str, String)> = vec![(
        0,
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": input, "cache_read_input_tokens": 0,
               "cache_creation_input_tokens": 0, "output_tokens": 1}}})
        .to_string(),
    )];
    for i in 0..n_out {
        let delay = if i == 0 { b.first_token_ms } else { b.token_ms };
        let text = token(i as u32);
        events.push((
            delay,
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
                .to_string(),
        ));
    }
    events.push((0, "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": n_out}}).to_string()));
    events.push((0, "message_stop", json!({"type": "message_stop"}).to_string()));
    let stream = stream::iter(events).then(|(delay, name, data)| async move {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Ok::<_, Infallible>(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
    });
    Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
}

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

async fn tokenize(State(s): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "POST", "/tokenize", &headers, body.clone());
    if !s.behaviour.lock().unwrap().tokenizer {
        return (StatusCode::NOT_FOUND, "File Not Found").into_response();
    }
    let n = words(body["content"].as_str().unwrap_or("")).len();
    axum::Json(json!({"tokens": vec![1; n]})).into_response()
}

async fn slot_action(
    State(s): State<AppState>,
    Path(id): Path<u64>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let action = q.get("action").cloned().unwrap_or_default();
    record(&s, "POST", &format!("/slots/{id}?action={action}"), &headers, body.clone());
    if s.behaviour.lock().unwrap().no_slot_save_path && action != "erase" {
        let message = "This server does not support slots action. Start it with `--slot-save-path`";
        return (
            StatusCode::NOT_IMPLEMENTED,
            json!({"error": {"code": 501, "message": message}}).to_string(),
        )
            .into_response();
    }
    let mut slots = s.slots.lock().unwrap();
    let file = body["filename"].as_str().unwrap_or("").to_string();
    match action.as_str() {
        "erase" => {
            slots.live.remove(&id);
        }
        "save" => {
            let prompt = slots.live.get(&id).cloned().unwrap_or_default();
            slots.files.insert(file, prompt);
        }
        "restore" => match slots.files.get(&file).cloned() {
            Some(p) => {
                slots.live.insert(id, p);
            }
            None => return (StatusCode::BAD_REQUEST, "no such file").into_response(),
        },
        _ => return (StatusCode::BAD_REQUEST, "bad action").into_response(),
    }
    axum::Json(json!({"id_slot": id})).into_response()
}

/// The prompt as a word list: every message's words plus the template tokens.
fn prompt_words(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().cloned().unwrap_or_default() {
        for _ in 0..TEMPLATE_TOKENS {
            out.push(format!("<{}>", m["role"].as_str().unwrap_or("")));
        }
        out.extend(words(m["content"].as_str().unwrap_or("")));
    }
    out
}

async fn chat(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<net::Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    record(&s, "POST", "/v1/chat/completions", &headers, body.clone());
    let b = s.behaviour.lock().unwrap().clone();
    // Faults (and other quirks) hit only measured-size requests, so prompt calibration (max_tokens 1) and the
    // warm-up (8) get through and the sweep reaches its measurements. A server without a tokenizer and
    // without usage has no usage for calibration either: that is the point of scripting it.
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16) as u32;
    let b = if max_tokens < 20 {
        let usage = b.usage || b.tokenizer;
        Behaviour { first_token_ms: b.first_token_ms, token_ms: b.token_ms, usage, ..Behaviour::default() }
    } else {
        b
    };
    match &b.fault {
        Fault::Status(code, text) => {
            return (StatusCode::from_u16(*code).unwrap(), text.to_string()).into_response();
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
    let prompt = prompt_words(&body);
    // Cache evidence like the server imitated: llama.cpp slot, agent-memory session, or vLLM prefix.
    let agent = headers.get("x-session-id").and_then(|v| v.to_str().ok());
    let cached = s.slots.lock().unwrap().serve(body["id_slot"].as_u64(), agent, &prompt);
    let input = prompt.len() as u64;
    let n_out = b.force_output_tokens.unwrap_or(max_tokens);
    let diverge = max_tokens >= 20 && {
        let mut slots = s.slots.lock().unwrap();
        slots.measured_requests += 1;
        b.diverge_after.is_some_and(|n| slots.measured_requests > n)
    };
    let token = |i: u32| if diverge && i == 1 { " wX".to_string() } else { token(i) };
    // Prefill time scales with what is not cached, like a real server.
    let uncached_share = if input == 0 { 1.0 } else { (input - cached) as f64 / input as f64 };
    let first_ms = (b.first_token_ms as f64 * uncached_share).round() as u64;
    let usage = json!({"prompt_tokens": input, "completion_tokens": n_out, "total_tokens": input + n_out as u64,
                       "prompt_tokens_details": {"cached_tokens": cached}});
    let timings = json!({"cache_n": cached, "prompt_n": input - cached});
    if body["stream"].as_bool() != Some(true) {
        tokio::time::sleep(Duration::from_millis(first_ms + b.token_ms * n_out as u64)).await;
        let text: String = (0..n_out).map(token).collect();
        let mut resp = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                               "finish_reason": "length"}], "timings": timings});
        if b.usage {
            resp["usage"] = usage;
        }
        return axum::Json(resp).into_response();
    }
    let mut events: Vec<(u64, String)> = Vec::new();
    let key = body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    if b.role_chunk {
        events.push((
            0,
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}).to_string(),
        ));
    }
    let mut produced = 0u32;
    let mut first = true;
    while produced < n_out {
        let k = b.tokens_per_chunk.min(n_out - produced);
        let text: Vec<String> = (0..k).map(|i| token(produced + i)).collect();
        let delay = if first { first_ms } else { b.token_ms * k as u64 };
        events.push((
            delay,
            json!({"choices": [{"index": 0, "delta": {"content": text.concat()}}]}).to_string(),
        ));
        if first && b.fault == Fault::ErrorInStream {
            events.push((1, json!({"error": {"message": "scripted failure", "code": 500}}).to_string()));
            break;
        }
        first = false;
        produced += k;
    }
    if b.fault != Fault::ErrorInStream && b.fault != Fault::Truncate {
        events.push((
            0,
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}).to_string(),
        ));
        if b.usage {
            events.push((0, json!({"choices": [], "usage": usage, "timings": timings}).to_string()));
        }
        events.push((0, "[DONE]".to_string()));
    }
    if let Fault::SlowDrip { bytes, every_ms } = b.fault {
        let frames = events.into_iter().map(|(_, data)| Bytes::from(format!("data: {data}\n\n"))).collect();
        let pieces = stream::iter(faults::drip(frames, bytes, every_ms)).then(|(delay, piece)| async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok::<_, Infallible>(piece)
        });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(pieces))
            .unwrap();
    }
    let keep_alive = b.fault == Fault::KeepAlive;
    let first_sent = s.first_sent.clone();
    let stream = stream::iter(events).then(move |(delay, data)| {
        let (first_sent, key) = (first_sent.clone(), key.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            if data.contains("\"content\":\"w0") {
                first_sent.lock().unwrap().entry(key).or_insert_with(std::time::Instant::now);
            }
            let mut frame = String::new();
            if keep_alive {
                frame.push_str(": keep-alive\n\n");
            }
            frame.push_str(&format!("data: {data}\n\n"));
            Ok::<_, Infallible>(Bytes::from(frame))
        }
    });
    Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
}
