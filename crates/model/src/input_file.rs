//! Files a user names as inputs are looked at before they are read, and read no further than
//! their kind needs: no input may hang bench or eat the machine's memory.
//!
//! - Settings and certificates (scenario, preset, `--ca-cert`, a model's config.json, a dataset)
//!   are read whole, so each kind has a size cap (`Limit`): a CA bundle is kilobytes, a scenario
//!   a page; `/dev/zero` given as one once read until the kernel's OOM killer ended bench.
//! - They must be regular files: opening a FIFO waits for a writer (forever, for a stray named
//!   pipe), and a device never ends. `open_file` refuses anything else before opening it, and
//!   opens without blocking, so a path swapped for a FIFO between the look and the open cannot
//!   hang it either.
//! - Result files are streamed (their memory is the records, not the text) and may also come
//!   through a pipe: `bench verify <(cat run.jsonl)` names `/dev/fd/63`, an anonymous pipe whose
//!   writer is already there. `open_stream` opens a pipe without waiting, then reads it as usual:
//!   with a writer it reads what is written; a named FIFO that nobody writes to reads as empty
//!   (end of file at once), which the caller refuses as an empty input. Never a wait.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The most bytes a kind of input file may have, and what to call that kind in a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub max_bytes: u64,
    /// "a CA bundle", "a scenario file", ...
    pub what: &'static str,
}

impl Limit {
    /// A scenario file: a few dozen keys. 1 MiB is a thousand times that.
    pub const SCENARIO: Limit = Limit { max_bytes: 1 << 20, what: "a scenario file" };
    /// A preset file: endpoints, placeholders and a few actions.
    pub const PRESET: Limit = Limit { max_bytes: 1 << 20, what: "a preset file" };
    /// A PEM CA bundle: the whole system store (~150 roots) is about 220 KB.
    pub const CA_BUNDLE: Limit = Limit { max_bytes: 4 << 20, what: "a CA bundle" };
    /// An HF `config.json` or `model.safetensors.index.json` (the index of a 400B model's
    /// thousands of tensors is a few hundred KB).
    pub const MODEL_CONFIG: Limit = Limit { max_bytes: 16 << 20, what: "a model config" };
    /// The header region of a GGUF file (metadata and tensor infos, not the weights): a 256k-token
    /// vocabulary with its scores, types and merges is tens of MB.
    pub const GGUF_HEADER: Limit = Limit { max_bytes: 256 << 20, what: "a GGUF header" };
    /// A dataset, read whole before sampling: ShareGPT's largest public file is 642 MB.
    pub const DATASET: Limit = Limit { max_bytes: 4 << 30, what: "a dataset" };
    /// A file read beside a result file (AIPerf's aggregate JSON): a summary of one run.
    pub const RESULT_SIDECAR: Limit = Limit { max_bytes: 16 << 20, what: "a result summary" };
    /// A run's run.json (a load run's steps and rates included), read by `--resume`.
    pub const RUN_JSON: Limit = Limit { max_bytes: 256 << 20, what: "a run.json" };
}

/// "4 MiB", "256 MiB", "4 GiB": a limit as a person reads it.
fn binary_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// What a path that is neither a regular file nor a directory is, for the message that refuses it.
pub fn file_kind(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a named pipe (FIFO)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
    }
    if kind.is_dir() { "a directory" } else { "not a regular file" }
}

/// Why an input file given by name could not be read; the caller adds the file and its flag.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read: {source}")]
    Unreadable { source: std::io::Error },
    /// What it is instead (`file_kind`).
    #[error("not a regular file (it is {0})")]
    NotAFile(&'static str),
    #[error("too large for {}: {size} bytes, at most {}", limit.what, binary_size(limit.max_bytes))]
    TooLarge { size: u64, limit: Limit },
}

fn unreadable(source: std::io::Error) -> ReadError {
    ReadError::Unreadable { source }
}

/// Opens `path` for reading without waiting: a FIFO's open returns at once (`O_NONBLOCK`), and the
/// flag is cleared again so that reads wait for data as a plain open's would.
fn open_without_waiting(path: &Path) -> Result<File, ReadError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(unreadable)?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns; F_GETFL/F_SETFL change only its flags.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(unreadable(std::io::Error::last_os_error()));
        }
    }
    Ok(file)
}

/// A regular file, opened: anything else is refused before it is opened (a device may act on
/// being opened), and the opened file is looked at again (the path may have changed between).
pub fn open_file(path: &Path) -> Result<File, ReadError> {
    let kind = std::fs::metadata(path).map_err(unreadable)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotAFile(file_kind(kind)));
    }
    let file = open_without_waiting(path)?;
    let kind = file.metadata().map_err(unreadable)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotAFile(file_kind(kind)));
    }
    Ok(file)
}

/// A stream of records: a regular file, or a pipe (`<(cat run.jsonl)`, a named FIFO) opened
/// without waiting for a writer; a pipe nobody writes to reads as empty at once. Devices,
/// sockets and directories are refused. The bool says whether it is a regular file (one that
/// can be opened again and read in parts).
pub fn open_stream(path: &Path) -> Result<(File, bool), ReadError> {
    let kind = std::fs::metadata(path).map_err(unreadable)?.file_type();
    if !(kind.is_file() || is_fifo(kind)) {
        return Err(ReadError::NotAFile(file_kind(kind)));
    }
    let file = open_without_waiting(path)?;
    let kind = file.metadata().map_err(unreadable)?.file_type();
    if !(kind.is_file() || is_fifo(kind)) {
        return Err(ReadError::NotAFile(file_kind(kind)));
    }
    Ok((file, kind.is_file()))
}

fn is_fifo(kind: std::fs::FileType) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        kind.is_fifo()
    }
    #[cfg(not(unix))]
    {
        let _ = kind;
        false
    }
}

/// Whether `path` is a regular file (of at most `limit`, when given), from its metadata alone:
/// what a run checks of the files its flags name before it starts.
pub fn check(path: &Path, limit: Option<Limit>) -> Result<(), ReadError> {
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile(file_kind(meta.file_type())));
    }
    match limit {
        Some(limit) if meta.len() > limit.max_bytes => Err(ReadError::TooLarge { size: meta.len(), limit }),
        _ => Ok(()),
    }
}

/// The bytes of a regular file of at most `limit.max_bytes`: a larger one is refused from its size
/// before anything is read, and one that grows past the limit while it is read is refused too.
pub fn read_bytes(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let file = open_file(path)?;
    let size = file.metadata().map_err(unreadable)?.len();
    if size > limit.max_bytes {
        return Err(ReadError::TooLarge { size, limit });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.max_bytes + 1).read_to_end(&mut bytes).map_err(unreadable)?;
    if bytes.len() as u64 > limit.max_bytes {
        return Err(ReadError::TooLarge { size: bytes.len() as u64, limit });
    }
    Ok(bytes)
}

/// `read_bytes` as UTF-8 text (a scenario, a preset, a config).
pub fn read_text(path: &Path, limit: Limit) -> Result<String, ReadError> {
    String::from_utf8(read_bytes(path, limit)?).map_err(|e| {
        unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8 text: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_readable_file_is_told_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_text(dir.path(), Limit::SCENARIO).unwrap_err();
        assert!(matches!(e, ReadError::NotAFile("a directory")), "{e:?}");
        assert_eq!(e.to_string(), "not a regular file (it is a directory)");
        let e = read_text(&dir.path().join("absent.toml"), Limit::SCENARIO).unwrap_err();
        let ReadError::Unreadable { source: io } = &e else { panic!("{e:?}") };
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("cannot read: No such file"), "{e}");
        #[cfg(unix)]
        {
            let e = read_bytes(Path::new("/dev/zero"), Limit::CA_BUNDLE).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file (it is a device)");
            let e = open_stream(Path::new("/dev/zero")).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file (it is a device)");
        }
    }

    #[test]
    fn a_file_over_its_kinds_limit_is_refused_by_size_and_one_at_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bundle.pem");
        let limit = Limit { max_bytes: 8, what: "a test file" };
        std::fs::write(&path, b"12345678").unwrap();
        assert_eq!(read_bytes(&path, limit).unwrap(), b"12345678");
        std::fs::write(&path, b"123456789").unwrap();
        let e = read_bytes(&path, limit).unwrap_err();
        assert_eq!(e.to_string(), "too large for a test file: 9 bytes, at most 8 bytes");
        let e = ReadError::TooLarge { size: 5 << 20, limit: Limit::CA_BUNDLE };
        assert_eq!(e.to_string(), "too large for a CA bundle: 5242880 bytes, at most 4 MiB");
        assert_eq!(binary_size(Limit::DATASET.max_bytes), "4 GiB");
    }
}
