//! The OS page cache of one file: dropping it, and asking the kernel how much of it is still in
//! memory. Warm means "evicted to disk": a restore that reads a saved session from the page cache
//! (the file the server wrote a moment ago) is a memory number, about 2x faster than the disk on
//! an H200 (docs/page-cache.md). Dropping is asked of the kernel; whether it worked is read back
//! (`resident_share`), because on a filesystem that keeps its files in memory (tmpfs, ramfs) the
//! drop succeeds and nothing leaves memory.

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

/// The share (0..=1) of `path`'s pages the OS page cache holds now, from `mincore` over a read-only
/// mapping of the whole file. None where the kernel would not say: since Linux 5.2 `mincore`
/// reports a file's page cache only to its owner or a process that may write it (to anyone else
/// it shows only the pages this process touched, which would read as "not cached" whatever is
/// cached), an empty file, or a system without `mincore`.
pub fn resident_share(path: &Path) -> std::io::Result<Option<f64>> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.len() == 0 || !kernel_reports_cache_of(path, &meta) {
        return Ok(None);
    }
    mincore_share(&file, meta.len())
}

/// The name of the filesystem `path` is on when that filesystem keeps its files in memory (tmpfs,
/// ramfs), where no drop can send a file to disk; None for any other filesystem.
pub fn memory_filesystem(path: &Path) -> std::io::Result<Option<&'static str>> {
    filesystem_in_memory(path)
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

/// Whether `mincore` will report the page cache of this file to this process: it owns the file,
/// may write it, or is root (the kernel's own test, `can_do_mincore`).
#[cfg(target_os = "linux")]
fn kernel_reports_cache_of(path: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid reads nothing of ours and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 || meta.uid() == euid {
        return true;
    }
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: c_path is a valid NUL-terminated string for the whole call.
    unsafe { libc::access(c_path.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn kernel_reports_cache_of(_: &Path, _: &std::fs::Metadata) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn mincore_share(file: &std::fs::File, len: u64) -> std::io::Result<Option<f64>> {
    use std::os::fd::AsRawFd;
    let Ok(len) = usize::try_from(len) else { return Ok(None) };
    // SAFETY: sysconf reads nothing of ours.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    // SAFETY: a fresh shared read-only mapping of the open file over its length; nothing is read
    // through it, and it is unmapped below on every path.
    let addr = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0)
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: addr..addr+len is the mapping made above; vec has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let error = (rc != 0).then(std::io::Error::last_os_error);
    // SAFETY: the mapping made above, unmapped once.
    unsafe { libc::munmap(addr, len) };
    if let Some(e) = error {
        return Err(e);
    }
    let resident = vec.iter().filter(|&&b| b & 1 == 1).count();
    Ok(Some(resident as f64 / pages as f64))
}

#[cfg(not(target_os = "linux"))]
fn mincore_share(_: &std::fs::File, _: u64) -> std::io::Result<Option<f64>> {
    Ok(None)
}

#[cfg(target_os = "linux")]
fn filesystem_in_memory(path: &Path) -> std::io::Result<Option<&'static str>> {
    use std::os::unix::ffi::OsStrExt;
    // The magic numbers of statfs(2): filesystems whose files live in memory only.
    const IN_MEMORY: &[(i64, &str)] = &[(0x0102_1994, "tmpfs"), (0x8584_58f6, "ramfs")];
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: an all-zero statfs is a valid value of the plain C struct; it is filled below.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is NUL-terminated and fs is a live statfs for the call to fill.
    if unsafe { libc::statfs(c_path.as_ptr(), &raw mut fs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)] // f_type's width differs by libc
    let kind = i64::from(fs.f_type as i64);
    Ok(IN_MEMORY.iter().find(|(magic, _)| *magic == kind).map(|(_, name)| *name))
}

#[cfg(not(target_os = "linux"))]
fn filesystem_in_memory(_: &Path) -> std::io::Result<Option<&'static str>> {
    Ok(None)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A directory on the build's own disk (the target directory), not /tmp, which may be tmpfs.
    fn disk_dir() -> tempfile::TempDir {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp");
        let _ = std::fs::create_dir_all(&base);
        tempfile::tempdir_in(base).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_written_file_is_resident_until_dropped_and_a_missing_one_is_named() {
        let dir = disk_dir();
        let path = dir.path().join("slot.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        if memory_filesystem(&path).ok().flatten().is_some() {
            return; // the build's disk itself is in memory: nothing here can leave it
        }
        let before = resident_share(&path).ok().flatten();
        assert!(before.is_some_and(|s| s > 0.9), "a file just written is in memory: {before:?}");
        assert_eq!(drop_file(&path).ok(), Some(1 << 20), "the size of the file dropped");
        let after = resident_share(&path).ok().flatten();
        assert!(after.is_some_and(|s| s < 0.1), "dropped: {after:?}");
        assert_eq!(std::fs::read(&path).map(|b| b.len()).ok(), Some(1 << 20), "the file itself is kept");
        let missing = drop_file(&dir.path().join("none.bin"));
        assert_eq!(missing.err().map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }

    #[test]
    fn a_file_on_tmpfs_stays_in_memory_whatever_the_drop() {
        let shm = Path::new("/dev/shm");
        if memory_filesystem(shm).ok().flatten() != Some("tmpfs") {
            return; // no tmpfs here to show it on
        }
        let dir = tempfile::tempdir_in(shm).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("slot.bin");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(memory_filesystem(&path).ok().flatten(), Some("tmpfs"));
        assert!(drop_file(&path).is_ok());
        let after = resident_share(&path).ok().flatten();
        assert!(after.is_some_and(|s| s > 0.9), "tmpfs keeps it: {after:?}");
        let disk = disk_dir();
        assert_eq!(memory_filesystem(disk.path()).ok(), Some(None), "the build's disk is not in memory");
    }
}
