//! `bench merge` writes each record's text as its input holds it (`results::text`): not parsed
//! and serialized again, which held every record whole (nearly 300 MB for 100,000) and could move
//! a float by its last digit. A text that changed after it was read is refused, never copied.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use ttft_bench::merge;
use ttft_bench::merge::Digested;
use ttft_bench::meta::{RunMeta, ServerInfo};
use ttft_model::record::{CellKey, Measurement, Record, SCHEMA_VERSION};
use ttft_results::results::canonical;
use ttft_results::results::sources::{self, Detail};
use ttft_results::results::text::InputFault;

/// Parsed and serialized again by serde_json (without `float_roundtrip`), this reads back as
/// 900.9456968646792: the old merge changed it.
const EXACT_TTFT: &str = "900.9456968646793";

fn record(context_tokens: u32, run: u32, started_at: &str, offsets: Vec<f64>) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        // Cold, streaming (the defaults), one request.
        cell: CellKey { model: "m".into(), context_tokens, batch_size: 1, run, ..Default::default() },
        started_at: started_at.into(),
        ttft_ms: Some(900.0),
        e2e_ms: Some(1500.0),
        token_offsets_ms: offsets,
        input_tokens: Some(u64::from(context_tokens)),
        output_tokens: Some(3),
        quality_ok: true,
        ..Default::default()
    }))
}

/// A run directory of `records` as a sweep leaves it (`common::runs`), the first record's TTFT
/// `EXACT_TTFT`; then edited the way a person may edit a text file (one line indented, a blank line
/// among them) and left in an order other than the canonical one. Returns the record lines as
/// bench wrote them.
fn run_dir(dir: &Path, name: &str, records: &[Record]) -> (PathBuf, Vec<String>) {
    run_dir_with(dir, name, &crate::common::runs::meta(name, &["--output-tokens", "3"]), records)
}

fn run_dir_with(dir: &Path, name: &str, meta: &RunMeta, records: &[Record]) -> (PathBuf, Vec<String>) {
    let mut records = records.to_vec();
    if let Record::Measurement(m) = &mut records[0] {
        m.ttft_ms = Some(EXACT_TTFT.parse().unwrap());
    }
    let run = crate::common::runs::write_with(dir, name, meta, &records);
    let jsonl = run.join("measurements.jsonl");
    let written = std::fs::read_to_string(&jsonl).unwrap();
    let lines: Vec<String> = written.lines().map(str::to_string).collect();
    assert!(lines[0].contains(&format!("\"ttft_ms\":{EXACT_TTFT}")), "bench wrote its digits");
    let text = format!("{}\n\n  {}\n{}\n", lines[0], lines[1], lines[2..].join("\n"));
    std::fs::write(&jsonl, text).unwrap();
    (run, lines)
}

/// The record lines of a canonical file, as they stand.
fn record_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| l.contains("\"record_type\""))
        .map(|l| l.trim().trim_end_matches(',').to_string())
        .collect()
}

fn bench_merge(inputs: &[&Path], out: &Path) -> std::process::Output {
    Command::cargo_bin("bench").unwrap().arg("merge").args(inputs).arg("-o").arg(out).output().unwrap()
}

#[test]
fn merge_writes_every_record_as_its_input_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = [4096, 1024, 2048, 8192]
        .iter()
        .map(|&c| record(c, 1, "2026-02-05T21:30:00.000Z", vec![1.5, 2.25]))
        .collect();
    let (run, lines) = run_dir(dir.path(), "run", &records);
    let out = dir.path().join("merged.json");
    let done = bench_merge(&[&run], &out);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let mut want = lines.clone();
    want.sort_by_key(|l| serde_json::from_str::<Record>(l).unwrap().cell().context_tokens);
    assert_eq!(record_lines(&out), want, "each record's text, in canonical order, unchanged");
    assert!(record_lines(&out)[2].contains(EXACT_TTFT), "the 1024-token record kept its digits");

    // The canonical file merged again (its records located by the scanner): the same texts, and
    // the same document as a merge of the same inputs read whole.
    let again = dir.path().join("again.json");
    assert!(bench_merge(&[&out], &again).status.success());
    assert_eq!(record_lines(&again), want);
    let whole = merge::build(sources::load_all(std::slice::from_ref(&out)).unwrap()).unwrap();
    assert!(whole.texts.iter().all(Option::is_none), "read whole, nothing to copy");
    let reread = sources::load(&again).unwrap().records;
    assert_eq!(reread, whole.doc.records, "the copied texts read as the whole records do");

    // verify reads what merge wrote.
    let verified = Command::cargo_bin("bench").unwrap().arg("verify").arg(&again).output().unwrap();
    assert_eq!(verified.status.code(), Some(0), "{}", String::from_utf8_lossy(&verified.stdout));

    // Merged into one of its own inputs (the usual way to add a run to a results file): the texts
    // are read from the file as it was, before the new one replaces it.
    let later = "2026-02-05T21:31:00.000Z";
    let (more, more_lines) =
        run_dir(dir.path(), "more", &[record(512, 1, later, vec![9.0]), record(256, 1, later, vec![8.0])]);
    let done = bench_merge(&[&again, &more], &again);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let mut with_more = [more_lines, want].concat();
    with_more.sort_by_key(|l| serde_json::from_str::<Record>(l).unwrap().cell().context_tokens);
    assert_eq!(record_lines(&again), with_more);
}

#[test]
fn a_record_changed_after_it_was_read_is_refused_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> =
        [1024, 2048, 4096].iter().map(|&c| record(c, 1, "2026-02-05T21:30:00.000Z", vec![1.5])).collect();
    let (run, _) = run_dir(dir.path(), "run", &records);
    let jsonl = run.join("measurements.jsonl");
    let sources = sources::load_all_with::<Digested>(std::slice::from_ref(&run), Detail::Located).unwrap();
    assert!(sources[0].texts.is_some(), "a run directory's records are located");
    // The same length, one digit other: only the checksum can tell.
    let text = std::fs::read_to_string(&jsonl).unwrap();
    std::fs::write(&jsonl, text.replacen("\"context_tokens\":2048", "\"context_tokens\":2049", 1)).unwrap();
    let merged = merge::build(sources).unwrap();
    let mut out = Vec::new();
    let err = canonical::write_with_texts(&merged.doc, &merged.texts, &mut out).unwrap_err();
    let fault = InputFault::of(&err).expect("the input's fault");
    assert!(
        fault.to_string().starts_with(&format!("{}: changed while it was being read", jsonl.display())),
        "{fault}"
    );
}

#[test]
fn located_duplicates_are_decided_as_whole_ones_are() {
    let dir = tempfile::tempdir().unwrap();
    let t = "2026-02-05T21:30:00.000Z";
    // The same cell in two runs: an identical copy, and a tie broken by content (same start).
    let (a, _) = run_dir(dir.path(), "a", &[record(1024, 1, t, vec![1.0]), record(2048, 1, t, vec![2.0])]);
    let (b, _) = run_dir(dir.path(), "b", &[record(1024, 1, t, vec![1.0]), record(2048, 1, t, vec![3.0])]);
    let inputs = [a.clone(), b.clone()];
    let located =
        merge::build(sources::load_all_with::<Digested>(&inputs, Detail::Located).unwrap()).unwrap();
    let whole = merge::build(sources::load_all(&inputs).unwrap()).unwrap();
    assert_eq!(located.doc.provenance, whole.doc.provenance);
    let reasons: Vec<&str> =
        whole.doc.provenance.replaced.iter().flat_map(|r| &r.losers).map(|l| l.reason.as_str()).collect();
    assert_eq!(reasons, ["identical copy", "tie on quality and start time; kept the first by content"]);
    let out = dir.path().join("merged.json");
    assert!(bench_merge(&[&a, &b], &out).status.success());
    assert_eq!(sources::load(&out).unwrap().records, whole.doc.records);
}

/// run.json of a sweep (`common::runs`) whose server reports `build_info`.
fn build_meta(run_id: &str, build_info: &str) -> RunMeta {
    RunMeta {
        server: ServerInfo {
            props: Some(serde_json::json!({"build_info": build_info})),
            ..Default::default()
        },
        ..crate::common::runs::meta(run_id, &["--output-tokens", "3"])
    }
}

/// Fails when the binary copies a record whose input changed in place between reading and
/// writing, exits other than 2, or leaves an output (or a temp file) behind.
///
/// The moment in between is made certain, not raced: the two runs disagree on their server's
/// build, whose values are megabytes long, so bench stops on its stderr line naming the conflict
/// (after reading, before writing) until this test drains the pipe.
#[test]
fn the_binary_refuses_an_input_changed_while_it_merges_and_writes_nothing() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let t = "2026-02-05T21:30:00.000Z";
    let (a, _) = run_dir_with(
        dir.path(),
        "a",
        &build_meta("a", &"A".repeat(4 << 20)),
        &[record(1024, 1, t, vec![]), record(2048, 1, t, vec![]), record(4096, 1, t, vec![])],
    );
    let (b, _) = run_dir_with(
        dir.path(),
        "b",
        &build_meta("b", &"B".repeat(4 << 20)),
        &[record(1024, 2, t, vec![]), record(2048, 2, t, vec![]), record(4096, 2, t, vec![])],
    );
    let out = dir.path().join("out").join("merged.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&out)
        .arg("--allow-conflicts")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("conflict: server_version") {
        let n = stderr.read(&mut chunk).unwrap();
        assert!(n > 0, "bench ended before naming the conflict: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    // bench has read both runs and waits on the rest of its line: change a record in place.
    let jsonl = a.join("measurements.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    std::fs::write(&jsonl, text.replacen("\"context_tokens\":2048", "\"context_tokens\":2049", 1)).unwrap();
    stderr.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    let seen = String::from_utf8_lossy(&seen);
    let tail = &seen[seen.len().saturating_sub(2000)..];
    assert_eq!(status.code(), Some(2), "{tail}");
    assert!(tail.contains(&format!("{}: changed while it was being read", jsonl.display())), "{tail}");
    let left: Vec<_> = std::fs::read_dir(out.parent().unwrap()).map_or(vec![], |d| d.collect());
    assert!(left.is_empty(), "nothing written, no temp file: {left:?}");
}
