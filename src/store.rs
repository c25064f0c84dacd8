//! Files on disk: the append-only `measurements.jsonl` and atomically replaced JSON documents.
//!
//! A record is written with one `write_all` of a complete line, then flushed and fsync'd, so a
//! crash or `kill -9` loses at most the record being measured, never one already written.
//! Documents (run.json, canonical merged files) go to a temp file that is fsync'd and renamed, so
//! readers see either the old or the new file, never half of one.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::record::{Record, SCHEMA_VERSION};

pub const MEASUREMENTS_FILE: &str = "measurements.jsonl";
pub const RUN_FILE: &str = "run.json";

/// Appends records to `measurements.jsonl`, durably.
pub struct RecordWriter {
    path: PathBuf,
    file: File,
}

impl RecordWriter {
    /// Opens (creating if needed) the file for appending. A torn last line left by a crash during
    /// a write is cut off first, so the next record starts on a line of its own.
    pub fn open(run_dir: &Path) -> io::Result<RecordWriter> {
        let path = run_dir.join(MEASUREMENTS_FILE);
        if path.exists() {
            cut_torn_tail(&path)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(RecordWriter { path, file })
    }

    pub fn append(&mut self, record: &Record) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()?;
        self.file.sync_data()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Truncates the file after its last newline (a partial line can only be a torn write).
fn cut_torn_tail(path: &Path) -> io::Result<()> {
    let bytes = std::fs::read(path)?;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(());
    }
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    eprintln!(
        "warning: {}: dropping a torn last line ({} bytes) left by an interrupted write",
        path.display(),
        bytes.len() - keep
    );
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(keep as u64)?;
    file.sync_all()
}

/// An exclusive lock on a run directory, held while a sweep writes to it; released on drop.
pub struct RunLock {
    _file: File,
}

impl RunLock {
    pub fn acquire(run_dir: &Path) -> io::Result<RunLock> {
        let path = run_dir.join(".lock");
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        file.try_lock().map_err(|_| {
            io::Error::other(format!("{} is in use by another bench sweep", run_dir.display()))
        })?;
        Ok(RunLock { _file: file })
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().ok_or_else(|| io::Error::other("path has no file name"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    // The rename itself must survive a crash too.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Serializes `value` as pretty JSON and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// A problem in an input file, located precisely enough to fix it by hand.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct InputError {
    pub file: String,
    /// 1-based; 0 when the problem is the file as a whole.
    pub line: usize,
    pub message: String,
}

/// How `read_records` treats a torn final line (one without its newline).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TornTail {
    /// Skip it with a warning: resuming after a crash.
    Skip,
    /// Refuse the file: merging must not silently drop data.
    Reject,
}

/// Reads every record of a `measurements.jsonl`, checking the schema version of each line.
pub fn read_records(path: &Path, torn: TornTail) -> Result<Vec<Record>, InputError> {
    let file = path.display().to_string();
    let err = |line: usize, message: String| InputError { file: file.clone(), line, message };
    let text = std::fs::read_to_string(path).map_err(|e| err(0, format!("cannot read: {e}")))?;
    let mut records = Vec::new();
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let number = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let is_last = number == lines.len();
        match serde_json::from_str::<serde_json::Value>(line) {
            Err(e) if is_last && !complete && torn == TornTail::Skip => {
                eprintln!("warning: {file}:{number}: skipping a torn last line ({e})");
                continue;
            }
            Err(e) if is_last && !complete => {
                return Err(err(number, format!("truncated JSON line (interrupted write?): {e}")));
            }
            Err(e) => return Err(err(number, format!("not valid JSON: {e}"))),
            Ok(value) => {
                let version = value.get("schema_version").and_then(|v| v.as_u64());
                if version != Some(SCHEMA_VERSION as u64) {
                    return Err(err(
                        number,
                        format!(
                            "schema_version {} is not supported (this bench reads {SCHEMA_VERSION})",
                            version.map_or("missing".to_string(), |v| v.to_string())
                        ),
                    ));
                }
                let record: Record = serde_json::from_value(value)
                    .map_err(|e| err(number, format!("not a bench record: {e}")))?;
                records.push(record);
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CacheState, CellKey, Measurement, Mode, Scenario};

    fn record(run: u32) -> Record {
        Record::Measurement(Box::new(Measurement {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            cell: CellKey {
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
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp file left behind");
    }
}
