//! How the HTTP client is built: TLS trust, size caps, connection reuse.

use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

use crate::SetupError;

/// Size caps on everything read from a server. Every read is bounded: a hostile or broken server
/// ends the request with a clear error naming the cap, never with memory exhaustion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// One SSE line. A line is one JSON chunk (a few hundred bytes; a logprobs chunk a few KiB).
    pub max_line_bytes: usize,
    /// One SSE event (its data lines joined). Servers send one data line per event.
    pub max_event_bytes: usize,
    /// A whole stream. The longest honest one (32K output tokens at ~300 bytes per chunk with
    /// llama.cpp's extra fields) is about 10 MB.
    pub max_stream_bytes: u64,
    /// A whole non-streaming response (32K tokens with top-20 logprobs is about 30 MB).
    pub max_body_bytes: usize,
    /// Answers of /v1/models, /props, /tokenize and preset actions (a /tokenize of a 1M-token
    /// prompt is about 8 MB of numbers).
    pub max_call_bytes: usize,
    /// How much of an error body is read before the connection is dropped: enough for any
    /// server's message, never the endless body of a broken proxy.
    pub max_error_read_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line_bytes: 1 << 20,
            max_event_bytes: 16 << 20,
            max_stream_bytes: 256 << 20,
            max_body_bytes: 64 << 20,
            max_call_bytes: 32 << 20,
            max_error_read_bytes: 64 << 10,
        }
    }
}

/// Idle keep-alive connections (and the direct path's spares, opened ahead of a request) are
/// dropped after this long. Servers close idle connections on
/// their own timer, and a request written onto a connection the server is closing at that moment
/// may have been read (so it must not be re-sent) yet gets no answer. Staying well under the
/// shortest common server timeout keeps that race away:
/// - llama.cpp's llama-server (cpp-httplib, vendor/cpp-httplib/httplib.h):
///   CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND = 5 (idle seconds, polled every 10 ms) and
///   CPPHTTPLIB_KEEPALIVE_MAX_COUNT = 100 requests per connection; the 100th response and every
///   response with status >= 400 carry `Connection: close` (hyper then never reuses the
///   connection); llama-server changes neither default.
/// - uvicorn (vLLM, SGLang) closes after 5 s idle, Node's http server after 5 s.
///
/// 2 s leaves 3 s for the response's last byte to travel and the next request to be written.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(2);

/// What the client is built with.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// A PEM file with private CA certificates, trusted in addition to the platform's roots.
    pub ca_cert: Option<PathBuf>,
    /// Accept any server certificate (`--insecure`). Never silent: the sweep warns and records it.
    pub insecure: bool,
    pub limits: Limits,
    /// See `KEEP_ALIVE_IDLE`.
    pub keep_alive_idle: Duration,
    /// The server ends a connection after every streamed response without announcing it
    /// (`Preset::stream_closes_connection`): streamed requests ask for `Connection: close`.
    pub close_after_stream: bool,
    /// Plain-HTTP chat requests go out on the direct path (direct.rs: the kernel's arrival stamps,
    /// less CPU per token) rather than through reqwest. On unless the environment says
    /// `TTFT_BENCH_TRANSPORT=reqwest`, which exists to compare the two (docs/client-lanes.md).
    pub direct: bool,
    /// Anthropic API: the server's `usage.input_tokens` is the whole prompt, not the part after
    /// its cache (`Preset::anthropic_input_tokens_total`).
    pub anthropic_input_tokens_total: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ca_cert: None,
            insecure: false,
            limits: Limits::default(),
            keep_alive_idle: KEEP_ALIVE_IDLE,
            close_after_stream: false,
            // Any other value is refused when a client is made (`check_transport_env`).
            direct: std::env::var(TRANSPORT_VAR).map_or(true, |v| v != "reqwest"),
            anthropic_input_tokens_total: false,
        }
    }
}

/// The environment variable that picks the transport of plain-HTTP chat requests, and the values
/// it accepts: `direct` (the default) and `reqwest` (to compare the two).
pub const TRANSPORT_VAR: &str = "TTFT_BENCH_TRANSPORT";

/// Refuses a `TTFT_BENCH_TRANSPORT` that names no transport: a typo would otherwise measure on
/// the default one while the user believes otherwise.
pub fn check_transport_env() -> Result<(), SetupError> {
    match std::env::var(TRANSPORT_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(()),
        Ok(v) if v.is_empty() || v == "direct" || v == "reqwest" => Ok(()),
        Ok(v) => Err(SetupError::Transport(format!(
            "{TRANSPORT_VAR}={v}: not a transport; accepted values: direct (the default), reqwest"
        ))),
        Err(std::env::VarError::NotUnicode(_)) => Err(SetupError::Transport(format!(
            "{TRANSPORT_VAR} is not UTF-8; accepted values: direct (the default), reqwest"
        ))),
    }
}

/// A client with the default options, for calls outside a measurement (a supervised server's
/// health check): building any reqwest client needs the TLS provider installed first.
pub fn default_http() -> Result<reqwest::Client, SetupError> {
    http_client(&ClientOptions::default())
}

/// The reqwest client. TLS is rustls with the ring provider (pure Rust and a little C and
/// assembly built by cc: no OpenSSL, the binary stays self-contained), verifying against the
/// platform's roots through rustls-platform-verifier, which on Linux reads the system store or
/// `SSL_CERT_FILE` / `SSL_CERT_DIR` where set; `ca_cert` adds to those roots.
pub(super) fn http_client(options: &ClientOptions) -> Result<reqwest::Client, SetupError> {
    static PROVIDER: Once = Once::new();
    // Fails only when a provider is already installed, which is as good.
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut builder = reqwest::Client::builder()
        // Keep-alive pool (a measurement must not pay a connect it need not), no global timeout
        // (ours is per request).
        .pool_idle_timeout(options.keep_alive_idle)
        .tcp_nodelay(true)
        // Never followed: a redirect is reported with where it leads (failure.rs).
        .redirect(reqwest::redirect::Policy::none());
    if let Some(path) = &options.ca_cert {
        // A regular file of at most a CA bundle's size: /dev/zero once read until the OOM killer
        // ended bench, and a FIFO waited forever.
        let pem = ttft_model::input_file::read_bytes(path, ttft_model::input_file::Limit::CA_BUNDLE)
            .map_err(|e| SetupError::ca_cert(path, e))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| SetupError::ca_cert(path, format!("not a PEM certificate file: {e}")))?;
        if certs.is_empty() {
            return Err(SetupError::ca_cert(path, "holds no PEM certificate"));
        }
        if options.insecure {
            builder = builder.tls_certs_merge(certs);
        } else {
            // Roots as reqwest adds them, and the same certificates pinned (trust.rs).
            use rustls::pki_types::pem::PemObject;
            let ders = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| SetupError::ca_cert(path, format!("not a PEM certificate file: {e}")))?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = super::trust::config(ders, provider).map_err(|e| SetupError::ca_cert(path, e))?;
            builder = builder.tls_backend_preconfigured(config);
        }
    }
    if options.insecure {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    builder.build().map_err(|e| {
        let why = super::error_chain(&e);
        match &options.ca_cert {
            Some(path) => SetupError::ca_cert(path, why),
            None => SetupError::Start(format!("cannot build the HTTP client: {why}")),
        }
    })
}
