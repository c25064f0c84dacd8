//! A scripted streaming server (axum) with exact timings and faults, speaking the wire format of
//! llama.cpp, vLLM, SGLang or the OpenAI API (`dialect.rs`) and Anthropic's messages: the tests' server, the benchmarks' reference server, and `bench-scripted-server` for
//! anyone who wants to test their own pipeline against a server whose timings are known.
//!
//! Tokens are whitespace-separated words; the chat template costs `TEMPLATE_TOKENS` per message.
//! Slots remember the last prompt (word list) so `timings.cache_n` behaves like llama.cpp's
//! (`slots.rs`). Every request is logged (tests count them), and every chat request's timing
//! (body read, first content written, each chunk, nonce) goes to `trace.rs`. Served over plain
//! HTTP or TLS (a CA generated per server); faults in `faults.rs`, sockets in `net.rs`, the chat
//! endpoints in `chat.rs`, what a request may ask (and the 400 otherwise) in `request.rs`,
//! everything else in `routes.rs`.

mod chat;
pub mod dialect;
pub mod faults;
pub mod net;
mod request;
mod routes;
mod slots;
pub mod trace;

pub use chat::{output_text, token};
pub use dialect::Dialect;
pub use faults::{EchoKey, Fault};
pub use request::{MAX_OUTPUT_TOKENS, MAX_REQUEST_BYTES};
pub use slots::{PREFIX_BLOCK, Restored};
pub use trace::{Clock, RequestTiming, TraceLine};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::Semaphore;

pub const TEMPLATE_TOKENS: u64 = 7;

/// What the chat endpoint does. One behaviour per server; tests pick it.
#[derive(Clone, Debug)]
pub struct Behaviour {
    /// Delay before the first content token (prefill), per request.
    pub first_token_ms: u64,
    /// Delay between tokens. The default, 5 ms, is slow enough that a client thread stalled for
    /// 10 ms on a loaded machine finds at most three deltas queued: four or more merged into one
    /// arrival before a short hot TTFT is a lump bench rightly flags, and would fail tests that
    /// are about something else.
    pub token_ms: u64,
    /// Delay between tokens in microseconds; when set it replaces `token_ms` for streams, so the
    /// ingest benchmark can ask for more than 1000 tokens/s per stream.
    pub token_interval_us: Option<u64>,
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
    /// At most this many chat requests are served at once; the rest wait, first come first
    /// served, so their TTFT grows with the queue like a saturated server's. None: no limit.
    pub max_concurrent: Option<usize>,
    /// Preset actions (the fallback route) whose path contains the text are answered 503 once
    /// more than the number of them have arrived: an action that works in preflight and fails
    /// later.
    pub refuse_after: Option<(&'static str, usize)>,
    /// The server imitated on the wire: chunk shapes, usage, timings, metrics (`dialect.rs`).
    pub dialect: Dialect,
    /// vLLM's `--enable-prompt-tokens-details`, SGLang's `--enable-cache-report`: usage carries
    /// `prompt_tokens_details.cached_tokens`. Without it, those servers' only cache evidence is
    /// their metrics page. llama.cpp and the OpenAI API always report.
    pub cache_report: bool,
    /// A stream that fell behind its schedule (the machine stalled the server) sends its overdue
    /// tokens at once to get back on it, so the offered token rate holds: what the benchmarks'
    /// `bench-scripted-server` does. Off (the tests' default), each token keeps its interval after
    /// the one before, as a real server's decode does, so a loaded test machine's stall delays
    /// the stream instead of turning it into a burst that the quality gate rightly fails.
    pub catch_up: bool,
    /// llama-server's `--slot-save-path`: slot saves are written to files in this directory (the
    /// session's words, padded to `slot_file_bytes`, left to the OS to write back as a server
    /// leaves them), and a restore reads its file whole, first asking the kernel how much of it
    /// the page cache held (`Scripted::restores`). None: slots are saved in memory only.
    pub slot_save_path: Option<PathBuf>,
    /// The size of each slot file written under `slot_save_path`.
    pub slot_file_bytes: usize,
    /// A slot restore takes this long (ms) before it answers, as reading a session back does.
    pub slot_restore_ms: u64,
    /// The `/metrics` page shows the counters as they stood before the latest chat request, as a
    /// page scraped one interval late does: the deltas around a request are the previous one's.
    pub metrics_late: bool,
    /// The arguments the server says it was started with (`EchoKey::Shapes` says them back in
    /// `/props` and in its completions, as SGLang's server info lists its arguments, keys included).
    pub server_args: Vec<String>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            first_token_ms: 50,
            token_ms: 5,
            token_interval_us: None,
            role_chunk: true,
            tokens_per_chunk: 1,
            usage: true,
            fault: Fault::None,
            force_output_tokens: None,
            tokenizer: true,
            no_slot_save_path: false,
            diverge_after: None,
            max_concurrent: None,
            refuse_after: None,
            dialect: Dialect::default(),
            cache_report: true,
            catch_up: false,
            slot_save_path: None,
            slot_file_bytes: 1 << 20,
            slot_restore_ms: 0,
            metrics_late: false,
            server_args: Vec::new(),
        }
    }
}

impl Behaviour {
    /// The delay between two tokens of a stream.
    pub fn token_interval(&self) -> Duration {
        match self.token_interval_us {
            Some(us) => Duration::from_micros(us),
            None => Duration::from_millis(self.token_ms),
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
    /// The client's end of the connection (chat requests and slot actions).
    pub peer: Option<SocketAddr>,
    /// The connection's serial (chat requests and slot actions): the same number is the same
    /// connection, reused; a client's address can come back on a new one.
    pub connection: Option<u64>,
}

/// The scripted server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ScriptedError {
    #[error("cannot start the server's runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot make the TLS certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot configure TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("cannot write the timing log {path}: {source}")]
    Log { path: String, source: std::io::Error },
}

/// A mutex guard, also after a handler panicked while holding it: the scripted state stays
/// usable (a test then fails on its assertion, not on a poisoned lock).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// When the server handed each stream's first content chunk to the transport, keyed by the
/// prompt's nonce (the second word of the first message when it carries none).
pub type FirstSent = Arc<Mutex<HashMap<String, std::time::Instant>>>;

/// How and where to serve (the test constructors use the defaults: 127.0.0.1:0, two threads).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    pub tls: bool,
    /// Append every chat request's timing to this JSONL file (first line: the clock origin).
    pub timing_log: Option<PathBuf>,
    /// Keep the timings in memory for `Scripted::timings` (tests).
    pub keep_timings: bool,
    /// Keep every request (method, path, headers, body) for `Scripted::log` (tests).
    pub keep_requests: bool,
    /// Runtime worker threads (None: one per core).
    pub worker_threads: Option<usize>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            timing_log: None,
            keep_timings: true,
            keep_requests: true,
            worker_threads: Some(2),
        }
    }
}

#[derive(Clone)]
struct AppState {
    behaviour: Arc<Mutex<Behaviour>>,
    /// The serving slots of `Behaviour::max_concurrent` (None: unlimited).
    admission: Arc<Mutex<Option<Arc<Semaphore>>>>,
    log: Option<Arc<Mutex<Vec<Logged>>>>,
    slots: Arc<Mutex<slots::Slots>>,
    first_sent: FirstSent,
    kills: net::Kills,
    clock: Clock,
    sink: trace::Sink,
    /// Replies so far: each gets its own id.
    replies: Arc<std::sync::atomic::AtomicU64>,
}

impl AppState {
    /// Logs a request the server received (`Scripted::requests`), when the log is kept.
    fn record(&self, method: &str, path: &str, headers: &HeaderMap, body: &Value) {
        self.record_from(None, method, path, headers, body)
    }

    /// `record`, with the connection it came on.
    fn record_from(
        &self,
        peer: Option<net::Peer>,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        body: &Value,
    ) {
        let Some(log) = &self.log else { return };
        let headers = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        lock(log).push(Logged {
            method: method.into(),
            path: path.into(),
            headers,
            body: body.clone(),
            at: std::time::Instant::now(),
            peer: peer.map(|p| p.0),
            connection: peer.map(|p| p.1),
        });
    }
}

pub struct Scripted {
    pub url: String,
    /// The CA certificate (PEM) of a TLS server.
    pub ca_pem: Option<String>,
    pub first_sent: FirstSent,
    /// The origin of the timing log's nanoseconds.
    pub clock: Clock,
    state: AppState,
    // Last: dropped after `state`, whose sink sender must be gone before the writer is joined.
    serving: Serving,
}

/// The runtime and the timing log's writer thread: on drop the runtime goes first (dropping
/// every task, and with them the sink's senders), then the writer sees its channel close,
/// writes what is left, and is joined.
struct Serving {
    runtime: Option<tokio::runtime::Runtime>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        drop(self.runtime.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Scripted {
    /// A plain-HTTP server on 127.0.0.1 for a test.
    ///
    /// # Panics
    /// When it cannot start (no port, no threads): a test constructor; `try_start` returns the error.
    pub fn start(behaviour: Behaviour) -> Scripted {
        Scripted::try_start(behaviour, ServeOptions::default()).expect("scripted server starts")
    }

    /// The same server over https, with a certificate for 127.0.0.1 signed by a fresh test CA.
    ///
    /// # Panics
    /// As `start`.
    pub fn start_tls(behaviour: Behaviour) -> Scripted {
        let options = ServeOptions { tls: true, ..ServeOptions::default() };
        Scripted::try_start(behaviour, options).expect("scripted TLS server starts")
    }

    /// The same server over https, with a self-signed certificate for 127.0.0.1 only (`ca_pem`:
    /// the certificate itself) that says it is a CA, as `openssl req -x509` makes one.
    ///
    /// # Panics
    /// As `start`.
    pub fn start_tls_self_signed(behaviour: Behaviour) -> Scripted {
        let options = ServeOptions { tls: true, ..ServeOptions::default() };
        let ca = net::TestCa::self_signed().expect("a self-signed certificate");
        Scripted::start_with(behaviour, options, Some(ca)).expect("scripted TLS server starts")
    }

    pub fn try_start(behaviour: Behaviour, options: ServeOptions) -> Result<Scripted, ScriptedError> {
        let ca = if options.tls { Some(net::TestCa::generate()?) } else { None };
        Scripted::start_with(behaviour, options, ca)
    }

    fn start_with(
        behaviour: Behaviour,
        options: ServeOptions,
        ca: Option<net::TestCa>,
    ) -> Result<Scripted, ScriptedError> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = options.worker_threads {
            builder.worker_threads(n.max(1));
        }
        let runtime = builder.enable_all().build().map_err(ScriptedError::Runtime)?;
        let clock = Clock::now();
        let (sink, writer) = match &options.timing_log {
            Some(path) => {
                let (sink, writer) = trace::file_sink(path, &clock)?;
                (sink, Some(writer))
            }
            None if options.keep_timings => (trace::Sink::Memory(Arc::default()), None),
            None => (trace::Sink::None, None),
        };
        let admission = behaviour.max_concurrent.map(|n| Arc::new(Semaphore::new(n.max(1))));
        let state = AppState {
            behaviour: Arc::new(Mutex::new(behaviour)),
            admission: Arc::new(Mutex::new(admission)),
            log: options.keep_requests.then(Arc::default),
            slots: Arc::default(),
            first_sent: Arc::default(),
            kills: Arc::default(),
            clock,
            sink,
            replies: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/models", get(routes::models))
            .route("/props", get(routes::props))
            .route("/tokenize", post(routes::tokenize))
            .route("/metrics", get(routes::metrics))
            .route("/slots/{id}", post(routes::slot_action))
            .route("/v1/chat/completions", post(chat::chat))
            .route("/v1/completions", post(chat::completions))
            .route("/v1/messages", post(chat::messages))
            .fallback(routes::anything)
            .layer(axum::extract::DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(state.clone());
        let tcp = runtime
            .block_on(tokio::net::TcpListener::bind(options.addr))
            .map_err(|source| ScriptedError::Bind { addr: options.addr, source })?;
        let addr = tcp.local_addr().map_err(|source| ScriptedError::Bind { addr: options.addr, source })?;
        let listener = net::Listener::new(tcp, ca.as_ref(), state.kills.clone());
        runtime.spawn(async move {
            let service = app.into_make_service_with_connect_info::<net::Peer>();
            if let Err(e) = axum::serve(listener, service).await {
                eprintln!("scripted server stopped: {e}");
            }
        });
        let scheme = if ca.is_some() { "https" } else { "http" };
        Ok(Scripted {
            url: format!("{scheme}://{addr}"),
            ca_pem: ca.map(|c| c.ca_pem),
            first_sent: state.first_sent.clone(),
            clock,
            state,
            serving: Serving { runtime: Some(runtime), writer },
        })
    }

    /// Changes the behaviour for the requests that arrive from now on. A new `max_concurrent`
    /// starts a new queue; requests already admitted or waiting keep the old one.
    pub fn set(&self, behaviour: Behaviour) {
        let mut current = lock(&self.state.behaviour);
        if behaviour.max_concurrent != current.max_concurrent {
            *lock(&self.state.admission) =
                behaviour.max_concurrent.map(|n| Arc::new(Semaphore::new(n.max(1))));
        }
        *current = behaviour;
    }

    /// Every request received (empty when `ServeOptions::keep_requests` is off).
    pub fn log(&self) -> Vec<Logged> {
        self.state.log.as_ref().map(|l| lock(l).clone()).unwrap_or_default()
    }

    pub fn clear_log(&self) {
        if let Some(l) = &self.state.log {
            lock(l).clear();
        }
    }

    /// The timing of every chat request that has ended (kept in memory by the test constructors).
    pub fn timings(&self) -> Vec<RequestTiming> {
        match &self.state.sink {
            trace::Sink::Memory(all) => lock(all).clone(),
            _ => Vec::new(),
        }
    }

    /// Every slot restore from a file (`Behaviour::slot_save_path`), in order, with how much of
    /// its file the page cache held when the restore began.
    pub fn restores(&self) -> Vec<Restored> {
        lock(&self.state.slots).restores.clone()
    }

    /// Chat requests of measured size (max_tokens >= 20: not calibration, not warm-up) received.
    pub fn measured_requests(&self) -> usize {
        self.log()
            .iter()
            .filter(|l| l.path.starts_with("/v1/") && l.body["max_tokens"].as_u64().is_some_and(|m| m >= 20))
            .count()
    }

    /// Serves until SIGINT or SIGTERM, then stops and flushes the timing log.
    pub fn serve_until_signal(mut self) -> std::io::Result<()> {
        let runtime = self.serving.runtime.take();
        if let Some(rt) = &runtime {
            rt.block_on(async {
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::select! {
                    r = tokio::signal::ctrl_c() => r,
                    _ = term.recv() => Ok(()),
                }
            })?;
        }
        drop(runtime);
        Ok(())
    }
}
