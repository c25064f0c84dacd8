//! Small JSON calls to a server's non-chat endpoints (/v1/models, /props, /tokenize, preset
//! actions). Chat requests go through `client`, which measures; these do not.
//!
//! One timeout policy: every call honours the client's request timeout (`--request-timeout`);
//! only preflight (is the server there at all?) uses the shorter `Client::preflight_timeout`.
//! Every answer is read up to `Limits::max_call_bytes` (error bodies up to
//! `max_error_read_bytes`), and every message passes through `secrets::redact`.

use std::time::Duration;

use serde_json::Value;

use ttft_client::{Client, quote};
use ttft_model::record::ErrorInfo;

/// Starts the message of a call that could not connect, so callers that only see text (prompt
/// sizing, preset actions) can still tell "server down" from "server said no". Prefer
/// `CallError::is_unreachable`.
pub const UNREACHABLE: &str = "server unreachable";

/// What to do about a certificate bench does not trust, in the flags' words (the transport, which
/// says what failed, names no flag).
pub(crate) const TRUST_ADVICE: &str = "pass --ca-cert FILE with its PEM certificate, or set SSL_CERT_FILE";
/// What to do about a redirect bench did not follow.
pub(crate) const REDIRECT_ADVICE: &str = "point --server at the address it leads to";

/// A record's error with what to do about it where one of bench's flags helps: a redirect (a 3xx
/// status) says to point `--server` where it leads.
pub(crate) fn advised(mut error: ErrorInfo) -> ErrorInfo {
    if error.http_status.is_some_and(|s| (300..400).contains(&s)) {
        error.message = format!("{}; {REDIRECT_ADVICE}", error.message);
    }
    error
}

/// A failed call. `call` is "METHOD /path"; every text is already redacted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The connection could not be opened (refused, no route, DNS).
    #[error("{UNREACHABLE}: {call}: {detail}")]
    Unreachable { call: String, detail: String },
    /// The TLS handshake failed (unknown issuer, expired or mismatched certificate).
    #[error("{call}: {detail}")]
    Tls { call: String, detail: String },
    /// No complete answer within the timeout.
    #[error("{call}: no complete answer within {}", humantime::format_duration(*timeout))]
    Timeout { call: String, timeout: Duration },
    /// The server answered with a non-2xx status; `body` is a bounded prefix of its body.
    #[error("{call}: HTTP {code}: {body}")]
    Status { call: String, code: u16, body: String },
    /// The connection broke while sending or reading.
    #[error("{call}: {detail}")]
    Transport { call: String, detail: String },
    /// The answer is larger than `cap` bytes.
    #[error("{call}: the answer exceeds the {} cap", ttft_client::sse::size(*cap))]
    TooLarge { call: String, cap: usize },
    /// A 2xx answer that is not JSON.
    #[error("{call}: answer is not JSON: {detail}")]
    NotJson { call: String, code: u16, detail: String },
}

impl CallError {
    pub fn is_unreachable(&self) -> bool {
        matches!(self, CallError::Unreachable { .. })
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, CallError::Timeout { .. })
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            CallError::Status { code, .. } | CallError::NotJson { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn redact(text: impl AsRef<str>) -> String {
    ttft_model::secrets::redact(text.as_ref())
}

/// Sends `method path` with an optional JSON body within the client's request timeout and returns
/// the JSON answer (Null when the body is empty, e.g. 204). Non-2xx is `CallError::Status`.
/// Sent again only when the connection could not be opened (the server never saw it), so a
/// non-idempotent preset action is never repeated.
pub(crate) async fn call(
    client: &Client,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(String, String)],
) -> Result<Value, CallError> {
    call_within(client, client.timeout(), method, path, body, headers).await
}

/// `call` with its own timeout (preflight).
pub(crate) async fn call_within(
    client: &Client,
    timeout: Duration,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(String, String)],
) -> Result<Value, CallError> {
    let call = redact(format!("{method} {path}"));
    let url = format!("{}{path}", client.base());
    // Every call on a connection of its own: a kept-alive one may hold a stray second answer to an
    // earlier call, which this call would read as its own (a warm reload inside the timed window
    // read a stray copy of the evict's answer: reload 22 ms for a 60 ms restore). So no call's
    // connection is kept for the next.
    let mut builder =
        client.identify(client.http().request(method, &url)).header(reqwest::header::CONNECTION, "close");
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    if let Some(body) = body {
        builder = builder.json(body);
    }
    let request = builder.build().map_err(|e| CallError::Transport {
        call: call.clone(),
        detail: redact(ttft_client::error_chain(&e)),
    })?;
    let sent = ttft_client::send_at_most_twice(client.http(), request, timeout).await;
    let deadline = sent.window.deadline;
    let response = match sent.result {
        Err(()) => return Err(CallError::Timeout { call, timeout }),
        Ok(Err(e)) if e.is_connect() => {
            let detail = redact(ttft_client::connect_failure(&e));
            return Err(match ttft_client::tls_problem(&e) {
                Some(_) if ttft_client::answered_in_plain_http(&e) => CallError::Tls { call, detail },
                Some(_) => CallError::Tls { call, detail: format!("{detail}; {TRUST_ADVICE}") },
                None => CallError::Unreachable { call, detail },
            });
        }
        Ok(Err(e)) => {
            return Err(CallError::Transport { call, detail: redact(ttft_client::send_failure(&e)) });
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    let limits = client.limits();
    if !status.is_success() {
        let location = ttft_client::location_of(&response);
        let prefix = ttft_client::body::read_prefix(response, limits.max_error_read_bytes, deadline).await;
        let body = match ttft_client::not_followed(status.as_u16(), location.as_deref()) {
            Some(redirect) => format!("{redirect}; {REDIRECT_ADVICE}"),
            None => quote(&prefix),
        };
        return Err(CallError::Status { call, code: status.as_u16(), body: redact(body) });
    }
    let bytes = match ttft_client::body::read_capped(response, limits.max_call_bytes, deadline).await {
        Ok(b) => b,
        Err(ttft_client::body::BodyError::Timeout) => return Err(CallError::Timeout { call, timeout }),
        Err(ttft_client::body::BodyError::TooLarge { cap }) => return Err(CallError::TooLarge { call, cap }),
        Err(ttft_client::body::BodyError::Broken(detail)) => {
            return Err(CallError::Transport { call, detail: redact(detail) });
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|e| CallError::NotJson {
        call,
        code: status.as_u16(),
        detail: redact(format!("{e}: {}", quote(&bytes))),
    })
}

pub async fn get_json(client: &Client, path: &str) -> Result<Value, CallError> {
    call(client, reqwest::Method::GET, path, None, &[]).await
}

/// A GET of preflight: within `Client::preflight_timeout`.
pub(crate) async fn preflight_get(client: &Client, path: &str) -> Result<Value, CallError> {
    call_within(client, client.preflight_timeout(), reqwest::Method::GET, path, None, &[]).await
}

pub async fn post_json(client: &Client, path: &str, body: &Value) -> Result<Value, CallError> {
    call(client, reqwest::Method::POST, path, Some(body), &[]).await
}

/// The first model id of an OpenAI-style `/v1/models` answer.
pub(crate) fn first_model_id(models: &Value) -> Option<String> {
    models.get("data")?.as_array()?.first()?.get("id")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::ErrorKind;

    #[test]
    fn a_redirect_in_a_record_says_to_point_the_server_flag_where_it_leads_and_nothing_else_is_advised() {
        let status = |code: u16| {
            let mut e = ErrorInfo::new(ErrorKind::HttpStatus, format!("HTTP {code}: said"));
            e.http_status = Some(code);
            e
        };
        for code in [301, 302, 307, 308] {
            let advised = advised(status(code)).message;
            assert!(advised.ends_with("; point --server at the address it leads to"), "{advised}");
        }
        for code in [400, 404, 500, 503] {
            assert_eq!(advised(status(code)).message, format!("HTTP {code}: said"));
        }
        let connect = ErrorInfo::new(ErrorKind::Connect, "cannot connect to h:1: refused");
        assert_eq!(advised(connect.clone()), connect);
    }
}
