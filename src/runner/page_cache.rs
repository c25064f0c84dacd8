//! Warm means "evicted to disk": a restore must read the saved session from the disk, not from
//! the OS page cache that still holds the file the server wrote a moment ago. Measured on an H200
//! with llama-server's slot restore, the same file restored from the page cache was about 2x
//! faster than after dropping it (docs/page-cache.md). Where bench can reach the saved file (the
//! server runs on this host and its save directory is known), it drops the file from the page
//! cache before the timed window opens.

use std::path::Path;

/// Drops `path` from the OS page cache: its dirty pages are written first (fsync), because
/// POSIX_FADV_DONTNEED leaves dirty pages in memory; then every cached page of it is released.
/// Returns the file's size in bytes.
pub fn drop_file(path: &Path) -> std::io::Result<u64> {
    let file = std::fs::File::open(path)?;
    file.sync_all()?;
    advise_dontneed(&file)?;
    Ok(file.metadata()?.len())
}

#[cfg(target_os = "linux")]
fn advise_dontneed(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the whole call (borrowed from `file`); offset 0 and
    // length 0 name the whole file; the call reads no memory of ours.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::from_raw_os_error(rc)) }
}

#[cfg(not(target_os = "linux"))]
fn advise_dontneed(_: &std::fs::File) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "dropping a file from the page cache needs Linux (posix_fadvise DONTNEED)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_is_dropped_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("slot.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(drop_file(&path).ok(), Some(1 << 20), "the size of the file dropped");
        assert_eq!(std::fs::read(&path).map(|b| b.len()).ok(), Some(1 << 20), "the file itself is kept");
        let missing = drop_file(&dir.path().join("none.bin"));
        assert_eq!(missing.err().map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }
}
