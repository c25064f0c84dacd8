//! Reading result inputs of every kind into one shape, for merge, verify and report.
//!
//! Accepted inputs (`load` decides by what the path holds, not by its name alone):
//! - a run directory written by `bench sweep` (`measurements.jsonl` + optional `run.json`);
//! - a `measurements.jsonl` file (or any file of one record per line);
//! - a canonical file written by `bench merge` (`"kind": "ttft-bench-canonical"`, see
//!   `merge::canonical`);
//! - the origin benchmark's result JSON (`metadata` + `measurements[]` + `staggered[]`), converted
//!   to our records by `origin`.
//!
//! Every problem is an `InputError` naming the file and the 1-based line (0: the file as a whole).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::canonical::{CANONICAL_KIND, SourceEntry};
use super::origin;
use crate::record::{Record, SCHEMA_VERSION};
use crate::store::{self, InputError, TornTail};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    RunDir,
    Jsonl,
    Canonical,
    Origin,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::RunDir => "run_dir",
            SourceKind::Jsonl => "jsonl",
            SourceKind::Canonical => "canonical",
            SourceKind::Origin => "origin",
        }
    }
}

/// One input, loaded.
#[derive(Clone, Debug)]
pub struct Source {
    pub path: PathBuf,
    pub kind: SourceKind,
    /// run.json of every run that contributed (one for a run dir; several for a canonical file;
    /// for an origin file, `{format, metadata, model_id, server_env, quality_summary}`).
    pub run_meta: Vec<serde_json::Value>,
    pub records: Vec<Record>,
}

/// Loads every input, failing on the first bad one (its error names the file and line): exit 2.
pub fn load_all(inputs: &[PathBuf]) -> anyhow::Result<Vec<Source>> {
    let mut sources = Vec::new();
    for path in inputs {
        sources.push(load(path).map_err(|e| crate::exit::Failure::usage(e.to_string()))?);
    }
    Ok(sources)
}

pub fn load(path: &Path) -> Result<Source, InputError> {
    let name = path.display().to_string();
    let whole = |message: String| InputError { file: name.clone(), line: 0, message };
    if path.is_dir() {
        return load_run_dir(path);
    }
    let meta = std::fs::metadata(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    if meta.len() == 0 {
        return Err(whole("empty file".into()));
    }
    let source = |kind, run_meta, records| Source { path: path.to_path_buf(), kind, run_meta, records };
    if path.extension().is_some_and(|e| e == "jsonl") {
        return Ok(source(SourceKind::Jsonl, Vec::new(), store::read_records(path, TornTail::Reject)?));
    }
    let text = std::fs::read_to_string(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    if text.trim().is_empty() {
        return Err(whole("empty file".into()));
    }
    let doc: Value = match serde_json::from_str(&text) {
        Ok(doc) => doc,
        // Several JSON objects, one per line: records written by `bench sweep` under another name.
        Err(_) if first_line_is_record(&text) => {
            return Ok(source(SourceKind::Jsonl, Vec::new(), store::read_records(path, TornTail::Reject)?));
        }
        Err(e) => {
            let hint = if e.is_eof() { " (truncated?)" } else { "" };
            return Err(InputError {
                file: name,
                line: e.line(),
                message: format!("not valid JSON{hint}: {e}"),
            });
        }
    };
    if doc.get("kind").and_then(Value::as_str) == Some(CANONICAL_KIND) {
        let (run_meta, records) = load_canonical(&name, &text, &doc)?;
        return Ok(source(SourceKind::Canonical, run_meta, records));
    }
    if origin::is_origin(&doc) {
        let rows: Rows = serde_json::from_str(&text).map_err(|e| InputError {
            file: name.clone(),
            line: e.line(),
            message: format!("origin file with an unexpected shape: {e}"),
        })?;
        let run_id = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
        let measurements = row_lines(&text, &rows.measurements);
        let staggered = row_lines(&text, &rows.staggered);
        let (records, meta) = origin::import(&name, &run_id, &doc, &measurements, &staggered)?;
        return Ok(source(SourceKind::Origin, vec![meta], records));
    }
    Err(whole(format!(
        "unrecognised JSON: expected a canonical file (\"kind\": \"{CANONICAL_KIND}\"), an origin result \
         file (metadata + measurements), or records one per line"
    )))
}

fn load_run_dir(path: &Path) -> Result<Source, InputError> {
    let jsonl = path.join(store::MEASUREMENTS_FILE);
    if !jsonl.exists() {
        return Err(InputError {
            file: path.display().to_string(),
            line: 0,
            message: format!("not a run directory: no {}", store::MEASUREMENTS_FILE),
        });
    }
    let records = store::read_records(&jsonl, TornTail::Reject)?;
    let run_json = path.join(store::RUN_FILE);
    let run_meta = match std::fs::read_to_string(&run_json) {
        Ok(text) => vec![serde_json::from_str(&text).map_err(|e| InputError {
            file: run_json.display().to_string(),
            line: e.line(),
            message: format!("not valid JSON: {e}"),
        })?],
        Err(_) => Vec::new(),
    };
    Ok(Source { path: path.to_path_buf(), kind: SourceKind::RunDir, run_meta, records })
}

/// The arrays whose elements need line numbers, borrowed from the file text.
#[derive(Deserialize)]
struct Rows<'a> {
    #[serde(borrow, default)]
    records: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    measurements: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    staggered: Option<Vec<&'a RawValue>>,
}

fn row_lines<'a>(text: &str, raws: &Option<Vec<&'a RawValue>>) -> Vec<origin::Row<'a>> {
    let raws = raws.as_deref().unwrap_or_default();
    raws.iter().map(|r| origin::Row { text: r.get(), line: line_of(text, r.get()) }).collect()
}

/// 1-based line of `part`, a slice borrowed from `text` (0 if it is not one).
fn line_of(text: &str, part: &str) -> usize {
    let offset = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize);
    match offset {
        Some(o) if o <= text.len() => text.as_bytes()[..o].iter().filter(|&&b| b == b'\n').count() + 1,
        _ => 0,
    }
}

fn first_line_is_record(text: &str) -> bool {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    serde_json::from_str::<Value>(first).is_ok_and(|v| v.get("record_type").is_some())
}

fn load_canonical(name: &str, text: &str, doc: &Value) -> Result<(Vec<Value>, Vec<Record>), InputError> {
    let err = |line: usize, message: String| InputError { file: name.to_string(), line, message };
    let version = doc.get("schema_version").and_then(Value::as_u64);
    if version != Some(u64::from(SCHEMA_VERSION)) {
        let line = text.find("\"schema_version\"").map_or(0, |o| line_of(text, &text[o..]));
        let shown = version.map_or("missing".to_string(), |v| v.to_string());
        return Err(err(
            line,
            format!("schema_version {shown} is not supported (this bench reads {SCHEMA_VERSION})"),
        ));
    }
    let sources: Vec<SourceEntry> = serde_json::from_value(doc["sources"].clone())
        .map_err(|e| err(0, format!("canonical file with unreadable sources: {e}")))?;
    let rows: Rows =
        serde_json::from_str(text).map_err(|e| err(e.line(), format!("unexpected shape: {e}")))?;
    let mut records = Vec::new();
    for raw in rows.records.as_deref().unwrap_or_default() {
        let line = line_of(text, raw.get());
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| err(line, e.to_string()))?;
        let version = value.get("schema_version").and_then(Value::as_u64);
        if version != Some(u64::from(SCHEMA_VERSION)) {
            let shown = version.map_or("missing".to_string(), |v| v.to_string());
            return Err(err(line, format!("record schema_version {shown} is not supported")));
        }
        records
            .push(serde_json::from_value(value).map_err(|e| err(line, format!("not a bench record: {e}")))?);
    }
    Ok((sources.into_iter().flat_map(|s| s.run_meta).collect(), records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_of_counts_newlines_before_a_borrowed_slice() {
        let text = "{\n \"a\": [\n  1,\n  2\n ]\n}";
        let at = text.find('2').unwrap_or_default();
        assert_eq!(line_of(text, &text[at..]), 4);
        // A slice of another allocation (heap, far from the literal) has no line here.
        let other = String::from("elsewhere");
        assert_eq!(line_of(text, &other), 0);
    }
}
