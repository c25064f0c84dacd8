//! `measurements.jsonl`: appended durably by the sweep, read back one line at a time.
//!
//! A record is written with one `write_all` of a complete line, then flushed and fsync'd, so a
//! crash or `kill -9` loses at most the record being measured, never one already written. Reading
//! is one pass with one line in memory at a time (line numbers from a running count), so a file of
//! any size is read in linear time and the records are the only thing that grows.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::atomic::{WriteError, write_json_atomic};
use super::{InputError, MEASUREMENTS_FILE, RUN_FILE, TornTail};
use ttft_model::record::{Record, SCHEMA_VERSION};

/// Appends records to `measurements.jsonl`, durably.
pub struct RecordWriter {
    path: PathBuf,
    file: File,
}

impl RecordWriter {
    /// Opens (creating if needed) the file for appending. A torn last line left by a crash during
    /// a write is cut off first, so the next record starts on a line of its own.
    pub fn open(run_dir: &Path) -> Result<RecordWriter, WriteError> {
        let path = run_dir.join(MEASUREMENTS_FILE);
        if path.exists() {
            cut_torn_tail(&path).map_err(|e| WriteError::new(&path, "cut a torn last line from", e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| WriteError::new(&path, "open for appending", e))?;
        Ok(RecordWriter { path, file })
    }

    /// Appends one record as one line, every registered secret masked inside its strings (a
    /// server's words in an error, a sample or a quality reason); the error names
    /// measurements.jsonl. Called once a record is built, never while a request is timed.
    pub fn append(&mut self, record: &Record) -> Result<(), WriteError> {
        let fail = |e| WriteError::new(&self.path, "append a record", e);
        let mut line = serde_json::to_vec(record).map_err(|e| fail(io::Error::other(e)))?;
        line.push(b'\n');
        let line = ttft_model::secrets::redact_json_bytes(&line);
        self.file.write_all(&line).map_err(fail)?;
        self.file.flush().map_err(fail)?;
        self.file.sync_data().map_err(fail)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Starts a run directory in the order that keeps it resumable: the directory, then run.json
/// (atomically), and only then measurements.jsonl. A kill between any two steps leaves nothing, or
/// a run.json beside no (or an empty) records file: `--resume` finishes either.
pub fn start_run<T: serde::Serialize>(run_dir: &Path, meta: &T) -> Result<RecordWriter, WriteError> {
    std::fs::create_dir_all(run_dir).map_err(|e| WriteError::new(run_dir, "create the run directory", e))?;
    write_json_atomic(&run_dir.join(RUN_FILE), meta)?;
    RecordWriter::open(run_dir)
}

/// Whether `run_dir` holds any measured record. A missing, empty or blank measurements file holds
/// none: such a run was killed before its first record and may be started again or resumed.
pub fn has_records(run_dir: &Path) -> io::Result<bool> {
    let file = match File::open(run_dir.join(MEASUREMENTS_FILE)) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::new(file);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(false);
        }
        if chunk.iter().any(|b| !b.is_ascii_whitespace()) {
            return Ok(true);
        }
        let n = chunk.len();
        reader.consume(n);
    }
}

/// Truncates the file after its last newline (a partial line can only be a torn write). Reads only
/// the tail, backwards, so a large file costs no more than its last line. Not a regular file (a
/// device, a pipe): nothing to cut.
fn cut_torn_tail(path: &Path) -> io::Result<()> {
    let mut file = OpenOptions::new().read(true).write(true).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(());
    }
    let len = meta.len();
    let mut end = len;
    let mut chunk = vec![0u8; 1 << 16];
    let keep = loop {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(part)?;
        if end == len && part.last() == Some(&b'\n') {
            return Ok(());
        }
        if let Some(i) = part.iter().rposition(|&b| b == b'\n') {
            break start + i as u64 + 1;
        }
        if start == 0 {
            break 0;
        }
        end = start;
    };
    eprintln!(
        "warning: {}: dropping a torn last line ({} bytes) left by an interrupted write",
        path.display(),
        len - keep
    );
    file.set_len(keep)?;
    file.sync_all()
}

/// Reads every record of a `measurements.jsonl`, checking the schema version of each line.
pub fn read_records(path: &Path, torn: TornTail) -> Result<Vec<Record>, InputError> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|e| InputError::new(&name, 0, format!("cannot read: {e}")))?;
    read_records_from(BufReader::with_capacity(1 << 16, file), &name, torn)
}

/// `read_records` over any reader; `file` names it in errors.
pub fn read_records_from(
    reader: impl BufRead,
    file: &str,
    torn: TornTail,
) -> Result<Vec<Record>, InputError> {
    read_records_with(reader, file, torn, &mut parse_record)
}

/// `read_records_from`, each line read by `parse`: `parse_record`, or a reading that keeps less of
/// each record and fails exactly where `parse_record` fails.
pub fn read_records_with<T>(
    reader: impl BufRead,
    file: &str,
    torn: TornTail,
    parse: &mut dyn FnMut(&[u8]) -> Result<T, LineError>,
) -> Result<Vec<T>, InputError> {
    read_records_at(reader, file, torn, 0, &mut |text, _| parse(text))
}

/// Reads one record's text found at an offset of its file, into what the reader keeps of it.
pub type ParseAt<'a, T = Record> = dyn FnMut(&[u8], u64) -> Result<T, LineError> + 'a;

/// `read_records_with`, `parse` also given where each record's text starts: `start` is the
/// reader's offset in its file.
pub fn read_records_at<T>(
    mut reader: impl BufRead,
    file: &str,
    torn: TornTail,
    start: u64,
    parse: &mut ParseAt<T>,
) -> Result<Vec<T>, InputError> {
    let mut records = Vec::new();
    // A line is read where it lies in the reader's buffer, its newline found by the vectorized
    // search; one that runs past the buffer's end is put together here (`read_until` copied every
    // line and searched a byte at a time: the search alone was 4% of a verify).
    let mut long_line = Vec::new();
    let mut number = 0;
    let mut line_start = start;
    loop {
        let buf = reader.fill_buf();
        let buf = buf.map_err(|e| InputError::new(file, number + 1, format!("cannot read: {e}")))?;
        let (line, used) = match memchr::memchr(b'\n', buf) {
            Some(i) if long_line.is_empty() => (&buf[..=i], i + 1),
            Some(i) => {
                long_line.extend_from_slice(&buf[..=i]);
                (&long_line[..], i + 1)
            }
            None if buf.is_empty() && long_line.is_empty() => return Ok(records),
            // The last line, without its newline.
            None if buf.is_empty() => (&long_line[..], 0),
            None => {
                long_line.extend_from_slice(buf);
                let n = buf.len();
                reader.consume(n);
                continue;
            }
        };
        number += 1;
        let at = line_start;
        line_start += line.len() as u64;
        let complete = line.ends_with(b"\n");
        let body = line.trim_ascii();
        if !body.is_empty() {
            let leading = line.len() - line.trim_ascii_start().len();
            let failed = match parse(body, at + leading as u64) {
                Ok(record) => {
                    records.push(record);
                    None
                }
                Err(LineError::Json(e)) if !complete && torn == TornTail::Skip => {
                    eprintln!("warning: {file}:{number}: skipping a torn last line ({})", json_message(&e));
                    None
                }
                Err(LineError::Json(e)) if !complete => {
                    Some(format!("truncated JSON line (interrupted write?): {}", json_message(&e)))
                }
                Err(LineError::Json(e)) => Some(format!("not valid JSON: {}", json_message(&e))),
                Err(LineError::Version(v)) => Some(format!(
                    "schema_version {} is not supported (this bench reads {SCHEMA_VERSION})",
                    shown(v)
                )),
                Err(LineError::Shape(e)) => Some(format!("not a bench record: {}", json_message(&e))),
            };
            if let Some(message) = failed {
                return Err(InputError::new(file, number, message));
            }
        }
        reader.consume(used);
        long_line.clear();
    }
}

/// Why a record's JSON text was not a record of this bench.
#[derive(Debug)]
pub enum LineError {
    /// Not JSON at all.
    Json(serde_json::Error),
    /// Another schema version (None: the field is missing), checked before the record's shape.
    Version(Option<u64>),
    /// JSON of this schema version, but not a record.
    Shape(serde_json::Error),
}

/// One record from its JSON text. The typed parse is tried first (the common case); only when it
/// fails is the text read again, untyped, to say whether it was JSON and which version it claims.
pub fn parse_record(bytes: &[u8]) -> Result<Record, LineError> {
    match typed(bytes) {
        Ok(r) if r.schema_version() == SCHEMA_VERSION => Ok(r),
        Ok(r) => Err(LineError::Version(Some(u64::from(r.schema_version())))),
        Err(typed) => match serde_json::from_slice::<serde_json::Value>(bytes) {
            Err(e) => Err(LineError::Json(e)),
            Ok(v) => match v.get("schema_version").and_then(serde_json::Value::as_u64) {
                Some(v) if v == u64::from(SCHEMA_VERSION) => Err(LineError::Shape(typed)),
                other => Err(LineError::Version(other)),
            },
        },
    }
}

/// The typed parse. bench writes the tag first (`{"record_type":"measurement",...`): such a line
/// is read straight into its variant, which ignores the tag key, saving serde the buffered second
/// pass an internally tagged enum needs (a third of verify's time on 100,000 records). Any other
/// line takes the general path, so what parses is exactly what the enum accepts.
fn typed(bytes: &[u8]) -> serde_json::Result<Record> {
    let body = bytes.trim_ascii_start();
    if body.starts_with(br#"{"record_type":"measurement","#) {
        return serde_json::from_slice::<Box<ttft_model::record::Measurement>>(bytes)
            .map(Record::Measurement);
    }
    serde_json::from_slice::<Record>(bytes)
}

/// A schema version as messages show it.
pub fn shown(version: Option<u64>) -> String {
    version.map_or("missing".to_string(), |v| v.to_string())
}

/// serde_json's message without its "at line L column C" (the caller knows the file's line); the
/// column is kept where it helps on a long line.
pub fn json_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(head) if e.line() <= 1 => format!("{head} (column {})", e.column()),
        Some(head) => format!("{head} (line {} of the value, column {})", e.line(), e.column()),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{CacheState, CellKey, Measurement, Mode, Scenario};

    fn record(run: u32) -> Record {
        Record::Measurement(Box::new(Measurement {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            cell: CellKey {
                dataset_row: None,
                model: "m".into(),
                scenario: Scenario::Cold,
                cache_state: CacheState::Cold,
                mode: Mode::Streaming,
                context_tokens: 512,
                batch_size: 1,
                run,
            },
            ..Default::default()
        }))
    }

    #[test]
    fn appended_records_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RecordWriter::open(dir.path()).unwrap();
        w.append(&record(1)).unwrap();
        w.append(&record(2)).unwrap();
        let back = read_records(w.path(), TornTail::Reject).unwrap();
        assert_eq!(back, vec![record(1), record(2)]);
    }

    #[test]
    fn a_torn_tail_is_cut_before_appending_and_named_when_merging() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEASUREMENTS_FILE);
        let mut text = serde_json::to_string(&record(1)).unwrap();
        text.push('\n');
        text.push_str("{\"record_type\":\"measu");
        std::fs::write(&path, &text).unwrap();

        let err = read_records(&path, TornTail::Reject).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.to_string().contains("measurements.jsonl:2"), "{err}");
        assert_eq!(read_records(&path, TornTail::Skip).unwrap().len(), 1);

        let mut w = RecordWriter::open(dir.path()).unwrap();
        w.append(&record(2)).unwrap();
        assert_eq!(read_records(&path, TornTail::Reject).unwrap(), vec![record(1), record(2)]);
    }

    #[test]
    fn a_torn_tail_longer_than_a_read_chunk_is_cut_at_the_last_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEASUREMENTS_FILE);
        let whole = serde_json::to_string(&record(1)).unwrap() + "\n";
        let torn = format!("{{\"record_type\":\"{}", "x".repeat(200_000));
        std::fs::write(&path, format!("{whole}{torn}")).unwrap();
        RecordWriter::open(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole);
        std::fs::write(&path, &torn).unwrap();
        RecordWriter::open(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"", "a file that is one torn line is emptied");
    }

    #[test]
    fn lines_across_the_read_buffer_read_as_lines_inside_it() {
        // Blank and padded lines, a CRLF, and a last line without its newline: through a buffer
        // smaller than a line and one larger than the file, the same records at the same offsets,
        // and a broken line named by the same number.
        let (one, two) =
            (serde_json::to_string(&record(1)).unwrap(), serde_json::to_string(&record(2)).unwrap());
        let text = format!("{one}\n\n  {two}\r\n\n{one}");
        let read = |capacity: usize, text: &str| {
            let mut found = Vec::new();
            let reader = BufReader::with_capacity(capacity, text.as_bytes());
            let parsed = read_records_at(reader, "m.jsonl", TornTail::Reject, 100, &mut |body, at| {
                found.push((at, body.len()));
                parse_record(body)
            });
            (parsed.map_err(|e| e.to_string()), found)
        };
        let whole = read(1 << 16, &text);
        assert_eq!(whole.0.as_ref().unwrap(), &vec![record(1), record(2), record(1)]);
        let two_at = 100 + one.len() as u64 + 4;
        assert_eq!(
            whole.1,
            vec![(100, one.len()), (two_at, two.len()), (two_at + two.len() as u64 + 3, one.len())]
        );
        let broken = format!("{one}\n\n  {}\r\n\n{one}", two.replacen("\"r\"", "\"r", 1));
        let broken_whole = read(1 << 16, &broken);
        assert!(
            broken_whole.0.as_ref().unwrap_err().starts_with("m.jsonl:3: not valid JSON"),
            "{broken_whole:?}"
        );
        for capacity in [1, 2, 7, 64, one.len() - 1, one.len(), one.len() + 1] {
            assert_eq!(read(capacity, &text), whole, "a {capacity}-byte buffer");
            assert_eq!(read(capacity, &broken).0, broken_whole.0, "a {capacity}-byte buffer");
        }
    }

    #[test]
    fn wrong_schema_version_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MEASUREMENTS_FILE);
        let mut value = serde_json::to_value(record(1)).unwrap();
        value["schema_version"] = 99.into();
        std::fs::write(&path, format!("{value}\n")).unwrap();
        let err = read_records(&path, TornTail::Skip).unwrap_err();
        assert!(err.to_string().contains(":1: schema_version 99"), "{err}");
    }

    #[test]
    fn an_invalid_utf8_byte_is_reported_on_its_own_line() {
        let good = serde_json::to_string(&record(1)).unwrap();
        let bad = good.replace("\"r\"", "\"r\u{e9}\"").into_bytes();
        // Cut the two-byte é in half: a lone lead byte inside a string.
        let at = bad.iter().position(|&b| b == 0xC3).unwrap();
        let mut text = format!("{good}\n{good}\n").into_bytes();
        text.extend_from_slice(&bad[..=at]);
        text.extend_from_slice(&bad[at + 2..]);
        text.extend_from_slice(format!("\n{good}\n").as_bytes());
        let err = read_records_from(&text[..], "m.jsonl", TornTail::Reject).unwrap_err();
        assert_eq!(err.line, 3, "{err}");
        assert!(err.to_string().starts_with("m.jsonl:3: not valid JSON"), "{err}");
    }

    #[test]
    fn append_errors_name_the_records_file() {
        if !Path::new("/dev/full").exists() {
            eprintln!("SKIP: /dev/full is absent on this system");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // Every write to /dev/full fails with ENOSPC: a full disk.
        std::os::unix::fs::symlink("/dev/full", dir.path().join(MEASUREMENTS_FILE)).unwrap();
        let mut w = RecordWriter::open(dir.path()).unwrap();
        let err = w.append(&record(1)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        let message = err.to_string();
        assert!(message.contains("measurements.jsonl: cannot append a record"), "{message}");
        assert!(!message.contains(RUN_FILE), "{message}");
    }

    #[test]
    fn an_empty_or_missing_records_file_holds_no_records() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!has_records(dir.path()).unwrap());
        std::fs::write(dir.path().join(MEASUREMENTS_FILE), b"").unwrap();
        assert!(!has_records(dir.path()).unwrap());
        std::fs::write(dir.path().join(MEASUREMENTS_FILE), b"\n \n").unwrap();
        assert!(!has_records(dir.path()).unwrap());
        assert!(read_records(&dir.path().join(MEASUREMENTS_FILE), TornTail::Reject).unwrap().is_empty());
        RecordWriter::open(dir.path()).unwrap().append(&record(1)).unwrap();
        assert!(has_records(dir.path()).unwrap());
    }

    #[test]
    fn start_run_writes_run_json_before_the_records_file() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r1");
        let w = start_run(&run, &serde_json::json!({"run_id": "r1"})).unwrap();
        assert!(run.join(RUN_FILE).exists());
        assert_eq!(w.path(), run.join(MEASUREMENTS_FILE));
        assert!(!has_records(&run).unwrap());
        // run.json cannot be written: no records file is created either.
        let blocked = dir.path().join("r2");
        std::fs::create_dir_all(blocked.join(RUN_FILE).join("x")).unwrap();
        assert!(start_run(&blocked, &serde_json::json!({})).is_err());
        assert!(!blocked.join(MEASUREMENTS_FILE).exists());
    }
}
