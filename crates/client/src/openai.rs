//! OpenAI chat completions: request body and response parsing (streamed chunks and whole bodies).
//!
//! Shapes handled on purpose: a role-only first chunk (`content: null`), a usage-only final chunk
//! with `choices: []`, multi-token chunks, `reasoning_content`/`reasoning` deltas (reasoning models
//! stream these before content), llama.cpp's `timings`, and a 200 stream carrying `{"error": ...}`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ChatRequest, EventOutcome, Exchange, Usage, count, error_message};
use ttft_model::record::ErrorKind;

pub(super) fn body(req: &ChatRequest) -> Value {
    let mut body = json!({
        "model": req.model,
        "messages": req.messages,
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "stream": req.stream,
    });
    if req.stream {
        // Without this most servers send no usage in streams, and token counts would be guessed
        // (docs/design.md, "Pitfalls").
        body["stream_options"] = json!({"include_usage": true});
    }
    if let Some(obj) = body.as_object_mut() {
        for (k, v) in &req.extra_body {
            obj.insert(k.clone(), v.clone());
        }
    }
    body
}

/// The same request for `/v1/completions`: the conversation as one prompt string (each message's
/// text, a blank line between), and `choices[].text` in the answer (read by `on_event` and
/// `on_whole` beside chat's `delta`/`message`).
pub(super) fn completions_body(req: &ChatRequest) -> Value {
    let prompt = req.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n\n");
    let mut body = body(req);
    if let Some(obj) = body.as_object_mut() {
        obj.remove("messages");
        obj.insert("prompt".into(), Value::String(prompt));
    }
    body
}

pub(super) fn on_event(data: &str, at_ms: f64, ex: &mut Exchange) -> EventOutcome {
    let data = data.trim();
    if data == "[DONE]" {
        return EventOutcome::Done;
    }
    if data.is_empty() {
        return EventOutcome::Continue;
    }
    if let Some(chunk) = token_chunk(data) {
        for choice in chunk.choices {
            if let Some(text) = choice.text {
                ex.on_text(at_ms, &text, false);
            }
            if let Some(delta) = choice.delta {
                for text in [delta.reasoning_content, delta.reasoning].into_iter().flatten() {
                    ex.on_text(at_ms, &text, true);
                }
                if let Some(text) = delta.content {
                    ex.on_text(at_ms, &text, false);
                }
            }
            if let Some(reason) = choice.finish_reason {
                ex.finish_reason = Some(reason.into_owned());
            }
        }
        return EventOutcome::Continue;
    }
    on_event_as_value(data, at_ms, ex)
}

/// Any event, read into a `Value`: the path for everything `token_chunk` does not take.
fn on_event_as_value(data: &str, at_ms: f64, ex: &mut Exchange) -> EventOutcome {
    let chunk: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => {
            ex.fail(ErrorKind::Protocol, format!("stream event is not JSON ({e}): {}", clip(data)));
            return EventOutcome::Done;
        }
    };
    if let Some(error) = chunk.get("error") {
        ex.fail(ErrorKind::StreamError, format!("error inside a 200 stream: {}", error_message(error)));
        return EventOutcome::Done;
    }
    // `choices` may be empty (usage-only chunk) or missing: never index blindly (docs/design.md, "Pitfalls").
    if let Some(choices) = chunk.get("choices").and_then(Value::as_array) {
        for choice in choices {
            if let Some(text) = choice.get("text").and_then(Value::as_str) {
                ex.on_text(at_ms, text, false);
            }
            if let Some(delta) = choice.get("delta") {
                for key in ["reasoning_content", "reasoning"] {
                    if let Some(text) = delta.get(key).and_then(Value::as_str) {
                        ex.on_text(at_ms, text, true);
                    }
                }
                if let Some(text) = delta.get("content").and_then(Value::as_str) {
                    ex.on_text(at_ms, text, false);
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                ex.finish_reason = Some(reason.to_string());
            }
        }
    }
    take_usage(&chunk, ex);
    EventOutcome::Continue
}

/// An ordinary token chunk, read in place: its texts borrowed from the event (copied only when
/// they hold escapes), every other field skipped. Reading each chunk into a `Value` allocated a
/// map and a string per field: JSON was a third of the lanes' time at 400k tokens/s, a fifth
/// since (perf; docs/client-lanes.md). Anything else (an error, usage, llama.cpp's timings, a
/// field of an unexpected type, a duplicated key) gives None and is read as a `Value`, with the
/// same result; the keys are looked for as text, so a token reading `"usage"` only costs the
/// slower path.
fn token_chunk(data: &str) -> Option<TokenChunk<'_>> {
    if ["\"error\"", "\"usage\"", "\"timings\""].iter().any(|key| data.contains(key)) {
        return None;
    }
    serde_json::from_str(data).ok()
}

#[derive(Deserialize)]
struct TokenChunk<'a> {
    /// Exactly one choice, as a benchmark asks for: no allocation per token. None or several
    /// fail here and go to the `Value` path, which reads them all.
    #[serde(borrow, default)]
    choices: [TokenChoice<'a>; 1],
}

#[derive(Default, Deserialize)]
struct TokenChoice<'a> {
    /// `/v1/completions` chunks carry their text here.
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<TokenDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Default, Deserialize)]
struct TokenDelta<'a> {
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

pub(super) fn on_whole(value: &Value, ex: &mut Exchange) {
    if let Some(error) = value.get("error") {
        ex.fail(ErrorKind::StreamError, format!("error in a 200 response: {}", error_message(error)));
        return;
    }
    let Some(choice) = value.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        ex.fail(ErrorKind::Protocol, format!("response has no choices: {}", clip(&value.to_string())));
        return;
    };
    if let Some(message) = choice.get("message") {
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = message.get(key).and_then(Value::as_str) {
                ex.reasoning.push_str(text);
            }
        }
        if let Some(text) = message.get("content").and_then(Value::as_str) {
            ex.content.push_str(text);
        }
    }
    if let Some(text) = choice.get("text").and_then(Value::as_str) {
        ex.content.push_str(text);
    }
    ex.finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
    take_usage(value, ex);
}

fn take_usage(value: &Value, ex: &mut Exchange) {
    if let Some(usage) = value.get("usage").filter(|u| u.is_object()) {
        ex.usage = Usage {
            input_tokens: count(usage.get("prompt_tokens")),
            output_tokens: count(usage.get("completion_tokens")),
            cached_tokens: count(usage.pointer("/prompt_tokens_details/cached_tokens")),
            anthropic_input_tokens: None,
        };
    }
    if let Some(timings) = value.get("timings").filter(|t| t.is_object()) {
        ex.server_timings = Some(timings.clone());
    }
}

fn clip(text: &str) -> String {
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(events: &[(&str, f64)]) -> (Exchange, EventOutcome) {
        let mut ex = Exchange::default();
        let mut last = EventOutcome::Continue;
        for (data, at) in events {
            last = on_event(data, *at, &mut ex);
            if last == EventOutcome::Done {
                break;
            }
        }
        (ex, last)
    }

    #[test]
    fn role_only_first_chunk_is_not_the_first_token() {
        let (ex, _) = feed(&[
            (r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#, 5.0),
            (r#"{"choices":[{"index":0,"delta":{"content":""}}]}"#, 6.0),
            (r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#, 40.0),
            ("[DONE]", 41.0),
        ]);
        assert_eq!(ex.ttft_ms, Some(40.0));
        assert_eq!(ex.delta_count, 1);
    }

    #[test]
    fn reasoning_counts_as_first_token() {
        let (ex, _) = feed(&[
            (r#"{"choices":[{"delta":{"reasoning_content":"Let me think"}}]}"#, 12.0),
            (r#"{"choices":[{"delta":{"content":"Answer"}}]}"#, 30.0),
        ]);
        assert_eq!(ex.ttft_ms, Some(12.0));
        assert_eq!(ex.full_output(), "Let me thinkAnswer");
        assert_eq!(ex.token_offsets_ms, vec![12.0, 30.0]);
    }

    #[test]
    fn usage_only_final_chunk_with_empty_choices() {
        let (ex, outcome) = feed(&[
            (r#"{"choices":[{"delta":{"content":"a b"},"finish_reason":null}]}"#, 10.0),
            (r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#, 11.0),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":1024,"completion_tokens":64,"prompt_tokens_details":{"cached_tokens":3}},"timings":{"cache_n":3,"prompt_n":1021}}"#,
                12.0,
            ),
            ("[DONE]", 12.5),
        ]);
        assert_eq!(outcome, EventOutcome::Done);
        assert_eq!(ex.usage.input_tokens, Some(1024));
        assert_eq!(ex.usage.output_tokens, Some(64));
        assert_eq!(ex.usage.cached_tokens, Some(3));
        assert_eq!(ex.finish_reason.as_deref(), Some("length"));
        assert_eq!(ex.server_timings.unwrap()["prompt_n"], 1021);
    }

    #[test]
    fn error_inside_a_200_stream_is_an_error() {
        let (ex, outcome) = feed(&[
            (r#"{"choices":[{"delta":{"content":"x"}}]}"#, 10.0),
            (r#"{"error":{"message":"context overflow","type":"server_error"}}"#, 11.0),
        ]);
        assert_eq!(outcome, EventOutcome::Done);
        let err = ex.error.unwrap();
        assert_eq!(err.kind, ErrorKind::StreamError);
        assert!(err.message.contains("context overflow"));
    }

    /// Token chunks skip the `Value`; every other shape falls back to it and reads the same.
    #[test]
    fn token_chunks_are_read_in_place_with_the_same_result() {
        let fast = [
            r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hm","content":"a\"b\u00e9"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":null,"finish_reason":"length"}]}"#,
            r#"{"object":"chunk"}"#,
        ];
        let slow = [
            r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#,
            r#"{"choices":[{"delta":{"content":7}}]}"#,
            r#"{"choices":null}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"delta":{"content":"usage"}}]}"#,
            // Two choices: a benchmark asks for one; the Value path reads every one.
            r#"{"choices":[{"delta":{"reasoning_content":"hm","content":"a\"b\u00e9"}},{"delta":{"content":"c"},"finish_reason":"stop"}]}"#,
        ];
        for data in fast {
            assert!(token_chunk(data).is_some(), "read in place: {data}");
        }
        for data in slow {
            assert!(token_chunk(data).is_none(), "read as a Value: {data}");
        }
        for data in fast.iter().chain(&slow) {
            let (mut quick, mut reference) = (Exchange::default(), Exchange::default());
            on_event(data, 3.0, &mut quick);
            on_event_as_value(data, 3.0, &mut reference);
            super::super::stream::read_alike(&quick, &reference, data);
            assert_eq!(
                (quick.usage.output_tokens, quick.error.is_some()),
                (reference.usage.output_tokens, false)
            );
        }
        let mut ex = Exchange::default();
        on_event(slow[5], 3.0, &mut ex);
        assert_eq!((ex.reasoning.as_str(), ex.content.as_str()), ("hm", "a\"b\u{e9}c"));
        assert_eq!(ex.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn garbage_is_a_protocol_error_not_a_panic() {
        let (ex, _) = feed(&[("{not json", 1.0)]);
        assert_eq!(ex.error.unwrap().kind, ErrorKind::Protocol);
    }

    #[test]
    fn whole_response_parses_usage_and_timings() {
        let value: Value = serde_json::from_str(
            r#"{"choices":[{"message":{"role":"assistant","content":"hello"},"finish_reason":"length"}],
                "usage":{"prompt_tokens":10,"completion_tokens":2},"timings":{"prompt_n":10}}"#,
        )
        .unwrap();
        let mut ex = Exchange::default();
        on_whole(&value, &mut ex);
        assert_eq!(ex.content, "hello");
        assert_eq!(ex.ttft_ms, None, "non-streaming has no TTFT");
        assert_eq!(ex.usage.output_tokens, Some(2));
        assert_eq!(ex.usage.cached_tokens, None);
        assert!(ex.error.is_none());
    }

    #[test]
    fn stream_body_asks_for_usage() {
        let req = ChatRequest { model: "m".into(), max_tokens: 8, stream: true, ..Default::default() };
        let b = body(&req);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["temperature"], 0);
        assert_eq!(b["max_tokens"], 8);
    }
}
