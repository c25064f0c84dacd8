//! Reading result inputs of every kind into one shape, for merge, verify and report.
//!
//! Accepted: a run directory (`run.json` + `measurements.jsonl`), a bare `measurements.jsonl`.
//! (Canonical merged files and the origin benchmark's JSON are added by the merge work.)

use std::path::{Path, PathBuf};

use crate::record::Record;
use crate::store::{self, InputError, TornTail};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    RunDir,
    Jsonl,
    Canonical,
    Origin,
}

/// One input, loaded.
#[derive(Clone, Debug)]
pub struct Source {
    pub path: PathBuf,
    pub kind: SourceKind,
    /// run.json of every run that contributed (one for a run dir; several for a canonical file;
    /// the origin's `metadata` object for an origin file).
    pub run_meta: Vec<serde_json::Value>,
    pub records: Vec<Record>,
}

pub fn load(path: &Path) -> Result<Source, InputError> {
    let name = path.display().to_string();
    let whole = |message: String| InputError { file: name.clone(), line: 0, message };
    if path.is_dir() {
        let jsonl = path.join(store::MEASUREMENTS_FILE);
        if !jsonl.exists() {
            return Err(whole(format!("not a run directory: no {}", store::MEASUREMENTS_FILE)));
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
        return Ok(Source { path: path.to_path_buf(), kind: SourceKind::RunDir, run_meta, records });
    }
    let meta = std::fs::metadata(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    if meta.len() == 0 {
        return Err(whole("empty file".into()));
    }
    if path.extension().is_some_and(|e| e == "jsonl") {
        let records = store::read_records(path, TornTail::Reject)?;
        return Ok(Source {
            path: path.to_path_buf(),
            kind: SourceKind::Jsonl,
            run_meta: Vec::new(),
            records,
        });
    }
    Err(whole("unrecognised input: expected a run directory or a .jsonl file".into()))
}
