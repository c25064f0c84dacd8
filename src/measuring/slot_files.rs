//! The sessions a warm measurement saves to the server's disk, and their removal. A server writes
//! each evicted session to a file (llama.cpp's slot file: on a GPU host 4.3 GB for one 32K session
//! of an 8B-shaped f16 model) and never removes it, so a sweep left to itself fills the server's
//! disk. Where bench reaches the save directory (`--slot-dir`, or `--slot-save-path` in
//! `--server-cmd`) it removes each saved file once its session is measured, and at the end of the
//! run (or on an interrupt) every file it saved that is still there. Files it did not save are
//! never touched.
//!
//! The registry is process-wide: an interrupt aborts the task that measures, and the file that
//! task had just saved must still be found by the close that follows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

use ttft_model::record::{CacheState, CellKey};

static SAVED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// What the server said it saved for each session (its evict's answer), by session id: a warm
/// record's `saved_bytes` where bench cannot read the file itself.
static WRITTEN: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// The server saved `bytes` for `session` (its evict's answer).
pub(crate) fn note_written(session: &str, bytes: u64) {
    WRITTEN.lock().unwrap_or_else(|p| p.into_inner()).insert(session.to_string(), bytes);
}

/// What the server said it saved for `session`, taken (each session's evict is measured once).
pub(crate) fn take_written(session: &str) -> Option<u64> {
    WRITTEN.lock().unwrap_or_else(|p| p.into_inner()).remove(session)
}

fn saved() -> std::sync::MutexGuard<'static, BTreeSet<PathBuf>> {
    SAVED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The session's saved file now exists (its evict succeeded): removed later by `remove` or
/// `remove_leftovers`.
pub(crate) fn track(path: PathBuf) {
    saved().insert(path);
}

/// Removes one saved file (its session is measured). A file already gone is no error.
pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    saved().remove(path);
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// What the end of a run removed: files and bytes, and the files it could not remove (named, so
/// the user can).
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    pub removed: usize,
    pub bytes: u64,
    pub failed: Vec<String>,
}

/// Removes every file this process saved and has not removed yet.
pub(crate) fn remove_leftovers() -> Leftovers {
    let paths = std::mem::take(&mut *saved());
    let mut out = Leftovers::default();
    for path in paths {
        let bytes = std::fs::metadata(&path).map(|m| m.len()).ok();
        match std::fs::remove_file(&path) {
            Ok(()) => {
                out.removed += 1;
                out.bytes += bytes.unwrap_or(0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => out.failed.push(format!("{}: {e}", path.display())),
        }
    }
    out
}

impl Leftovers {
    /// One line for stderr when there was something to remove, None otherwise.
    pub(crate) fn line(&self) -> Option<String> {
        if self.removed == 0 && self.failed.is_empty() {
            return None;
        }
        let mut line = format!(
            "removed {} saved session file(s) of this run from the server's save directory ({:.1} MB)",
            self.removed,
            self.bytes as f64 / 1e6
        );
        if !self.failed.is_empty() {
            line += &format!("; could not remove: {}", self.failed.join(", "));
        }
        Some(line)
    }
}

/// What a plan's warm cells save on the server's disk, from the model's KV bytes per token: one
/// session holds its prompt and its reply (batch members one each).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct WarmDisk {
    /// The largest warm cell's saved sessions: what the disk must hold at once when bench removes
    /// each session once measured.
    pub peak_bytes: f64,
    /// Every warm cell's saved sessions: what the sweep leaves where bench cannot remove them.
    pub total_bytes: f64,
    pub warm_cells: usize,
    /// bench reaches the save directory, so it removes each session once measured.
    pub reachable: bool,
}

/// `cells`' warm disk use, or None when the plan has no warm cell or the KV size is unknown;
/// `reachable`: bench reaches the save directory.
pub(crate) fn warm_disk(
    cells: &[CellKey],
    output_tokens: u32,
    kv_bytes_per_token: Option<f64>,
    reachable: bool,
) -> Option<WarmDisk> {
    let kv = kv_bytes_per_token.filter(|k| *k > 0.0)?;
    let saved: Vec<f64> = cells
        .iter()
        .filter(|c| c.cache_state == CacheState::Warm)
        .map(|c| f64::from(c.batch_size.max(1)) * f64::from(c.context_tokens + output_tokens) * kv)
        .collect();
    (!saved.is_empty()).then(|| WarmDisk {
        peak_bytes: saved.iter().copied().fold(0.0, f64::max),
        total_bytes: saved.iter().sum(),
        warm_cells: saved.len(),
        reachable,
    })
}

impl WarmDisk {
    /// What the sweep does to the server's disk, in one line.
    pub(crate) fn line(&self) -> String {
        if self.reachable {
            format!(
                "warm: {} cells save up to {} at once on the server's disk (each session removed once measured)",
                self.warm_cells,
                gb(self.peak_bytes)
            )
        } else {
            format!(
                "warm: {} cells will leave about {} of saved sessions on the server's disk, which bench cannot \
                 reach to remove (give --slot-dir where the server saves them, on this host)",
                self.warm_cells,
                gb(self.total_bytes)
            )
        }
    }
}

fn gb(bytes: f64) -> String {
    format!("{:.2} GB", bytes / 1e9)
}

/// Bytes free for an unprivileged writer on the filesystem holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let stat = nix::sys::statvfs::statvfs(dir)?;
    #[allow(clippy::useless_conversion)] // the fields' widths differ between platforms
    Ok(u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size())))
}

/// Whether the save directory can hold the largest warm cell; the error names the directory, what
/// it has free and what the cell needs (exit 4: results that cannot be written).
pub(crate) fn check_room(dir: &Path, disk: &WarmDisk) -> Result<(), String> {
    let Ok(free) = free_bytes(dir) else { return Ok(()) };
    if (free as f64) < disk.peak_bytes {
        return Err(format!(
            "the server's save directory {} has {} free, but the largest warm cell saves about {} \
             (free space there, or measure smaller contexts)",
            dir.display(),
            gb(free as f64),
            gb(disk.peak_bytes)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracked_files_are_removed_once_and_untracked_ones_never() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (a, b, other) = (dir.path().join("a.bin"), dir.path().join("b.bin"), dir.path().join("o.bin"));
        for p in [&a, &b, &other] {
            std::fs::write(p, [1u8; 10]).unwrap_or_else(|e| panic!("{e}"));
        }
        track(a.clone());
        track(b.clone());
        assert!(remove(&a).is_ok());
        assert!(!a.exists());
        assert!(remove(&a).is_ok(), "a file already gone is no error");
        let left = remove_leftovers();
        assert!(!b.exists(), "the leftover is removed at the end");
        assert!(other.exists(), "a file bench did not save is never touched");
        assert!(left.removed >= 1 && left.bytes >= 10, "{left:?}");
        assert!(remove_leftovers().failed.is_empty());
    }

    fn cell(state: CacheState, context_tokens: u32, batch_size: u32) -> CellKey {
        CellKey { cache_state: state, context_tokens, batch_size, ..Default::default() }
    }

    #[test]
    fn warm_disk_counts_warm_sessions_only_with_their_replies_and_batch_members() {
        let cells = [
            cell(CacheState::Cold, 32768, 1),
            cell(CacheState::Warm, 1000, 1),
            cell(CacheState::Warm, 2000, 2),
            cell(CacheState::Hot, 32768, 1),
        ];
        let disk = warm_disk(&cells, 24, Some(10.0), true).unwrap_or_else(|| panic!("warm cells"));
        assert_eq!(disk.warm_cells, 2);
        assert!((disk.peak_bytes - 2.0 * 2024.0 * 10.0).abs() < 1e-6, "{disk:?}");
        assert!((disk.total_bytes - (1024.0 + 2.0 * 2024.0) * 10.0).abs() < 1e-6, "{disk:?}");
        assert_eq!(warm_disk(&cells[..1], 24, Some(10.0), true), None, "no warm cell");
        assert_eq!(warm_disk(&cells, 24, None, true), None, "unknown KV size");
    }

    #[test]
    fn a_save_directory_too_small_for_the_largest_cell_is_named_with_its_free_space() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let huge = WarmDisk { peak_bytes: 1e18, total_bytes: 1e18, warm_cells: 1, reachable: true };
        let err = check_room(dir.path(), &huge).err().unwrap_or_default();
        assert!(err.contains(&dir.path().display().to_string()) && err.contains("free"), "{err}");
        let tiny = WarmDisk { peak_bytes: 1.0, total_bytes: 1.0, warm_cells: 1, reachable: true };
        assert!(check_room(dir.path(), &tiny).is_ok());
    }
}
