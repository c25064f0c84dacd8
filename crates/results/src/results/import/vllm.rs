//! vLLM's `vllm bench serve --save-result` JSON (one object; `--append-result` adds one per line).
//!
//! Per request (with `--save-detailed`): `ttfts` and `latencies` (seconds from send), `itls`
//! (seconds between tokens), `input_lens` (the tool's own tokenizer count of the prompt it built),
//! `output_lens` (the server's usage where it sent one, else the tool's count), `start_times`
//! (`time.perf_counter()`: seconds on an arbitrary clock, so only their differences mean anything),
//! `errors` ("" for a success). Without `--save-detailed` only aggregates are left (`mean_ttft_ms`,
//! `mean_tpot_ms`, `mean_e2el_ms`, token totals): one record stands for the mean request. vLLM's
//! request functions always stream. The file does not say `max_tokens`, the cache state or the
//! hardware. Its `date` is the machine's local time without a zone: kept without one.

use serde::Deserialize;
use serde_json::Value;

use super::{Request, Run, ms, tokens_at};
use crate::store::{InputError, json_message};

#[derive(Deserialize)]
struct Result {
    date: Option<String>,
    model_id: Option<String>,
    tokenizer_id: Option<String>,
    num_prompts: Option<Value>,
    request_rate: Option<Value>,
    max_concurrency: Option<Value>,
    completed: Option<u64>,
    total_input_tokens: Option<Value>,
    total_output_tokens: Option<Value>,
    mean_ttft_ms: Option<f64>,
    mean_tpot_ms: Option<f64>,
    mean_e2el_ms: Option<f64>,
    #[serde(default)]
    input_lens: Vec<Value>,
    #[serde(default)]
    output_lens: Vec<Value>,
    #[serde(default)]
    ttfts: Vec<Option<f64>>,
    #[serde(default)]
    itls: Vec<Vec<f64>>,
    #[serde(default)]
    latencies: Vec<Option<f64>>,
    #[serde(default)]
    start_times: Vec<Option<f64>>,
    #[serde(default)]
    errors: Vec<Option<String>>,
    #[serde(default)]
    generated_texts: Vec<Option<String>>,
}

pub fn read(file: &str, text: &str) -> std::result::Result<Vec<Run>, InputError> {
    let mut runs = Vec::new();
    // `--append-result` writes one object per line; a single result may be on one line or pretty.
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut at = 0;
    while let Some(next) = stream.next() {
        let start = at + (text[at..].len() - text[at..].trim_start().len());
        let line = 1 + text[..start].matches('\n').count();
        let value = next
            .map_err(|e| InputError::new(file, e.line(), format!("not valid JSON: {}", json_message(&e))))?;
        same_lengths(file, line, &value)?;
        let r: Result = serde_json::from_value(value.clone()).map_err(|e| {
            InputError::new(file, line, format!("not a vLLM bench serve result: {}", json_message(&e)))
        })?;
        runs.push(run(file, line, r, value)?);
        at = stream.byte_offset();
    }
    Ok(runs)
}

fn run(file: &str, line: usize, r: Result, mut raw: Value) -> std::result::Result<Run, InputError> {
    let model = r
        .model_id
        .clone()
        .or(r.tokenizer_id.clone())
        .ok_or_else(|| InputError::new(file, line, "vLLM result without model_id"))?;
    let date = r.date.as_deref().and_then(local_date);
    let concurrency = r.max_concurrency.as_ref().filter(|v| !v.is_null()).map(|v| v.to_string());
    let rate = r.request_rate.as_ref().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    let load = format!(
        "{} requests at max concurrency {}, request rate {}/s",
        r.num_prompts.as_ref().map_or("?".into(), Value::to_string),
        concurrency.unwrap_or_else(|| "unlimited".into()),
        rate.unwrap_or_else(|| "?".into())
    );
    let lens = |field: &str, values: &[Value], i: usize| match values.get(i) {
        Some(v) => tokens_at(file, line, &format!("{field}[{i}]"), v),
        None => Ok(None),
    };
    let first_start = r.start_times.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let mut requests = Vec::new();
    for (i, ttft) in r.ttfts.iter().enumerate() {
        let error = r.errors.get(i).cloned().flatten().filter(|e| !e.is_empty());
        let offset_s = r.start_times.get(i).copied().flatten().map(|t| t - first_start);
        let input = lens("input_lens", &r.input_lens, i)?;
        requests.push(Request {
            started_at: stamp(date, offset_s.unwrap_or(0.0)),
            ttft_ms: ttft.map(ms),
            e2e_ms: r.latencies.get(i).copied().flatten().map(ms),
            itl_ms: r.itls.get(i).map(|v| v.iter().copied().map(ms).collect()).unwrap_or_default(),
            // vLLM counts prompts with its own tokenizer only.
            input_tokens: input,
            tool_input_tokens: input,
            output_tokens: lens("output_lens", &r.output_lens, i)?,
            output_text: r.generated_texts.get(i).cloned().flatten().unwrap_or_default(),
            error,
            ..Default::default()
        });
    }
    let mut aggregate_of = None;
    if requests.is_empty() {
        // Aggregates only: the mean request, with the tool's own decode rate (1000 / mean TPOT).
        let n = r.completed.unwrap_or(0);
        let mean = |field: &str, v: &Option<Value>| -> std::result::Result<Option<u64>, InputError> {
            let total = match v {
                Some(v) => super::count_at(file, line, field, v)?,
                None => None,
            };
            Ok(total.filter(|_| n > 0).map(|t| (t as f64 / n as f64).round() as u64))
        };
        let (input, output) = (
            mean("total_input_tokens", &r.total_input_tokens)?,
            mean("total_output_tokens", &r.total_output_tokens)?,
        );
        requests.push(Request {
            started_at: stamp(date, 0.0),
            ttft_ms: r.mean_ttft_ms,
            e2e_ms: r.mean_e2el_ms,
            input_tokens: input,
            tool_input_tokens: input,
            output_tokens: output,
            decode_tps: r.mean_tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t),
            ..Default::default()
        });
        aggregate_of = Some(n);
    }
    // The settings, without the per-request arrays (they are in the records now).
    if let Value::Object(map) = &mut raw {
        for key in PER_REQUEST {
            map.remove(key);
        }
    }
    Ok(Run {
        model,
        // Every request function of `vllm bench serve` streams.
        streaming: true,
        requests,
        aggregate_of,
        load,
        max_tokens: 0,
        settings: raw,
    })
}

/// The arrays that hold one entry per request, in the order the tool sent them.
const PER_REQUEST: [&str; 9] = [
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "errors",
    "generated_texts",
];

/// Every per-request array the result holds has the same length: request i is entry i of each,
/// so arrays of different lengths (a file cut short or edited) cannot be paired up. Refused, not
/// truncated to the shortest. (An aggregates-only result keeps some of them, equally long.)
fn same_lengths(file: &str, line: usize, value: &Value) -> std::result::Result<(), InputError> {
    let lengths: Vec<(&str, usize)> =
        PER_REQUEST.iter().filter_map(|k| Some((*k, value.get(k)?.as_array()?.len()))).collect();
    if lengths.windows(2).all(|w| w[0].1 == w[1].1) {
        return Ok(());
    }
    let shown: Vec<String> = lengths.iter().map(|(k, n)| format!("{k} {n}")).collect();
    Err(InputError::new(
        file,
        line,
        format!(
            "per-request arrays differ in length ({}): each must hold one entry per request",
            shown.join(", ")
        ),
    ))
}

/// `20261123-094501` -> seconds since the epoch of that wall-clock reading (no zone).
fn local_date(date: &str) -> Option<f64> {
    let (d, t) = date.split_once('-')?;
    if d.len() != 8 || t.len() != 6 {
        return None;
    }
    let text = format!("{}-{}-{}T{}:{}:{}Z", &d[..4], &d[4..6], &d[6..], &t[..2], &t[2..4], &t[4..]);
    let at = humantime::parse_rfc3339(&text).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64())
}

/// The date plus an offset, as RFC 3339 without a zone (vLLM's date has none); "" without a date.
fn stamp(date: Option<f64>, offset_s: f64) -> String {
    let Some(base) = date else { return String::new() };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64((base + offset_s.max(0.0)).max(0.0));
    let text = humantime::format_rfc3339_millis(at).to_string();
    text.strip_suffix('Z').map_or(text.clone(), str::to_string)
}
