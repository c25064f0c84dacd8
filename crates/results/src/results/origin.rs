//! Import of the origin benchmark's result JSON (agent-memory `colm_full_*.json`) into our records.
//!
//! The origin file is `{metadata, model_id?, server_env?, measurements[], staggered[], quality_summary}`.
//! Mapping decisions (each one a place where copying the origin verbatim would repeat a defect):
//! - `run` comes from the `pN` prefix of `pass_id` (run = N + 1). Ordering by timestamp within a
//!   file is only the fallback for rows without that prefix: re-run files hold only some passes of
//!   a cell (the Gemma re-run has p0 and p2 of b2/warm/streaming/1K), so numbering them 1..k by time
//!   would key p2 as run 2 and let it replace the wrong record in a merge.
//! - Non-streaming `ttft_ms` was written as 0 (or as e2e): it is imported as null, with a
//!   non-gating `origin_ttft_not_measured` flag, and the origin's number kept under
//!   `server_timings.origin`.
//! - `decode_tps` is recomputed with our definition ((out - 1) / (e2e - ttft)); the origin divided
//!   all output tokens by the decode time. Its value is kept as `server_timings.origin.decode_tps`.
//! - A batch-2 row is one row per batch (averages only): it becomes a `Group` record (wall, system
//!   TPS, average TTFT/E2E) plus one `Measurement` (request_index 0) that carries the batch's quality
//!   verdict and output, with null per-request timings and an `origin_batch_aggregate` flag. The
//!   origin's `per_request_tps` is system_tps / 2, not a mean of decode rates, so it is not put in
//!   `GroupRecord::per_request_tps` (kept under the measurement's `server_timings.origin`).
//! - Staggered rows have no context (4096 per the origin methodology, flagged) and no quality check
//!   (quality_ok = error-free, flagged `origin_quality_unchecked`); `user_a_tps`/`user_b_tps` are
//!   derived numbers with no slot and are dropped.
//! - `cooldown_actual_s` -> thermal (policy "probe"; recovered = cooldown within the configured cap).
//! - Timestamps `+00:00` are rewritten as `Z` so they compare with ours.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::store::InputError;
use ttft_model::record::QualityCode;
use ttft_model::record::{
    self, CacheState, CellKey, ErrorInfo, ErrorKind, GroupRecord, Measurement, Mode, QualityFlag, Record,
    SCHEMA_VERSION, Scenario, StaggeredRecord, ThermalRecord,
};

/// Context of the origin's staggered pairs; its rows do not say.
pub const ORIGIN_STAGGER_CONTEXT: u32 = 4096;

/// Marks the run_meta built from an origin file.
pub const ORIGIN_FORMAT: &str = "agent-memory colm_full";

/// Flag on the stand-in measurement of an imported batch row (the origin kept only batch totals).
pub const BATCH_AGGREGATE_FLAG: QualityCode = QualityCode::OriginBatchAggregate;

/// One origin row as raw JSON text plus the line it starts on (for error messages).
pub struct Row<'a> {
    pub text: &'a [u8],
    pub line: usize,
}

#[derive(Deserialize)]
struct MeasurementRow {
    model_id: Option<String>,
    context_tokens: u32,
    batch_size: u32,
    cache_state: String,
    mode: String,
    pass_id: String,
    ttft_ms: Option<f64>,
    e2e_ms: Option<f64>,
    decode_tps: Option<f64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    raw_output: Option<String>,
    quality_ok: bool,
    #[serde(default)]
    quality_structural: Vec<String>,
    error: Option<Value>,
    timestamp: String,
    cooldown_actual_s: Option<f64>,
    thermal_state_before: Option<String>,
    thermal_state_after: Option<String>,
    wall_ms: Option<f64>,
    avg_e2e_ms: Option<f64>,
    avg_ttft_ms: Option<f64>,
    total_output_tokens: Option<u64>,
    system_tps: Option<f64>,
    per_request_tps: Option<f64>,
    /// avg_tps, tpot_ms, prefill_ms, peak_memory_mb, quality_semantic, pool_utilization_pct, ...
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct StaggeredRow {
    model_id: Option<String>,
    pass_id: String,
    stagger_mode: String,
    context_tokens: Option<u32>,
    user_a_ttft_ms: Option<f64>,
    user_a_e2e_ms: Option<f64>,
    user_b_ttft_ms: Option<f64>,
    user_b_e2e_ms: Option<f64>,
    user_b_start_delay_ms: Option<f64>,
    user_b_wait_ms: Option<f64>,
    total_wall_time_ms: Option<f64>,
    system_tps: Option<f64>,
    error: Option<Value>,
    timestamp: String,
    cooldown_actual_s: Option<f64>,
    thermal_state_before: Option<String>,
    thermal_state_after: Option<String>,
}

/// File-level facts every row needs.
struct Context<'a> {
    file: &'a str,
    run_id: &'a str,
    model: Option<String>,
    max_tokens: u32,
    max_cooldown_s: f64,
}

/// Converts a parsed origin document; `measurements` and `staggered` are its rows with lines.
pub fn import(
    file: &str,
    run_id: &str,
    doc: &Value,
    measurements: &[Row],
    staggered: &[Row],
) -> Result<(Vec<Record>, Value), InputError> {
    let config = &doc["metadata"]["config"];
    let cx = Context {
        file,
        run_id,
        model: doc.get("model_id").and_then(Value::as_str).map(str::to_string),
        max_tokens: config["output_tokens"].as_u64().and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
        max_cooldown_s: config["max_cooldown_s"].as_f64().unwrap_or(240.0),
    };
    let mut records = Vec::new();
    let mut unnumbered: BTreeMap<CellKey, Vec<(String, usize)>> = BTreeMap::new();
    for row in measurements {
        let r: MeasurementRow = parse_row(&cx, row)?;
        let cell = measurement_cell(&cx, row.line, &r)?;
        if cell.batch_size > 1 && r.wall_ms.is_none() {
            return Err(bad(&cx, row.line, "batch row without wall_ms".into()));
        }
        let first = records.len();
        records.extend(measurement_records(&cx, cell.clone(), r));
        if cell.run == 0 {
            let rows = unnumbered.entry(cell.clone()).or_default();
            rows.extend(records.iter().enumerate().skip(first).map(|(i, r)| (r.started_at().to_string(), i)));
        }
    }
    for row in staggered {
        let r: StaggeredRow = parse_row(&cx, row)?;
        let record = staggered_record(&cx, row.line, r)?;
        if record.cell.run == 0 {
            let at = (record.started_at.clone(), records.len());
            unnumbered.entry(record.cell.clone()).or_default().push(at);
        }
        records.push(Record::Staggered(Box::new(record)));
    }
    number_by_time(&mut records, unnumbered);
    let run_meta = json!({
        "format": ORIGIN_FORMAT,
        "metadata": doc["metadata"],
        "model_id": doc.get("model_id"),
        "server_env": doc.get("server_env"),
        "quality_summary": doc.get("quality_summary"),
    });
    Ok((records, run_meta))
}

fn parse_row<T: for<'de> Deserialize<'de>>(cx: &Context, row: &Row) -> Result<T, InputError> {
    serde_json::from_slice(row.text).map_err(|e| InputError {
        file: cx.file.to_string(),
        line: row.line + e.line().saturating_sub(1),
        message: format!("not an origin result row: {}", crate::store::json_message(&e)),
    })
}

fn bad(cx: &Context, line: usize, message: String) -> InputError {
    InputError { file: cx.file.to_string(), line, message }
}

/// `p0_1770592933` -> 1; None when the id has no `pN` prefix.
pub fn pass_run(pass_id: &str) -> Option<u32> {
    let head = pass_id.split('_').next()?;
    head.strip_prefix('p')?.parse::<u32>().ok().map(|n| n + 1)
}

/// Fallback numbering: rows of one cell without a `pN` prefix get runs 1.. in timestamp order.
fn number_by_time(records: &mut [Record], cells: BTreeMap<CellKey, Vec<(String, usize)>>) {
    for (_, mut rows) in cells {
        rows.sort();
        let mut run = 0;
        let mut last = None;
        for (at, i) in rows {
            // A batch row yields two records with the same timestamp: one run number for both.
            if last.as_ref() != Some(&at) {
                run += 1;
                last = Some(at);
            }
            match &mut records[i] {
                Record::Measurement(m) => m.cell.run = run,
                Record::Group(g) => g.cell.run = run,
                Record::Staggered(s) => s.cell.run = run,
            }
        }
    }
}

fn measurement_cell(cx: &Context, line: usize, r: &MeasurementRow) -> Result<CellKey, InputError> {
    let cache_state = parse_cache_state(&r.cache_state)
        .ok_or_else(|| bad(cx, line, format!("unknown cache_state {:?}", r.cache_state)))?;
    let mode = parse_mode(&r.mode).ok_or_else(|| bad(cx, line, format!("unknown mode {:?}", r.mode)))?;
    let model = r.model_id.clone().or_else(|| cx.model.clone());
    let model = model.ok_or_else(|| bad(cx, line, "no model_id in the row or the file".into()))?;
    let scenario = Scenario::of(cache_state, r.batch_size);
    Ok(CellKey {
        dataset_row: None,
        model,
        scenario,
        cache_state,
        mode,
        context_tokens: r.context_tokens,
        batch_size: r.batch_size,
        run: pass_run(&r.pass_id).unwrap_or(0),
    })
}

/// The origin's cache-state names (ours, by their serde names). Kept here rather than borrowed from
/// the sweep's flag parsing so this layer stays below `config`.
fn parse_cache_state(s: &str) -> Option<CacheState> {
    [CacheState::Cold, CacheState::Warm, CacheState::Hot].into_iter().find(|c| c.as_str() == s)
}

/// The origin's mode names, with the spellings its scripts used over time.
fn parse_mode(s: &str) -> Option<Mode> {
    match s {
        "streaming" | "stream" => Some(Mode::Streaming),
        "non-streaming" | "non_streaming" | "nonstreaming" => Some(Mode::NonStreaming),
        _ => None,
    }
}

fn measurement_records(cx: &Context, cell: CellKey, r: MeasurementRow) -> Vec<Record> {
    let mut flags: Vec<QualityFlag> = r.quality_structural.iter().map(|s| structural_flag(s)).collect();
    let streaming = cell.mode == Mode::Streaming;
    // The origin wrote 0 (or e2e) where no first token was observed; null is the only honest value.
    let ttft_ms = r.ttft_ms.filter(|&t| streaming && t > 0.0);
    if let Some(t) = r.ttft_ms.filter(|_| ttft_ms.is_none()) {
        flags.push(note(
            QualityCode::OriginTtftNotMeasured,
            format!("origin recorded ttft_ms = {t}; imported as null"),
        ));
    }
    let started_at = utc_z(&r.timestamp);
    let error = r.error.as_ref().and_then(error_info);
    let thermal = thermal(cx, r.cooldown_actual_s, &r.thermal_state_before, &r.thermal_state_after);
    let mut extra: BTreeMap<String, Value> = r.rest;
    extra.insert("pass_id".into(), json!(r.pass_id));
    extra.insert("decode_tps".into(), json!(r.decode_tps));
    extra.insert("ttft_ms".into(), json!(r.ttft_ms));
    let is_batch = cell.batch_size > 1;
    let group_id = is_batch.then(|| format!("{}:{}", cx.run_id, r.pass_id));
    let mut out = Vec::new();
    if is_batch {
        extra.insert("per_request_tps".into(), json!(r.per_request_tps));
        flags.push(note(
            BATCH_AGGREGATE_FLAG,
            "origin kept one row per batch: per-request timings unknown; batch figures are in the group record"
                .into(),
        ));
        let good = r.quality_ok && error.is_none();
        out.push(Record::Group(Box::new(GroupRecord {
            schema_version: SCHEMA_VERSION,
            run_id: cx.run_id.to_string(),
            cell: cell.clone(),
            group_id: group_id.clone().unwrap_or_default(),
            started_at: started_at.clone(),
            wall_ms: r.wall_ms.unwrap_or_default(),
            system_tps: r.system_tps,
            per_request_tps: None,
            avg_ttft_ms: r.avg_ttft_ms.filter(|&t| streaming && t > 0.0),
            avg_e2e_ms: r.avg_e2e_ms,
            total_output_tokens: r.total_output_tokens.unwrap_or(0),
            // The origin judged the batch as a whole: a failed verdict counts every request.
            requests_ok: if good { cell.batch_size } else { 0 },
            requests_failed: if good { 0 } else { cell.batch_size },
            server_metrics: None,
            error: error.clone(),
        })));
    }
    let (ttft_ms, e2e_ms, input_tokens, output_tokens) = if is_batch {
        (None, None, None, None)
    } else {
        (ttft_ms, r.e2e_ms, r.input_tokens, r.output_tokens)
    };
    let expected_input_tokens =
        (!is_batch && cell.cache_state != CacheState::Hot).then_some(u64::from(cell.context_tokens));
    out.push(Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: cx.run_id.to_string(),
        cell,
        request_index: 0,
        group_id,
        started_at,
        ttft_ms,
        e2e_ms,
        input_tokens,
        output_tokens,
        expected_input_tokens,
        decode_tps: record::decode_tps(output_tokens, ttft_ms, e2e_ms),
        prefill_tps: record::prefill_tps(input_tokens, ttft_ms),
        max_tokens: cx.max_tokens,
        output_sample: record::output_sample(r.raw_output.as_deref().unwrap_or_default()),
        server_timings: Some(Box::new(json!({ "origin": extra }))),
        quality_ok: r.quality_ok,
        quality_flags: flags,
        thermal,
        error,
        ..Default::default()
    })));
    out
}

fn staggered_record(cx: &Context, line: usize, r: StaggeredRow) -> Result<StaggeredRecord, InputError> {
    let scenario = match r.stagger_mode.as_str() {
        "sequential" => Scenario::StaggeredSequential,
        "batched" => Scenario::StaggeredBatched,
        other => return Err(bad(cx, line, format!("unknown stagger_mode {other:?}"))),
    };
    let model = r.model_id.clone().or_else(|| cx.model.clone());
    let model = model.ok_or_else(|| bad(cx, line, "no model_id in the row or the file".into()))?;
    let mut flags = vec![note(
        QualityCode::OriginQualityUnchecked,
        "origin ran no quality check on staggered pairs".into(),
    )];
    if r.context_tokens.is_none() {
        flags.push(note(
            QualityCode::OriginContextAssumed,
            format!("origin rows carry no context; {ORIGIN_STAGGER_CONTEXT} per its methodology"),
        ));
    }
    let error = r.error.as_ref().and_then(error_info);
    // Older origin scripts did not write user_b_wait_ms; it is delay + B's TTFT by their definition.
    let from_wall = r.user_b_wait_ms.or_else(|| Some(r.user_b_start_delay_ms? + r.user_b_ttft_ms?));
    Ok(StaggeredRecord {
        schema_version: SCHEMA_VERSION,
        run_id: cx.run_id.to_string(),
        cell: CellKey {
            dataset_row: None,
            model,
            scenario,
            cache_state: CacheState::Cold,
            mode: Mode::Streaming,
            context_tokens: r.context_tokens.unwrap_or(ORIGIN_STAGGER_CONTEXT),
            batch_size: 2,
            run: pass_run(&r.pass_id).unwrap_or(0),
        },
        started_at: utc_z(&r.timestamp),
        stagger_delay_ms: None,
        user_a_ttft_ms: r.user_a_ttft_ms,
        user_a_e2e_ms: r.user_a_e2e_ms,
        user_b_ttft_ms: r.user_b_ttft_ms,
        user_b_e2e_ms: r.user_b_e2e_ms,
        user_b_arrival_ms: r.user_b_start_delay_ms,
        user_b_ttft_from_wall_start_ms: from_wall,
        total_wall_ms: r.total_wall_time_ms,
        system_tps: r.system_tps,
        quality_ok: error.is_none(),
        quality_flags: flags,
        thermal: thermal(cx, r.cooldown_actual_s, &r.thermal_state_before, &r.thermal_state_after),
        error,
        ..Default::default()
    })
}

/// `early_eos_45_of_64` -> code `early_eos` with the numbers in the reason; other codes verbatim.
fn structural_flag(s: &str) -> QualityFlag {
    let code = if s.starts_with("early_eos") { QualityCode::EarlyEos } else { QualityCode::from_name(s) };
    QualityFlag { flag: code, reason: format!("origin structural check: {s}"), fails_gate: true }
}

fn note(flag: QualityCode, reason: String) -> QualityFlag {
    QualityFlag { flag, reason, fails_gate: false }
}

fn error_info(v: &Value) -> Option<ErrorInfo> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(ErrorInfo::new(ErrorKind::Transport, format!("origin: {s}"))),
        other => Some(ErrorInfo::new(ErrorKind::Transport, format!("origin: {other}"))),
    }
}

fn thermal(
    cx: &Context,
    cooldown: Option<f64>,
    before: &Option<String>,
    after: &Option<String>,
) -> Option<ThermalRecord> {
    let cooldown_s = cooldown?;
    Some(ThermalRecord {
        policy: record::PolicyKind::Probe,
        baseline_tps: None,
        probe_tps: Vec::new(),
        cooldown_s,
        // The origin did not record recovery; a wait past its cap means it gave up waiting.
        recovered: cooldown_s <= cx.max_cooldown_s,
        before: before.as_ref().map(|s| Box::new(json!({ "thermal_state": s }))),
        after: after.as_ref().map(|s| Box::new(json!({ "thermal_state": s }))),
    })
}

/// `2026-02-08T23:22:21.730087+00:00` -> `2026-02-08T23:22:21.730087Z`.
pub fn utc_z(ts: &str) -> String {
    ts.strip_suffix("+00:00").map_or_else(|| ts.to_string(), |head| format!("{head}Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_ids_give_runs() {
        assert_eq!(pass_run("p0_1770592933"), Some(1));
        assert_eq!(pass_run("p2"), Some(3));
        assert_eq!(pass_run("x1"), None);
        assert_eq!(pass_run(""), None);
    }

    #[test]
    fn timestamps_become_z() {
        assert_eq!(utc_z("2026-02-08T23:22:21.7+00:00"), "2026-02-08T23:22:21.7Z");
        assert_eq!(utc_z("2026-02-08T23:22:21Z"), "2026-02-08T23:22:21Z");
    }
}
