//! Anthropic messages: request body and response parsing.
//!
//! Token accounting: Anthropic's `input_tokens` excludes prompt tokens read from or written to the
//! cache, so our `input_tokens` (all prompt tokens) is the sum of the three and `cached_tokens` is
//! `cache_read_input_tokens`. Output tokens arrive in `message_delta.usage`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ChatRequest, EventOutcome, Exchange, count, error_message};
use ttft_model::record::ErrorKind;

pub(super) fn body(req: &ChatRequest) -> Value {
    // A system message is a top-level field in this dialect, not a turn.
    let system: Vec<&str> =
        req.messages.iter().filter(|m| m.role == "system").map(|m| m.content.as_str()).collect();
    let turns: Vec<_> = req.messages.iter().filter(|m| m.role != "system").collect();
    let mut body = json!({
        "model": req.model,
        "messages": turns,
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "stream": req.stream,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n"));
    }
    if let Some(obj) = body.as_object_mut() {
        for (k, v) in &req.extra_body {
            obj.insert(k.clone(), v.clone());
        }
    }
    body
}

pub(super) fn on_event(event: &str, data: &str, at_ms: f64, ex: &mut Exchange) -> EventOutcome {
    if let Some(delta) = text_delta(event, data) {
        for (text, reasoning) in [(delta.text, false), (delta.thinking, true)] {
            if let Some(text) = text {
                ex.on_text(at_ms, &text, reasoning);
            }
        }
        return EventOutcome::Continue;
    }
    on_event_as_value(event, data, at_ms, ex)
}

/// A `content_block_delta`, the event every token comes in, read in place: its texts borrowed
/// from the event (copied only when they hold escapes), every other field skipped, as the OpenAI
/// token chunks are (openai.rs). Anything else, or anything unexpected in one (a field of another
/// type, a duplicated key, an `error` anywhere), gives None and is read as a `Value`, with the
/// same result.
fn text_delta<'a>(event: &str, data: &'a str) -> Option<DeltaTexts<'a>> {
    if data.contains("\"error\"") {
        return None;
    }
    let parsed: DeltaEvent<'a> = serde_json::from_str(data).ok()?;
    // Servers put the type in the SSE `event:` line, the JSON `type`, or both; the JSON wins.
    (parsed.kind.as_deref().unwrap_or(event) == "content_block_delta").then_some(parsed.delta?)
}

#[derive(Deserialize)]
struct DeltaEvent<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<DeltaTexts<'a>>,
}

#[derive(Deserialize)]
struct DeltaTexts<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
}

/// Any event, read into a `Value`: the path for everything `text_delta` does not take.
fn on_event_as_value(event: &str, data: &str, at_ms: f64, ex: &mut Exchange) -> EventOutcome {
    let value: Value = match serde_json::from_str(data.trim()) {
        Ok(v) => v,
        Err(e) => {
            ex.fail(ErrorKind::Protocol, format!("{event} event is not JSON ({e})"));
            return EventOutcome::Done;
        }
    };
    // Servers put the type in the SSE `event:` line, the JSON `type`, or both.
    let kind = value.get("type").and_then(Value::as_str).unwrap_or(event);
    match kind {
        "message_start" => {
            if let Some(usage) = value.pointer("/message/usage") {
                take_input_usage(usage, ex);
            }
        }
        "content_block_delta" => {
            let delta = value.get("delta");
            if let Some(text) = delta.and_then(|d| d.get("text")).and_then(Value::as_str) {
                ex.on_text(at_ms, text, false);
            }
            if let Some(text) = delta.and_then(|d| d.get("thinking")).and_then(Value::as_str) {
                ex.on_text(at_ms, text, true);
            }
        }
        "message_delta" => {
            if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                ex.finish_reason = Some(reason.to_string());
            }
            if let Some(out) = count(value.pointer("/usage/output_tokens")) {
                ex.usage.output_tokens = Some(out);
            }
        }
        "message_stop" => return EventOutcome::Done,
        "error" => {
            let error = value.get("error").unwrap_or(&value);
            ex.fail(ErrorKind::StreamError, format!("error inside a 200 stream: {}", error_message(error)));
            return EventOutcome::Done;
        }
        _ => {} // ping, content_block_start/stop
    }
    EventOutcome::Continue
}

pub(super) fn on_whole(value: &Value, ex: &mut Exchange) {
    if value.get("type").and_then(Value::as_str) == Some("error") || value.get("error").is_some() {
        let error = value.get("error").unwrap_or(value);
        ex.fail(ErrorKind::StreamError, format!("error in a 200 response: {}", error_message(error)));
        return;
    }
    let Some(blocks) = value.get("content").and_then(Value::as_array) else {
        ex.fail(ErrorKind::Protocol, "response has no content blocks");
        return;
    };
    for block in blocks {
        if let Some(text) = block.get("thinking").and_then(Value::as_str) {
            ex.reasoning.push_str(text);
        }
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            ex.content.push_str(text);
        }
    }
    ex.finish_reason = value.get("stop_reason").and_then(Value::as_str).map(str::to_string);
    if let Some(usage) = value.get("usage") {
        take_input_usage(usage, ex);
        ex.usage.output_tokens = count(usage.get("output_tokens"));
    }
}

fn take_input_usage(usage: &Value, ex: &mut Exchange) {
    let fresh = count(usage.get("input_tokens"));
    let read = count(usage.get("cache_read_input_tokens"));
    let written = count(usage.get("cache_creation_input_tokens"));
    ex.usage.input_tokens = fresh.map(|f| f + read.unwrap_or(0) + written.unwrap_or(0));
    ex.usage.cached_tokens = read;
    ex.usage.anthropic_input_tokens = fresh;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_counts_cache_reads_and_output_tokens() {
        let mut ex = Exchange::default();
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":24,"cache_read_input_tokens":1000,"cache_creation_input_tokens":0,"output_tokens":1}}}"#,
                3.0,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                3.5,
            ),
            ("ping", r#"{"type":"ping"}"#, 4.0),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
                20.0,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":64}}"#,
                90.0,
            ),
        ];
        for (event, data, at) in events {
            assert_eq!(on_event(event, data, at, &mut ex), EventOutcome::Continue);
        }
        assert_eq!(on_event("message_stop", r#"{"type":"message_stop"}"#, 91.0, &mut ex), EventOutcome::Done);
        assert_eq!(ex.ttft_ms, Some(20.0));
        assert_eq!(ex.usage.input_tokens, Some(1024));
        assert_eq!(ex.usage.cached_tokens, Some(1000));
        assert_eq!(ex.usage.output_tokens, Some(64));
        assert_eq!(ex.finish_reason.as_deref(), Some("max_tokens"));
    }

    /// Token deltas skip the `Value`; every other shape falls back to it and reads the same.
    #[test]
    fn text_deltas_are_read_in_place_with_the_same_result() {
        let fast = [
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            ("content_block_delta", r#"{"delta":{"type":"thinking_delta","thinking":"hm \"q\" \u00e9"}}"#),
            ("message", r#"{"type":"content_block_delta","delta":{"text":"x","thinking":null}}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{"}}"#,
            ),
        ];
        let slow = [
            ("content_block_delta", r#"{"type":"content_block_delta","delta":{"text":7}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","delta":{"text":"a","text":"b"}}"#),
            ("content_block_delta", r#"{"type":5,"delta":{"text":"c"}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","delta":"text"}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","delta":{"text":"error"}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta"}"#),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","text":"no"}}"#),
            ("ping", r#"{"type":"ping"}"#),
            ("content_block_delta", r#"{"type":"error","error":{"message":"Overloaded"}}"#),
            ("content_block_delta", "{not json"),
        ];
        for (event, data) in fast {
            assert!(text_delta(event, data).is_some(), "read in place: {data}");
        }
        for (event, data) in slow {
            assert!(text_delta(event, data).is_none(), "read as a Value: {data}");
        }
        for (event, data) in fast.iter().chain(&slow) {
            let (mut quick, mut reference) = (Exchange::default(), Exchange::default());
            let outcomes =
                (on_event(event, data, 3.0, &mut quick), on_event_as_value(event, data, 3.0, &mut reference));
            assert_eq!(outcomes.0, outcomes.1, "{data}");
            super::super::stream::read_alike(&quick, &reference, data);
            assert_eq!(quick.error.map(|e| e.message), reference.error.map(|e| e.message), "{data}");
        }
    }

    #[test]
    fn error_event_fails_the_exchange() {
        let mut ex = Exchange::default();
        let outcome = on_event(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            1.0,
            &mut ex,
        );
        assert_eq!(outcome, EventOutcome::Done);
        assert!(ex.error.unwrap().message.contains("Overloaded"));
    }

    #[test]
    fn system_message_moves_to_top_level() {
        let req = ChatRequest {
            messages: vec![
                super::super::Message::new("system", "be brief"),
                super::super::Message::new("user", "hi"),
            ],
            max_tokens: 4,
            ..Default::default()
        };
        let b = body(&req);
        assert_eq!(b["system"], "be brief");
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
    }
}
