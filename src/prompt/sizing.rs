//! Exact prompt sizes. The origin benchmark cut `target x 4` characters and its prompts came out
//! 25% short; ours land within 1% of nominal, chat template included, or the cell fails.
//!
//! Two ways to count, chosen once per sweep:
//! - the server's tokenizer (`POST /tokenize`: llama.cpp, vLLM): the template overhead is measured
//!   once (usage.prompt_tokens of a `max_tokens: 1` request minus the tokenized user text), then
//!   every prompt is sized by tokenizing candidates;
//! - calibration only: two `max_tokens: 1` requests of different lengths give tokens per word and
//!   the template overhead as a line; prompts are sized from it, and each measurement's reported
//!   input_tokens is checked afterwards (quality flag input_tokens_mismatch).

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Nonces, Prompt, document};
use crate::exit::Failure;
use crate::server;
use ttft_client::{ChatRequest, Client, Message};
use ttft_model::record::ErrorKind;

/// Why a prompt could not be sized. `kind` says what a record of the failure is: the server
/// gone or too slow (connect, timeout), or the prompt itself (prompt_size).
#[derive(Debug, thiserror::Error)]
#[error("prompt sizing: {message}")]
pub struct SizingError {
    pub kind: ErrorKind,
    pub message: String,
    /// The server cannot count tokens at all (no tokenizer and no usage): a setup problem, found
    /// before anything is measured.
    pub uncountable: bool,
}

impl SizingError {
    fn prompt(message: impl Into<String>) -> SizingError {
        SizingError { kind: ErrorKind::PromptSize, message: message.into(), uncountable: false }
    }

    fn call(e: server::CallError) -> SizingError {
        let kind = crate::preset::kind_of(&e);
        SizingError { kind, message: e.to_string(), uncountable: false }
    }
}

/// Sizing before anything is measured: a server that cannot count tokens, or answers what cannot
/// be sized, is the setup's problem (exit 2); one that cannot be reached or does not answer in
/// time is the server's (exit 3).
impl From<SizingError> for Failure {
    fn from(e: SizingError) -> Failure {
        match e.kind {
            _ if e.uncountable => Failure::usage(e.to_string()),
            ErrorKind::Connect | ErrorKind::Timeout => Failure::server(e.to_string()),
            _ => Failure::usage(e.to_string()),
        }
    }
}

/// How prompts are counted, as run.json records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum SizingMethod {
    /// The server's tokenizer (POST /tokenize) plus the measured chat-template overhead.
    Tokenizer { template_overhead_tokens: i64 },
    /// Calibrated from usage.prompt_tokens of two max_tokens=1 requests.
    Calibrated { intercept_tokens: f64, tokens_per_word: f64 },
}

/// Allowed distance from nominal: the one tolerance quality and verify judge by.
pub(crate) fn tolerance_tokens(nominal: u32) -> u64 {
    ttft_results::quality::input_tokens_tolerance(u64::from(nominal)).floor() as u64
}

#[derive(Clone, Debug, PartialEq)]
enum Counter {
    /// Server tokenizer; `overhead` = template tokens around the user text.
    Tokenizer { overhead: i64 },
    /// prompt_tokens ~= intercept + per_word x words.
    Line { intercept: f64, per_word: f64 },
}

pub struct Sizer {
    counter: Counter,
    model: String,
    /// Last word count that hit each (seed, nominal): later prompts start their search there.
    found: Mutex<HashMap<(u64, u32), usize>>,
}

impl Sizer {
    /// Measures how the server counts. Sends one or two tiny `max_tokens: 1` requests.
    pub async fn calibrate(
        client: &Client,
        model: &str,
        nonces: &Nonces,
        seed: u64,
    ) -> Result<Sizer, SizingError> {
        let probe = document(seed, &nonces.next(), 150);
        let has_tokenizer = count_tokens(client, model, "Hello world").await.is_ok();
        let reported = prompt_tokens(client, model, &probe).await?;
        let counter = if has_tokenizer {
            let user = count_tokens(client, model, &probe).await?;
            Counter::Tokenizer { overhead: reported as i64 - user as i64 }
        } else {
            let long = document(seed, &nonces.next(), 650);
            let reported_long = prompt_tokens(client, model, &long).await?;
            let per_word = (reported_long as f64 - reported as f64) / 500.0;
            if per_word <= 0.0 {
                return Err(SizingError {
                    uncountable: true,
                    ..SizingError::prompt(format!(
                        "the server reported {reported} prompt tokens for 150 words and {reported_long} \
                         for 650; its usage numbers cannot size prompts"
                    ))
                });
            }
            Counter::Line { intercept: reported as f64 - per_word * 150.0, per_word }
        };
        Ok(Sizer { counter, model: model.to_string(), found: Mutex::new(HashMap::new()) })
    }

    /// What run.json records about sizing.
    pub(crate) fn describe(&self) -> SizingMethod {
        match &self.counter {
            Counter::Tokenizer { overhead } => {
                SizingMethod::Tokenizer { template_overhead_tokens: *overhead }
            }
            Counter::Line { intercept, per_word } => {
                SizingMethod::Calibrated { intercept_tokens: *intercept, tokens_per_word: *per_word }
            }
        }
    }

    /// Tokens the server will count for `messages` (turn 1 of a dataset row, nonce line included):
    /// one message by the tokenizer plus the measured template overhead, or by the calibrated
    /// line over its words; several (a system prompt first) by the server's own usage of a
    /// `max_tokens: 1` request, since each message adds template tokens of its own.
    pub(crate) async fn count(&self, client: &Client, messages: Vec<Message>) -> Result<u64, SizingError> {
        if messages.len() > 1 {
            return prompt_tokens_of(client, &self.model, messages).await;
        }
        let text = messages.first().map_or("", |m| m.content.as_str());
        match &self.counter {
            Counter::Tokenizer { overhead } => {
                let n = count_tokens(client, &self.model, text).await? as i64 + overhead;
                Ok(n.max(1) as u64)
            }
            Counter::Line { intercept, per_word } => {
                let words = text.split_whitespace().count() as f64;
                Ok((intercept + per_word * words).round().max(1.0) as u64)
            }
        }
    }

    /// Tokens of `text` alone (no chat template): the tokenizer's count, or the calibrated line's
    /// per-word rate over its words. A dataset row's reply length (`--dataset-output-tokens`).
    pub(crate) async fn count_text(&self, client: &Client, text: &str) -> Result<u64, SizingError> {
        match &self.counter {
            Counter::Tokenizer { .. } => Ok(count_tokens(client, &self.model, text).await?.max(1)),
            Counter::Line { per_word, .. } => {
                let words = text.split_whitespace().count() as f64;
                Ok((per_word * words).round().max(1.0) as u64)
            }
        }
    }

    /// Builds a prompt of `nominal` tokens (chat template included) starting with `nonce`.
    pub async fn build(
        &self,
        client: &Client,
        nominal: u32,
        seed: u64,
        nonce: String,
    ) -> Result<Prompt, SizingError> {
        let tolerance = tolerance_tokens(nominal);
        match &self.counter {
            Counter::Line { intercept, per_word } => {
                let words = ((nominal as f64 - intercept) / per_word).round();
                if words < 0.0 {
                    return Err(SizingError::prompt(too_small(nominal, *intercept as i64)));
                }
                let words = words as usize;
                Ok(Prompt {
                    text: document(seed, &nonce, words),
                    nonce,
                    expected_input_tokens: nominal as u64,
                    words,
                })
            }
            Counter::Tokenizer { overhead } => {
                let target = nominal as i64 - overhead;
                let count = |words: usize| {
                    let text = document(seed, &nonce, words);
                    async move { count_tokens(client, &self.model, &text).await.map(|t| t as i64) }
                };
                let empty = count(0).await?;
                if target < empty {
                    return Err(SizingError::prompt(too_small(nominal, overhead + empty)));
                }
                let start = self.found.lock().ok().and_then(|f| f.get(&(seed, nominal)).copied());
                // The search's own count of the words it settles on is the prompt's: counting a
                // 32K prompt again cost ~0.35 s with an 8B model's tokenizer (docs/reuse-primes.md).
                let (words, tokens) =
                    search(start.unwrap_or(((target - empty) as f64 / 1.3) as usize), target, count).await?;
                let actual = tokens + overhead;
                let miss = (actual - nominal as i64).unsigned_abs();
                if miss > tolerance {
                    return Err(SizingError::prompt(format!(
                        "closest prompt to {nominal} tokens has {actual} (off by {miss}, more than the \
                         {tolerance} allowed)"
                    )));
                }
                if let Ok(mut f) = self.found.lock() {
                    f.insert((seed, nominal), words);
                }
                Ok(Prompt {
                    text: document(seed, &nonce, words),
                    nonce,
                    expected_input_tokens: actual as u64,
                    words,
                })
            }
        }
    }
}

fn too_small(nominal: u32, fixed: i64) -> String {
    format!(
        "a context of {nominal} tokens is too small: the chat template, nonce and question \
         alone take {fixed} tokens"
    )
}

/// Finds the word count whose token count is closest to `target` (ties: the shorter one), and
/// that count. Token count grows monotonically with words (prefixes are stable), so a secant step
/// followed by a walk of single words converges in a few calls.
async fn search<F, Fut, E>(start: usize, target: i64, count: F) -> Result<(usize, i64), E>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<i64, E>>,
{
    let mut words = start.max(1);
    let mut tokens = count(words).await?;
    for _ in 0..6 {
        if tokens == target {
            return Ok((words, tokens));
        }
        let rate = (tokens as f64 / words as f64).max(0.1);
        let step = ((target - tokens) as f64 / rate).round() as i64;
        if step.abs() <= 2 {
            break;
        }
        words = (words as i64 + step).max(0) as usize;
        tokens = count(words).await?;
    }
    // Walk one word at a time to the crossing point.
    let dir: i64 = if tokens < target { 1 } else { -1 };
    let mut best = (words, (tokens - target).abs(), tokens);
    for _ in 0..64 {
        if (dir > 0 && tokens >= target) || (dir < 0 && tokens <= target) || (dir < 0 && words == 0) {
            break;
        }
        words = (words as i64 + dir) as usize;
        tokens = count(words).await?;
        let miss = (tokens - target).abs();
        if miss < best.1 || (miss == best.1 && words < best.0) {
            best = (words, miss, tokens);
        }
    }
    Ok((best.0, best.2))
}

/// Token count of `text` by the server's tokenizer. Accepts llama.cpp (`{"tokens": [...]}`) and
/// vLLM (`{"count": n, "tokens": [...]}`) answers.
async fn count_tokens(client: &Client, model: &str, text: &str) -> Result<u64, SizingError> {
    let body = json!({"content": text, "prompt": text, "model": model, "add_special": false});
    let answer = server::post_json(client, "/tokenize", &body).await.map_err(SizingError::call)?;
    answer
        .get("count")
        .and_then(Value::as_u64)
        .or_else(|| answer.get("tokens").and_then(Value::as_array).map(|t| t.len() as u64))
        .ok_or_else(|| SizingError::prompt(format!("/tokenize answered without tokens: {answer}")))
}

/// usage.prompt_tokens of a non-streaming `max_tokens: 1` request.
async fn prompt_tokens(client: &Client, model: &str, text: &str) -> Result<u64, SizingError> {
    prompt_tokens_of(client, model, vec![Message::new("user", text)]).await
}

async fn prompt_tokens_of(client: &Client, model: &str, messages: Vec<Message>) -> Result<u64, SizingError> {
    let req = ChatRequest {
        model: model.to_string(),
        messages,
        max_tokens: 1,
        stream: false,
        ..Default::default()
    };
    let prepared = client.prepare(&req).map_err(|e| SizingError::prompt(e.to_string()))?;
    let ex = client.send(prepared).await;
    if let Some(err) = ex.error {
        let kind = match err.kind {
            ErrorKind::Connect | ErrorKind::Timeout => err.kind,
            _ => ErrorKind::PromptSize,
        };
        return Err(SizingError {
            kind,
            message: format!("calibration request failed: {}", err.message),
            uncountable: false,
        });
    }
    ex.usage.input_tokens.ok_or_else(|| SizingError {
        uncountable: true,
        ..SizingError::prompt(
            "the server has no tokenizer endpoint (POST /tokenize) and reports no usage.prompt_tokens, \
             so prompt sizes can be neither built nor checked; enable usage reporting on the server",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A fake tokenizer: 3 tokens of fixed text, then 1.37 tokens a word, rounded down.
    fn fake(words: usize) -> i64 {
        3 + (words as f64 * 1.37) as i64
    }

    #[tokio::test]
    async fn search_finds_the_closest_word_count() {
        for target in [10i64, 700, 1021, 4093, 32000] {
            let calls = Cell::new(0);
            let (words, tokens) = search(target as usize / 2, target, |w| {
                calls.set(calls.get() + 1);
                async move { Ok::<i64, ()>(fake(w)) }
            })
            .await
            .unwrap();
            assert!((fake(words) - target).abs() <= 1, "target {target}: {words} words -> {}", fake(words));
            assert_eq!(tokens, fake(words), "the count returned is the words' own");
            assert!(calls.get() <= 20, "target {target}: {} calls", calls.get());
        }
    }

    #[test]
    fn tolerance_is_one_percent_with_a_floor() {
        assert_eq!(tolerance_tokens(32768), 327);
        assert_eq!(tolerance_tokens(1024), 10);
        assert_eq!(tolerance_tokens(64), 2);
    }
}
