//! Reading result inputs of every kind into one shape, for merge, verify and report.
//!
//! Accepted inputs (`load` decides by what the path holds, not by its name alone):
//! - a run directory written by `bench sweep` (`measurements.jsonl` + optional `run.json`);
//! - an AIPerf output directory, read by its `profile_export.jsonl` (else its aggregate file);
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

use super::canonical::Conflict;
pub use super::detail::{Detail, FromRecord, token_offsets_read_back};
use super::import;
pub use super::kind::SourceKind;
use super::parts::Parsed;
use super::run_meta::SourceMeta;
use super::text::{TextFile, Texts};
use super::{document, parts};
use crate::store::{self, InputError, TornTail, json_message};
use ttft_model::input_file::{self, Limit, ReadError};
use ttft_model::record::Record;

/// One input, loaded: what the reader keeps of each record (`FromRecord`: the records, or a
/// verb's compact form of them) and the input's own metadata.
#[derive(Clone, Debug)]
pub struct Source<T = Record> {
    pub path: PathBuf,
    pub kind: SourceKind,
    /// The metadata of every run that contributed, verbatim and typed: one run.json for a run dir,
    /// several for a canonical file, for an origin file `{format, metadata, model_id, server_env,
    /// quality_summary}`.
    pub run_meta: Vec<SourceMeta>,
    pub records: Vec<T>,
    /// Where each record's text lies in the file, when read `Detail::Located` (and the records are
    /// lean); None when the records are whole.
    pub texts: Option<Texts>,
    /// The settings a canonical file recorded as differing between its sources (merge's
    /// `conflicts`); none for any other input.
    pub conflicts: Vec<Conflict>,
}

impl<T> Source<T> {
    /// A source of whole records (converted, or made by hand).
    pub fn whole(path: PathBuf, kind: SourceKind, run_meta: Vec<SourceMeta>, records: Vec<T>) -> Source<T> {
        Source { path, kind, run_meta, records, texts: None, conflicts: Vec::new() }
    }

    /// A source of records read from the file at `path`: located ones keep the file open.
    fn read(
        path: &Path,
        kind: SourceKind,
        run_meta: Vec<SourceMeta>,
        parsed: Parsed<T>,
    ) -> Result<Source<T>, InputError> {
        let name = path.display().to_string();
        let texts = if parsed.spans.is_empty() {
            None
        } else {
            let file = TextFile::open(path, &name)
                .map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
            Some(Texts { file, spans: parsed.spans })
        };
        Ok(Source {
            path: path.to_path_buf(),
            kind,
            run_meta,
            records: parsed.records,
            texts,
            conflicts: Vec::new(),
        })
    }
}

/// Loads every input, failing on the first bad one (its error names the file and line).
pub fn load_all(inputs: &[PathBuf]) -> Result<Vec<Source>, InputError> {
    load_all_with(inputs, Detail::Full)
}

/// `load_all`, keeping `detail` of each record (as `T`).
pub fn load_all_with<T: FromRecord>(
    inputs: &[PathBuf],
    detail: Detail,
) -> Result<Vec<Source<T>>, InputError> {
    inputs.iter().map(|path| load_with(path, detail)).collect()
}

/// Lets loaded records go without freeing them one by one: a verb's records live until it ends,
/// and bench exits right after, so the hundreds of thousands of frees of a large input (a tenth
/// of a 100,000-record run) buy nothing. The operating system takes the memory back at exit.
pub fn release<T>(loaded: T) {
    std::mem::forget(loaded);
}

/// Frees loaded records where a verb reads more afterwards, and gives the allocator's free pages
/// back to the system: freed one by one, a million records leave their memory scattered through
/// the reading threads' heaps, where the next reading (other threads, other heaps) would not find
/// it, and it would count twice at the verb's peak.
pub fn free<T>(loaded: T) {
    drop(loaded);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system; nothing refers to it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Lets loaded records go as `release` does, but their vector's own memory at once: the records
/// of a large input, even compact, are hundreds of MB that a verb's later work can use.
pub fn release_each<T>(records: Vec<T>) {
    records.into_iter().for_each(std::mem::forget);
}

/// An input that holds no record.
#[derive(Debug, thiserror::Error)]
#[error("no records in {}", path.display())]
pub struct EmptyInput {
    pub path: PathBuf,
}

/// Refuses inputs that hold no record (an empty run: killed before its first record, or the wrong
/// directory) unless they are explicitly allowed, naming the first such input.
pub fn require_records<T>(sources: &[Source<T>], allow_empty: bool) -> Result<(), EmptyInput> {
    match sources.iter().find(|s| s.records.is_empty()) {
        Some(empty) if !allow_empty => Err(EmptyInput { path: empty.path.clone() }),
        _ => Ok(()),
    }
}

pub fn load(path: &Path) -> Result<Source, InputError> {
    load_with(path, Detail::Full)
}

/// `load`, keeping `detail` of each record (as `T`).
pub fn load_with<T: FromRecord>(path: &Path, detail: Detail) -> Result<Source<T>, InputError> {
    let name = path.display().to_string();
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        // An AIPerf output directory (`artifacts/<run>/`) is read by the file inside it that
        // holds its requests, as that file given alone is; a run directory is ours.
        if !path.join(store::MEASUREMENTS_FILE).exists()
            && let Some(file) = import::aiperf::file_in(path)
        {
            return load_with(&file, detail);
        }
        return load_run_dir(path, detail);
    }
    // A file, or a pipe (`bench verify <(cat run.jsonl)`), opened without waiting for a writer: a
    // named FIFO nobody writes to reads as empty at once. A device never ends and is refused.
    let (file, regular) = input_file::open_stream(path).map_err(|e| match e {
        ReadError::NotAFile(kind) => {
            InputError::new(&name, 0, format!("not a regular file or a run directory (it is {kind})"))
        }
        e => InputError::new(&name, 0, e.to_string()),
    })?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let empty =
        reader.fill_buf().map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?.is_empty();
    if empty && !regular {
        return Err(InputError::new(&name, 0, "empty: a pipe that nothing was written to"));
    }
    // A regular file of records may be read again, in parts at once (`parts`).
    read(reader, path, detail, regular)
}

/// `load` of a file's bytes; `name` stands for its path (its extension counts, as in `load`).
pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Source, InputError> {
    read(bytes, Path::new(name), Detail::Full, false)
}

fn is_jsonl(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jsonl")
}

/// `regular`: `path` is a regular file that can be opened again (not stdin or a pipe).
fn read<T: FromRecord>(
    mut reader: impl BufRead,
    path: &Path,
    detail: Detail,
    regular: bool,
) -> Result<Source<T>, InputError> {
    let name = path.display().to_string();
    let source = |kind, run_meta, records| Source::whole(path.to_path_buf(), kind, run_meta, records);
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
        if regular {
            return Source::read(
                path,
                SourceKind::Jsonl,
                Vec::new(),
                parts::read_records(path, &name, detail)?,
            );
        }
        let whole = detail.unlocated();
        let records =
            store::read_records_with(Cursor::new(head).chain(reader), &name, TornTail::Reject, &mut |b| {
                whole.parse(b)
            })?;
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
        let records = imported.records.into_iter().map(|r| detail.keep(r)).collect();
        return Ok(source(SourceKind::Imported(tool), vec![meta], records));
    }
    let reader = Cursor::new(head).chain(reader);
    let parallel = regular && parts::cores() > 1;
    let read = match document::read(reader, &name, &run_id, detail, parallel, regular.then_some(path))? {
        Some(read) => Some(read),
        // A record that did not parse where the threads found it: one pass names the error.
        None => {
            let file = File::open(path).map_err(cannot_read)?;
            document::read(BufReader::with_capacity(1 << 16, file), &name, &run_id, detail, false, None)?
        }
    };
    let document::Read { kind, run_meta, parsed, conflicts } =
        read.ok_or_else(|| InputError::new(&name, 0, "cannot read in one pass"))?;
    let mut loaded = if regular {
        Source::read(path, kind, run_meta, parsed)?
    } else {
        source(kind, run_meta, parsed.records)
    };
    loaded.conflicts = conflicts;
    Ok(loaded)
}

/// Just enough of a line to tell a record.
#[derive(Deserialize)]
struct Sniff {
    record_type: Option<IgnoredAny>,
}

/// A run directory. An empty (or blank) measurements.jsonl is a run killed before its first
/// record: it loads with no records (callers decide whether that is acceptable).
fn load_run_dir<T: FromRecord>(path: &Path, detail: Detail) -> Result<Source<T>, InputError> {
    let jsonl = path.join(store::MEASUREMENTS_FILE);
    if !jsonl.exists() {
        return Err(InputError::new(
            &path.display().to_string(),
            0,
            format!(
                "not a run directory: no {} (nor an AIPerf output directory: no {} or {})",
                store::MEASUREMENTS_FILE,
                import::aiperf::RECORDS_FILE,
                import::aiperf::AGGREGATE_FILE
            ),
        ));
    }
    // The run's own files are regular files bench wrote: anything else is refused, not waited on.
    for file in [&jsonl, &path.join(store::RUN_FILE)] {
        if let Ok(meta) = std::fs::metadata(file)
            && !meta.is_file()
        {
            let kind = input_file::file_kind(meta.file_type());
            return Err(InputError::new(
                &file.display().to_string(),
                0,
                format!("not a regular file (it is {kind})"),
            ));
        }
    }
    let parsed = parts::read_records(&jsonl, &jsonl.display().to_string(), detail)?;
    let run_json = path.join(store::RUN_FILE);
    let name = run_json.display().to_string();
    let run_meta = match input_file::read_bytes(&run_json, Limit::RUN_JSON) {
        Ok(bytes) => {
            let mut meta = read_run_json(&name, &bytes)?;
            read_killed_as_interrupted(path, &mut meta.raw);
            vec![meta]
        }
        Err(ReadError::Unreadable { source }) if source.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(InputError::new(&name, 0, e.to_string())),
    };
    let mut source = Source::read(&jsonl, SourceKind::RunDir, run_meta, parsed)?;
    source.path = path.to_path_buf();
    Ok(source)
}

/// A run whose run.json says `running` while no process holds its lock was killed before it could
/// say so: it reads as `interrupted` (with `status_note` saying why), in every reading verb and in
/// what merge copies.
fn read_killed_as_interrupted(run_dir: &Path, raw: &mut serde_json::Value) {
    if raw.get("status").and_then(serde_json::Value::as_str) == Some("running") && store::holder_gone(run_dir)
    {
        raw["status"] = "interrupted".into();
        raw["status_note"] = store::KILLED.into();
    }
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

    /// Files on disk are read by several threads (`parts`); what loads, and every error, is what
    /// one pass over the same bytes gives.
    #[test]
    fn a_file_read_in_parts_loads_as_its_bytes_do() {
        let dir = tempfile::tempdir().unwrap();
        let line = |i: u32| {
            let m = ttft_model::record::Measurement {
                schema_version: ttft_model::record::SCHEMA_VERSION,
                request_index: i,
                token_offsets_ms: vec![1.5; 1000],
                ..Default::default()
            };
            serde_json::to_string(&Record::Measurement(Box::new(m))).unwrap()
        };
        // 20 MB: more than one part's worth.
        let mut lines: Vec<String> = (0..1000).map(line).collect();
        let path = dir.path().join("m.jsonl");
        let same = |lines: &[String]| {
            let text = lines.join("\n") + "\n";
            std::fs::write(&path, &text).unwrap();
            let name = path.display().to_string();
            let (disk, bytes) = (load(&path), from_bytes(&name, text.as_bytes()));
            match (disk, bytes) {
                (Ok(a), Ok(b)) => assert_eq!(a.records, b.records),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("{:?} vs {:?}", a.map(|s| s.records.len()), b.map(|s| s.records.len())),
            }
        };
        same(&lines);
        lines[990] = "{\"record_type\": \"group\"}".into();
        lines[700] = "{oops".into();
        same(&lines);
        lines[700] = line(700);
        same(&lines);
        // The same records as a canonical file.
        lines[990] = line(990);
        let records: Vec<Record> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        let doc = crate::results::canonical::Canonical {
            schema_version: ttft_model::record::SCHEMA_VERSION,
            kind: crate::results::canonical::CANONICAL_KIND.into(),
            sources: vec![],
            conflicts: vec![],
            provenance: Default::default(),
            records,
        };
        let mut text = Vec::new();
        crate::results::canonical::write(&doc, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let path = dir.path().join("c.json");
        for text in [text.clone(), text.replacen("\"request_index\":500", "\"request_index\":-5", 1)] {
            std::fs::write(&path, &text).unwrap();
            let name = path.display().to_string();
            match (load(&path), from_bytes(&name, text.as_bytes())) {
                (Ok(a), Ok(b)) => assert_eq!((a.kind, a.records), (SourceKind::Canonical, b.records)),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("{:?} vs {:?}", a.map(|s| s.records.len()), b.map(|s| s.records.len())),
            }
        }
        assert!(load(&path).unwrap_err().to_string().contains("invalid value: integer `-5`"));
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
