//! Result files other benchmark tools publish, read into our records: vLLM's `bench serve`
//! result JSON, AIPerf's profile export (per-request JSONL and aggregate JSON) and GuideLLM's
//! benchmarks report. What each importer maps, and what no such file can tell, is in
//! docs/import.md.
//!
//! Formats are told apart by content: the top-level keys at the head of the file (`sniff`), never
//! by the file name alone. Every importer maps per-request TTFT, ITL and token counts where the
//! file holds them, and aggregates otherwise (one record standing for the mean request, flagged).
//! Every imported record carries the non-gating flag `imported` whose reason says what the file
//! cannot know (the cache state, the hardware, and how requests overlapped); verify turns it into
//! an info finding, report into a note. With `--hardware` and a model, verify's physics ceilings
//! apply to imported records like to ours: a decode rate above what memory bandwidth allows is an
//! error in anyone's file.
//!
//! Imported records are cold (our key has no "unknown" cache state) and batch size 1: requests
//! the tool sent concurrently are single measurements of one cell, one run each, in the order the
//! tool started them. The physics ceiling of a single stream bounds every stream of a batch, so
//! the ceilings hold either way.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use serde_json::Value;

use super::scan::ObjectScanner;
use crate::store::InputError;
use ttft_model::record::QualityCode;
use ttft_model::record::{
    self, CacheState, CellKey, ErrorInfo, ErrorKind, Measurement, Mode, QualityFlag, Record, SCHEMA_VERSION,
    Scenario,
};

pub mod aiperf;
mod guidellm;
pub mod origin_streaming;
mod vllm;

/// The flag every imported record carries (a code of ours kept as `QualityCode::Other`, so
/// readers that do not know it keep it verbatim).
pub const IMPORTED_FLAG: &str = "imported";

/// The tools whose files `load` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tool {
    /// `vllm bench serve --save-result [--save-detailed]` (also `--append-result`: one per line).
    Vllm,
    /// AIPerf's `profile_export.jsonl`: one record per request.
    AiperfRecords,
    /// AIPerf's `profile_export_aiperf.json`: aggregates only.
    AiperfAggregate,
    /// GuideLLM's `benchmarks.json` report.
    Guidellm,
    /// The origin benchmark's own `streaming_benchmark.py` output (its cache states kept as it
    /// claims them: `origin_streaming`).
    OriginStreaming,
}

impl Tool {
    /// The tool as people name it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Vllm => "vLLM bench serve",
            Tool::AiperfRecords | Tool::AiperfAggregate => "AIPerf",
            Tool::Guidellm => "GuideLLM",
            Tool::OriginStreaming => origin_streaming::NAME,
        }
    }
}

/// How many bytes of a file's head `sniff` is given (top-level keys that tell a format are there).
pub const SNIFF_BYTES: usize = 64 * 1024;

/// The tool whose file starts with `head` (the first JSON object's top-level keys decide), or None
/// for anything else (our own files, the origin's, or unknown JSON).
pub fn sniff(head: &[u8]) -> Option<Tool> {
    let keys = top_level_keys(head);
    let has = |k: &str| keys.iter().any(|x| x == k);
    if has("backend") && has("model_id") && has("num_prompts") && (has("completed") || has("duration")) {
        return Some(Tool::Vllm);
    }
    if has("metadata") && has("metrics") && !has("measurements") {
        return Some(Tool::AiperfRecords);
    }
    if has("input_config") && (has("time_to_first_token") || has("request_latency") || has("records")) {
        return Some(Tool::AiperfAggregate);
    }
    if has("benchmarks") && !has("measurements") && !has("records") {
        return Some(Tool::Guidellm);
    }
    if origin_streaming::sniffed(&has) {
        return Some(Tool::OriginStreaming);
    }
    None
}

/// The keys of the first top-level object in `head`, as far as `head` goes (a value cut off by the
/// end of the head ends the list).
fn top_level_keys(head: &[u8]) -> Vec<String> {
    let mut sc = ObjectScanner::new(Cursor::new(head), "head");
    let mut keys = Vec::new();
    if !sc.begin().unwrap_or(false) {
        return keys;
    }
    let mut buf = Vec::new();
    while let Ok(Some(key)) = sc.next_key() {
        keys.push(key);
        if sc.value(&mut buf).is_err() {
            break;
        }
    }
    keys
}

/// What an import yields: records and one metadata document (the tool's settings, verbatim).
pub struct Imported {
    pub records: Vec<Record>,
    pub meta: Value,
}

/// Reads a whole file of `tool`'s format; `run_id` names its records' run (the file's stem);
/// `dir`: the file's directory (AIPerf names the model only in the aggregate file beside its records).
pub fn import(
    tool: Tool,
    file: &str,
    run_id: &str,
    bytes: &[u8],
    dir: Option<&Path>,
) -> Result<Imported, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        InputError::new(file, line, "not valid UTF-8")
    })?;
    let runs = match tool {
        // Its rows carry their own cells (cache states, modes): not a load of cold requests.
        Tool::OriginStreaming => return origin_streaming::import(file, run_id, text),
        Tool::Vllm => vllm::read(file, text)?,
        Tool::AiperfRecords => aiperf::read_records(file, text, dir)?,
        Tool::AiperfAggregate => aiperf::read_aggregate(file, text)?,
        Tool::Guidellm => guidellm::read(file, text)?,
    };
    for run in &runs {
        for (i, r) in run.requests.iter().enumerate() {
            let counts = [
                ("input tokens", r.input_tokens),
                ("prompt tokens by the tool's count", r.tool_input_tokens),
                ("output tokens", r.output_tokens),
                ("cached tokens", r.cached_tokens),
            ];
            if let Some((what, n)) =
                counts.iter().find_map(|(w, n)| n.filter(|&n| n > MAX_REQUEST_TOKENS).map(|n| (w, n)))
            {
                return Err(InputError::new(
                    file,
                    0,
                    format!(
                        "request {} of model {}: {n} {what} is more than any request holds (at most \
                         {MAX_REQUEST_TOKENS})",
                        i + 1,
                        run.model
                    ),
                ));
            }
        }
    }
    let mut records = Vec::new();
    let mut numbering = BTreeMap::new();
    for run in &runs {
        records.extend(run.records(tool, run_id, &mut numbering));
    }
    let settings: Vec<Value> = runs.iter().map(|r| r.settings(tool)).collect();
    Ok(Imported { records, meta: serde_json::json!({ "format": tool.name(), "imported": settings }) })
}

/// One request as another tool recorded it (times in ms since the request was sent).
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// When it was sent, RFC 3339 where the tool gives a wall clock (else the file's date).
    pub started_at: String,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// Inter-token latencies, ms (token arrival offsets follow from TTFT plus their running sum).
    pub itl_ms: Vec<f64>,
    /// Prompt tokens as the server counted them (usage) where the file has them, else the tool's.
    pub input_tokens: Option<u64>,
    /// Prompt tokens as the tool counted them with its own tokenizer (becomes
    /// `expected_input_tokens`, so verify compares the two like the tool's own discrepancy check).
    pub tool_input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Prompt tokens the server said it served from its cache.
    pub cached_tokens: Option<u64>,
    /// The tool's own decode rate where it kept only aggregates (else ours is computed).
    pub decode_tps: Option<f64>,
    pub output_text: String,
    pub error: Option<String>,
}

/// One benchmark run of another tool, in the terms our records need.
#[derive(Debug, Default)]
pub struct Run {
    pub model: String,
    pub streaming: bool,
    pub requests: Vec<Request>,
    /// The requests are one stand-in for the mean request (the file kept aggregates only).
    pub aggregate_of: Option<u64>,
    /// How the tool sent its requests ("max concurrency 2", "rate 5/s"): our key cannot say it.
    pub load: String,
    /// max_tokens the tool asked for, where the file says (0: unknown).
    pub max_tokens: u32,
    /// The tool's settings and version, verbatim where the file has them.
    pub settings: Value,
}

impl Run {
    fn unknowns(&self, tool: Tool) -> String {
        let mut out = format!(
            "imported from {}: cache state unknown (recorded as cold), hardware unknown",
            tool.name()
        );
        if !self.load.is_empty() {
            out.push_str(&format!("; sent {}", self.load));
        }
        if let Some(n) = self.aggregate_of {
            out.push_str(&format!(
                "; the file kept aggregates only: this record is the mean of {n} requests"
            ));
        }
        out
    }

    fn settings(&self, tool: Tool) -> Value {
        serde_json::json!({ "tool": tool.name(), "model": self.model, "load": self.load, "settings": self.settings })
    }

    /// Records: one measurement per request, cells keyed by input tokens, runs numbered in the
    /// order the tool sent the requests (continuing across the runs of one file: `numbering`,
    /// the last run of each (model, context)).
    fn records(&self, tool: Tool, run_id: &str, numbering: &mut BTreeMap<(String, u32), u32>) -> Vec<Record> {
        let flag = QualityFlag {
            flag: QualityCode::Other(IMPORTED_FLAG.into()),
            reason: self.unknowns(tool),
            fails_gate: false,
        };
        let mode = if self.streaming { Mode::Streaming } else { Mode::NonStreaming };
        // One cell per run: these tools sample prompt lengths around a target, so the cell's
        // context is the run's median prompt (each record keeps its own counts).
        let mut sizes: Vec<u64> =
            self.requests.iter().filter_map(|r| r.tool_input_tokens.or(r.input_tokens)).collect();
        sizes.sort_unstable();
        let context = sizes.get(sizes.len() / 2).and_then(|&n| u32::try_from(n).ok()).unwrap_or(0);
        let mut order: Vec<&Request> = self.requests.iter().collect();
        order.sort_by(|a, b| a.started_at.cmp(&b.started_at));
        let mut out = Vec::new();
        for r in order {
            let run = numbering.entry((self.model.clone(), context)).or_default();
            *run += 1;
            let error = r
                .error
                .as_ref()
                .map(|e| ErrorInfo::new(ErrorKind::Transport, format!("{}: {e}", tool.name())));
            let ttft_ms = r.ttft_ms.filter(|_| self.streaming && error.is_none());
            let e2e_ms = r.e2e_ms.filter(|_| error.is_none());
            let token_offsets_ms = match ttft_ms {
                Some(t) if !r.itl_ms.is_empty() => std::iter::once(t)
                    .chain(r.itl_ms.iter().scan(t, |at, itl| {
                        *at += itl;
                        Some(*at)
                    }))
                    .collect(),
                _ => Vec::new(),
            };
            let decode_tps = r.decode_tps.or_else(|| record::decode_tps(r.output_tokens, ttft_ms, e2e_ms));
            out.push(Record::Measurement(Box::new(Measurement {
                schema_version: SCHEMA_VERSION,
                run_id: run_id.to_string(),
                cell: CellKey {
                    dataset_row: None,
                    model: self.model.clone(),
                    scenario: Scenario::Cold,
                    cache_state: CacheState::Cold,
                    mode,
                    context_tokens: context,
                    batch_size: 1,
                    run: *run,
                },
                started_at: r.started_at.clone(),
                ttft_ms,
                e2e_ms,
                delta_count: token_offsets_ms.len() as u64,
                token_offsets_ms,
                input_tokens: r.input_tokens,
                expected_input_tokens: r.tool_input_tokens,
                output_tokens: r.output_tokens,
                cached_tokens: r.cached_tokens,
                decode_tps: decode_tps.filter(|_| error.is_none()),
                prefill_tps: record::prefill_tps(r.input_tokens, ttft_ms),
                max_tokens: self.max_tokens,
                output_sample: record::output_sample(&r.output_text),
                quality_ok: error.is_none(),
                quality_flags: vec![flag.clone()],
                error,
                ..Default::default()
            })));
        }
        out
    }
}

/// Whether a record was imported from another tool, and what its file could not tell.
pub fn imported_reason(r: &Record) -> Option<&str> {
    let Record::Measurement(m) = r else { return None };
    let flag = m.quality_flags.iter().find(|f| f.flag == QualityCode::Other(IMPORTED_FLAG.into()))?;
    Some(flag.reason.as_str())
}

/// Seconds to ms (the tools write seconds; our fields are ms).
fn ms(seconds: f64) -> f64 {
    seconds * 1000.0
}

/// A whole number of tokens from a JSON number the tool may have written as a float.
fn count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f as u64))
}

/// The most tokens one request may hold: more than any model's context. A larger count (1e30,
/// 2^64) is a file corrupted or edited, not a measurement.
pub const MAX_REQUEST_TOKENS: u64 = ttft_model::spec::MAX_CONTEXT_TOKENS as u64;

/// A total of tokens (over requests) at `field`: a whole number that fits in 64 bits; null is
/// none. Anything else is refused naming the file and the field, rather than read as 0 or
/// rounded to the largest number there is.
fn count_at(file: &str, line: usize, field: &str, v: &Value) -> Result<Option<u64>, InputError> {
    if v.is_null() {
        return Ok(None);
    }
    // 2^64 and above read as a float; `as u64` would saturate to 2^64 - 1.
    let fits = v.as_u64().is_some() || v.as_f64().is_some_and(|f| f < u64::MAX as f64);
    match count(v).filter(|_| fits) {
        Some(n) => Ok(Some(n)),
        None => Err(InputError::new(file, line, format!("{field}: {v} is not a whole number of tokens"))),
    }
}

/// One request's token count at `field`: `count_at`, and at most `MAX_REQUEST_TOKENS`.
fn tokens_at(file: &str, line: usize, field: &str, v: &Value) -> Result<Option<u64>, InputError> {
    match count_at(file, line, field, v)? {
        Some(n) if n > MAX_REQUEST_TOKENS => Err(InputError::new(
            file,
            line,
            format!("{field}: {n} tokens is more than any request holds (at most {MAX_REQUEST_TOKENS})"),
        )),
        n => Ok(n),
    }
}
