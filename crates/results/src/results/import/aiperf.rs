//! AIPerf's profile export: `profile_export.jsonl` (one record per request) and
//! `profile_export_aiperf.json` (aggregates and the run's configuration).
//!
//! A request record is `{metadata, metrics, error?}`: `metadata.request_start_ns` is a wall clock
//! (ns since the epoch); each metric is `{value, unit}` in ms or tokens: `time_to_first_token`,
//! `request_latency`, `inter_chunk_latency` (ms between streamed chunks: our token offsets),
//! `input_sequence_length`/`output_sequence_length` (AIPerf's tokenizer), `usage_prompt_tokens`/
//! `usage_completion_tokens`/`usage_prompt_cache_read_tokens` (the server's usage). Records of a
//! warm-up phase are left out, as AIPerf's own statistics leave them out. The records name no
//! model: it is read from the aggregate file beside them when there is one.
//!
//! The aggregate file keeps `{unit, avg, p50, ...}` per metric and `input_config` (model, endpoint,
//! streaming, load phases): one record stands for the mean request, with AIPerf's own per-user
//! output rate as its decode rate.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::{Request, Run, count};
use crate::store::{InputError, json_message};

/// The aggregate file AIPerf writes beside its records.
pub const AGGREGATE_FILE: &str = "profile_export_aiperf.json";

/// The per-request records AIPerf writes in its output directory.
pub const RECORDS_FILE: &str = "profile_export.jsonl";

/// The file of an AIPerf output directory to read: its per-request records where it wrote them
/// (they hold every request; the aggregate beside them still names the model), else its
/// aggregate; None when `dir` holds neither.
pub fn file_in(dir: &Path) -> Option<std::path::PathBuf> {
    [RECORDS_FILE, AGGREGATE_FILE].iter().map(|name| dir.join(name)).find(|p| p.is_file())
}

#[derive(Deserialize)]
struct Record {
    metadata: Metadata,
    #[serde(default)]
    metrics: serde_json::Map<String, Value>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Metadata {
    request_start_ns: Option<u64>,
    benchmark_phase: Option<String>,
    #[serde(default)]
    was_cancelled: bool,
}

/// `metrics[name].value` as a number (None when absent or not a number).
fn value(metrics: &serde_json::Map<String, Value>, name: &str) -> Option<f64> {
    metrics.get(name)?.get("value")?.as_f64()
}

fn tokens(metrics: &serde_json::Map<String, Value>, name: &str) -> Option<u64> {
    count(metrics.get(name)?.get("value")?)
}

pub fn read_records(file: &str, text: &str, dir: Option<&Path>) -> Result<Vec<Run>, InputError> {
    let mut requests = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(line).map_err(|e| {
            InputError::new(file, i + 1, format!("not an AIPerf profile_export record: {}", json_message(&e)))
        })?;
        if r.metadata.benchmark_phase.as_deref().is_some_and(|p| p != "profiling") {
            continue;
        }
        let m = &r.metrics;
        let error = match (&r.error, r.metadata.was_cancelled) {
            (Some(e), _) if !e.is_null() => {
                Some(e.get("message").and_then(Value::as_str).map_or_else(|| e.to_string(), str::to_string))
            }
            (_, true) => Some("cancelled".to_string()),
            _ => None,
        };
        let chunks: Vec<f64> = m
            .get("inter_chunk_latency")
            .and_then(|v| v.get("value"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let tool_input = tokens(m, "input_sequence_length");
        requests.push(Request {
            started_at: r.metadata.request_start_ns.map(wall_clock).unwrap_or_default(),
            ttft_ms: value(m, "time_to_first_token"),
            e2e_ms: value(m, "request_latency"),
            itl_ms: chunks,
            input_tokens: tokens(m, "usage_prompt_tokens").or(tool_input),
            tool_input_tokens: tool_input,
            output_tokens: tokens(m, "usage_completion_tokens").or(tokens(m, "output_sequence_length")),
            cached_tokens: tokens(m, "usage_prompt_cache_read_tokens"),
            error,
            ..Default::default()
        });
    }
    // The records name no model and no load: the aggregate file beside them does.
    let beside = dir.map(|d| d.join(AGGREGATE_FILE)).and_then(|p| {
        ttft_model::input_file::read_text(&p, ttft_model::input_file::Limit::RESULT_SIDECAR).ok()
    });
    let config: Option<Value> = beside.and_then(|t| serde_json::from_str(&t).ok());
    let mut run = describe(config.as_ref());
    if run.model.is_empty() {
        run.model = format!("unknown (no {AGGREGATE_FILE} beside the records)");
    }
    run.requests = requests;
    Ok(vec![run])
}

pub fn read_aggregate(file: &str, text: &str) -> Result<Vec<Run>, InputError> {
    let doc: Value = serde_json::from_str(text)
        .map_err(|e| InputError::new(file, e.line(), format!("not valid JSON: {}", json_message(&e))))?;
    let avg = |name: &str| doc.get(name)?.get("avg")?.as_f64();
    let mut run = describe(Some(&doc));
    if run.model.is_empty() {
        return Err(InputError::new(file, 0, "AIPerf export without input_config.models"));
    }
    let n = avg("request_count").or(avg("completed_request_count")).unwrap_or(0.0) as u64;
    let round = |v: Option<f64>| v.map(|t| t.round() as u64);
    run.requests = vec![Request {
        started_at: doc.get("start_time").and_then(Value::as_str).unwrap_or_default().to_string(),
        ttft_ms: avg("time_to_first_token"),
        e2e_ms: avg("request_latency"),
        input_tokens: round(avg("usage_prompt_tokens").or(avg("input_sequence_length"))),
        tool_input_tokens: round(avg("input_sequence_length")),
        output_tokens: round(avg("usage_completion_tokens").or(avg("output_sequence_length"))),
        cached_tokens: round(avg("usage_prompt_cache_read_tokens")),
        decode_tps: avg("output_token_throughput_per_user"),
        ..Default::default()
    }];
    run.aggregate_of = Some(n);
    Ok(vec![run])
}

/// Model, streaming, load and settings from an aggregate document (or nothing).
fn describe(doc: Option<&Value>) -> Run {
    let Some(doc) = doc else { return Run { streaming: true, ..Default::default() } };
    let config = &doc["input_config"];
    let model = config["models"]["items"][0]["name"].as_str().unwrap_or_default().to_string();
    let phases: Vec<String> = config["phases"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["kind"] == "profiling" || p["name"] == "profiling")
                .map(|p| match p["concurrency"].as_u64() {
                    Some(c) => format!("at concurrency {c}"),
                    None => format!("as {}", p["type"].as_str().unwrap_or("load")),
                })
                .collect()
        })
        .unwrap_or_default();
    Run {
        model,
        streaming: config["endpoint"]["streaming"].as_bool().unwrap_or(true),
        load: phases.join(", "),
        // AIPerf's output length is a target of its dataset, not a limit it states it sent.
        max_tokens: 0,
        settings: serde_json::json!({
            "aiperf_version": doc["aiperf_version"],
            "input_config": config,
            "run_info": doc["run_info"],
        }),
        ..Default::default()
    }
}

/// ns since the epoch -> RFC 3339 UTC with microseconds.
fn wall_clock(ns: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_micros(at).to_string()
}
