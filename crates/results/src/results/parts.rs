//! A large records file read in parts at once, one thread each: parsing is nearly all of the time
//! a reading verb spends on 100,000 records, and the machines bench runs on have a core or more
//! to spare for it.
//!
//! A records file is cut after a newline near each part's share of the bytes, so every part holds
//! whole lines and the parts together hold the file, in order. Each part is read as the whole file
//! would be (`store::read_records_with`); the records come back in file order and the first error
//! in file order wins, its line counted from the file's start: what one pass would give.
//!
//! A canonical file's records array, where it is in the form merge writes it (one element a line,
//! the array the document's last member: `canonical_array`), is cut the same way and each part
//! read as lines, each line one element and its comma. Anything else in the array's place, and any
//! element that does not parse, declines: the array is then cut by the document's scanner instead
//! (`canonical_records`; one thread finds the elements, the others parse them), or the whole
//! document is read again in one pass, so an error is the one that pass names.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::detail::{Detail, FromRecord};
use super::scan::ObjectScanner;
use super::text::Span;
use crate::store::{self, InputError, LineError, TornTail};
use ttft_model::record::Record;

/// Records read (what the reader keeps of each: `FromRecord`), and where each one's text lies in
/// its file when they were read `Located` (`spans[i]` for `records[i]`; empty otherwise).
#[derive(Debug)]
pub struct Parsed<T = Record> {
    pub records: Vec<T>,
    pub spans: Vec<Span>,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed { records: Vec::new(), spans: Vec::new() }
    }
}

impl<T> Parsed<T> {
    /// Records read whole, not located.
    pub fn whole(records: Vec<T>) -> Parsed<T> {
        Parsed { records, spans: Vec::new() }
    }

    /// The parts end to end, in vectors of their exact length, each chunk let go as soon as it is
    /// moved: the parts are never all held beside the vector they are moved into (a million
    /// records' vector is a few hundred MB, whatever a verb keeps of each).
    fn concat(parts: Vec<Chunks<T>>) -> Parsed<T> {
        if let [part] = &parts[..]
            && part.records.len() <= 1
            && part.spans.len() <= 1
        {
            // One part alone, one vector each: taken as they are, not copied.
            let part = parts.into_iter().next().map(|p| (p.records, p.spans));
            let (mut records, mut spans) = part.unwrap_or_default();
            return Parsed {
                records: records.pop().unwrap_or_default(),
                spans: spans.pop().unwrap_or_default(),
            };
        }
        let records = parts.iter().flat_map(|p| &p.records).map(Vec::len).sum();
        let spans = parts.iter().flat_map(|p| &p.spans).map(Vec::len).sum();
        let mut all = Parsed { records: Vec::with_capacity(records), spans: Vec::with_capacity(spans) };
        for part in parts {
            for chunk in part.records {
                all.records.extend(chunk);
            }
            for chunk in part.spans {
                all.spans.extend(chunk);
            }
        }
        all
    }
}

/// One part's records (and where their texts lie) in chunks (`Chunks::push`).
struct Chunks<T> {
    records: Vec<Vec<T>>,
    spans: Vec<Vec<Span>>,
    /// Bytes a chunk holds and reserves: one part alone grows one vector (`usize::MAX`, 0).
    filled_bytes: usize,
    reserved_bytes: usize,
}

/// What a chunk of one of several parts holds: each is moved into the whole input's vector and
/// let go at once, so the parts are never all held beside it (half a million records' vector is a
/// hundred MB and more). A chunk reserves more than it fills, above the 64 MB that glibc gives a
/// thread's heap at most, so that it is always mapped on its own and unmapped the moment it is let
/// go (a chunk inside a heap would leave its pages there, free but held); what it does not fill is
/// never touched, so never resident.
const CHUNK_FILLED_BYTES: usize = 16 << 20;
const CHUNK_RESERVED_BYTES: usize = 80 << 20;

impl<T> Chunks<T> {
    /// `several`: one of several parts, moved into one vector as the last is done.
    fn new(several: bool) -> Chunks<T> {
        let (filled_bytes, reserved_bytes) =
            if several { (CHUNK_FILLED_BYTES, CHUNK_RESERVED_BYTES) } else { (usize::MAX, 0) };
        Chunks { records: Vec::new(), spans: Vec::new(), filled_bytes, reserved_bytes }
    }

    fn push(&mut self, record: T, span: Option<Span>) {
        let (filled, reserved) = (self.filled_bytes, self.reserved_bytes);
        push_chunked(&mut self.records, record, filled, reserved);
        if let Some(span) = span {
            push_chunked(&mut self.spans, span, filled, reserved);
        }
    }
}

/// `item` pushed to the last of `chunks`, a new chunk begun (`reserved_bytes` reserved) where the
/// last holds `filled_bytes`.
fn push_chunked<T>(chunks: &mut Vec<Vec<T>>, item: T, filled_bytes: usize, reserved_bytes: usize) {
    let size = size_of::<T>().max(1);
    match chunks.last_mut() {
        Some(last) if last.len() < (filled_bytes / size).max(1) => last.push(item),
        _ => {
            let mut chunk = Vec::with_capacity(reserved_bytes / size);
            chunk.push(item);
            chunks.push(chunk);
        }
    }
}

/// Below this size one thread reads the file (starting threads would cost more than they save).
const MIN_PART_BYTES: u64 = 8 << 20;
const MAX_PARTS: usize = 8;
const BUFFER: usize = 1 << 16;

/// Every record of the records file at `path` (`name` in errors), in as many parts as pay off.
pub fn read_records<T: FromRecord>(path: &Path, name: &str, detail: Detail) -> Result<Parsed<T>, InputError> {
    let len = std::fs::metadata(path).map_err(|e| cannot(name, e))?.len();
    read_records_in(path, name, detail, (len / MIN_PART_BYTES).clamp(1, cores().min(MAX_PARTS) as u64))
}

/// The threads this machine runs at once.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn cannot(name: &str, e: std::io::Error) -> InputError {
    InputError::new(name, 0, format!("cannot read: {e}"))
}

/// `read_records` in (at most) `parts` parts.
fn read_records_in<T: FromRecord>(
    path: &Path,
    name: &str,
    detail: Detail,
    parts: u64,
) -> Result<Parsed<T>, InputError> {
    let cannot = |_, e| cannot(name, e);
    let len = std::fs::metadata(path).map_err(|e| cannot(0, e))?.len();
    let starts = cuts(path, 0..len, parts).map_err(|e| cannot(0, e))?;
    let several = starts.len() > 1;
    // One part alone reads to the file's end whenever that is, as one pass does.
    let end = if several { len } else { u64::MAX };
    let results = read_parts(
        &starts,
        end,
        |start, end| {
            let reader = part_reader(path, start, end).map_err(|e| cannot(0, e))?;
            read_part(reader, name, detail, start, several)
        },
        || Err(InputError::new(name, 0, "a reading thread failed")),
    );
    let mut parts = Vec::with_capacity(results.len());
    for (result, &start) in results.into_iter().zip(&starts) {
        match result {
            Ok(part) => parts.push(part),
            Err(mut e) => {
                // The part counted its lines from its own start.
                if e.line > 0 && start > 0 {
                    e.line += lines_before(path, start).map_err(|e| cannot(0, e))?;
                }
                return Err(e);
            }
        }
    }
    Ok(Parsed::concat(parts))
}

/// A reader of the bytes `start..end` of the file at `path`.
fn part_reader(path: &Path, start: u64, end: u64) -> std::io::Result<BufReader<std::io::Take<File>>> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    Ok(BufReader::with_capacity(BUFFER, file.take(end - start)))
}

/// `read` of each part (`start`, `end`: a part begins at each of `starts` and ends where the next
/// begins, the last at `end`), in file order; each part in a thread of its own where there are
/// several. `lost` stands for a part whose thread panicked.
fn read_parts<R: Send>(
    starts: &[u64],
    end: u64,
    read: impl Fn(u64, u64) -> R + Sync,
    lost: impl Fn() -> R,
) -> Vec<R> {
    let ends: Vec<u64> = starts.iter().skip(1).copied().chain([end]).collect();
    if let [start] = starts {
        return vec![read(*start, end)];
    }
    let read = &read;
    std::thread::scope(|scope| {
        let running: Vec<_> =
            starts.iter().zip(&ends).map(|(&start, &end)| scope.spawn(move || read(start, end))).collect();
        running.into_iter().map(|t| t.join().unwrap_or_else(|_| lost())).collect()
    })
}

/// Why `canonical_array` did not read an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Declined {
    /// The document is not in the form it reads (the array not its last member, or not one element
    /// a line with its comma): the scanner reads the array (`canonical_records`).
    Form,
    /// An element did not parse, or a part could not be read: one pass names the error.
    Element,
}

/// How much of a document's end is looked at for the records array's closing bracket.
const TAIL_BYTES: u64 = 1 << 16;

/// Where the closing bracket of a document's last member is, in the file at `path` (`len` bytes):
/// the document ends with `]`, then `}`, whitespace around each. None for any other end.
fn last_array_end(path: &Path, len: u64) -> std::io::Result<Option<u64>> {
    let from = len.saturating_sub(TAIL_BYTES);
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::new();
    file.take(len - from).read_to_end(&mut tail)?;
    let Some(body) = tail.trim_ascii_end().strip_suffix(b"}") else { return Ok(None) };
    let body = body.trim_ascii_end();
    Ok(body.ends_with(b"]").then(|| from + body.len() as u64 - 1))
}

/// The records of a canonical file's records array, whose `[` ends at `array_start` of the file at
/// `path` (`name` in errors), read in as many parts as pay off, like a records file's lines: where
/// the array is the document's last member (`last_array_end`) and each of its lines holds one
/// element and the comma after it (none after the last element). What is read here is what the
/// document's scanner would find: a line holds nothing else, so each element is the whole line
/// (its comma and whitespace aside), located where its `{` is.
pub fn canonical_array<T: FromRecord>(
    path: &Path,
    name: &str,
    array_start: u64,
    detail: Detail,
) -> Result<Parsed<T>, Declined> {
    let len = std::fs::metadata(path).map_err(|_| Declined::Element)?.len();
    let end = last_array_end(path, len).map_err(|_| Declined::Element)?.ok_or(Declined::Form)?;
    if end < array_start {
        return Err(Declined::Form);
    }
    let parts = ((end - array_start) / MIN_PART_BYTES).clamp(1, cores().min(MAX_PARTS) as u64);
    canonical_array_in(path, name, array_start..end, detail, parts)
}

/// One part of an array read as lines: its records, and whether its last element had no comma
/// after it (an array's last element), None where it has no element.
struct ArrayPart<T> {
    records: Chunks<T>,
    open: Option<bool>,
}

/// `canonical_array` of the array's bytes `range` (its `[` and `]` outside) in (at most) `parts`
/// parts.
fn canonical_array_in<T: FromRecord>(
    path: &Path,
    name: &str,
    range: std::ops::Range<u64>,
    detail: Detail,
    parts: u64,
) -> Result<Parsed<T>, Declined> {
    let starts = cuts(path, range.clone(), parts).map_err(|_| Declined::Element)?;
    let several = starts.len() > 1;
    let read = |start: u64, end: u64| -> Result<ArrayPart<T>, Declined> {
        let reader = part_reader(path, start, end).map_err(|_| Declined::Element)?;
        let mut part = ArrayPart { records: Chunks::new(several), open: None };
        let mut form = true;
        let read = store::read_records_at(reader, name, TornTail::Reject, start, &mut |body, at| {
            // After an element without its comma (the array's last), nothing more may come.
            if part.open == Some(true) || !body.starts_with(b"{") {
                form = false;
                return Err(LineError::Shape(serde::de::Error::custom("not an element line")));
            }
            let (text, comma) = match body.strip_suffix(b",") {
                Some(text) => (text.trim_ascii_end(), true),
                None => (body, false),
            };
            part.open = Some(!comma);
            part.records.push(detail.parse(text)?, detail.locates().then(|| Span::of(at, text)));
            Ok(())
        });
        match read {
            Ok(_) => Ok(part),
            Err(_) if !form => Err(Declined::Form),
            Err(_) => Err(Declined::Element),
        }
    };
    let results = read_parts(&starts, range.end, read, || Err(Declined::Element));
    let mut parts = Vec::with_capacity(results.len());
    let mut open = None;
    for result in results {
        let part = result?;
        // An element without its comma before another element, or a comma after the last.
        if open == Some(true) && part.open.is_some() {
            return Err(Declined::Form);
        }
        open = part.open.or(open);
        parts.push(part.records);
    }
    if open == Some(false) {
        return Err(Declined::Form);
    }
    Ok(Parsed::concat(parts))
}

/// Bytes of element text handed to a parsing thread at once.
const BATCH_BYTES: usize = 1 << 21;

/// Elements found but not parsed: their text end to end, where each ends, and where each starts
/// in the file.
#[derive(Default)]
struct Batch {
    text: Vec<u8>,
    ends: Vec<usize>,
    offsets: Vec<u64>,
}

impl Batch {
    /// The next batch to fill: one a worker has parsed and sent back, emptied, its memory kept;
    /// a new one where none has come back yet.
    fn next(returned: &std::sync::mpsc::Receiver<Batch>) -> Batch {
        let mut batch = returned.try_recv().unwrap_or_default();
        batch.text.clear();
        batch.ends.clear();
        batch.offsets.clear();
        batch
    }
}

/// The rest of a canonical file's records array (begun by `sc.array_begin`), parsed by other
/// threads while this one finds the elements (with `ObjectScanner::next_element`'s quick path,
/// which takes a line to its last `}` on trust: a parse that fails tells it was not one element).
/// None when any element did not parse, or the array did not scan: the caller reads the document
/// again in one pass, which names the first error. Worth it where `cores()` is 2 or more.
/// `Located`: an element not taken on the quick path (not one line) sends the document back too,
/// to be read whole.
pub fn canonical_records<R: BufRead, T: FromRecord>(
    sc: &mut ObjectScanner<R>,
    detail: Detail,
) -> Option<Parsed<T>> {
    let threads = cores().clamp(1, MAX_PARTS);
    std::thread::scope(|scope| {
        // Parsed batches come back as they are done and are appended in order at once: their
        // small vectors are let go as the reading goes, so their memory serves the next batches
        // instead of lying unused beside the whole input's records.
        let (done, finished) = std::sync::mpsc::channel::<(usize, Option<Parsed<T>>)>();
        // A parsed batch's emptied buffers come back to be filled again: the document's text is
        // copied into the few batches in flight over and over, not into fresh memory (pages the
        // kernel must find and zero) batch after batch.
        let (emptied, returned) = std::sync::mpsc::channel::<Batch>();
        let senders: Vec<_> = (0..threads)
            .map(|_| {
                let (send, receive) = std::sync::mpsc::sync_channel::<(usize, Batch)>(2);
                let (done, emptied) = (done.clone(), emptied.clone());
                scope.spawn(move || {
                    for (index, batch) in receive {
                        let parsed = parse_batch(&batch, detail);
                        let failed = parsed.is_none();
                        if done.send((index, parsed)).is_err() || failed {
                            return;
                        }
                        let _ = emptied.send(batch);
                    }
                });
                send
            })
            .collect();
        drop((done, emptied));
        let mut all = InOrder::default();
        let mut batch = Batch::default();
        let mut sent = 0;
        let mut buf = Vec::new();
        let mut scanned = true;
        loop {
            let begun = batch.text.len();
            let mut found = |bytes: &[u8]| {
                batch.text.extend_from_slice(bytes);
                Some(())
            };
            match sc.next_element(&mut buf, &mut found) {
                Ok(Some((_, Some(())))) => {
                    // Taken from its line: the text just consumed.
                    batch.offsets.push(sc.offset() - (batch.text.len() - begun) as u64);
                    batch.ends.push(batch.text.len());
                }
                // Copied (its line ran past the read buffer, or it is not one line): the text
                // just consumed too. A located record must be one line (`text`).
                Ok(Some((_, None))) if detail.locates() && buf.contains(&b'\n') => {
                    scanned = false;
                    break;
                }
                Ok(Some((_, None))) => {
                    batch.text.extend_from_slice(&buf);
                    batch.offsets.push(sc.offset() - buf.len() as u64);
                    batch.ends.push(batch.text.len());
                }
                Ok(None) => break,
                Err(_) => {
                    scanned = false;
                    break;
                }
            }
            if batch.text.len() >= BATCH_BYTES {
                // A worker gone (it stopped on a bad element) means the pass is moot.
                let next = Batch::next(&returned);
                if senders[sent % threads].send((sent, std::mem::replace(&mut batch, next))).is_err() {
                    scanned = false;
                    break;
                }
                sent += 1;
                all.take(finished.try_iter());
            }
        }
        if scanned && !batch.ends.is_empty() {
            scanned = senders[sent % threads].send((sent, batch)).is_ok();
            sent += 1;
        }
        drop(senders);
        all.take(finished.iter());
        // Every batch sent came back parsed.
        (scanned && !all.failed && all.next == sent).then_some(all.parsed)
    })
}

/// One batch's elements parsed; None when any does not parse.
fn parse_batch<T: FromRecord>(batch: &Batch, detail: Detail) -> Option<Parsed<T>> {
    let mut records = Vec::with_capacity(batch.ends.len());
    let mut spans = Vec::with_capacity(if detail.locates() { batch.ends.len() } else { 0 });
    let mut start = 0;
    for (&end, &offset) in batch.ends.iter().zip(&batch.offsets) {
        let text = &batch.text[start..end];
        records.push(detail.parse(text).ok()?);
        if detail.locates() {
            spans.push(Span::of(offset, text));
        }
        start = end;
    }
    Some(Parsed { records, spans })
}

/// Parsed batches put together in the order they were sent, whatever order they come back in.
struct InOrder<T> {
    parsed: Parsed<T>,
    /// Batches come back before those sent earlier.
    waiting: std::collections::BTreeMap<usize, Parsed<T>>,
    next: usize,
    failed: bool,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder { parsed: Parsed::default(), waiting: Default::default(), next: 0, failed: false }
    }
}

impl<T> InOrder<T> {
    fn take(&mut self, results: impl Iterator<Item = (usize, Option<Parsed<T>>)>) {
        for (index, part) in results {
            match part {
                Some(part) => {
                    self.waiting.insert(index, part);
                }
                None => self.failed = true,
            }
            while let Some(part) = self.waiting.remove(&self.next) {
                self.parsed.records.extend(part.records);
                self.parsed.spans.extend(part.spans);
                self.next += 1;
            }
        }
    }
}

/// One part's records; `start` is where the part begins in its file; `several`: one of several.
fn read_part<T: FromRecord>(
    reader: impl BufRead,
    name: &str,
    detail: Detail,
    start: u64,
    several: bool,
) -> Result<Chunks<T>, InputError> {
    let mut part = Chunks::new(several);
    // Each record goes to the part's chunks as it is read (the reader itself collects nothing).
    store::read_records_at(reader, name, TornTail::Reject, start, &mut |text, at| {
        part.push(detail.parse(text)?, detail.locates().then(|| Span::of(at, text)));
        Ok(())
    })?;
    Ok(part)
}

/// Where each part of the file's bytes `range` starts: its start, then just past the first newline
/// at or after each share's offset (a part can be empty where one line spans several shares; only
/// non-empty parts are kept).
fn cuts(path: &Path, range: std::ops::Range<u64>, parts: u64) -> std::io::Result<Vec<u64>> {
    let mut starts = vec![range.start];
    if parts < 2 {
        return Ok(starts);
    }
    let mut reader = BufReader::with_capacity(BUFFER, File::open(path)?);
    let mut skipped = Vec::new();
    let share = (range.end - range.start) / parts;
    for k in 1..parts {
        let at = range.start + share * k;
        let last = *starts.last().unwrap_or(&range.start);
        if at <= last {
            continue;
        }
        reader.seek(SeekFrom::Start(at))?;
        skipped.clear();
        let n = (&mut reader).take(range.end - at).read_until(b'\n', &mut skipped)? as u64;
        let start = at + n;
        if skipped.last() == Some(&b'\n') && start < range.end && start > last {
            starts.push(start);
        }
    }
    Ok(starts)
}

/// Newlines in the first `offset` bytes of the file.
fn lines_before(path: &Path, offset: u64) -> std::io::Result<usize> {
    let mut reader = BufReader::with_capacity(BUFFER, File::open(path)?.take(offset));
    let mut count = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(count);
        }
        count += memchr::memchr_iter(b'\n', buf).count();
        let n = buf.len();
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{Measurement, SCHEMA_VERSION};

    fn line(i: u32) -> String {
        let m = Measurement { schema_version: SCHEMA_VERSION, request_index: i, ..Default::default() };
        serde_json::to_string(&Record::Measurement(Box::new(m))).unwrap()
    }

    /// A canonical document in merge's form holding `elements` (each line of its records array).
    fn canonical(elements: &[String]) -> String {
        format!(
            "{{\n  \"schema_version\": 1,\n  \"kind\": \"ttft-bench-canonical\",\n  \"sources\": [],\n  \
             \"conflicts\": [],\n  \"provenance\": {{\"kept_by_source\": {{}}, \"replaced\": []}},\n  \
             \"records\": [\n{}\n  ]\n}}\n",
            elements.iter().map(|e| format!("    {e}")).collect::<Vec<_>>().join(",\n")
        )
    }

    /// A document's records and spans, None where it is sent back to be read in one pass, or the
    /// error that names what is wrong.
    type Reading = Result<Option<(Vec<Record>, Vec<Span>)>, String>;

    /// The document at `path` read as a reading verb reads it (its records array in parts where it
    /// can be), and in one pass.
    fn read_both(path: &Path, detail: Detail) -> [Reading; 2] {
        [(true, Some(path)), (false, None)].map(|(parallel, at)| {
            let reader = BufReader::new(File::open(path).unwrap());
            super::super::document::read::<_, Record>(reader, "c.json", "c", detail, parallel, at)
                .map(|read| read.map(|r| (r.parsed.records, r.parsed.spans)))
                .map_err(|e| e.to_string())
        })
    }

    /// Where the records array of the document at `path` begins and ends (past its `[`, at its `]`).
    fn array_of(path: &Path) -> std::ops::Range<u64> {
        let text = std::fs::read_to_string(path).unwrap();
        let start = text.find("\"records\": [").unwrap() + "\"records\": [".len();
        start as u64..text.rfind(']').unwrap() as u64
    }

    #[test]
    fn a_canonical_array_in_merge_s_form_is_read_in_parts_as_one_pass_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let lines: Vec<String> = (0..120).map(line).collect();
        let text = canonical(&lines);
        std::fs::write(&path, &text).unwrap();
        let range = array_of(&path);
        assert_eq!(last_array_end(&path, text.len() as u64).unwrap(), Some(range.end));
        let one = read_both(&path, Detail::Full)[1].clone().unwrap().unwrap().0;
        assert_eq!(one.len(), 120);
        for parts in [1, 3, 7] {
            let full: Parsed =
                canonical_array_in(&path, "c.json", range.clone(), Detail::Full, parts).unwrap();
            assert_eq!(full.records, one, "{parts} parts");
            let located: Parsed =
                canonical_array_in(&path, "c.json", range.clone(), Detail::Located, parts).unwrap();
            let found: Vec<&str> =
                located.spans.iter().map(|s| &text[s.offset as usize..s.offset as usize + s.len]).collect();
            assert_eq!(found, lines, "{parts} parts: each element where it is, without its comma");
            assert!(located.spans.iter().zip(&lines).all(|(s, l)| s.crc == crc32fast::hash(l.as_bytes())));
        }
        // As a verb reads it: the same records, and where their texts are.
        let [parallel, one_pass] = read_both(&path, Detail::Full);
        assert_eq!(parallel, one_pass);
        let (_, spans) = read_both(&path, Detail::Located)[0].clone().unwrap().unwrap();
        assert_eq!(spans.len(), 120);
        // An empty array.
        std::fs::write(&path, canonical(&[]).replace("[\n\n  ]", "[]")).unwrap();
        assert_eq!(read_both(&path, Detail::Full)[0].clone().unwrap().unwrap().0, []);
    }

    /// Whatever is not merge's form declines (the scanner or one pass reads it, as before), and
    /// what is not JSON is refused as one pass refuses it: a comma after the last element, none
    /// between two, members after the array, two elements on a line or one over several.
    #[test]
    fn a_canonical_array_in_another_form_is_read_as_one_pass_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let lines: Vec<String> = (0..60).map(line).collect();
        let form = canonical(&lines);
        let last = form.rfind("}\n  ]").unwrap() + 1;
        let middle = form.find(&format!("{},", lines[30])).unwrap() + lines[30].len();
        let cases = [
            (
                "a comma after the last element",
                format!("{},{}", &form[..last], &form[last..]),
                Declined::Form,
            ),
            (
                "no comma between two elements",
                format!("{}{}", &form[..middle], &form[middle + 1..]),
                Declined::Form,
            ),
            (
                "a member after the array",
                form.replace("\n  ]\n}", "\n  ],\n  \"extra\": [1]\n}"),
                Declined::Form,
            ),
            ("two elements on a line", form.replacen(",\n    ", ", ", 1), Declined::Element),
            (
                "an element over two lines",
                form.replacen("{\"record_type\"", "{\n      \"record_type\"", 1),
                Declined::Element,
            ),
        ];
        for (what, text, declined) in cases {
            std::fs::write(&path, &text).unwrap();
            let range = array_of(&path);
            for parts in [1, 3] {
                let got = canonical_array_in::<Record>(&path, "c.json", range.clone(), Detail::Full, parts);
                assert_eq!(got.err(), Some(declined), "{what}, {parts} parts");
            }
            let [parallel, one_pass] = read_both(&path, Detail::Full);
            // Sent back (None), the document is read in one pass: that reading is the verb's.
            if parallel != Ok(None) {
                assert_eq!(parallel, one_pass, "{what}");
            }
            if what.starts_with("a comma") || what.starts_with("no comma") {
                assert!(one_pass.is_err(), "{what}: not JSON");
            }
        }
        // A comma missing after any element, at the end of a part or inside one.
        for (i, element) in lines.iter().enumerate().take(lines.len() - 1) {
            let at = form.find(&format!("{element},")).unwrap() + element.len();
            std::fs::write(&path, format!("{}{}", &form[..at], &form[at + 1..])).unwrap();
            for parts in [2, 3] {
                let got = canonical_array_in::<Record>(&path, "c.json", array_of(&path), Detail::Full, parts);
                assert_eq!(got.err(), Some(Declined::Form), "no comma after element {i}, {parts} parts");
            }
        }
    }

    #[test]
    fn cuts_fall_after_newlines_and_skip_empty_parts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        std::fs::write(&path, "aaaa\nbb\n\ncccccccccccccccccccc\nd\n").unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(cuts(&path, 0..len, 1).unwrap(), [0]);
        let starts = cuts(&path, 0..len, 8).unwrap();
        assert_eq!(starts, [0, 5, 9, 30]);
        let text = std::fs::read(&path).unwrap();
        assert!(starts.iter().skip(1).all(|&s| text[s as usize - 1] == b'\n'));
        assert_eq!(lines_before(&path, 9).unwrap(), 3);
    }

    #[test]
    fn a_batch_sent_back_is_filled_again_from_empty_with_its_memory() {
        let (emptied, returned) = std::sync::mpsc::channel();
        assert!(Batch::next(&returned).ends.is_empty(), "none sent back: a new one");
        let text = [line(1), line(2)].concat();
        let parsed =
            Batch { ends: vec![line(1).len(), text.len()], offsets: vec![0, 10], text: text.into_bytes() };
        assert_eq!(parse_batch::<Record>(&parsed, Detail::Full).unwrap().records.len(), 2);
        let capacity = parsed.text.capacity();
        emptied.send(parsed).unwrap();
        let mut again = Batch::next(&returned);
        assert!(again.text.is_empty() && again.ends.is_empty() && again.offsets.is_empty());
        assert_eq!(again.text.capacity(), capacity, "its memory kept");
        // Filled with one record, it parses as that record alone.
        again.text.extend_from_slice(line(3).as_bytes());
        again.ends.push(again.text.len());
        again.offsets.push(0);
        let records = parse_batch::<Record>(&again, Detail::Full).unwrap().records;
        assert!(matches!(&records[..], [Record::Measurement(m)] if m.request_index == 3));
    }

    #[test]
    fn chunks_are_put_together_in_order() {
        let mut part = Chunks::new(true);
        let size = size_of::<u64>();
        (part.filled_bytes, part.reserved_bytes) = (3 * size, 5 * size);
        for i in 0..10u64 {
            part.push(i, (i % 2 == 0).then_some(Span { offset: i, len: 1, crc: 0 }));
        }
        assert_eq!(part.records.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 3, 1]);
        let alone = Chunks::new(false);
        let all = Parsed::concat(vec![part, alone]);
        assert_eq!(all.records, (0..10).collect::<Vec<u64>>());
        assert_eq!(all.spans.iter().map(|s| s.offset).collect::<Vec<_>>(), [0, 2, 4, 6, 8]);
    }

    #[test]
    fn located_parts_find_each_line_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let mut text: Vec<String> = (0..120).map(line).collect();
        text[7] = format!("   {}  ", text[7]);
        text.insert(30, String::new());
        let bytes = text.join("\n") + "\n";
        std::fs::write(&path, &bytes).unwrap();
        for parts in [1, 3] {
            let parsed: Parsed = read_records_in(&path, "m", Detail::Located, parts).unwrap();
            assert_eq!((parsed.records.len(), parsed.spans.len()), (120, 120));
            let found: Vec<&str> =
                parsed.spans.iter().map(|s| &bytes[s.offset as usize..s.offset as usize + s.len]).collect();
            let want: Vec<&str> = text.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
            assert_eq!(found, want, "{parts} parts");
        }
        assert!(read_records_in::<Record>(&path, "m", Detail::Lean, 3).unwrap().spans.is_empty());
    }

    #[test]
    fn parts_give_the_records_and_the_first_error_of_one_pass() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let mut text: Vec<String> = (0..200).map(line).collect();
        text.insert(50, String::new());
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let one: Vec<Record> = Parsed::concat(vec![
            read_part(BufReader::new(File::open(&path).unwrap()), "m", Detail::Full, 0, false).unwrap(),
        ])
        .records;
        assert_eq!(one.len(), 200);
        for parts in [2, 3, 7] {
            let starts = cuts(&path, 0..len, parts).unwrap();
            assert_eq!(starts.len() as u64, parts);
            let mut got: Vec<Record> = Vec::new();
            for (i, &start) in starts.iter().enumerate() {
                let end = starts.get(i + 1).copied().unwrap_or(len);
                let mut file = File::open(&path).unwrap();
                file.seek(SeekFrom::Start(start)).unwrap();
                let part = read_part(BufReader::new(file.take(end - start)), "m", Detail::Full, start, true);
                got.extend(Parsed::concat(vec![part.unwrap()]).records);
            }
            assert_eq!(got, one, "{parts} parts");
        }
        // Errors late in the file name their line from the file's start, the first one first.
        text[150] = "{\"record_type\": \"measurement\"}".into();
        text[180] = "not json".into();
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        let whole =
            read_part::<Record>(BufReader::new(File::open(&path).unwrap()), "m", Detail::Full, 0, false)
                .err()
                .unwrap();
        assert_eq!(whole.line, 151);
        // 20 KB: below the size that pays for threads, so the parts are forced here.
        let parts = read_records_in::<Record>(&path, "m", Detail::Full, 4).unwrap_err();
        assert_eq!(parts.to_string(), whole.to_string());
        text[150] = line(150);
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        let parts = read_records_in::<Record>(&path, "m", Detail::Full, 4).unwrap_err();
        assert_eq!((parts.line, parts.message.starts_with("not valid JSON")), (181, true), "{parts}");
    }
}
