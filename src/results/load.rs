//! Reading result inputs of every kind into one shape, for merge, verify and report.
//!
//! Accepted inputs (`load` decides by what the path holds, not by its name alone):
//! - a run directory written by `bench sweep` (`measurements.jsonl` + optional `run.json`);
//! - a `measurements.jsonl` file (or any file of one record per line);
//! - a canonical file written by `bench merge` (`"kind": "ttft-bench-canonical"`, see `canonical`);
//! - the origin benchmark's result JSON (`metadata` + `measurements[]` + `staggered[]`), converted
//!   to our records by `origin`;
//! - other tools' result files (vLLM `bench serve`, AIPerf, GuideLLM), told apart by the keys at
//!   the head of the file and converted by `import` (these files are read whole: they are small).
//!
//! Every reader is one streaming pass (line numbers from a running count), so load time is linear
//! in the file and memory holds the records, not the file's text. Every problem is an `InputError`
//! naming the file and the 1-based line (0: the file as a whole). `from_bytes` reads the same
//! inputs from memory (for fuzzing and tests).

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::document;
use super::import::{self, Tool};
use super::run_meta::SourceMeta;
use crate::exit::Failure;
use crate::record::Record;
use crate::store::{self, InputError, TornTail, json_message};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    RunDir,
    Jsonl,
    Canonical,
    Origin,
    /// Another tool's result file (`import`).
    Imported(Tool),
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::RunDir => "run_dir",
            SourceKind::Jsonl => "jsonl",
            SourceKind::Canonical => "canonical",
            SourceKind::Origin => "origin",
            SourceKind::Imported(Tool::Vllm) => "vllm",
            SourceKind::Imported(Tool::AiperfRecords | Tool::AiperfAggregate) => "aiperf",
            SourceKind::Imported(Tool::Guidellm) => "guidellm",
        }
    }
}

/// One input, loaded.
#[derive(Clone, Debug)]
pub struct Source {
    pub path: PathBuf,
    pub kind: SourceKind,
    /// The metadata of every run that contributed, verbatim and typed: one run.json for a run dir,
    /// several for a canonical file, for an origin file `{format, metadata, model_id, server_env,
    /// quality_summary}`.
    pub run_meta: Vec<SourceMeta>,
    pub records: Vec<Record>,
}

/// Loads every input, failing on the first bad one (its error names the file and line): exit 2.
pub fn load_all(inputs: &[PathBuf]) -> anyhow::Result<Vec<Source>> {
    let mut sources = Vec::new();
    for path in inputs {
        sources.push(load(path).map_err(|e| Failure::usage(e.to_string()))?);
    }
    Ok(sources)
}

/// Refuses inputs that hold no record (an empty run: killed before its first record, or the wrong
/// directory) unless they are explicitly allowed: exit 2, naming the input.
pub fn require_records(sources: &[Source], allow_empty: bool) -> Result<(), Failure> {
    match sources.iter().find(|s| s.records.is_empty()) {
        Some(empty) if !allow_empty => Err(Failure::usage(format!(
            "no records in {} (use --allow-empty to accept inputs without records)",
            empty.path.display()
        ))),
        _ => Ok(()),
    }
}

pub fn load(path: &Path) -> Result<Source, InputError> {
    if path.is_dir() {
        return load_run_dir(path);
    }
    let name = path.display().to_string();
    let file = File::open(path).map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
    read(BufReader::with_capacity(1 << 16, file), path)
}

/// `load` of a file's bytes; `name` stands for its path (its extension counts, as in `load`).
pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Source, InputError> {
    read(bytes, Path::new(name))
}

fn is_jsonl(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jsonl")
}

fn read(mut reader: impl BufRead, path: &Path) -> Result<Source, InputError> {
    let name = path.display().to_string();
    let source = |kind, run_meta, records| Source { path: path.to_path_buf(), kind, run_meta, records };
    // A file given by name that holds nothing is a mistake; a run directory's empty records file is
    // a run killed before its first record (`load_run_dir`).
    let at_end =
        reader.fill_buf().map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?.is_empty();
    if at_end {
        return Err(InputError::new(&name, 0, "empty file"));
    }
    // The first line that is not blank says whether this is records one per line.
    let mut head = Vec::new();
    let first = loop {
        let start = head.len();
        let n = reader
            .read_until(b'\n', &mut head)
            .map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
        if n == 0 {
            // A records file of blank lines holds no records; any other blank file is a mistake.
            if is_jsonl(path) {
                return Ok(source(SourceKind::Jsonl, Vec::new(), Vec::new()));
            }
            return Err(InputError::new(&name, 0, "empty file"));
        }
        if !head[start..].trim_ascii().is_empty() {
            break start;
        }
    };
    let is_record =
        serde_json::from_slice::<Sniff>(head[first..].trim_ascii()).is_ok_and(|s| s.record_type.is_some());
    // A `.jsonl` is records unless its first line is another tool's (AIPerf's per-request export).
    let other_tool = || import::sniff(&head[first..]).is_some();
    if is_record || (is_jsonl(path) && !other_tool()) {
        let records = store::read_records_from(Cursor::new(head).chain(reader), &name, TornTail::Reject)?;
        return Ok(source(SourceKind::Jsonl, Vec::new(), records));
    }
    let run_id = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    // Another tool's file? Its head (the first object's top-level keys) says.
    let cannot_read = |e: std::io::Error| InputError::new(&name, 0, format!("cannot read: {e}"));
    let more = import::SNIFF_BYTES.saturating_sub(head.len()) as u64;
    (&mut reader).take(more).read_to_end(&mut head).map_err(cannot_read)?;
    if let Some(tool) = import::sniff(&head[first..]) {
        reader.read_to_end(&mut head).map_err(cannot_read)?;
        let imported = import::import(tool, &name, &run_id, &head, path.parent())?;
        let meta = SourceMeta::from_value(imported.meta)
            .map_err(|e| InputError::new(&name, 0, format!("imported metadata: {}", json_message(&e))))?;
        return Ok(source(SourceKind::Imported(tool), vec![meta], imported.records));
    }
    let reader = Cursor::new(head).chain(reader);
    let (kind, run_meta, records) = document::read(reader, &name, &run_id)?;
    Ok(source(kind, run_meta, records))
}

/// Just enough of a line to tell a record.
#[derive(Deserialize)]
struct Sniff {
    record_type: Option<IgnoredAny>,
}

/// A run directory. An empty (or blank) measurements.jsonl is a run killed before its first
/// record: it loads with no records (callers decide whether that is acceptable).
fn load_run_dir(path: &Path) -> Result<Source, InputError> {
    let jsonl = path.join(store::MEASUREMENTS_FILE);
    if !jsonl.exists() {
        return Err(InputError::new(
            &path.display().to_string(),
            0,
            format!("not a run directory: no {}", store::MEASUREMENTS_FILE),
        ));
    }
    let records = store::read_records(&jsonl, TornTail::Reject)?;
    let run_json = path.join(store::RUN_FILE);
    let name = run_json.display().to_string();
    let run_meta = match File::open(&run_json) {
        Ok(mut file) => {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
            vec![read_run_json(&name, &bytes)?]
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(InputError::new(&name, 0, format!("cannot read: {e}"))),
    };
    Ok(Source { path: path.to_path_buf(), kind: SourceKind::RunDir, run_meta, records })
}

/// run.json, typed: a renamed or mistyped field is an error naming its line.
pub fn read_run_json(name: &str, bytes: &[u8]) -> Result<SourceMeta, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        InputError::new(name, line, "not valid UTF-8")
    })?;
    SourceMeta::parse(text).map_err(|e| {
        let what = if e.is_data() { "not a bench run.json" } else { "not valid JSON" };
        InputError::new(name, e.line(), format!("{what}: {}", json_message(&e)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_before_records_keep_the_line_numbers() {
        let err = from_bytes("r.json", b"\n\n{\"record_type\": \"measurement\"}\n").unwrap_err();
        assert_eq!(err.line, 3, "{err}");
        assert!(err.message.contains("schema_version missing"), "{err}");
    }

    #[test]
    fn an_empty_file_is_refused_and_a_blank_jsonl_has_no_records() {
        assert_eq!(from_bytes("x.json", b" \n\t\n").unwrap_err().to_string(), "x.json:0: empty file");
        assert_eq!(from_bytes("x.json", b"").unwrap_err().to_string(), "x.json:0: empty file");
        assert_eq!(from_bytes("x.jsonl", b"").unwrap_err().to_string(), "x.jsonl:0: empty file");
        let empty = from_bytes("x.jsonl", b"\n").unwrap();
        assert!(empty.records.is_empty());
        assert!(
            require_records(std::slice::from_ref(&empty), false)
                .unwrap_err()
                .to_string()
                .contains("no records in x.jsonl")
        );
        assert!(require_records(&[empty], true).is_ok());
    }

    #[test]
    fn run_json_errors_name_their_line() {
        let err = read_run_json("run.json", b"{\n\"config\": {\n\"thermal\": {\"policy\": \"probe\"}}}")
            .unwrap_err();
        assert_eq!(err.line, 3, "{err}");
        assert!(err.message.contains("missing field `tolerance`"), "{err}");
        let err = read_run_json("run.json", b"{\n\"host\": \"\xff\"}").unwrap_err();
        assert_eq!((err.line, err.message.as_str()), (2, "not valid UTF-8"));
    }
}
