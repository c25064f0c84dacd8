//! Documents replaced atomically: written to a temp file beside the target, fsync'd, renamed.
//!
//! Why our own and not `tempfile::NamedTempFile::persist` alone: a large document is written
//! around the page cache, or where it cannot be, starts its writeback while it is written
//! (`direct`, so the closing fsync does not wait for all of it), a signal stops a write between
//! buffers, and temp files a killed writer left behind are found by their name and swept;
//! tempfile's `persist` leaves all three to its caller.
//!
//! Readers see the old file or the new one, never half of one. The temp file is removed on every
//! error path (a failed write, fsync or rename), and temp files that killed writers left behind
//! for the same target are swept before the next write, so failures leave no debris.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use super::direct::DocumentFile;
use super::placed::Document;

/// A signal arrived while a document was being written (`stop_writes_on_signal`).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// A temp file is being filled: a signal must let its writer remove it before the process ends.
static WRITING: AtomicBool = AtomicBool::new(false);
/// The exit code a signal ends the process with (`stop_writes_on_signal`).
static EXIT_CODE: AtomicU8 = AtomicU8::new(1);

/// From now on SIGINT and SIGTERM end this process with `exit_code` and leave no temp file: outside
/// a write it ends at once (nothing half-written exists); during one, the write fails at its next
/// buffer, removes its temp file and reports `interrupted()`, and the caller exits. For verbs
/// that only read and then write one document (merge, report -o); a sweep handles its signals itself.
pub fn stop_writes_on_signal(exit_code: u8) {
    EXIT_CODE.store(exit_code, Ordering::SeqCst);
    #[cfg(unix)]
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only touches atomics and calls _exit, both async-signal-safe.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
}

#[cfg(unix)]
extern "C" fn on_signal(_: libc::c_int) {
    if !WRITING.load(Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe; nothing is half-written outside a write.
        unsafe { libc::_exit(i32::from(EXIT_CODE.load(Ordering::SeqCst))) };
    }
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether a signal stopped a write (its temp file is removed, the target untouched).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Marks a write in progress while it lives.
struct Writing;

impl Writing {
    fn start() -> Writing {
        WRITING.store(true, Ordering::SeqCst);
        Writing
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        WRITING.store(false, Ordering::SeqCst);
    }
}

/// A write that failed, naming the file and what was being done to it.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot {action}: {source}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    pub action: &'static str,
    #[source]
    pub source: io::Error,
}

impl WriteError {
    pub fn new(path: &Path, action: &'static str, source: io::Error) -> WriteError {
        WriteError { path: path.to_path_buf(), action, source }
    }

    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename. Text has every
/// registered secret masked first (`secrets::redact`: a report or a plot quoting a server's words).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let bytes = ttft_model::secrets::redact_bytes(bytes);
    write_atomic_with(path, |w| w.write_all(&bytes))
}

/// Serializes `value` as pretty JSON (and a final newline) and writes it atomically, every
/// registered secret masked inside its strings (`secrets::redact_json_text`): what a server
/// said (its `/v1/models` and `/props` answers, echoing a key) is stored as said, less the keys.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), WriteError> {
    let mut json =
        serde_json::to_vec_pretty(value).map_err(|e| WriteError::new(path, "write", io::Error::other(e)))?;
    json.push(b'\n');
    let json = ttft_model::secrets::redact_json_bytes(&json);
    write_atomic_with(path, |w| w.write_all(&json))
}

/// Streams a document into `path` atomically: `fill` writes it (buffered) into the temp file, in
/// order, and where it places a stretch of it out of order (`Document::write_stretch`), that stretch.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Document) -> io::Result<()>,
) -> Result<(), WriteError> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| WriteError::new(dir, "create the directory", e))?;
    let name = path
        .file_name()
        .ok_or_else(|| WriteError::new(path, "write", io::Error::other("the path has no file name")))?
        .to_string_lossy()
        .to_string();
    sweep_stale_temps(dir, &name);
    // Marked before the temp file exists and until it is renamed or removed (TempFile drops first).
    let _writing = Writing::start();
    let tmp = TempFile(dir.join(format!("{}{}", temp_prefix(&name), std::process::id())));
    let file = File::create(&tmp.0).map_err(|e| WriteError::new(path, "create a temp file beside", e))?;
    let mut out = DocumentFile::new(file, &tmp.0);
    fill(&mut out).map_err(|e| WriteError::new(path, "write", e))?;
    let file = out.finish().map_err(|e| WriteError::new(path, "write", e))?;
    file.sync_all().map_err(|e| WriteError::new(path, "sync", e))?;
    drop(file);
    std::fs::rename(&tmp.0, path).map_err(|e| WriteError::new(path, "replace", e))?;
    tmp.keep();
    // The rename itself must survive a crash too.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// Removes the temp file unless it was renamed into place.
struct TempFile(PathBuf);

impl TempFile {
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Temp files for `name` whose writer is gone (killed mid-write: no error path ran). Only on
/// Linux, where `/proc` says whether a pid is alive; elsewhere they stay until removed by hand.
fn sweep_stale_temps(dir: &Path, name: &str) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let prefix = temp_prefix(name);
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["x.json"], "no temp file left behind");
    }

    #[test]
    fn a_failed_rename_removes_the_temp_file_and_names_the_target() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory where the file should go: the rename fails.
        let target = dir.path().join("out.json");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"x").unwrap();
        let err = write_atomic(&target, b"data").unwrap_err();
        assert!(err.to_string().starts_with(&format!("{}: cannot replace", target.display())), "{err}");
        assert_eq!(names(dir.path()), ["out.json"], "no .tmp- file remains");
    }

    #[test]
    fn a_failed_fill_removes_the_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        let err = write_atomic_with(&target, |_| Err(io::Error::other("disk full"))).unwrap_err();
        assert!(err.to_string().contains("out.json: cannot write: disk full"), "{err}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    #[test]
    fn a_write_to_a_place_nothing_can_be_written_names_the_file() {
        // /proc refuses new files even to root.
        if !Path::new("/proc/self").exists() {
            eprintln!("SKIP: no /proc on this system");
            return;
        }
        let err = write_atomic(Path::new("/proc/out.json"), b"data").unwrap_err();
        assert!(err.to_string().starts_with("/proc/out.json: cannot create a temp file beside"), "{err}");
    }

    #[test]
    fn a_write_of_many_megabytes_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        // Five direct chunks and a part, in pieces that straddle their ends.
        let bytes: Vec<u8> = (0..(21 << 20) + 7).map(|i| (i % 251) as u8).collect();
        write_atomic_with(&path, |w| bytes.chunks(1_000_003).try_for_each(|c| w.write_all(c))).unwrap();
        assert!(std::fs::read(&path).unwrap() == bytes, "every byte, in order");
    }

    #[test]
    fn temp_files_of_dead_writers_are_swept() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // pid 4194304 is above Linux's maximum pid: never alive.
        let stale = dir.path().join(".out.json.tmp-4194304");
        std::fs::write(&stale, b"half").unwrap();
        let other = dir.path().join(".other.json.tmp-4194304");
        std::fs::write(&other, b"not ours").unwrap();
        write_atomic(&dir.path().join("out.json"), b"whole").unwrap();
        assert_eq!(names(dir.path()), [".other.json.tmp-4194304", "out.json"]);
    }
}
