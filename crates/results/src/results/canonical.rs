//! The canonical file `bench merge` writes (and every reader accepts through `sources::load`).
//!
//! Layout: the document is indented JSON except for `records`, which holds one record per line (so
//! a file of 100,000 records diffs, greps and streams line by line). Any JSON layout of the same
//! document reads the same.
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "kind": "ttft-bench-canonical",
//!   "sources": [ { "path": "...", "kind": "run_dir|jsonl|canonical|origin", "records": 198,
//!                  "run_ids": ["..."], "run_meta": [ {run.json or origin metadata}, ... ] } ],
//!   "conflicts": [ { "model": "gemma", "setting": "thermal_tolerance",
//!                    "values": [ { "value": "0.05", "sources": ["a.json"] },
//!                                { "value": "0.2",  "sources": ["b.json"] } ] } ],
//!   "provenance": { "kept_by_source": { "a.json": 183, "b.json": 15 },
//!                   "replaced": [ { "slot": "measurement m concurrent/warm streaming 1024 b2 r1 #0",
//!                                   "kept": { "source": "b.json", "run_id": "...", "started_at": "...",
//!                                             "good": true },
//!                                   "beat": 1,
//!                                   "losers": [ { "source": "a.json", ..., "reason": "..." } ] } ] },
//!   "records": [ { "record_type": "measurement", ... }, ... ]
//! }
//! ```
//! - `records` are our `Record`s, sorted by (record type, model, scenario, cache state, mode,
//!   context, batch size, run, request index) and kept whole, raw `token_offsets_ms` included.
//!   `bench merge` copies each record's text as its input holds it (`text`: the same bytes, down
//!   to every digit) where the input is a file of one record per line or a canonical file;
//!   records converted from other formats are serialized.
//! - `sources` are sorted by path; `run_meta` holds every metadata object verbatim (a canonical
//!   input contributes the run_meta of all its own sources).
//! - `conflicts` lists settings whose values differ between the sources of one model (also
//!   printed to stderr): which server (URL or `--server-cmd`, preset, API, build, model file,
//!   hardware) and what was measured (output tokens, thermal policy, harness).
//! - `provenance` says where every kept record came from and, for each slot that had more than one
//!   candidate, what was dropped and why; nothing is dropped silently.
//! - Nothing in the file depends on when or in which order the merge ran: same inputs, same bytes.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::slotted::Slotted;
use super::text::{self, Text, read_in_order};
use crate::store::Document;
use ttft_model::record::Record;

pub const CANONICAL_KIND: &str = "ttft-bench-canonical";

/// The document: its records are `Record`s, or what merge keeps of each (`Slotted`), written from
/// their texts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Canonical<R = Record> {
    pub schema_version: u32,
    pub kind: String,
    pub sources: Vec<SourceEntry>,
    pub conflicts: Vec<Conflict>,
    pub provenance: Provenance,
    pub records: Vec<R>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceEntry {
    pub path: String,
    pub kind: String,
    /// Records read from this source (before de-duplication).
    pub records: usize,
    pub run_ids: Vec<String>,
    pub run_meta: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// The model whose sources disagree: settings are compared among the sources of one model,
    /// whose records share cells (absent where the sources state no model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub setting: String,
    pub values: Vec<ConflictValue>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictValue {
    pub value: String,
    pub sources: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Records in the output, by the source they came from.
    pub kept_by_source: BTreeMap<String, usize>,
    /// Slots that had more than one candidate.
    pub replaced: Vec<Replacement>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replacement {
    pub slot: String,
    pub kept: Candidate,
    /// How many candidates the kept one beat.
    pub beat: usize,
    pub losers: Vec<Loser>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub source: String,
    pub run_id: String,
    pub started_at: String,
    pub good: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Loser {
    #[serde(flatten)]
    pub candidate: Candidate,
    pub reason: String,
}

/// Writes `doc` in the canonical layout (streamed: the records are never one string in memory).
pub fn write<R: Slotted + Sync>(doc: &Canonical<R>, w: &mut dyn Write) -> io::Result<()> {
    write_head(doc, w)?;
    write_records(&doc.records, &[], w)?;
    write_tail(doc, w)
}

/// `write`, each record whose text is in `texts` (`texts[i]` for `doc.records[i]`) copied from
/// its input instead of serialized (see `text`). Where every record has its text, the texts are
/// read in the order they lie in their files and each is placed where it goes (`copy_placed`).
pub fn write_with_texts<R: Slotted + Sync>(
    doc: &Canonical<R>,
    texts: &[Option<Text>],
    w: &mut dyn Document,
) -> io::Result<()> {
    write_head(doc, w)?;
    if !copy_placed(doc.records.len(), texts, w)? {
        write_records(&doc.records, texts, w)?;
    }
    write_tail(doc, w)
}

/// Everything before the records' first separator.
fn write_head<R>(doc: &Canonical<R>, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(b"{\n")?;
    member(w, "schema_version", &doc.schema_version)?;
    member(w, "kind", &doc.kind)?;
    member(w, "sources", &doc.sources)?;
    member(w, "conflicts", &doc.conflicts)?;
    member(w, "provenance", &doc.provenance)?;
    w.write_all(b"  \"records\": [")
}

/// Everything after the last record.
fn write_tail<R>(doc: &Canonical<R>, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(if doc.records.is_empty() { b"]\n}\n" } else { b"\n  ]\n}\n" })
}

/// What goes before record `i` of the document.
fn separator(i: usize) -> &'static [u8] {
    if i == 0 { b"\n    " } else { b",\n    " }
}

/// The most points a merge's output may continue from at once and still be copied in the order its
/// texts lie in their files (`copy_placed`): a run's records make one point per cell.
const MOST_PLACES_AT_ONCE: usize = 128;

/// The `count` records, each after its separator, copied from their texts in the order the texts
/// lie in their files, each placed where it goes in `w`: a run's file holds its records in sweep
/// order, a merge writes them by cell, and copied in the merge's order each would be a read of
/// its own (a million reads for a million records). Ok(false), nothing written, where a record has no
/// text, where the texts' order in their files would place them from more than `MOST_PLACES_AT_ONCE`
/// places at once, or where `w` takes bytes in order only.
fn copy_placed(count: usize, texts: &[Option<Text>], w: &mut dyn Document) -> io::Result<bool> {
    let located: Option<Vec<&Text>> = (0..count).map(|i| texts.get(i).and_then(Option::as_ref)).collect();
    let Some(located) = located.filter(|l| !l.is_empty()) else { return Ok(false) };
    let points = text::ascending_runs(&located);
    if points > MOST_PLACES_AT_ONCE {
        return Ok(false);
    }
    let mut places = Vec::with_capacity(located.len());
    let mut len = 0;
    for (i, text) in located.iter().enumerate() {
        places.push(len);
        len += (separator(i).len() + text.byte_len()) as u64;
    }
    w.write_stretch(len, points, &mut |placed| {
        text::read_each(&located, |i, bytes| {
            placed.write_at(places[i], separator(i))?;
            placed.write_at(places[i] + separator(i).len() as u64, bytes)
        })
    })
}

/// Records per piece serialized by one thread (under a MB of text).
const PIECE: usize = 256;

/// The records, one per line after `[`: serialized in pieces by as many threads as the machine
/// has cores (serializing was half of a 100,000-record merge), written in order as they come. Each
/// thread keeps at most one finished piece waiting, so the text is never all in memory.
fn write_records<R: Slotted + Sync>(
    records: &[R],
    texts: &[Option<Text>],
    w: &mut dyn Write,
) -> io::Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let threads = threads.min(records.len().div_ceil(PIECE)).max(1);
    if threads == 1 {
        let mut piece = Vec::new();
        for (i, chunk) in records.chunks(PIECE).enumerate() {
            serialize_piece(i * PIECE, chunk, texts, &mut piece)?;
            w.write_all(&piece)?;
        }
        return Ok(());
    }
    std::thread::scope(|scope| {
        let receivers: Vec<_> = (0..threads)
            .map(|t| {
                let (send, receive) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(1);
                scope.spawn(move || {
                    // Pieces t, t + threads, ...: the writer takes them round-robin, in order.
                    for (i, chunk) in records.chunks(PIECE).enumerate().skip(t).step_by(threads) {
                        let mut piece = Vec::with_capacity(chunk.len() * 3072);
                        let done = serialize_piece(i * PIECE, chunk, texts, &mut piece).map(|()| piece);
                        let failed = done.is_err();
                        if send.send(done).is_err() || failed {
                            return;
                        }
                    }
                });
                receive
            })
            .collect();
        for i in 0..records.len().div_ceil(PIECE) {
            // A closed channel before its last piece: the thread stopped on an error it sent.
            let piece = receivers[i % threads]
                .recv()
                .map_err(|_| io::Error::other("a serializing thread stopped"))?;
            w.write_all(&piece?)?;
        }
        Ok(())
    })
}

/// Records `first..` of the file, each after its separator, into `out` (cleared first): copied
/// where `texts` holds its text, serialized otherwise. A piece whose every record has its text is
/// copied a run of neighbouring texts at a time (`read_in_order`: a canonical file's records lie in
/// the order they are written, so a merge of one reads it in large reads, not one per record).
fn serialize_piece<R: Slotted>(
    first: usize,
    records: &[R],
    texts: &[Option<Text>],
    out: &mut Vec<u8>,
) -> io::Result<()> {
    out.clear();
    let separator = |i: usize| separator(first + i);
    let located: Option<Vec<&Text>> =
        (0..records.len()).map(|i| texts.get(first + i).and_then(Option::as_ref)).collect();
    if let Some(located) = located {
        return read_in_order(&located, |i, bytes| {
            out.extend_from_slice(separator(i));
            out.extend_from_slice(bytes);
            Ok(())
        });
    }
    for (i, record) in records.iter().enumerate() {
        out.extend_from_slice(separator(i));
        match texts.get(first + i) {
            Some(Some(text)) => text.append_to(out)?,
            _ => record.write_json(out)?,
        }
    }
    Ok(())
}

/// `  "key": value,` with the value pretty-printed one level in. JSON strings hold no raw newline,
/// so every newline of the pretty text is layout and may be indented.
fn member(w: &mut dyn Write, key: &str, value: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    writeln!(w, "  \"{key}\": {},", text.replace('\n', "\n  "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{Measurement, SCHEMA_VERSION};

    fn doc(records: Vec<Record>) -> Canonical {
        Canonical {
            schema_version: SCHEMA_VERSION,
            kind: CANONICAL_KIND.into(),
            sources: vec![],
            conflicts: vec![],
            provenance: Provenance::default(),
            records,
        }
    }

    fn written(doc: &Canonical) -> String {
        let mut out = Vec::new();
        write(doc, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_layout_is_json_of_the_same_document_with_one_record_per_line() {
        let m = || {
            Record::Measurement(Box::new(Measurement {
                schema_version: SCHEMA_VERSION,
                ..Default::default()
            }))
        };
        let two = doc(vec![m(), m()]);
        let text = written(&two);
        let back: Canonical = serde_json::from_str(&text).unwrap();
        assert_eq!(back, two);
        let record_lines: Vec<&str> = text.lines().filter(|l| l.contains("\"record_type\"")).collect();
        assert_eq!(record_lines.len(), 2);
        assert!(record_lines[0].starts_with("    {") && record_lines[0].ends_with("},"), "{text}");
        // Many records (several pieces, several threads) come out as one thread writes them.
        let many: Vec<Record> = (0..3000)
            .map(|i| {
                let mut m =
                    Measurement { schema_version: SCHEMA_VERSION, request_index: i, ..Default::default() };
                m.ttft_ms = Some(f64::from(i) / 7.0);
                Record::Measurement(Box::new(m))
            })
            .collect();
        let mut one_by_one = String::from("  \"records\": [");
        for (i, r) in many.iter().enumerate() {
            one_by_one += if i == 0 { "\n    " } else { ",\n    " };
            one_by_one += &serde_json::to_string(r).unwrap();
        }
        let text = written(&doc(many));
        assert!(text.contains(&(one_by_one + "\n  ]\n}\n")), "the records are written in order");
        let empty = written(&doc(vec![]));
        assert!(empty.ends_with("  \"records\": []\n}\n"), "{empty}");
        assert_eq!(serde_json::from_str::<Canonical>(&empty).unwrap(), doc(vec![]));
    }

    /// Fails when a run's records, held in sweep order and written by cell, are copied with a read
    /// each (or any number of reads that grows with them), land other than in the document's
    /// order, or are copied after their file changed.
    #[test]
    fn a_runs_records_held_in_sweep_order_are_copied_by_cell_in_one_pass_over_the_file() {
        use super::super::text::{READS, Span, TextFile, Texts};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("measurements.jsonl");
        let (runs, cells) = (300, 7);
        // The file: run by run, every cell of a run; lines of varied lengths.
        let line = |run: usize, cell: usize| {
            format!(
                "{{\"run\":{run},\"cell\":{cell},\"pad\":\"{}\"}}",
                "x".repeat((run * 31 + cell * 7) % 900)
            )
        };
        let mut file = String::new();
        let mut spans = vec![None; runs * cells];
        for run in 0..runs {
            for cell in 0..cells {
                let text = line(run, cell);
                // The document holds cell by cell, every run of a cell.
                spans[cell * runs + run] = Some(Span::of(file.len() as u64, text.as_bytes()));
                file += &text;
                file.push('\n');
            }
        }
        std::fs::write(&path, &file).unwrap();
        let texts = Texts {
            file: TextFile::open(&path, "measurements.jsonl").unwrap(),
            spans: spans.into_iter().map(Option::unwrap).collect(),
        };
        let texts: Vec<Option<Text>> = texts.each().map(Some).collect();
        let m = Record::Measurement(Box::new(Measurement {
            schema_version: SCHEMA_VERSION,
            ..Default::default()
        }));
        let document = doc(vec![m; runs * cells]);

        let out = dir.path().join("merged.json");
        READS.set(0);
        crate::store::write_atomic_with(&out, |w| write_with_texts(&document, &texts, w)).unwrap();
        let reads = READS.get();
        assert!((1..=2).contains(&reads), "{} texts copied with {reads} reads", runs * cells);
        let written = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = written
            .lines()
            .filter(|l| l.starts_with("    {"))
            .map(|l| l.trim().trim_end_matches(','))
            .collect();
        let want: Vec<String> = (0..cells).flat_map(|c| (0..runs).map(move |r| line(r, c))).collect();
        assert!(lines == want, "every text once, cell by cell, each cell's runs in order");
        // The same document as one written in order, a text at a time.
        let mut in_order = Vec::new();
        write_with_texts(&document, &texts, &mut in_order).unwrap();
        assert!(written.as_bytes() == in_order, "the document written in order is the same");

        // One digit of one text changed in place after it was read: an error, the output kept.
        std::fs::write(&path, file.replacen("\"run\":123,\"cell\":4", "\"run\":124,\"cell\":4", 1)).unwrap();
        let err =
            crate::store::write_atomic_with(&out, |w| write_with_texts(&document, &texts, w)).unwrap_err();
        assert!(err.to_string().contains("changed while it was being read"), "{err}");
        assert!(std::fs::read_to_string(&out).unwrap() == written, "the earlier output stands");
    }
}
