//! GuideLLM's benchmarks report (`benchmarks.json`, report `metadata.version` 2).
//!
//! `benchmarks[]`, one per load point (a sweep holds several): `config.strategy` (type, streams
//! or rate), `config.backend` (model, stream), `requests.successful[]` / `errored[]` /
//! `incomplete[]` (the requests the report kept: it may sample), each with `request_start_time`
//! (epoch seconds), `request_latency` (s), `time_to_first_token_ms`, `inter_token_latency_ms` (a
//! per-request mean: no per-token times), `prompt_tokens` / `output_tokens` / `cached_tokens` (the
//! server's usage where it sent one), `output`. `metrics` holds the distributions over all
//! requests (`{successful: {mean, median, ...}}`); where no request was kept, one record stands
//! for the mean request, with 1000 / mean ITL as its decode rate.

use serde_json::Value;

use super::{Request, Run, count};
use crate::store::{InputError, json_message};

pub fn read(file: &str, text: &str) -> Result<Vec<Run>, InputError> {
    let doc: Value = serde_json::from_str(text)
        .map_err(|e| InputError::new(file, e.line(), format!("not valid JSON: {}", json_message(&e))))?;
    let Some(benchmarks) = doc["benchmarks"].as_array() else {
        return Err(InputError::new(file, 0, "GuideLLM report without a benchmarks list"));
    };
    let mut runs = Vec::new();
    for b in benchmarks {
        let config = &b["config"];
        let backend = &config["backend"];
        let model = backend["model"].as_str().unwrap_or_default().to_string();
        if model.is_empty() {
            return Err(InputError::new(file, 0, "GuideLLM benchmark without config.backend.model"));
        }
        let mut run = Run {
            model,
            streaming: backend["stream"].as_bool().unwrap_or(true),
            load: load(&config["strategy"]),
            max_tokens: backend["max_tokens"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
            settings: serde_json::json!({
                "guidellm": doc["metadata"],
                "strategy": config["strategy"],
                "backend": {"kind": backend["kind"], "target": backend["target"], "request_format": backend["request_format"]},
            }),
            ..Default::default()
        };
        for (list, failed) in [("successful", false), ("errored", true), ("incomplete", true)] {
            for r in b["requests"][list].as_array().into_iter().flatten() {
                run.requests.push(request(r, failed.then(|| error_of(r, list))));
            }
        }
        let total = b["metrics"]["request_totals"]["successful"].as_u64();
        let kept = run.requests.iter().filter(|r| r.error.is_none()).count() as u64;
        if run.requests.is_empty() {
            run.requests.push(mean_request(b));
            run.aggregate_of = total;
        } else if let Some(total) = total.filter(|&t| t > kept) {
            run.load.push_str(&format!(" (the report kept {kept} of {total} successful requests)"));
        }
        runs.push(run);
    }
    Ok(runs)
}

fn request(r: &Value, error: Option<String>) -> Request {
    let ms = |k: &str| r[k].as_f64();
    Request {
        started_at: r["request_start_time"].as_f64().map(epoch).unwrap_or_default(),
        ttft_ms: ms("time_to_first_token_ms"),
        e2e_ms: r["request_latency"].as_f64().map(|s| s * 1000.0),
        input_tokens: count(&r["prompt_tokens"]),
        output_tokens: count(&r["output_tokens"]),
        cached_tokens: count(&r["cached_tokens"]),
        output_text: r["output"].as_str().unwrap_or_default().to_string(),
        error,
        ..Default::default()
    }
}

fn error_of(r: &Value, list: &str) -> String {
    let info = &r["info"];
    info["error"].as_str().or(r["error"].as_str()).map_or_else(|| format!("{list} request"), str::to_string)
}

/// The mean request of a benchmark that kept no requests.
fn mean_request(b: &Value) -> Request {
    let mean = |k: &str| b["metrics"][k]["successful"]["mean"].as_f64();
    let round = |v: Option<f64>| v.map(|t| t.round() as u64);
    Request {
        started_at: b["start_time"].as_f64().map(epoch).unwrap_or_default(),
        ttft_ms: mean("time_to_first_token_ms"),
        e2e_ms: mean("request_latency").map(|s| s * 1000.0),
        input_tokens: round(mean("prompt_token_count")),
        output_tokens: round(mean("output_token_count")),
        decode_tps: mean("inter_token_latency_ms").filter(|t| *t > 0.0).map(|t| 1000.0 / t),
        ..Default::default()
    }
}

/// "at 2 concurrent streams (concurrent)", "at 5 requests/s (constant)".
fn load(strategy: &Value) -> String {
    let kind = strategy["type_"].as_str().unwrap_or("unknown strategy");
    match (strategy["streams"].as_u64(), strategy["rate"].as_f64()) {
        (Some(n), _) => format!("at {n} concurrent streams ({kind})"),
        (None, Some(rate)) => format!("at {rate} requests/s ({kind})"),
        _ => format!("by the {kind} strategy"),
    }
}

/// Epoch seconds -> RFC 3339 UTC with microseconds.
fn epoch(s: f64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(s.max(0.0));
    humantime::format_rfc3339_micros(at).to_string()
}
