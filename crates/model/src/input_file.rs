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

/// The text of an input file given by name (a scenario, a preset), refusing anything that is not
/// a regular file before opening it: opening a FIFO waits for a writer, a device never ends.
pub fn read_text(path: &std::path::Path) -> Result<String, String> {
    let kind = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?.file_type();
    if !kind.is_file() {
        return Err(format!("not a regular file (it is {})", file_kind(kind)));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))
}
