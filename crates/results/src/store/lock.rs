//! One writer per run directory: two `bench sweep --resume` of the same run at once would append
//! the same cells twice. The lock is an OS advisory lock (`File::try_lock`: flock on Unix,
//! LockFileEx on Windows) on `bench.lock` in the run directory, which also holds the holder's pid
//! for the message the second process prints. The OS drops the lock when the holder exits, however
//! it exits (kill -9 included), so a stale lock file never blocks anyone.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "bench.lock";

/// Held while a process writes into a run directory; released on drop.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error("{}: the run is in use by another bench process (pid {}); wait for it to finish or stop it", path.display(), pid.map_or("unknown".to_string(), |p| p.to_string()))]
    Held { path: PathBuf, pid: Option<u32> },
    #[error("{}: cannot lock the run: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl RunLock {
    /// Takes the lock of `run_dir` (which must exist) without waiting.
    pub fn acquire(run_dir: &Path) -> Result<RunLock, LockError> {
        let path = run_dir.join(LOCK_FILE);
        let io_err = |source| LockError::Io { path: path.clone(), source };
        // Not truncated on open: the holder's pid must survive a second process opening the file.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(LockError::Held { pid: holder(&mut file), path }),
            Err(TryLockError::Error(e)) => return Err(io_err(e)),
        }
        file.set_len(0).map_err(io_err)?;
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(io_err)?;
        file.sync_data().map_err(io_err)?;
        Ok(RunLock { file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // The file stays (removing it would race with a process that has just opened it); the
        // lock is what counts, and closing the file would release it anyway.
        let _ = self.file.unlock();
    }
}

/// What a run whose writer is gone (`holder_gone`) while run.json says `running` is told as.
pub const KILLED: &str = "run.json says running, but no bench process holds the run: it was killed (kill -9, a \
     crash, a power loss) and is read as interrupted";

/// Whether the writer of the run in `run_dir` is gone: its lock file is there and no process holds
/// the lock. A run killed outright (kill -9, a power loss) cannot write `interrupted` into its
/// run.json; this is how a reader tells that `running` is no longer true. A directory without a
/// lock file was not written by a bench on this host and is not judged (false). The probe is a
/// shared lock held for the moment of the test.
pub fn holder_gone(run_dir: &Path) -> bool {
    let Ok(file) = File::open(run_dir.join(LOCK_FILE)) else { return false };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            true
        }
        Err(_) => false,
    }
}

/// How long a refused process waits for the holder's pid to appear (`holder`).
const PID_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The pid the holder wrote (None if the file is not ours). The holder writes it right after it
/// takes the lock, emptying the file first; a process refused in between found an empty file and
/// said "pid unknown" while bench.lock held the pid a moment later. So an empty or partial file
/// is read again, for up to `PID_WAIT`.
fn holder(file: &mut File) -> Option<u32> {
    let started = std::time::Instant::now();
    loop {
        if let Some(pid) = read_pid(file) {
            return Some(pid);
        }
        if started.elapsed() >= PID_WAIT {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(64).read_to_string(&mut text).ok()?;
    // Only a whole line: "12" of a "1234\n" still being written is not the pid.
    text.strip_suffix('\n')?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_acquire_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::acquire(dir.path()).unwrap();
        match RunLock::acquire(dir.path()) {
            Err(LockError::Held { pid, path }) => {
                assert_eq!(pid, Some(std::process::id()));
                assert_eq!(path, dir.path().join(LOCK_FILE));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        let message = RunLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(message.contains(&format!("pid {}", std::process::id())), "{message}");
        drop(first);
        let again = RunLock::acquire(dir.path()).unwrap();
        assert_eq!(again.path(), dir.path().join(LOCK_FILE));
    }

    #[test]
    fn a_missing_run_directory_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = RunLock::acquire(&dir.path().join("absent")).unwrap_err();
        assert!(matches!(err, LockError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("absent/bench.lock"), "{err}");
    }
}
