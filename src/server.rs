//! Small JSON calls to a server's non-chat endpoints (/v1/models, /props, /tokenize, preset
//! actions). Chat requests go through `client`, which measures; these do not.

use std::time::Duration;

use serde_json::Value;

use crate::client::{Client, error_chain};

/// A failed call, with the status when the server answered.
#[derive(Debug, Clone, PartialEq)]
pub struct CallError {
    pub status: Option<u16>,
    pub message: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

const BODY_CHARS: usize = 500;

/// Starts the message of a call that could not connect, so callers that only see text (prompt
/// sizing, preset actions) can still tell "server down" from "server said no".
pub const UNREACHABLE: &str = "server unreachable";

/// Sends `method path` with an optional JSON body and returns the JSON answer (Null when the body
/// is empty, e.g. 204). Non-2xx is an error carrying the status and the start of the body.
pub async fn call(
    client: &Client,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<Value, CallError> {
    let url = format!("{}{path}", client.base());
    let mut builder = client.http().request(method.clone(), &url).timeout(timeout);
    builder = client.auth(builder);
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    if let Some(body) = body {
        builder = builder.json(body);
    }
    let spare = builder.try_clone();
    let mut sent = builder.send().await;
    // Same stale keep-alive case as in `Client::send`: one more try on a fresh connection.
    if let (Err(e), Some(again)) = (&sent, spare)
        && crate::client::stale_connection(e)
    {
        sent = again.send().await;
    }
    let response = sent.map_err(|e| {
        let prefix = if e.is_connect() { format!("{UNREACHABLE}: ") } else { String::new() };
        CallError { status: None, message: format!("{prefix}{method} {path}: {}", error_chain(&e)) }
    })?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| CallError {
        status: Some(status.as_u16()),
        message: format!("{method} {path}: reading body: {}", error_chain(&e)),
    })?;
    if !status.is_success() {
        let text: String = String::from_utf8_lossy(&bytes).chars().take(BODY_CHARS).collect();
        return Err(CallError {
            status: Some(status.as_u16()),
            message: format!("{method} {path}: HTTP {status}: {text}"),
        });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|e| CallError {
        status: Some(status.as_u16()),
        message: format!("{method} {path}: answer is not JSON: {e}"),
    })
}

pub async fn get_json(client: &Client, path: &str, timeout: Duration) -> Result<Value, CallError> {
    call(client, reqwest::Method::GET, path, None, &[], timeout).await
}

pub async fn post_json(
    client: &Client,
    path: &str,
    body: &Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    call(client, reqwest::Method::POST, path, Some(body), &[], timeout).await
}

/// The first model id of an OpenAI-style `/v1/models` answer.
pub fn first_model_id(models: &Value) -> Option<String> {
    models.get("data")?.as_array()?.first()?.get("id")?.as_str().map(str::to_string)
}
