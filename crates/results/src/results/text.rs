//! Where each record's JSON text lies in the file it was read from, so `bench merge` can write
//! records back as they were read (`sources::Detail::Located`) instead of holding every one whole.
//!
//! Holding 100,000 records whole (their token offsets, output samples, server timings) took
//! nearly 300 MB, and serializing them again was a third of the merge. A located record is read
//! lean (what merge decides with) and remembers its text's offset, length and CRC-32 in its file;
//! the merge copies the text from there. The file stays open from reading to writing, so a rename
//! over it changes nothing, and the CRC taken while parsing is checked on the copy: a file changed
//! in place in between is an error naming it, never a record written that was not the one read.
//!
//! Only a record of the current schema whose text is one line is located (every record a sweep
//! appends and every record a canonical file holds): its text is what the canonical layout wants.
//! Anything else (other layouts, other formats) is read whole and written as bench serializes it.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// One record's text in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub len: usize,
    pub crc: u32,
}

impl Span {
    /// The span of `text`, found at `offset` of its file.
    pub fn of(offset: u64, text: &[u8]) -> Span {
        Span { offset, len: text.len(), crc: crc32fast::hash(text) }
    }
}

/// An input file kept open for the texts of its records.
#[derive(Debug)]
pub struct TextFile {
    name: String,
    file: File,
}

impl TextFile {
    /// Opens `path` (`name` in messages).
    pub fn open(path: &Path, name: &str) -> io::Result<Arc<TextFile>> {
        Ok(Arc::new(TextFile { name: name.to_string(), file: File::open(path)? }))
    }
}

/// Where the records of one source were read: `spans[i]` is the text of its `records[i]`.
#[derive(Clone, Debug)]
pub struct Texts {
    pub file: Arc<TextFile>,
    pub spans: Vec<Span>,
}

impl Texts {
    /// Each record's text, in order.
    pub fn each(&self) -> impl Iterator<Item = Text> + '_ {
        self.spans.iter().map(|&span| Text { file: Arc::clone(&self.file), span })
    }
}

/// One record's text, to be copied.
#[derive(Clone, Debug)]
pub struct Text {
    file: Arc<TextFile>,
    span: Span,
}

impl Text {
    /// Appends the text to `out`, as it was when it was read; an error names the file when it
    /// cannot be read or holds other bytes there now.
    pub fn append_to(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        out.resize(start + self.span.len, 0);
        let read = read_at(&self.file.file, &mut out[start..], self.span.offset);
        let changed = || {
            InputFault::error(format!(
                "{}: changed while it was being merged (the record at byte {} is not the one read); \
                 nothing was written: merge it again",
                self.file.name, self.span.offset
            ))
        };
        match read {
            Ok(()) if crc32fast::hash(&out[start..]) == self.span.crc => Ok(()),
            Ok(()) => Err(changed()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(changed()),
            Err(e) => Err(InputFault::error(format!("{}: cannot read: {e}", self.file.name))),
        }
    }

    /// The text as a string (it was valid UTF-8 when it parsed).
    pub fn read(&self) -> io::Result<String> {
        let mut out = Vec::with_capacity(self.span.len);
        self.append_to(&mut out)?;
        String::from_utf8(out).map_err(io::Error::other)
    }
}

/// A text that could not be copied: the input's fault, not the output's (a merge says so with
/// exit 2, where an output it cannot write is exit 4).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputFault(String);

impl InputFault {
    fn error(message: String) -> io::Error {
        io::Error::other(InputFault(message))
    }

    /// The input's fault behind `e`, if that is what it is.
    pub fn of(e: &io::Error) -> Option<&InputFault> {
        e.get_ref()?.downcast_ref::<InputFault>()
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Elsewhere records are not located (`sources::Detail::Located` reads them whole), so this never
/// runs; it exists so the crate builds there.
#[cfg(not(unix))]
fn read_at(_: &File, _: &mut [u8], _: u64) -> io::Result<()> {
    Err(io::Error::other("record texts are read back on unix only"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_reads_back_and_a_changed_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        std::fs::write(&path, b"{\"a\":1}\n  {\"b\":2}\n").unwrap();
        let file = TextFile::open(&path, "m.jsonl").unwrap();
        let texts = Texts { file, spans: vec![Span::of(0, b"{\"a\":1}"), Span::of(10, b"{\"b\":2}")] };
        let read: Vec<String> = texts.each().map(|t| t.read().unwrap()).collect();
        assert_eq!(read, ["{\"a\":1}", "{\"b\":2}"]);
        // Changed in place (same length, other bytes), then cut short.
        std::fs::write(&path, b"{\"a\":1}\n  {\"b\":3}\n").unwrap();
        let err = texts.each().nth(1).unwrap().read().unwrap_err();
        assert!(err.to_string().starts_with("m.jsonl: changed while it was being merged"), "{err}");
        assert!(err.to_string().contains("byte 10"), "{err}");
        std::fs::write(&path, b"{\"a\":1}\n").unwrap();
        let err = texts.each().nth(1).unwrap().read().unwrap_err();
        assert!(err.to_string().starts_with("m.jsonl: changed"), "{err}");
        assert_eq!(texts.each().next().unwrap().read().unwrap(), "{\"a\":1}", "the first is intact");
    }

    #[test]
    fn a_file_renamed_over_keeps_the_texts_that_were_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, b"{\"a\":1}\n").unwrap();
        let texts =
            Texts { file: TextFile::open(&path, "c.json").unwrap(), spans: vec![Span::of(0, b"{\"a\":1}")] };
        let other = dir.path().join("new");
        std::fs::write(&other, b"{\"z\":9}\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(texts.each().next().unwrap().read().unwrap(), "{\"a\":1}");
    }
}
