//! Files a user names as inputs (result files, scenario and preset files) are looked at before
//! they are opened: only regular files (and, for results, run directories) are inputs. Opening a
//! FIFO waits for a writer, forever for a stray named pipe; a device never ends.

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
}

/// The text of an input file given by name (a scenario, a preset), refusing anything that is not
/// a regular file before opening it: opening a FIFO waits for a writer, a device never ends.
pub fn read_text(path: &std::path::Path) -> Result<String, ReadError> {
    let kind = std::fs::metadata(path).map_err(|source| ReadError::Unreadable { source })?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotAFile(file_kind(kind)));
    }
    std::fs::read_to_string(path).map_err(|source| ReadError::Unreadable { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_readable_file_is_told_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_text(dir.path()).unwrap_err();
        assert!(matches!(e, ReadError::NotAFile("a directory")), "{e:?}");
        assert_eq!(e.to_string(), "not a regular file (it is a directory)");
        let e = read_text(&dir.path().join("absent.toml")).unwrap_err();
        let ReadError::Unreadable { source: io } = &e else { panic!("{e:?}") };
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("cannot read: No such file"), "{e}");
    }
}
