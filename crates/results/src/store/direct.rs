//! A document's bytes written around the OS page cache where the file system takes it (Linux's
//! `O_DIRECT`), in aligned chunks, the last part and anything refused written as usual.
//!
//! Why: a document is fsync'd before it is renamed into place, so its writer waits for the disk
//! either way; written through the page cache, every byte is first copied into cache pages the
//! kernel allocates and accounts, which cost a large merge most of its time (docs/performance.md,
//! "Writing a large document"). The first verb to read the file afterwards fills the cache instead.
//! A small document (under one chunk) never opens the file that way: it is one ordinary write.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::placed::{ALIGN, Blocks, Document, Placed, Stretch, aligned_start, behind};

/// Bytes a direct write carries: a multiple of every block size a file system aligns direct I/O
/// to (512 B to 4 KiB, `ALIGN` in memory and in the file), and large enough that the disk writes
/// at its pace.
const CHUNK: usize = 4 << 20;

/// How the chunks are written.
enum Way {
    /// No chunk yet: a small document is never written around the cache.
    Undecided,
    /// Around the page cache, through this second descriptor of the file.
    Direct(File),
    /// Through the page cache (refused, or not Linux), writeback started as it goes.
    Cached,
}

/// The temp file of a document being written (`write_atomic_with`).
pub(super) struct DocumentFile {
    /// Opened as usual: the last part, every chunk written cached, and the fsync.
    file: File,
    path: PathBuf,
    way: Way,
    /// `CHUNK` bytes from `start` are aligned to `ALIGN` in memory.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    /// Bytes in the file, and up to where writeback of cached writes was started.
    written: u64,
    writeback_from: u64,
    #[cfg(test)]
    refuse_direct: bool,
}

/// Cached writes start their writeback every this many bytes, so the closing fsync finds little
/// left to do (a 280 MB document spent a third of a second in its fsync when all of its writeback
/// started there). The fsync still decides durability.
const WRITE_BEHIND: u64 = 8 << 20;

impl DocumentFile {
    /// `file`, just created at `path` (which a second descriptor opens to write around the cache).
    pub(super) fn new(file: File, path: &Path) -> DocumentFile {
        let buf = vec![0u8; CHUNK + ALIGN];
        let start = aligned_start(&buf);
        DocumentFile {
            file,
            path: path.to_path_buf(),
            way: Way::Undecided,
            buf,
            start,
            filled: 0,
            written: 0,
            writeback_from: 0,
            #[cfg(test)]
            refuse_direct: false,
        }
    }

    /// What is left written, as usual: the file, to be synced.
    pub(super) fn finish(mut self) -> io::Result<File> {
        let rest = self.start..self.start + self.filled;
        self.file.seek(SeekFrom::Start(self.written))?;
        self.file.write_all(&self.buf[rest])?;
        Ok(self.file)
    }

    /// The full chunk written, around the cache where it can be.
    fn write_chunk(&mut self) -> io::Result<()> {
        self.decide_way();
        let chunk = &self.buf[self.start..self.start + CHUNK];
        write_around_cache(&mut self.way, &mut self.file, chunk, self.written)?;
        self.written += CHUNK as u64;
        self.filled = 0;
        if matches!(self.way, Way::Cached) && self.written - self.writeback_from >= WRITE_BEHIND {
            self.start_writeback();
        }
        Ok(())
    }

    /// Whether chunks are written around the cache, decided at the first.
    fn decide_way(&mut self) {
        if let Way::Undecided = self.way {
            self.way = match self.open_direct() {
                Ok(direct) => Way::Direct(direct),
                Err(_) => Way::Cached,
            };
        }
    }

    #[cfg(target_os = "linux")]
    fn open_direct(&self) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        #[cfg(test)]
        if self.refuse_direct {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(&self.path)
    }

    #[cfg(not(target_os = "linux"))]
    fn open_direct(&self) -> io::Result<File> {
        Err(io::ErrorKind::Unsupported.into())
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self) {
        use std::os::fd::AsRawFd;
        let from = self.writeback_from as libc::off64_t;
        let len = (self.written - self.writeback_from) as libc::off64_t;
        // SAFETY: a plain syscall on a descriptor this struct owns; no memory is passed. A failure
        // only means the fsync does the work, so it is ignored.
        unsafe { libc::sync_file_range(self.file.as_raw_fd(), from, len, libc::SYNC_FILE_RANGE_WRITE) };
        self.writeback_from = self.written;
    }

    #[cfg(not(target_os = "linux"))]
    fn start_writeback(&mut self) {
        self.writeback_from = self.written;
    }
}

/// Writes `blocks` (whole blocks, aligned) at `offset`, around the cache while `way` is `Direct`;
/// what the file system refuses is written cached through `file`, and so is every later write
/// (`way` becomes `Cached`).
fn write_around_cache(way: &mut Way, file: &mut File, blocks: &[u8], offset: u64) -> io::Result<()> {
    let done = match way {
        Way::Direct(direct) => write_direct(direct, blocks, offset)?,
        _ => 0,
    };
    if done < blocks.len() {
        *way = Way::Cached;
        file.seek(SeekFrom::Start(offset + done as u64))?;
        file.write_all(&blocks[done..])?;
    }
    Ok(())
}

/// Writes `chunk` at `offset` through `direct`; the bytes written before the file system refused
/// the rest (an alignment it asks more of, or direct writes it opened but does not do), all of
/// them where it took the whole chunk.
#[cfg(target_os = "linux")]
fn write_direct(direct: &File, chunk: &[u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < chunk.len() {
        match direct.write_at(&chunk[done..], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Never called: only Linux opens a file to be written around its cache (`open_direct`).
#[cfg(not(target_os = "linux"))]
fn write_direct(_: &File, _: &[u8], _: u64) -> io::Result<usize> {
    Ok(0)
}

impl Write for DocumentFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if super::interrupted() {
            return Err(io::Error::other("interrupted by a signal"));
        }
        let n = bytes.len().min(CHUNK - self.filled);
        let at = self.start + self.filled;
        self.buf[at..at + n].copy_from_slice(&bytes[..n]);
        self.filled += n;
        if self.filled == CHUNK {
            self.write_chunk()?;
        }
        Ok(n)
    }

    /// Chunks are written as they fill; the last part is written by `finish`.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A stretch's buffers go out as the in-order chunks do: whole blocks around the cache.
impl Blocks for DocumentFile {
    fn write_blocks(&mut self, buf: Vec<u8>, range: Range<usize>, at: u64) -> io::Result<Vec<u8>> {
        self.decide_way();
        write_around_cache(&mut self.way, &mut self.file, &buf[range], at)?;
        Ok(buf)
    }

    fn write_cached(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(at))?;
        self.file.write_all(bytes)
    }
}

impl Document for DocumentFile {
    fn write_stretch(
        &mut self,
        len: u64,
        points: usize,
        fill: &mut dyn FnMut(&mut dyn Placed) -> io::Result<()>,
    ) -> io::Result<bool> {
        // What was written in order goes out first, cached: it ends inside a block.
        let base = self.written + self.filled as u64;
        self.file.seek(SeekFrom::Start(self.written))?;
        self.file.write_all(&self.buf[self.start..self.start + self.filled])?;
        self.filled = 0;
        self.written = base;
        if len < CHUNK as u64 && matches!(self.way, Way::Undecided) {
            // A small stretch, like a small document, is never written around the cache.
            self.way = Way::Cached;
        }
        // The disk takes the full buffers while the next ones fill.
        behind(self, |sink| {
            let mut stretch = Stretch::new(sink, base, len, points);
            fill(&mut stretch)?;
            stretch.finish()
        })?;
        self.written = base + len;
        // The document goes on inside a block: the rest of it is written cached.
        self.way = Way::Cached;
        self.start_writeback();
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::page_cache;

    fn document(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    fn open(path: &Path) -> DocumentFile {
        DocumentFile::new(File::create(path).unwrap(), path)
    }

    /// The share of `path` the page cache holds once written, where the file system writes to a
    /// disk and the kernel says (None elsewhere).
    fn cached_share(path: &Path) -> Option<f64> {
        if page_cache::memory_filesystem(path).unwrap().is_some() {
            return None;
        }
        page_cache::resident_share(path).unwrap()
    }

    /// Whether the file system of `dir` opens a file to be written around its cache.
    fn takes_direct(dir: &Path) -> bool {
        let probe = open(&dir.join("probe"));
        let takes = probe.open_direct().is_ok();
        std::fs::remove_file(dir.join("probe")).unwrap();
        takes
    }

    /// Whether the file system of `dir` refuses a direct write from memory off its alignment (a
    /// file system in memory, or one that falls back to cached writes, may take it).
    #[cfg(target_os = "linux")]
    fn refuses_misaligned_direct_writes(dir: &Path) -> bool {
        use std::os::unix::fs::FileExt;
        let probe = open(&dir.join("probe"));
        let refused = probe.open_direct().is_ok_and(|direct| {
            let aligned = &probe.buf[probe.start..probe.start + CHUNK];
            let misaligned = &probe.buf[probe.start + 1..probe.start + 1 + ALIGN];
            direct.write_at(aligned, 0).is_ok() && direct.write_at(misaligned, 0).is_err()
        });
        std::fs::remove_file(dir.join("probe")).unwrap();
        refused
    }

    #[cfg(not(target_os = "linux"))]
    fn refuses_misaligned_direct_writes(_: &Path) -> bool {
        false
    }

    #[test]
    fn a_document_of_several_chunks_is_written_whole_around_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        // Three chunks and a part, in pieces that straddle the chunks' ends.
        let bytes = document(CHUNK * 3 + CHUNK / 3);
        let mut out = open(&path);
        bytes.chunks(1_000_003).for_each(|c| out.write_all(c).unwrap());
        let direct = matches!(out.way, Way::Direct(_));
        out.finish().unwrap().sync_all().unwrap();
        // Asked before the file is read back (which caches it).
        let share = cached_share(&path);
        assert!(std::fs::read(&path).unwrap() == bytes, "every byte, in order");
        if takes_direct(dir.path()) {
            assert!(direct, "{}: this file system takes direct writes; none was made", dir.path().display());
            // The last part (a tenth of the document) is written cached.
            assert!(share.is_none_or(|s| s < 0.5), "{share:?} of the document is in the page cache");
        }
    }

    /// Fails when a stretch placed out of order (between bytes written in order) is not the
    /// document the same bytes make in order, or is written through the page cache where the file
    /// system takes direct writes.
    #[test]
    fn a_stretch_placed_from_several_points_is_written_whole_around_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        let bytes = document(CHUNK * 3 + 12_345);
        let (head, tail) = (1_001, bytes.len() - 777);
        let mut out = open(&path);
        out.write_all(&bytes[..head]).unwrap();
        // Five points, each a fifth of the stretch, handed over a piece of each in turn.
        let stretch = &bytes[head..tail];
        let fifth = stretch.len().div_ceil(5);
        let placed = out
            .write_stretch(stretch.len() as u64, 5, &mut |placed| {
                for from in (0..fifth).step_by(99_991) {
                    for point in 0..5 {
                        let start = (point * fifth + from).min(stretch.len());
                        let end = (start + 99_991).min((point + 1) * fifth).min(stretch.len());
                        placed.write_at(start as u64, &stretch[start..end])?;
                    }
                }
                Ok(())
            })
            .unwrap();
        assert!(placed, "a document file places a stretch");
        out.write_all(&bytes[tail..]).unwrap();
        let direct = takes_direct(dir.path());
        out.finish().unwrap().sync_all().unwrap();
        let share = cached_share(&path);
        assert!(std::fs::read(&path).unwrap() == bytes, "every byte at its place");
        if direct {
            assert!(share.is_none_or(|s| s < 0.1), "{share:?} of the document is in the page cache");
        }
    }

    #[test]
    fn a_file_system_that_refuses_direct_writes_is_written_cached_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        let bytes = document(CHUNK * 2 + 12_345);
        let mut out = open(&path);
        out.refuse_direct = true;
        bytes.chunks(777_777).for_each(|c| out.write_all(c).unwrap());
        assert!(matches!(out.way, Way::Cached));
        out.finish().unwrap().sync_all().unwrap();
        let share = cached_share(&path);
        assert!(std::fs::read(&path).unwrap() == bytes, "every byte, in order");
        assert!(share.is_none_or(|s| s > 0.9), "written cached, yet {share:?} of it is in the page cache");
    }

    #[test]
    fn a_direct_write_refused_midway_is_written_cached_from_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        if !refuses_misaligned_direct_writes(dir.path()) {
            eprintln!("SKIP: {} does not refuse a misaligned direct write", dir.path().display());
            return;
        }
        let path = dir.path().join("big.json");
        let bytes = document(CHUNK * 3 + 999);
        let mut out = open(&path);
        out.write_all(&bytes[..CHUNK]).unwrap();
        assert!(matches!(out.way, Way::Direct(_)), "the first chunk is written around the cache");
        // The next chunk's memory one byte off its alignment: a direct write of it is refused.
        out.start += 1;
        out.write_all(&bytes[CHUNK..]).unwrap();
        assert!(matches!(out.way, Way::Cached), "refused, the rest is written cached");
        out.finish().unwrap().sync_all().unwrap();
        assert!(std::fs::read(&path).unwrap() == bytes, "every byte, in order");
    }
}
