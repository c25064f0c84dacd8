//! A JSON result document, read member by member (`scan`): a canonical file (`bench merge`'s, see
//! `canonical`) or an origin benchmark result file (converted by `origin`).
//!
//! A canonical file's records are parsed one at a time as they stream by, so only the records
//! themselves stay in memory; every error names the line where the faulty value (or record) is.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;

use super::canonical::{CANONICAL_KIND, Conflict};
use super::detail::{Detail, FromRecord};
use super::kind::SourceKind;
use super::origin;
use super::parts::{self, Declined, Parsed};
use super::run_meta::SourceMeta;
use super::scan::ObjectScanner;
use crate::store::{InputError, LineError, json_message, shown};
use ttft_model::record::{Record, SCHEMA_VERSION};

/// Members kept (as text) for after the scan; every other member is only checked to be JSON.
const KEPT: [&str; 7] =
    ["schema_version", "sources", "conflicts", "metadata", "model_id", "server_env", "quality_summary"];

/// One value's text and the line it starts on.
struct Captured {
    bytes: Vec<u8>,
    line: usize,
}

/// A document read.
#[derive(Debug)]
pub struct Read<T = Record> {
    pub kind: SourceKind,
    /// The metadata of its runs.
    pub run_meta: Vec<SourceMeta>,
    /// Its records (located only where the threads read them: `parts::canonical_records`).
    pub parsed: Parsed<T>,
    /// A canonical file's `conflicts` (merge's; none for an origin file).
    pub conflicts: Vec<Conflict>,
}

/// Reads a document that starts with `{`; `run_id` names the run of an origin file's records,
/// `detail` what each record keeps. `parallel`: a canonical file's records are parsed by several
/// threads, its records array read in parts from `path` where it is in merge's form
/// (`parts::canonical_array`: the document ends there), else found by the scanner
/// (`parts::canonical_records`); None then means "read it again without": a record did not parse
/// where it was found, and only one pass names the first error as it should.
pub fn read<R: BufRead, T: FromRecord>(
    reader: R,
    file: &str,
    run_id: &str,
    detail: Detail,
    parallel: bool,
    path: Option<&Path>,
) -> Result<Option<Read<T>>, InputError> {
    let mut sc = ObjectScanner::new(reader, file);
    if !sc.begin()? {
        return Err(unrecognised(file));
    }
    let mut kind: Option<String> = None;
    let mut kept: BTreeMap<String, Captured> = BTreeMap::new();
    let mut arrays: BTreeMap<String, Vec<Captured>> = BTreeMap::new();
    // Only the threads locate records; one pass reads them whole (`Detail::Located`).
    let whole = detail.unlocated();
    let mut records = Vec::new();
    let mut spans = Vec::new();
    let mut buf = Vec::new();
    // The records array was read in parts to the document's end, checked there to hold nothing
    // else (`parts::canonical_array`).
    let mut read_to_end = false;
    while let Some(key) = sc.next_key()? {
        let streamed = matches!(key.as_str(), "records" | "measurements" | "staggered");
        if streamed && sc.array_begin()? {
            // Our own layout names the kind first: its records are parsed as they stream by.
            let parse_now = key == "records" && kind.as_deref() == Some(CANONICAL_KIND);
            let mut raw = Vec::new();
            records.clear();
            spans.clear();
            if parse_now && parallel {
                if let Some(path) = path {
                    match parts::canonical_array(path, file, sc.offset(), detail) {
                        Ok(parsed) => {
                            (records, spans) = (parsed.records, parsed.spans);
                            arrays.insert(key, raw);
                            read_to_end = true;
                            break;
                        }
                        Err(Declined::Element) => return Ok(None),
                        Err(Declined::Form) => {}
                    }
                }
                let Some(parsed) = parts::canonical_records(&mut sc, detail) else { return Ok(None) };
                (records, spans) = (parsed.records, parsed.spans);
                arrays.insert(key, raw);
                continue;
            }
            // A record that parses whole from its line is taken as it is; anything else goes the
            // long way, so its error is the one the long way gives.
            let mut quick = |bytes: &[u8]| if parse_now { whole.parse(bytes).ok() } else { None };
            while let Some((line, parsed)) = sc.next_element(&mut buf, &mut quick)? {
                match parsed {
                    Some(record) => records.push(record),
                    None if parse_now => records.push(canonical_record(file, &buf, line, whole)?),
                    None => raw.push(Captured { bytes: buf.clone(), line }),
                }
            }
            arrays.insert(key, raw);
            continue;
        }
        arrays.remove(&key);
        let line = sc.value(&mut buf)?;
        serde_json::from_slice::<IgnoredAny>(&buf).map_err(|e| json_error(file, line, &e))?;
        if key == "kind" {
            kind = serde_json::from_slice::<Value>(&buf).ok().and_then(|v| v.as_str().map(str::to_string));
        }
        if KEPT.contains(&key.as_str()) {
            kept.insert(key, Captured { bytes: buf.clone(), line });
        } else {
            kept.remove(&key);
        }
    }
    if !read_to_end {
        sc.end()?;
    }
    if kind.as_deref() == Some(CANONICAL_KIND) {
        for raw in arrays.remove("records").unwrap_or_default() {
            records.push(canonical_record(file, &raw.bytes, raw.line, whole)?);
        }
        let run_meta = canonical_meta(file, &kept)?;
        let conflicts = canonical_conflicts(file, &kept)?;
        let parsed = Parsed { records, spans };
        return Ok(Some(Read { kind: SourceKind::Canonical, run_meta, parsed, conflicts }));
    }
    let is_object = |c: &Captured| c.bytes.first() == Some(&b'{');
    if kept.get("metadata").is_some_and(is_object) && arrays.contains_key("measurements") {
        let (meta, records) = origin_file(file, run_id, &kept, &arrays)?;
        return Ok(Some(Read {
            kind: SourceKind::Origin,
            run_meta: vec![meta],
            parsed: Parsed::whole(records.into_iter().map(|r| detail.keep(r)).collect()),
            conflicts: Vec::new(),
        }));
    }
    Err(unrecognised(file))
}

fn unrecognised(file: &str) -> InputError {
    InputError::new(
        file,
        0,
        format!(
            "unrecognised JSON: expected a canonical file (\"kind\": \"{CANONICAL_KIND}\"), an origin result \
             file (metadata + measurements), or records one per line"
        ),
    )
}

/// A serde error inside a value that starts on `line`, located in the file.
fn json_error(file: &str, line: usize, e: &serde_json::Error) -> InputError {
    let hint = if e.is_eof() { " (truncated?)" } else { "" };
    InputError::new(
        file,
        line + e.line().saturating_sub(1),
        format!("not valid JSON{hint}: {}", json_message(e)),
    )
}

/// A canonical file's `conflicts`, kept as the scan goes by (a report that shows them does not
/// read a million-record file again for them); none when the member is absent.
fn canonical_conflicts(file: &str, kept: &BTreeMap<String, Captured>) -> Result<Vec<Conflict>, InputError> {
    let Some(c) = kept.get("conflicts") else { return Ok(Vec::new()) };
    serde_json::from_slice(&c.bytes).map_err(|e| {
        InputError::new(file, c.line + e.line().saturating_sub(1), format!("conflicts: {}", json_message(&e)))
    })
}

/// One element of a canonical file's `records`.
fn canonical_record<T: FromRecord>(
    file: &str,
    bytes: &[u8],
    line: usize,
    detail: Detail,
) -> Result<T, InputError> {
    detail.parse(bytes).map_err(|e| match e {
        LineError::Json(e) => json_error(file, line, &e),
        LineError::Version(v) => {
            InputError::new(file, line, format!("record schema_version {} is not supported", shown(v)))
        }
        LineError::Shape(e) => InputError::new(
            file,
            line + e.line().saturating_sub(1),
            format!("not a bench record: {}", json_message(&e)),
        ),
    })
}

/// `sources[]` of a canonical file, with each metadata document borrowed for its line.
#[derive(Deserialize)]
struct SourceText<'a> {
    #[serde(rename = "path")]
    _path: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(rename = "records")]
    _records: usize,
    #[serde(rename = "run_ids")]
    _run_ids: Vec<String>,
    #[serde(borrow)]
    run_meta: Vec<&'a RawValue>,
}

/// The document's schema version, then every source's metadata, typed.
fn canonical_meta(file: &str, kept: &BTreeMap<String, Captured>) -> Result<Vec<SourceMeta>, InputError> {
    let version = kept.get("schema_version");
    let number =
        version.and_then(|c| serde_json::from_slice::<Value>(&c.bytes).ok()).and_then(|v| v.as_u64());
    if number != Some(u64::from(SCHEMA_VERSION)) {
        return Err(InputError::new(
            file,
            version.map_or(0, |c| c.line),
            format!("schema_version {} is not supported (this bench reads {SCHEMA_VERSION})", shown(number)),
        ));
    }
    let unreadable = |line, message: String| {
        InputError::new(file, line, format!("canonical file with unreadable sources: {message}"))
    };
    let Some(sources) = kept.get("sources") else { return Err(unreadable(0, "no `sources`".into())) };
    let text = utf8(file, sources)?;
    let entries: Vec<SourceText> = serde_json::from_str(text)
        .map_err(|e| unreadable(sources.line + e.line().saturating_sub(1), json_message(&e)))?;
    let mut lines = LineCounter::new(text, sources.line);
    let mut out = Vec::new();
    for raw in entries.iter().flat_map(|s| &s.run_meta) {
        let line = lines.line_of(raw.get());
        let meta = SourceMeta::parse(raw.get()).map_err(|e| {
            InputError::new(
                file,
                line + e.line().saturating_sub(1),
                format!("run metadata: {}", json_message(&e)),
            )
        })?;
        out.push(meta);
    }
    Ok(out)
}

fn origin_file(
    file: &str,
    run_id: &str,
    kept: &BTreeMap<String, Captured>,
    arrays: &BTreeMap<String, Vec<Captured>>,
) -> Result<(SourceMeta, Vec<Record>), InputError> {
    let mut doc = serde_json::Map::new();
    for key in ["metadata", "model_id", "server_env", "quality_summary"] {
        if let Some(c) = kept.get(key) {
            let value = serde_json::from_slice(&c.bytes).map_err(|e| json_error(file, c.line, &e))?;
            doc.insert(key.to_string(), value);
        }
    }
    let doc = Value::Object(doc);
    let rows = |key: &str| -> Vec<origin::Row> {
        let found = arrays.get(key).map(Vec::as_slice).unwrap_or_default();
        found.iter().map(|c| origin::Row { text: &c.bytes, line: c.line }).collect()
    };
    let (records, raw) = origin::import(file, run_id, &doc, &rows("measurements"), &rows("staggered"))?;
    let line = kept.get("metadata").map_or(0, |c| c.line);
    let meta = SourceMeta::from_value(raw)
        .map_err(|e| InputError::new(file, line, format!("origin metadata: {}", json_message(&e))))?;
    Ok((meta, records))
}

/// A captured value as text; a bad UTF-8 byte is named on its own line.
fn utf8<'a>(file: &str, c: &'a Captured) -> Result<&'a str, InputError> {
    std::str::from_utf8(&c.bytes).map_err(|e| {
        let before = &c.bytes[..e.valid_up_to()];
        let line = c.line + before.iter().filter(|&&b| b == b'\n').count();
        InputError::new(file, line, "not valid UTF-8")
    })
}

/// Lines of slices borrowed from one text, asked for in increasing order: each newline is counted
/// once (a slice before the last one asked for restarts the count; still correct, only slower).
struct LineCounter<'a> {
    text: &'a str,
    at: usize,
    line: usize,
    first_line: usize,
}

impl<'a> LineCounter<'a> {
    fn new(text: &'a str, first_line: usize) -> LineCounter<'a> {
        LineCounter { text, at: 0, line: first_line, first_line }
    }

    /// The line `part` (a slice of the text) starts on; the text's first line for a foreign slice.
    fn line_of(&mut self, part: &str) -> usize {
        let offset = (part.as_ptr() as usize).wrapping_sub(self.text.as_ptr() as usize);
        if offset > self.text.len() {
            return self.first_line;
        }
        if offset < self.at {
            (self.at, self.line) = (0, self.first_line);
        }
        self.line += self.text.as_bytes()[self.at..offset].iter().filter(|&&b| b == b'\n').count();
        self.at = offset;
        self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::canonical::{self, Canonical, Provenance};
    use ttft_model::record::Measurement;

    /// A canonical file of `n` records as merge writes it.
    fn canonical_text(n: u32) -> String {
        let records = (0..n)
            .map(|i| {
                let mut m =
                    Measurement { schema_version: SCHEMA_VERSION, request_index: i, ..Default::default() };
                m.token_offsets_ms = vec![f64::from(i) / 3.0; 40];
                Record::Measurement(Box::new(m))
            })
            .collect();
        let doc = Canonical {
            schema_version: SCHEMA_VERSION,
            kind: CANONICAL_KIND.into(),
            sources: vec![],
            conflicts: vec![],
            provenance: Provenance::default(),
            records,
        };
        let mut out = Vec::new();
        canonical::write(&doc, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    const BATCH: usize = 1 << 21;

    fn read_text(text: &str, parallel: bool) -> Result<Option<Read>, InputError> {
        read(text.as_bytes(), "c.json", "c", Detail::Full, parallel, None)
    }

    #[test]
    fn records_parsed_by_threads_are_those_of_one_pass_or_sent_back() {
        let text = canonical_text(6000);
        assert!(text.len() > 2 * BATCH, "several batches: {}", text.len());
        let one = read_text(&text, false).unwrap().unwrap();
        assert_eq!(one.parsed.records.len(), 6000);
        assert_eq!(read_text(&text, true).unwrap().unwrap().parsed.records, one.parsed.records);
        // Two records on one line: found as one, which does not parse; one pass reads it.
        let lines: Vec<&str> = text.lines().collect();
        let at = lines.len() / 2;
        let joined = format!(
            "{}\n{} {}\n{}",
            lines[..at].join("\n"),
            lines[at],
            lines[at + 1],
            lines[at + 2..].join("\n")
        );
        assert!(read_text(&joined, true).unwrap().is_none());
        assert_eq!(read_text(&joined, false).unwrap().unwrap().parsed.records, one.parsed.records);
        // A bad record: sent back, and one pass names its line.
        let mut bad: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        bad[at + 100] = bad[at + 100].replace("\"request_index\":", "\"request_index\":\"x\",\"y\":");
        let bad = bad.join("\n");
        assert!(read_text(&bad, true).unwrap().is_none());
        let e = read_text(&bad, false).unwrap_err();
        assert_eq!(e.line, at + 101, "{e}");
    }

    #[test]
    fn located_records_are_found_where_their_line_is_even_across_the_read_buffer() {
        let text = canonical_text(300);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("\"record_type\""))
            .map(|l| l.trim().trim_end_matches(','))
            .collect();
        // A buffer shorter than a record: every element is copied, none taken from its line.
        for capacity in [64, 1000, 1 << 16] {
            let reader = std::io::BufReader::with_capacity(capacity, text.as_bytes());
            let Read { parsed, .. } =
                read(reader, "c.json", "c", Detail::Located, true, None).unwrap().unwrap();
            assert_eq!(parsed.spans.len(), 300, "capacity {capacity}");
            let found: Vec<&str> =
                parsed.spans.iter().map(|s| &text[s.offset as usize..s.offset as usize + s.len]).collect();
            assert_eq!(found, lines, "capacity {capacity}");
            assert!(
                parsed
                    .records
                    .iter()
                    .all(|r| matches!(r, Record::Measurement(m) if m.token_offsets_ms.is_empty()))
            );
        }
        // Records over several lines are not located: the document is read again, whole.
        let pretty = text.replacen("{\"record_type\"", "{\n      \"record_type\"", 1);
        assert!(
            read::<_, Record>(pretty.as_bytes(), "c.json", "c", Detail::Located, true, None)
                .unwrap()
                .is_none()
        );
        let Read { parsed: whole, .. } =
            read(pretty.as_bytes(), "c.json", "c", Detail::Located, false, None).unwrap().unwrap();
        assert!(whole.spans.is_empty());
        assert_eq!(whole.records.len(), 300);
        assert!(matches!(&whole.records[0], Record::Measurement(m) if m.token_offsets_ms.len() == 40));
    }

    #[test]
    fn line_counter_counts_each_newline_once_and_restarts_when_asked_backwards() {
        let text = "a\nb\nc\nd";
        let mut lines = LineCounter::new(text, 10);
        assert_eq!(lines.line_of(&text[2..]), 11);
        assert_eq!(lines.line_of(&text[6..]), 13);
        assert_eq!(lines.line_of(&text[4..]), 12);
        let elsewhere = String::from("on the heap, far from the literal");
        assert_eq!(lines.line_of(&elsewhere), 10);
    }

    /// Fails when a canonical file's `conflicts` are dropped by the reader (the HTML report, which
    /// shows them, then read the whole file again for them), or when a broken one is not named by
    /// its line.
    #[test]
    fn a_canonical_file_s_conflicts_are_kept_and_a_broken_one_is_named_by_line() {
        let conflict = Conflict {
            model: Some("m".into()),
            setting: "thermal_tolerance".into(),
            values: vec![canonical::ConflictValue { value: "0.2".into(), sources: vec!["a".into()] }],
        };
        let text = canonical_text(3);
        let with = text.replacen(
            "\"conflicts\": []",
            &format!("\"conflicts\": [{}]", serde_json::to_string(&conflict).unwrap()),
            1,
        );
        assert_ne!(with, text, "the conflicts member was found");
        for parallel in [false, true] {
            let read = read_text(&with, parallel).unwrap().unwrap();
            assert_eq!(read.conflicts, vec![conflict.clone()]);
            assert_eq!(read.parsed.records.len(), 3);
        }
        let line = with.lines().position(|l| l.contains("\"conflicts\"")).unwrap() + 1;
        let broken = with.replacen("\"setting\":", "\"setting_name\":", 1);
        let e = read_text(&broken, false).unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert!(e.to_string().contains("conflicts: missing field `setting`"), "{e}");
    }
}
