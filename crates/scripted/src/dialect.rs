//! The wire formats the scripted server speaks: every chunk, whole reply, model list and metrics
//! page shaped as the server it imitates writes it, so any client (AIPerf, GuideLLM, `vllm bench
//! serve`, the openai SDK, bench) runs against it unchanged, and each server's cache evidence
//! arrives the way that server gives it, and only that way:
//! - llama.cpp: `timings` (`cache_n`, `prompt_n`, ...) on the last chunk, usage with
//!   `prompt_tokens_details.cached_tokens`, `llamacpp:` counters; keys sorted (nlohmann::json);
//! - vLLM: usage `prompt_tokens_details.cached_tokens` only when started with
//!   `--enable-prompt-tokens-details` (`Behaviour::cache_report`), `vllm:` prefix-cache counters;
//! - SGLang: the same with `--enable-cache-report` (else `prompt_tokens_details: null`),
//!   `sglang:` counters;
//! - OpenAI (the hosted API): usage `prompt_tokens_details.cached_tokens`, counted only for
//!   prompts of 1024 tokens or more, in steps of 128; no metrics page, no /props;
//! - bare: the smallest chunks an OpenAI-compatible stream may carry (`choices` only, usage with
//!   llama.cpp's two cache timings): what this server sent before it spoke the others, kept so
//!   the client's ingest cost can be measured on both.
//!
//! Shapes were read from the servers' own sources (llama.cpp tools/server, vLLM's
//! entrypoints/openai protocol and serving code) and the public API references.

use std::fmt::Write as _;
use std::str::FromStr;

use serde_json::{Value, json};

/// Seconds since the Unix epoch: the `created` of replies and models.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A response whose body is an event stream: every dialect streams as `text/event-stream`, the
/// ordinary replies and the faults' held or lumped ones alike.
pub(super) fn sse_response(body: axum::body::Body) -> axum::response::Response {
    let mut response = axum::response::Response::new(body);
    response
        .headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("text/event-stream"));
    response
}

/// Which server the scripted server imitates on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    #[default]
    LlamaCpp,
    Vllm,
    Sglang,
    Openai,
    Bare,
}

/// The model every dialect lists and names in its replies.
pub const MODEL: &str = "scripted-model";

/// llama.cpp's `system_fingerprint` is its build (`b<number>-<commit>`).
const LLAMA_BUILD: &str = "b7100-5c3e1a9f";

/// The OpenAI API caches prompts of at least this many tokens, and counts cached tokens in steps
/// of `OPENAI_CACHE_STEP`.
pub const OPENAI_CACHE_MIN: u64 = 1024;
pub const OPENAI_CACHE_STEP: u64 = 128;

impl Dialect {
    pub const ALL: [Dialect; 5] =
        [Dialect::LlamaCpp, Dialect::Vllm, Dialect::Sglang, Dialect::Openai, Dialect::Bare];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::LlamaCpp => "llama.cpp",
            Dialect::Vllm => "vllm",
            Dialect::Sglang => "sglang",
            Dialect::Openai => "openai",
            Dialect::Bare => "bare",
        }
    }

    /// Prompt tokens this server reports as served from its cache, of `input`, when its cache
    /// held `held` of them (the hosted API counts only long prompts, in whole steps).
    pub fn reported_cached(self, input: u64, held: u64) -> u64 {
        match self {
            Dialect::Openai if input < OPENAI_CACHE_MIN => 0,
            Dialect::Openai => held / OPENAI_CACHE_STEP * OPENAI_CACHE_STEP,
            _ => held,
        }
    }

    /// Whether this server answers llama.cpp's `/props` (and slot actions).
    pub fn serves_props(self) -> bool {
        matches!(self, Dialect::LlamaCpp | Dialect::Bare)
    }

    /// The Prometheus page: the counters of the server imitated, None where it has none.
    /// `computed` prompt tokens were prefilled, `cached` served from the cache.
    pub fn metrics(self, computed: u64, cached: u64) -> Option<String> {
        let all = computed + cached;
        let labels = format!("{{model_name=\"{MODEL}\"}}");
        let counters: Vec<(&str, String, u64)> = match self {
            Dialect::LlamaCpp | Dialect::Bare => vec![
                ("llamacpp:prompt_tokens_total", String::new(), computed),
                ("llamacpp:prompt_tokens_cached_total", String::new(), cached),
            ],
            Dialect::Vllm => vec![
                ("vllm:prompt_tokens_total", labels.clone(), all),
                ("vllm:prefix_cache_queries_total", labels.clone(), all),
                ("vllm:prefix_cache_hits_total", labels, cached),
            ],
            Dialect::Sglang => vec![
                ("sglang:prompt_tokens_total", labels.clone(), all),
                ("sglang:cached_tokens_total", labels, cached),
            ],
            Dialect::Openai => return None,
        };
        let mut page = String::new();
        for (name, labels, value) in counters {
            let _ = write!(page, "# TYPE {name} counter\n{name}{labels} {value}\n");
        }
        Some(page)
    }

    /// GET /v1/models.
    pub fn models(self, created: u64) -> Value {
        match self {
            Dialect::LlamaCpp => json!({"object": "list", "data": [{"id": MODEL, "object": "model",
                "created": created, "owned_by": "llamacpp", "meta": {"n_ctx_train": 131072, "n_params": 0}}]}),
            Dialect::Vllm => json!({"object": "list", "data": [{"id": MODEL, "object": "model",
                "created": created, "owned_by": "vllm", "root": MODEL, "parent": null, "max_model_len": 131072,
                "permission": []}]}),
            Dialect::Sglang => json!({"object": "list", "data": [{"id": MODEL, "object": "model",
                "created": created, "owned_by": "sglang", "root": MODEL, "max_model_len": 131072}]}),
            Dialect::Openai => json!({"object": "list", "data": [{"id": MODEL, "object": "model",
                "created": created, "owned_by": "system"}]}),
            Dialect::Bare => json!({"object": "list", "data": [{"id": MODEL, "object": "model"}]}),
        }
    }
}

/// A dialect name that is none of `Dialect::ALL`; it names the known ones.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("unknown dialect '{name}' (one of {})", Dialect::ALL.map(Dialect::as_str).join(", "))]
pub struct UnknownDialect {
    pub name: String,
}

impl FromStr for Dialect {
    type Err = UnknownDialect;
    fn from_str(text: &str) -> Result<Dialect, UnknownDialect> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.as_str() == text)
            .ok_or_else(|| UnknownDialect { name: text.to_string() })
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Chat completions or the legacy text completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// A request's token counts, and what the server's cache served of its prompt.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
}

/// One reply's wire: the dialect, and the identity every chunk of it repeats.
pub struct Wire {
    pub dialect: Dialect,
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    /// `stream_options.include_usage`: a last chunk with usage (and no choices).
    pub include_usage: bool,
    /// vLLM's `stream_options.continuous_usage_stats`: usage on every chunk.
    pub continuous_usage: bool,
    /// vLLM's `--enable-prompt-tokens-details`, SGLang's `--enable-cache-report`.
    pub cache_report: bool,
}

/// The placeholder a stream's last frame carries where llama.cpp's `timings` go: filled when the
/// frame is sent, from what the stream really took (`Timings::json`).
pub const TIMINGS_MARK: &str = "\"@timings@\"";

/// llama.cpp's `timings` of one reply.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub cache_n: u64,
    pub prompt_n: u64,
    pub prompt_ms: f64,
    pub predicted_n: u64,
    pub predicted_ms: f64,
}

impl Timings {
    pub fn json(&self) -> Value {
        let per = |ms: f64, n: u64| if n == 0 { 0.0 } else { ms / n as f64 };
        let rate = |ms: f64, n: u64| if ms <= 0.0 { 0.0 } else { n as f64 * 1000.0 / ms };
        json!({"cache_n": self.cache_n, "prompt_n": self.prompt_n, "prompt_ms": self.prompt_ms,
               "prompt_per_token_ms": per(self.prompt_ms, self.prompt_n),
               "prompt_per_second": rate(self.prompt_ms, self.prompt_n),
               "predicted_n": self.predicted_n, "predicted_ms": self.predicted_ms,
               "predicted_per_token_ms": per(self.predicted_ms, self.predicted_n),
               "predicted_per_second": rate(self.predicted_ms, self.predicted_n)})
    }

    /// `frame` with its `TIMINGS_MARK` replaced by these timings.
    pub fn fill(&self, frame: &str) -> String {
        frame.replacen(TIMINGS_MARK, &self.json().to_string(), 1)
    }
}

/// A JSON string literal of `text`.
fn quoted(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

impl Wire {
    fn object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completions => "text_completion",
        }
    }

    /// The usage object of this dialect.
    pub fn usage(&self, c: Counts) -> Value {
        let total = c.input + c.output;
        let details = json!({"cached_tokens": c.cached});
        match self.dialect {
            Dialect::LlamaCpp | Dialect::Bare => {
                json!({"completion_tokens": c.output, "prompt_tokens": c.input,
                "total_tokens": total, "prompt_tokens_details": details})
            }
            Dialect::Vllm => {
                let mut u =
                    json!({"prompt_tokens": c.input, "total_tokens": total, "completion_tokens": c.output});
                if self.cache_report {
                    u["prompt_tokens_details"] = details;
                }
                u
            }
            Dialect::Sglang => json!({"prompt_tokens": c.input, "total_tokens": total,
                "completion_tokens": c.output,
                "prompt_tokens_details": if self.cache_report { details } else { Value::Null }}),
            Dialect::Openai => {
                json!({"prompt_tokens": c.input, "completion_tokens": c.output, "total_tokens": total,
                "prompt_tokens_details": {"cached_tokens": c.cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                    "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
            }
        }
    }

    /// The fields every chunk of a reply repeats, in the dialect's order, with `choices` (a JSON
    /// array's text) in its place; `tail` is appended inside the object (`,"usage":...`).
    fn chunk(&self, choices: &str, tail: &str) -> String {
        let (id, created, object) = (quoted(&self.id), self.created, self.object());
        match self.dialect {
            Dialect::Bare => format!("{{\"choices\":{choices}{tail}}}"),
            // nlohmann::json keeps keys sorted.
            Dialect::LlamaCpp => format!(
                "{{\"choices\":{choices},\"created\":{created},\"id\":{id},\"model\":\"{MODEL}\",\
                 \"system_fingerprint\":\"{LLAMA_BUILD}\",\"object\":\"{object}\"{tail}}}"
            ),
            Dialect::Vllm => format!(
                "{{\"id\":{id},\"object\":\"{object}\",\"created\":{created},\"model\":\"{MODEL}\",\
                 \"choices\":{choices}{tail}}}"
            ),
            Dialect::Sglang => format!(
                "{{\"id\":{id},\"object\":\"{object}\",\"created\":{created},\"model\":\"{MODEL}\",\
                 \"choices\":{choices}{tail}}}"
            ),
            Dialect::Openai => format!(
                "{{\"id\":{id},\"object\":\"{object}\",\"created\":{created},\"model\":\"{MODEL}\",\
                 \"service_tier\":\"default\",\"system_fingerprint\":\"fp_5c3e1a9f01\",\"choices\":{choices}{tail}}}"
            ),
        }
    }

    /// What a content chunk carries after its choices: vLLM's running usage, OpenAI's
    /// `"usage":null` while usage is asked for, SGLang's `"usage":null` always.
    fn running_usage(&self, c: Counts) -> String {
        match self.dialect {
            Dialect::Vllm if self.continuous_usage => {
                let u = json!({"prompt_tokens": c.input, "total_tokens": c.input + c.output,
                               "completion_tokens": c.output});
                format!(",\"usage\":{u}")
            }
            Dialect::Openai if self.include_usage => ",\"usage\":null".into(),
            Dialect::Sglang => ",\"usage\":null".into(),
            _ => String::new(),
        }
    }

    /// The role-only chunk a chat stream opens with (None for text completions).
    pub fn role_chunk(&self) -> Option<String> {
        if self.endpoint != Endpoint::Chat {
            return None;
        }
        let delta = match self.dialect {
            Dialect::LlamaCpp | Dialect::Bare => r#"{"content":null,"role":"assistant"}"#,
            Dialect::Vllm => r#"{"role":"assistant","content":""}"#,
            Dialect::Sglang => {
                r#"{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null}"#
            }
            Dialect::Openai => r#"{"role":"assistant","content":"","refusal":null}"#,
        };
        let counts = Counts::default();
        Some(self.chunk(&self.choice(delta, "null"), &self.running_usage(counts)))
    }

    /// One choice of a stream chunk: a chat `delta` (JSON text) or, for text completions, the
    /// text (a JSON string literal), and the finish reason (JSON text).
    fn choice(&self, delta: &str, finish: &str) -> String {
        let chat = self.endpoint == Endpoint::Chat;
        match (self.dialect, chat) {
            (Dialect::Bare, true) if finish == "null" => format!("[{{\"index\":0,\"delta\":{delta}}}]"),
            (Dialect::Bare, true) => {
                format!("[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]")
            }
            (Dialect::Bare, false) => {
                format!("[{{\"index\":0,\"text\":{delta},\"finish_reason\":{finish}}}]")
            }
            (Dialect::LlamaCpp, true) => {
                format!("[{{\"delta\":{delta},\"finish_reason\":{finish},\"index\":0}}]")
            }
            (Dialect::LlamaCpp, false) => {
                format!("[{{\"finish_reason\":{finish},\"index\":0,\"logprobs\":null,\"text\":{delta}}}]")
            }
            (Dialect::Vllm, true) if finish == "null" => {
                format!("[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":null}}]")
            }
            (Dialect::Vllm, true) => format!(
                "[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}]"
            ),
            (Dialect::Vllm, false) => format!(
                "[{{\"index\":0,\"text\":{delta},\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}]"
            ),
            (Dialect::Sglang, true) => format!(
                "[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish},\"matched_stop\":null}}]"
            ),
            (Dialect::Sglang, false) => format!(
                "[{{\"index\":0,\"text\":{delta},\"logprobs\":null,\"finish_reason\":{finish},\"matched_stop\":null}}]"
            ),
            (Dialect::Openai, true) => {
                format!("[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]")
            }
            (Dialect::Openai, false) => {
                format!("[{{\"text\":{delta},\"index\":0,\"logprobs\":null,\"finish_reason\":{finish}}}]")
            }
        }
    }

    /// A content chunk of `text`; `counts` so far (vLLM's continuous usage), and llama.cpp's
    /// per-token `timings` when the request asked for them (`timings_per_token`).
    pub fn content_chunk(&self, text: &str, counts: Counts, timings: Option<&Timings>) -> String {
        let text = quoted(text);
        let delta = match (self.endpoint, self.dialect) {
            (Endpoint::Completions, _) => text,
            (Endpoint::Chat, _) => format!("{{\"content\":{text}}}"),
        };
        let mut tail = self.running_usage(counts);
        if let Some(t) = timings {
            let _ = write!(tail, ",\"timings\":{}", t.json());
        }
        self.chunk(&self.choice(&delta, "null"), &tail)
    }

    /// The chunk that carries the finish reason. With llama.cpp, when no usage chunk follows, it
    /// carries the `timings` (as `TIMINGS_MARK`, filled when sent).
    pub fn finish_chunk(&self, reason: &str, counts: Counts) -> String {
        let delta = match (self.endpoint, self.dialect) {
            (Endpoint::Completions, _) => "\"\"",
            (Endpoint::Chat, Dialect::Vllm | Dialect::Sglang) => r#"{"content":""}"#,
            (Endpoint::Chat, _) => "{}",
        };
        let mut tail = self.running_usage(counts);
        if self.dialect == Dialect::LlamaCpp && !self.include_usage {
            let _ = write!(tail, ",\"timings\":{TIMINGS_MARK}");
        }
        self.chunk(&self.choice(delta, &quoted(reason)), &tail)
    }

    /// The usage chunk (no choices) that ends a stream when usage was asked for; llama.cpp's
    /// carries the `timings` (as `TIMINGS_MARK`, filled when sent), bare's the two cache ones.
    pub fn usage_chunk(&self, counts: Counts) -> String {
        let usage = self.usage(counts);
        let tail = match self.dialect {
            Dialect::LlamaCpp => format!(",\"usage\":{usage},\"timings\":{TIMINGS_MARK}"),
            Dialect::Bare => {
                let timings = json!({"cache_n": counts.cached, "prompt_n": counts.input - counts.cached});
                format!(",\"usage\":{usage},\"timings\":{timings}")
            }
            _ => format!(",\"usage\":{usage}"),
        };
        self.chunk("[]", &tail)
    }

    /// A whole (non-streamed) reply.
    pub fn whole(&self, text: &str, reason: &str, counts: Counts, usage: bool, timings: &Timings) -> Value {
        let object = match self.endpoint {
            Endpoint::Chat => "chat.completion",
            Endpoint::Completions => "text_completion",
        };
        let mut choice = match self.endpoint {
            Endpoint::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": reason}),
            Endpoint::Completions => json!({"index": 0, "text": text, "finish_reason": reason}),
        };
        match self.dialect {
            Dialect::Vllm => {
                choice["logprobs"] = Value::Null;
                choice["stop_reason"] = Value::Null;
            }
            Dialect::Sglang => {
                choice["logprobs"] = Value::Null;
                choice["matched_stop"] = Value::Null;
            }
            Dialect::Openai | Dialect::LlamaCpp if self.endpoint == Endpoint::Completions => {
                choice["logprobs"] = Value::Null;
            }
            Dialect::Openai => {
                choice["logprobs"] = Value::Null;
                choice["message"]["refusal"] = Value::Null;
            }
            _ => {}
        }
        let mut reply = if self.dialect == Dialect::Bare {
            json!({"choices": [choice]})
        } else {
            json!({"id": self.id, "object": object, "created": self.created, "model": MODEL, "choices": [choice]})
        };
        match self.dialect {
            Dialect::LlamaCpp => {
                reply["system_fingerprint"] = json!(LLAMA_BUILD);
                reply["timings"] = timings.json();
            }
            Dialect::Bare => {
                reply["timings"] =
                    json!({"cache_n": counts.cached, "prompt_n": counts.input - counts.cached});
            }
            Dialect::Openai => {
                reply["service_tier"] = json!("default");
                reply["system_fingerprint"] = json!("fp_5c3e1a9f01");
            }
            _ => {}
        }
        if usage {
            reply["usage"] = self.usage(counts);
        }
        reply
    }
}

/// The Anthropic Messages API's shapes (`/v1/messages`). Cache evidence as the server gives it:
/// the API (and vLLM, SGLang, which copy it) report `input_tokens` as what was neither read from
/// nor written to the cache and `cache_read_input_tokens` as what the cache served; llama.cpp
/// reports the same two and `output_tokens`, nothing more; bare reports no cache at all (this
/// server's old messages, kept for the test of evidence that shows nothing).
pub mod anthropic {
    use serde_json::{Value, json};

    use super::{Counts, Dialect, MODEL};

    pub fn usage(d: Dialect, c: Counts, output: u64) -> Value {
        match d {
            Dialect::Bare => json!({"input_tokens": c.input, "output_tokens": output}),
            Dialect::LlamaCpp => {
                json!({"cache_read_input_tokens": c.cached, "input_tokens": c.input - c.cached,
                                        "output_tokens": output})
            }
            _ => json!({"input_tokens": c.input - c.cached, "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": c.cached, "output_tokens": output,
                        "service_tier": "standard"}),
        }
    }

    pub fn message(id: &str, content: Value, stop_reason: Value, usage: Value) -> Value {
        json!({"id": id, "type": "message", "role": "assistant", "model": MODEL, "content": content,
               "stop_reason": stop_reason, "stop_sequence": null, "usage": usage})
    }

    /// The first event: the message, empty, with the prompt's usage.
    pub fn message_start(d: Dialect, id: &str, c: Counts) -> Value {
        let usage = match d {
            Dialect::Bare => json!({"input_tokens": c.input, "cache_read_input_tokens": 0,
                                    "cache_creation_input_tokens": 0, "output_tokens": 1}),
            _ => usage(d, c, 1),
        };
        json!({"type": "message_start", "message": message(id, json!([]), Value::Null, usage)})
    }

    pub fn content_block_start() -> Value {
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    }

    pub fn text_delta(text: &str) -> Value {
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
    }

    pub fn content_block_stop() -> Value {
        json!({"type": "content_block_stop", "index": 0})
    }

    /// The last usage: the output tokens (the API repeats the input counts; llama.cpp does not).
    pub fn message_delta(d: Dialect, stop_reason: &str, c: Counts) -> Value {
        let usage = match d {
            Dialect::Bare | Dialect::LlamaCpp => json!({"output_tokens": c.output}),
            _ => usage(d, c, c.output),
        };
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": usage})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(dialect: Dialect, endpoint: Endpoint) -> Wire {
        Wire {
            dialect,
            endpoint,
            id: "chatcmpl-x".into(),
            created: 1,
            include_usage: true,
            continuous_usage: false,
            cache_report: true,
        }
    }

    /// Every chunk of every dialect is one JSON object; the identified dialects carry what
    /// OpenAI clients require of a chunk (id, object, created, model).
    #[test]
    fn every_chunk_is_json_with_the_fields_clients_require() {
        let c = Counts { input: 10, cached: 4, output: 2 };
        let t = Timings { cache_n: 4, prompt_n: 6, prompt_ms: 1.0, predicted_n: 2, predicted_ms: 2.0 };
        for d in Dialect::ALL {
            for e in [Endpoint::Chat, Endpoint::Completions] {
                let w = wire(d, e);
                let mut frames =
                    vec![w.content_chunk("hi \"there\"", c, Some(&t)), w.finish_chunk("length", c)];
                frames.extend(w.role_chunk());
                frames.push(t.fill(&w.usage_chunk(c)));
                for f in frames {
                    let v: Value = serde_json::from_str(&f).unwrap_or_else(|e| panic!("{d} {e:?}: {f}"));
                    if d != Dialect::Bare {
                        assert_eq!(v["object"], w.object(), "{d}: {f}");
                        assert!(
                            v["id"].is_string() && v["created"].is_u64() && v["model"] == MODEL,
                            "{d}: {f}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn dialects_parse_from_their_names() {
        for d in Dialect::ALL {
            assert_eq!(d.as_str().parse::<Dialect>(), Ok(d));
        }
        assert!("tgi".parse::<Dialect>().unwrap_err().to_string().contains("llama.cpp, vllm"));
    }

    #[test]
    fn the_hosted_api_counts_cached_tokens_of_long_prompts_in_steps() {
        assert_eq!(Dialect::Openai.reported_cached(1000, 990), 0);
        assert_eq!(Dialect::Openai.reported_cached(2048, 2000), 1920);
        assert_eq!(Dialect::Vllm.reported_cached(1000, 990), 990);
    }
}
