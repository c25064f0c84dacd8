//! What a request may ask of the reference server, and the 400 it gets otherwise.
//!
//! `bench-scripted-server` is a binary users run in front of their own clients, so one request
//! must not be able to take it down: a reply is planned whole before it is sent (one event a
//! token), so an output budget of 3e8 tokens would grow the process by gigabytes until the
//! allocator aborts. What a request may ask is therefore capped (`MAX_OUTPUT_TOKENS`, one choice,
//! a body of at most `MAX_REQUEST_BYTES`), and a body that is not a JSON object, or whose known
//! fields have the wrong type, is refused with 400 as the servers imitated refuse it, in the
//! error shape of the dialect (`refusal`), never served as if it had asked for nothing.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::dialect::Dialect;

/// The most output tokens one request may ask for: the context of a long-context model (the
/// `max_model_len` the dialects list), far above anything a benchmark asks (bench's tests ask
/// for at most a few hundred).
pub const MAX_OUTPUT_TOKENS: u64 = 131_072;

/// The largest request body read: axum's default limit, named. A prompt of plain words this size
/// is about 350,000 tokens; a larger body is answered 413.
pub const MAX_REQUEST_BYTES: usize = 2 << 20;

/// Which API a request speaks, for the fields it must have and the error shape it gets back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Api {
    Chat,
    Completions,
    /// Anthropic's `/v1/messages`.
    Messages,
    /// `/tokenize` and the slot actions: a JSON object, or no body at all.
    Other,
}

/// Why a request was refused: the field at fault (None: the body as a whole) and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Refused {
    pub param: Option<&'static str>,
    pub message: String,
}

impl Refused {
    fn new(param: Option<&'static str>, message: impl Into<String>) -> Refused {
        Refused { param, message: message.into() }
    }
}

/// The body of a request, checked: a JSON object whose known fields have the types the APIs
/// give them and whose output budget fits `MAX_OUTPUT_TOKENS`.
pub(super) fn parse(body: &[u8], api: Api) -> Result<Value, Refused> {
    if api == Api::Other && body.trim_ascii().is_empty() {
        return Ok(Value::Null);
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Refused::new(None, format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(Refused::new(None, "the request body must be a JSON object"));
    }
    if api == Api::Other {
        return Ok(value);
    }
    let present = |key: &str| value.get(key).filter(|v| !v.is_null());
    for key in ["max_tokens", "max_completion_tokens"] {
        let Some(v) = present(key) else { continue };
        let param = if key == "max_tokens" { "max_tokens" } else { "max_completion_tokens" };
        let Some(n) = v.as_u64() else {
            return Err(Refused::new(
                Some(param),
                format!("'{key}' must be a non-negative integer, not {v}"),
            ));
        };
        if n > MAX_OUTPUT_TOKENS {
            return Err(Refused::new(
                Some(param),
                format!(
                    "'{key}' is {n}, more than this server generates for one request \
                     (at most {MAX_OUTPUT_TOKENS})"
                ),
            ));
        }
    }
    if let Some(v) = present("stream").filter(|v| !v.is_boolean()) {
        return Err(Refused::new(Some("stream"), format!("'stream' must be a boolean, not {v}")));
    }
    if let Some(v) = present("n").filter(|v| v.as_u64() != Some(1)) {
        return Err(Refused::new(Some("n"), format!("only one completion choice is served ('n' is {v})")));
    }
    match api {
        Api::Chat | Api::Messages => match present("messages") {
            Some(Value::Array(_)) => {}
            Some(v) => {
                return Err(Refused::new(Some("messages"), format!("'messages' must be an array, not {v}")));
            }
            None => return Err(Refused::new(Some("messages"), "'messages' is required")),
        },
        Api::Completions => match present("prompt") {
            Some(Value::String(_) | Value::Array(_)) => {}
            Some(v) => {
                return Err(Refused::new(
                    Some("prompt"),
                    format!("'prompt' must be a string or an array, not {v}"),
                ));
            }
            None => return Err(Refused::new(Some("prompt"), "'prompt' is required")),
        },
        Api::Other => {}
    }
    Ok(value)
}

/// The output budget a checked request asks for (`max_tokens`, or `max_completion_tokens` as
/// AIPerf and GuideLLM send it); 16 when it names none.
pub(super) fn output_tokens(body: &Value) -> u32 {
    let asked = body["max_tokens"].as_u64().or_else(|| body["max_completion_tokens"].as_u64());
    // `parse` let nothing above MAX_OUTPUT_TOKENS through; the min keeps a body that did not go
    // through it from wrapping.
    asked.unwrap_or(16).min(MAX_OUTPUT_TOKENS) as u32
}

/// The 400 a refused request gets, shaped as the server imitated writes its errors (Anthropic's
/// own shape on `/v1/messages`).
pub(super) fn refusal(dialect: Dialect, api: Api, why: &Refused) -> Response {
    let body = if api == Api::Messages {
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": why.message}})
    } else {
        match dialect {
            // llama.cpp's format_error_response.
            Dialect::LlamaCpp | Dialect::Bare => {
                json!({"error": {"code": 400, "message": why.message, "type": "invalid_request_error"}})
            }
            Dialect::Vllm => json!({"error": {"message": why.message, "type": "BadRequestError",
                "param": why.param, "code": 400}}),
            Dialect::Sglang => json!({"object": "error", "message": why.message, "type": "BadRequestError",
                "param": why.param, "code": 400}),
            Dialect::Openai => json!({"error": {"message": why.message, "type": "invalid_request_error",
                "param": why.param, "code": null}}),
        }
    };
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_request_may_ask_is_checked_field_by_field() {
        let ok = |body: &str, api| parse(body.as_bytes(), api).map(|_| ());
        let refused = |body: &str, api| parse(body.as_bytes(), api).unwrap_err().param;
        assert_eq!(
            ok(r#"{"messages": [], "max_tokens": 131072, "stream": true, "n": 1}"#, Api::Chat),
            Ok(())
        );
        assert_eq!(ok(r#"{"messages": [], "max_tokens": null, "stream": null}"#, Api::Chat), Ok(()));
        assert_eq!(ok(r#"{"prompt": "a b", "max_completion_tokens": 8}"#, Api::Completions), Ok(()));
        assert_eq!(ok("", Api::Other), Ok(()));
        assert_eq!(refused(r#"{"messages": [], "max_tokens": 131073}"#, Api::Chat), Some("max_tokens"));
        assert_eq!(
            refused(r#"{"messages": [], "max_tokens": 300000000}"#, Api::Messages),
            Some("max_tokens")
        );
        assert_eq!(
            refused(r#"{"messages": [], "max_completion_tokens": -1}"#, Api::Chat),
            Some("max_completion_tokens")
        );
        assert_eq!(refused(r#"{"messages": [], "max_tokens": "8"}"#, Api::Chat), Some("max_tokens"));
        assert_eq!(refused(r#"{"messages": [], "max_tokens": 3e8}"#, Api::Chat), Some("max_tokens"));
        assert_eq!(refused(r#"{"messages": [], "stream": "yes"}"#, Api::Chat), Some("stream"));
        assert_eq!(refused(r#"{"messages": [], "n": 2}"#, Api::Chat), Some("n"));
        assert_eq!(refused(r#"{"messages": "hi"}"#, Api::Chat), Some("messages"));
        assert_eq!(refused(r#"{"max_tokens": 8}"#, Api::Messages), Some("messages"));
        assert_eq!(refused(r#"{"prompt": 7}"#, Api::Completions), Some("prompt"));
        for bad in ["", "{", "[1]", "null", "{\"messages\": []} x"] {
            assert_eq!(refused(bad, Api::Chat), None, "{bad:?}");
        }
        assert_eq!(refused("{oops", Api::Other), None);
    }
}
