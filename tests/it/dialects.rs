//! The scripted server's wire formats (`Behaviour::dialect`, `bench-scripted-server --dialect`):
//! every chunk, whole reply and model list shaped as the server it imitates writes them, so
//! OpenAI clients (AIPerf, GuideLLM, the openai SDK), which reject chunks without `object`, `id`,
//! `created` and `model`, run against it unchanged. Read over a raw socket, as bytes on the wire.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

use common::scripted::{Behaviour, Dialect, Scripted, output_text};
use serde_json::{Value, json};

const SERVED: [Dialect; 4] = [Dialect::LlamaCpp, Dialect::Vllm, Dialect::Sglang, Dialect::Openai];

/// One HTTP/1.0 exchange (the server closes when done, so the body needs no chunked decoding):
/// status and body.
fn http(url: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut socket = TcpStream::connect(addr).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        socket,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    socket.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// The `data:` payloads of an SSE body, with the event name of each.
fn events(body: &str) -> Vec<(Option<String>, String)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).map(str::to_string);
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_else(|| panic!("{e}"));
            (name, data.to_string())
        })
        .collect()
}

/// A request as AIPerf and GuideLLM send it: content parts, `max_completion_tokens`, usage asked.
fn chat_body(stream: bool) -> Value {
    json!({"model": "scripted-model", "stream": stream, "max_completion_tokens": 5,
           "stream_options": {"include_usage": true},
           "messages": [{"role": "user", "content": [{"type": "text", "text": "one two three"}]}]})
}

fn start(dialect: Dialect) -> Scripted {
    Scripted::start(Behaviour { dialect, first_token_ms: 5, token_ms: 1, ..Default::default() })
}

#[test]
fn every_chat_chunk_carries_what_openai_clients_require() {
    for dialect in SERVED {
        let server = start(dialect);
        let (status, models) = http(&server.url, "GET", "/v1/models", None);
        assert_eq!(status, 200);
        let models: Value = serde_json::from_str(&models).unwrap();
        assert_eq!(models["object"], "list", "{dialect}");
        let model = models["data"][0]["id"].as_str().unwrap().to_string();

        let (status, body) = http(&server.url, "POST", "/v1/chat/completions", Some(&chat_body(true)));
        assert_eq!(status, 200, "{dialect}: {body}");
        let all = events(&body);
        assert_eq!(all.last().unwrap().1, "[DONE]", "{dialect}");
        let chunks: Vec<Value> =
            all[..all.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
        let id = chunks[0]["id"].as_str().unwrap_or_else(|| panic!("{dialect}: no id in {}", chunks[0]));
        let mut text = String::new();
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk", "{dialect}: {c}");
            assert_eq!(c["id"], id, "{dialect}: one id a stream: {c}");
            assert!(c["created"].as_u64().is_some_and(|t| t > 1_700_000_000), "{dialect}: {c}");
            assert_eq!(c["model"], model.as_str(), "{dialect}: {c}");
            for choice in c["choices"].as_array().unwrap() {
                text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(text, output_text(5), "{dialect}");
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant", "{dialect}: the role chunk first");
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "length", "{dialect}: {finish}");
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]), "{dialect}: usage comes in a chunk without choices");
        // One user message: the template's 7 tokens and the 3 words.
        assert_eq!(last["usage"]["prompt_tokens"], 10, "{dialect}: {last}");
        assert_eq!(last["usage"]["completion_tokens"], 5, "{dialect}: {last}");
        assert_eq!(last["usage"]["total_tokens"], 15, "{dialect}: {last}");
        // llama.cpp alone sends its timings, measured on the stream as sent.
        if dialect == Dialect::LlamaCpp {
            let t = &last["timings"];
            assert_eq!((t["prompt_n"].as_u64(), t["cache_n"].as_u64()), (Some(10), Some(0)), "{last}");
            assert_eq!(t["predicted_n"], 5, "{last}");
            assert!(
                t["prompt_ms"].as_f64().unwrap() >= 5.0 && t["predicted_ms"].as_f64().unwrap() > 0.0,
                "{last}"
            );
            assert!(last["system_fingerprint"].is_string());
        } else {
            assert!(chunks.iter().all(|c| c.get("timings").is_none()), "{dialect}: no timings");
        }
    }
}

#[test]
fn whole_replies_and_text_completions_are_shaped_as_each_server_writes_them() {
    for dialect in SERVED {
        let server = start(dialect);
        let (status, body) = http(&server.url, "POST", "/v1/chat/completions", Some(&chat_body(false)));
        assert_eq!(status, 200, "{dialect}: {body}");
        let whole: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(whole["object"], "chat.completion", "{dialect}: {whole}");
        assert!(
            whole["id"].is_string() && whole["created"].is_u64() && whole["model"].is_string(),
            "{whole}"
        );
        assert_eq!(whole["choices"][0]["message"]["content"], output_text(5), "{dialect}");
        assert_eq!(whole["usage"]["prompt_tokens"], 10, "{dialect}: {whole}");
        assert_eq!(whole["timings"].is_object(), dialect == Dialect::LlamaCpp, "{dialect}: {whole}");

        let prompt = json!({"model": "scripted-model", "prompt": "one two three four", "max_tokens": 4,
                            "stream": true, "stream_options": {"include_usage": true}});
        let (status, body) = http(&server.url, "POST", "/v1/completions", Some(&prompt));
        assert_eq!(status, 200, "{dialect}: {body}");
        let all = events(&body);
        assert_eq!(all.last().unwrap().1, "[DONE]");
        let mut text = String::new();
        for (_, data) in &all[..all.len() - 1] {
            let c: Value = serde_json::from_str(data).unwrap();
            assert_eq!(c["object"], "text_completion", "{dialect}: {c}");
            assert!(c["id"].is_string() && c["created"].is_u64() && c["model"].is_string(), "{c}");
            for choice in c["choices"].as_array().unwrap() {
                text.push_str(choice["text"].as_str().unwrap());
            }
            if let Some(usage) = c.get("usage").filter(|u| u.is_object()) {
                assert_eq!(usage["prompt_tokens"], 4, "a text prompt has no template: {c}");
            }
        }
        assert_eq!(text, output_text(4), "{dialect}");
    }
}

/// Anthropic's event sequence, each event's type matching its SSE name, with the message object
/// and its usage up front and the final usage in message_delta.
#[test]
fn anthropic_messages_stream_every_event_the_api_sends() {
    let server = start(Dialect::LlamaCpp);
    let body = json!({"model": "scripted-model", "max_tokens": 3, "stream": true,
                      "messages": [{"role": "user", "content": "one two three"}]});
    let (status, reply) = http(&server.url, "POST", "/v1/messages", Some(&body));
    assert_eq!(status, 200, "{reply}");
    let all = events(&reply);
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    let expected = [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ];
    assert_eq!(names, expected);
    for (name, data) in &all {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"], name.as_deref().unwrap(), "{v}");
    }
    let start: Value = serde_json::from_str(&all[0].1).unwrap();
    let message = &start["message"];
    assert!(message["id"].as_str().unwrap().starts_with("msg_"), "{message}");
    assert_eq!((message["type"].as_str(), message["role"].as_str()), (Some("message"), Some("assistant")));
    assert_eq!(message["usage"]["input_tokens"], 10, "{message}");
    assert_eq!(message["usage"]["cache_read_input_tokens"], 0, "{message}");
    let delta: Value = serde_json::from_str(&all[7].1).unwrap();
    assert_eq!(delta["usage"]["output_tokens"], 3, "{delta}");
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
}

/// `/metrics` and `/props` as each server has them: llama.cpp's counters and props, vLLM's and
/// SGLang's labelled counters, none on the hosted API.
#[test]
fn metrics_and_props_exist_where_the_server_imitated_has_them() {
    for (dialect, counter, props) in [
        (Dialect::LlamaCpp, Some("llamacpp:prompt_tokens_total "), 200),
        (Dialect::Vllm, Some("vllm:prefix_cache_hits_total{"), 404),
        (Dialect::Sglang, Some("sglang:cached_tokens_total{"), 404),
        (Dialect::Openai, None, 404),
    ] {
        let server = start(dialect);
        let (status, page) = http(&server.url, "GET", "/metrics", None);
        match counter {
            Some(name) => assert!(status == 200 && page.contains(name), "{dialect}: {status} {page}"),
            None => assert_eq!(status, 404, "{dialect}"),
        }
        assert_eq!(http(&server.url, "GET", "/props", None).0, props, "{dialect}");
    }
}

/// `bench-scripted-server --dialect` takes the dialects by name and refuses others, naming the flag.
#[test]
fn the_server_binary_speaks_the_dialect_it_is_given() {
    let bin = assert_cmd::cargo::cargo_bin("bench-scripted-server");
    let bad = Command::new(&bin).args(["--dialect", "tgi"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--dialect") && err.contains("unknown dialect 'tgi'"), "{err}");

    let mut child = Command::new(&bin)
        .args(["--dialect", "vllm", "--first-token-ms", "1", "--token-ms", "0.5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    let mut out = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        url.push(byte[0] as char);
    }
    let (_, body) = http(&url, "POST", "/v1/chat/completions", Some(&chat_body(true)));
    child.kill().unwrap();
    child.wait().unwrap();
    let first: Value = serde_json::from_str(&events(&body)[0].1).unwrap();
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"), "{first}");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""}),
        "vLLM's role chunk"
    );
    assert!(body.contains(r#""logprobs":null,"finish_reason":null"#), "vLLM's choices: {body}");
}
