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

    /// The text of record `i` (None past the last).
    pub fn text(&self, i: usize) -> Option<Text> {
        self.spans.get(i).map(|&span| Text { file: Arc::clone(&self.file), span })
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
        self.checked(read, &out[start..])
    }

    /// `bytes`, read for this text (`read`: how the reading went), if they are the text read.
    fn checked(&self, read: io::Result<()>, bytes: &[u8]) -> io::Result<()> {
        let changed = || {
            InputFault::error(format!(
                "{}: changed while it was being read (the record at byte {} is not the one read before); \
                 nothing was written: run the command again",
                self.file.name, self.span.offset
            ))
        };
        match read {
            Ok(()) if crc32fast::hash(bytes) == self.span.crc => Ok(()),
            Ok(()) => Err(changed()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(changed()),
            Err(e) => Err(InputFault::error(format!("{}: cannot read: {e}", self.file.name))),
        }
    }

    /// Its length in bytes.
    pub fn byte_len(&self) -> usize {
        self.span.len
    }

    /// Where it lies: its file (as the file's address: the same file, the same address) and its
    /// offset there; texts in this order are in file order.
    fn place(&self) -> (usize, u64) {
        (Arc::as_ptr(&self.file) as usize, self.span.offset)
    }

    /// The text as a string (it was valid UTF-8 when it parsed).
    pub fn read(&self) -> io::Result<String> {
        let mut out = Vec::with_capacity(self.span.len);
        self.append_to(&mut out)?;
        String::from_utf8(out).map_err(io::Error::other)
    }
}

/// How far apart two texts of a file may lie and still be read with one `pread` (`read_each`), and
/// how much one such read takes at most.
const READ_GAP_BYTES: u64 = 16 * 1024;
const READ_WINDOW_BYTES: u64 = 4 * 1024 * 1024;

/// How many stretches of `texts`, in their order, lie one after another in one file each: 1 for a
/// canonical file's records copied in its order, one per cell for a run's records (held in sweep
/// order) copied sorted by cell.
pub fn ascending_runs(texts: &[&Text]) -> usize {
    let descents = texts.windows(2).filter(|w| w[1].place() < w[0].place()).count();
    descents + usize::from(!texts.is_empty())
}

/// Hands each of `texts` to `each` (its place in `texts`, its bytes), checked as `append_to`
/// checks it, in the order they lie in their files, which is the order `each` sees them in. Texts
/// that lie near one another are read with one `pread`: a canonical file holds a cell's records
/// side by side, so reading a cell's texts back is a few large reads, not one per record.
pub fn read_each(texts: &[&Text], each: impl FnMut(usize, &[u8]) -> io::Result<()>) -> io::Result<()> {
    read_in(texts, &places_in_file_order(texts), each)
}

/// Hands each of `texts` to `each` as `read_each` does, in their order in `texts`: texts that
/// follow one another there and in their file (a canonical file's records, copied into a merge in
/// their order) are read with one `pread`; any other is read alone.
pub fn read_in_order(texts: &[&Text], each: impl FnMut(usize, &[u8]) -> io::Result<()>) -> io::Result<()> {
    read_in(texts, &places(texts), each)
}

/// What reading a text takes of it, beside its place in `texts`: texts taken in file order are
/// in another order than `texts` holds them (a merge's), and reaching each through its place
/// there would be a random read of memory each.
struct Place {
    /// Its file, as its address (`Text::place`).
    file: usize,
    offset: u64,
    len: usize,
    crc: u32,
    index: u32,
}

fn places_in_file_order(texts: &[&Text]) -> Vec<Place> {
    let mut places = places(texts);
    places.sort_unstable_by_key(|p| (p.file, p.offset));
    places
}

fn places(texts: &[&Text]) -> Vec<Place> {
    (0..)
        .zip(texts)
        .map(|(index, t)| Place {
            file: t.place().0,
            offset: t.span.offset,
            len: t.span.len,
            crc: t.span.crc,
            index,
        })
        .collect()
}

/// Hands `texts[p.index]` to `each` for each place `p` in `places`, in that order, reading each
/// run of texts that lie near one another and in this order in one file with one `pread`.
fn read_in(
    texts: &[&Text],
    places: &[Place],
    mut each: impl FnMut(usize, &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut window = Vec::new();
    let mut at = 0;
    while at < places.len() {
        let first = &places[at];
        let start = first.offset;
        let (last, end) = one_read(places, at);
        // Grown, never cleared: each read fills the part it uses, so zeroing it first would be
        // work for nothing.
        let len = (end - start) as usize;
        if window.len() < len {
            window.resize(len, 0);
        }
        let window = &mut window[..len];
        let file = texts[first.index as usize];
        if let Err(e) = read_at(&file.file.file, window, start) {
            return file.checked(Err(e), &[]);
        }
        for place in &places[at..last] {
            let from = (place.offset - start) as usize;
            let bytes = &window[from..from + place.len];
            if crc32fast::hash(bytes) != place.crc {
                // The text itself names its file and place.
                texts[place.index as usize].checked(Ok(()), bytes)?;
            }
            each(place.index as usize, bytes)?;
        }
        at = last;
    }
    Ok(())
}

/// The texts one `pread` takes from `places[at]` on: up to `places[last]`, and where that read
/// ends in the file. Texts that lie near one another and in this order in one file share a read.
fn one_read(places: &[Place], at: usize) -> (usize, u64) {
    let first = &places[at];
    let start = first.offset;
    let mut end = start + first.len as u64;
    let mut last = at + 1;
    while let Some(next) = places.get(last) {
        let next_end = next.offset + next.len as u64;
        let near = next.file == first.file
            && next.offset >= end
            && next.offset - end <= READ_GAP_BYTES
            && next_end - start <= READ_WINDOW_BYTES;
        if !near {
            break;
        }
        end = next_end;
        last += 1;
    }
    (last, end)
}

/// How many reads `read_each` makes of `texts`.
pub fn reads(texts: &[&Text]) -> usize {
    let places = places_in_file_order(texts);
    let mut reads = 0;
    let mut at = 0;
    while at < places.len() {
        at = one_read(&places, at).0;
        reads += 1;
    }
    reads
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
    #[cfg(test)]
    READS.set(READS.get() + 1);
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(test)]
thread_local! {
    /// The reads this thread made of texts (how a test tells one read of a run of texts from one
    /// read each).
    pub(crate) static READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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
        assert!(err.to_string().starts_with("m.jsonl: changed while it was being read"), "{err}");
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

    /// Texts of two files, given out of order, some side by side (one read) and some far apart:
    /// each is handed over with its own place and bytes, and a text changed inside a shared read is
    /// named by its own offset.
    #[test]
    fn texts_read_each_with_neighbours_together_and_checked_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let far = READ_GAP_BYTES as usize + 10;
        let mut a = b"{\"a\":0}\n{\"a\":1}\n".to_vec();
        a.resize(a.len() + far, b' ');
        a.extend_from_slice(b"{\"a\":2}\n");
        let (pa, pb) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        std::fs::write(&pa, &a).unwrap();
        std::fs::write(&pb, b"{\"b\":0}\n").unwrap();
        let fa = TextFile::open(&pa, "a.jsonl").unwrap();
        let fb = TextFile::open(&pb, "b.jsonl").unwrap();
        let at2 = (16 + far) as u64;
        let text = |file: &Arc<TextFile>, offset: u64, bytes: &[u8]| Text {
            file: Arc::clone(file),
            span: Span::of(offset, bytes),
        };
        let texts = [
            text(&fa, at2, b"{\"a\":2}"),
            text(&fb, 0, b"{\"b\":0}"),
            text(&fa, 8, b"{\"a\":1}"),
            text(&fa, 0, b"{\"a\":0}"),
        ];
        let given: Vec<&Text> = texts.iter().collect();
        let mut seen = Vec::new();
        read_each(&given, |i, bytes| {
            seen.push((i, String::from_utf8(bytes.to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        seen.sort();
        let want: Vec<(usize, String)> =
            texts.iter().enumerate().map(|(i, t)| (i, t.read().unwrap())).collect();
        assert_eq!(seen, want);
        // Three reads (a's neighbours together, its far text, b), counted before they are made.
        let before = READS.get();
        read_each(&given, |_, _| Ok(())).unwrap();
        assert_eq!(READS.get() - before, 3);
        assert_eq!(reads(&given), 3);
        assert_eq!(reads(&given[..1]), 1);
        assert_eq!(reads(&[]), 0);
        // The second text of the first window changed in place.
        a[9] = b'b';
        std::fs::write(&pa, &a).unwrap();
        let err = read_each(&given, |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().starts_with("a.jsonl: changed"), "{err}");
        assert!(err.to_string().contains("byte 8"), "{err}");
    }

    /// In order: each text handed over in the order given, its own bytes, whether it follows the
    /// one before it in its file (read together) or not (read alone), and checked.
    #[test]
    fn texts_read_in_order_are_handed_over_in_that_order_each_its_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let mut bytes = b"{\"a\":0}\n{\"a\":1}\n{\"a\":2}\n".to_vec();
        std::fs::write(&path, &bytes).unwrap();
        let file = TextFile::open(&path, "a.jsonl").unwrap();
        let line = |k: u64| Text {
            file: Arc::clone(&file),
            span: Span::of(8 * k, format!("{{\"a\":{k}}}").as_bytes()),
        };
        let texts = [line(0), line(1), line(2), line(1), line(0), line(2), line(2)];
        let given: Vec<&Text> = texts.iter().collect();
        let mut seen = Vec::new();
        read_in_order(&given, |i, bytes| {
            seen.push((i, String::from_utf8(bytes.to_vec()).unwrap()));
            Ok(())
        })
        .unwrap();
        let want: Vec<(usize, String)> =
            texts.iter().enumerate().map(|(i, t)| (i, t.read().unwrap())).collect();
        assert_eq!(seen, want);
        bytes[13] = b'9';
        std::fs::write(&path, &bytes).unwrap();
        let err = read_in_order(&given, |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().starts_with("a.jsonl: changed"), "{err}");
    }
}
