//! The origin benchmark's `benchmarks/streaming_benchmark.py` output (docs/agent-memory.md):
//! `{benchmark: "streaming_comparison", timestamp, model_id, git_sha, platform, machine, settings,
//! results[]}`. A row of `results` is one request (`mode`, `cache_state` cold/warm/hot,
//! `context_tokens`, `ttft_ms`, `e2e_ms`, `decode_tps`, `tpot_ms`, `output_tokens`, `input_tokens`,
//! `batch_size`, `run`), one concurrent pair (`cache_state` "concurrent_2x": `wall_ms`,
//! `avg_ttft_ms`, `avg_e2e_ms`, `total_output_tokens`, `system_tps`), or a failure (`error`).
//!
//! What the rows become, and why:
//! - a request: a measurement of its cache state, batch size 1. The script's rows labelled
//!   `batch_size` 2 are the same single requests sent again one at a time (only its concurrent_2x
//!   rows are concurrent), so they are batch-1 runs of the same cells, flagged with the label.
//! - non-streaming `ttft_ms` is the script's E2E (it writes E2E there): null here, as in our records;
//!   its non-streaming `decode_tps` (output over E2E) is no decode rate: null. Streaming decode is
//!   ours, `(output_tokens - 1) / (e2e - ttft)`, from its numbers.
//! - `context_tokens` is the size the script claims (it cuts 4 characters per token), so it is the
//!   expected input; `input_tokens` is the server's usage.
//! - the file keeps no cache evidence: every record says so in its `imported` flag, and nothing
//!   confirms a cache state.
//! - a concurrent pair: a group record of 2 requests with the script's wall time, averages and
//!   system rate (the file keeps no per-request numbers of a pair).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{IMPORTED_FLAG, Imported, tokens_at};
use crate::store::InputError;
use ttft_model::record::{
    self, CacheState, CellKey, ErrorInfo, ErrorKind, GroupRecord, Measurement, Mode, QualityCode,
    QualityFlag, Record, SCHEMA_VERSION, Scenario,
};

/// What the importer is called in messages and metadata.
pub const NAME: &str = "the origin's streaming_benchmark.py";

/// Whether the top-level keys are this format's.
pub fn sniffed(has: &dyn Fn(&str) -> bool) -> bool {
    has("benchmark") && has("results") && has("settings") && !has("measurements")
}

pub fn import(file: &str, run_id: &str, text: &str) -> Result<Imported, InputError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| InputError::new(file, e.line(), e.to_string()))?;
    let bad = |what: String| InputError::new(file, 0, what);
    if doc["benchmark"] != "streaming_comparison" {
        return Err(bad(format!("benchmark {}: not \"streaming_comparison\" ({NAME})", doc["benchmark"])));
    }
    let rows = doc["results"].as_array().ok_or_else(|| bad("results: not an array".into()))?;
    let model = doc["model_id"].as_str().unwrap_or("unknown").to_string();
    let started_at = doc["timestamp"].as_str().map(super::super::origin::utc_z).unwrap_or_default();
    let max_tokens =
        doc["settings"]["output_tokens"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    let mut runs: BTreeMap<CellKey, u32> = BTreeMap::new();
    let mut records = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let at = |field: &str| format!("results[{i}].{field}");
        let mode = match row["mode"].as_str() {
            Some("streaming") => Mode::Streaming,
            Some("non-streaming") => Mode::NonStreaming,
            other => {
                return Err(bad(format!("{}: {other:?} is neither streaming nor non-streaming", at("mode"))));
            }
        };
        let context =
            row["context_tokens"].as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                bad(format!("{}: {} is not a token count", at("context_tokens"), row["context_tokens"]))
            })?;
        let label = row["batch_size"].as_u64().unwrap_or(1);
        let (scenario, cache_state, batch_size) = match row["cache_state"].as_str() {
            Some("cold") => (Scenario::Cold, CacheState::Cold, 1),
            Some("warm") => (Scenario::Warm, CacheState::Warm, 1),
            Some("hot") => (Scenario::Hot, CacheState::Hot, 1),
            Some("concurrent_2x") => (Scenario::Concurrent, CacheState::Cold, 2),
            other => return Err(bad(format!("{}: unknown cache state {other:?}", at("cache_state")))),
        };
        let mut cell = CellKey {
            dataset_row: None,
            model: model.clone(),
            scenario,
            cache_state,
            mode,
            context_tokens: context,
            batch_size,
            run: 0,
        };
        let run = runs.entry(cell.clone()).or_default();
        *run += 1;
        cell.run = *run;
        let error =
            row["error"].as_str().map(|e| ErrorInfo::new(ErrorKind::Transport, format!("{NAME}: {e}")));
        let ms = |field: &str| row[field].as_f64().filter(|v| v.is_finite() && *v >= 0.0);
        let streaming = mode == Mode::Streaming;
        let mut reason = format!(
            "imported from {NAME}: the file keeps no cache evidence ('{}' as the script claims it, never \
             confirmed), nor the hardware",
            cache_state.as_str()
        );
        if scenario == Scenario::Concurrent {
            records.push(Record::Group(Box::new(GroupRecord {
                schema_version: SCHEMA_VERSION,
                run_id: run_id.to_string(),
                cell,
                group_id: format!("{run_id}-{i}"),
                started_at: started_at.clone(),
                wall_ms: ms("wall_ms").unwrap_or(0.0),
                system_tps: ms("system_tps"),
                per_request_tps: ms("per_request_tps"),
                avg_ttft_ms: ms("avg_ttft_ms").filter(|_| streaming),
                avg_e2e_ms: ms("avg_e2e_ms"),
                total_output_tokens: tokens_at(
                    file,
                    0,
                    &at("total_output_tokens"),
                    &row["total_output_tokens"],
                )?
                .unwrap_or(0),
                requests_ok: if error.is_some() { 0 } else { 2 },
                requests_failed: if error.is_some() { 2 } else { 0 },
                server_metrics: None,
                error,
            })));
            continue;
        }
        if label > 1 {
            reason.push_str(&format!(
                "; labelled batch_size {label} in the file, but sent alone: the script repeats its single \
                 requests under every batch size (only its concurrent_2x rows are concurrent)"
            ));
        }
        let output_tokens = tokens_at(file, 0, &at("output_tokens"), &row["output_tokens"])?;
        let input_tokens = tokens_at(file, 0, &at("input_tokens"), &row["input_tokens"])?;
        let ttft_ms = ms("ttft_ms").filter(|_| streaming && error.is_none());
        let e2e_ms = ms("e2e_ms").filter(|_| error.is_none());
        records.push(Record::Measurement(Box::new(Measurement {
            schema_version: SCHEMA_VERSION,
            run_id: run_id.to_string(),
            cell,
            started_at: started_at.clone(),
            ttft_ms,
            e2e_ms,
            input_tokens,
            expected_input_tokens: Some(u64::from(context)),
            output_tokens,
            decode_tps: record::decode_tps(output_tokens, ttft_ms, e2e_ms),
            prefill_tps: record::prefill_tps(input_tokens, ttft_ms),
            max_tokens,
            quality_ok: error.is_none(),
            quality_flags: vec![QualityFlag {
                flag: QualityCode::Other(IMPORTED_FLAG.into()),
                reason,
                fails_gate: false,
            }],
            error,
            ..Default::default()
        })));
    }
    let meta = serde_json::json!({
        "format": NAME,
        "imported": [{
            "tool": NAME,
            "model": model,
            "settings": doc["settings"],
            "git_sha": doc["git_sha"],
            "platform": doc["platform"],
            "timestamp": doc["timestamp"],
        }],
    });
    Ok(Imported { records, meta })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"benchmark": "streaming_comparison", "timestamp": "2026-11-28T08:53:28.348983+00:00",
      "model_id": "m", "git_sha": "unknown", "platform": "p", "machine": "x86_64",
      "settings": {"contexts": [256], "batch_sizes": [1, 2], "runs_per_scenario": 1, "output_tokens": 16},
      "results": [
        {"mode": "streaming", "cache_state": "warm", "context_tokens": 256, "ttft_ms": 266.8, "e2e_ms": 562.3,
         "decode_tps": 54.1, "tpot_ms": 18.5, "output_tokens": 16, "input_tokens": 294, "peak_memory_mb": 0.0,
         "batch_size": 1, "run": 0},
        {"mode": "non-streaming", "cache_state": "cold", "context_tokens": 256, "ttft_ms": 444.4, "e2e_ms": 444.4,
         "decode_tps": 36.0, "tpot_ms": 27.8, "output_tokens": 16, "input_tokens": 294, "peak_memory_mb": 0.0,
         "batch_size": 2, "run": 0},
        {"mode": "streaming", "cache_state": "warm", "context_tokens": 256, "batch_size": 2, "run": 0, "error": "boom"},
        {"mode": "streaming", "cache_state": "concurrent_2x", "context_tokens": 256, "wall_ms": 700.0,
         "avg_e2e_ms": 650.0, "avg_ttft_ms": 300.0, "total_output_tokens": 32, "system_tps": 45.7,
         "per_request_tps": 22.9, "batch_size": 2, "run": 0}
      ]}"#;

    #[test]
    fn rows_become_records_of_their_cache_state_sent_alone() {
        let imported = import("f.json", "f", FILE).unwrap();
        let r = &imported.records;
        assert_eq!(r.len(), 4);
        let Record::Measurement(warm) = &r[0] else { panic!("{:?}", r[0]) };
        assert_eq!((warm.cell.cache_state, warm.cell.batch_size, warm.cell.run), (CacheState::Warm, 1, 1));
        assert_eq!(
            (warm.input_tokens, warm.expected_input_tokens, warm.max_tokens),
            (Some(294), Some(256), 16)
        );
        // Ours: 15 tokens over 295.5 ms, not the script's 54.1.
        assert!((warm.decode_tps.unwrap() - 15.0 / 0.2955).abs() < 1e-6);
        assert_eq!(warm.cache_state_confirmed, None);
        assert_eq!(warm.started_at, "2026-11-28T08:53:28.348983Z");
        let Record::Measurement(cold) = &r[1] else { panic!() };
        assert_eq!((cold.ttft_ms, cold.decode_tps, cold.cell.batch_size), (None, None, 1));
        assert!(cold.quality_flags[0].reason.contains("labelled batch_size 2"), "{:?}", cold.quality_flags);
        let Record::Measurement(failed) = &r[2] else { panic!() };
        assert_eq!(failed.cell.run, 2, "the second warm streaming run of the cell");
        assert!(failed.error.as_ref().unwrap().message.contains("boom"));
        let Record::Group(pair) = &r[3] else { panic!() };
        assert_eq!((pair.cell.batch_size, pair.requests_ok, pair.total_output_tokens), (2, 2, 32));
        assert_eq!(imported.meta["format"], NAME);
    }

    #[test]
    fn a_row_that_does_not_add_up_is_refused_naming_it() {
        let Err(err) = import("f.json", "f", &FILE.replace("\"warm\"", "\"tepid\"")) else {
            panic!("a row of an unknown cache state was read")
        };
        let err = err.to_string();
        assert!(err.contains("results[0].cache_state") && err.contains("tepid"), "{err}");
    }
}
