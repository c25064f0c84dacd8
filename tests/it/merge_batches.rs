//! A concurrent batch is one unit in merge and `--expect`: a batch missing its group record or a
//! member (a sweep killed mid-append) never beats a complete one, and never counts as measured.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use ttft_bench::merge;
use ttft_bench::merge::Digested;
use ttft_model::record::{
    CacheState, CellKey, GroupRecord, Measurement, Mode, QualityFlag, Record, SCHEMA_VERSION, Scenario,
};
use ttft_results::results::canonical::Canonical;
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{self, Detail};

fn cell(run: u32) -> CellKey {
    CellKey {
        dataset_row: None,
        model: "m".into(),
        scenario: Scenario::Concurrent,
        cache_state: CacheState::Cold,
        mode: Mode::Streaming,
        context_tokens: 1024,
        batch_size: 2,
        run,
    }
}

fn member(run_id: &str, index: u32, started_at: &str, ok: bool) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.into(),
        cell: cell(1),
        request_index: index,
        group_id: Some(format!("{run_id}:g1")),
        started_at: started_at.into(),
        ttft_ms: Some(100.0 + f64::from(index)),
        e2e_ms: Some(740.0),
        output_tokens: Some(64),
        quality_ok: ok,
        quality_flags: if ok {
            vec![]
        } else {
            vec![QualityFlag { flag: "empty_output".into(), reason: "0 chars".into(), fails_gate: true }]
        },
        ..Default::default()
    }))
}

fn group(run_id: &str, started_at: &str, ok: bool) -> Record {
    Record::Group(Box::new(GroupRecord {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.into(),
        cell: cell(1),
        group_id: format!("{run_id}:g1"),
        started_at: started_at.into(),
        wall_ms: 800.0,
        requests_ok: if ok { 2 } else { 1 },
        requests_failed: if ok { 0 } else { 1 },
        ..Default::default()
    }))
}

/// A run directory of `records` as a sweep leaves it.
fn write_run(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    crate::common::runs::write(dir, name, records)
}

const EARLY: &str = "2026-01-01T00:00:00Z";
const LATE: &str = "2026-01-02T00:00:00Z";

/// The earlier run measured the batch whole; the later one was killed after appending both members
/// but before their group record.
fn complete_then_half_written(dir: &Path) -> (PathBuf, PathBuf) {
    let early = write_run(
        dir,
        "early",
        &[member("early", 0, EARLY, true), member("early", 1, EARLY, true), group("early", EARLY, true)],
    );
    let late = write_run(dir, "late", &[member("late", 0, LATE, true), member("late", 1, LATE, true)]);
    (early, late)
}

/// The document merge builds of `inputs` from whole records. The binary reads each record located
/// and keeps its digest (`merge::digest`): that reading must keep the same records, in the same
/// order, and give the same account of what it set aside.
fn build(inputs: &[PathBuf]) -> Canonical {
    let whole = merge::build(sources::load_all(inputs).unwrap()).unwrap().doc;
    let digested: Vec<sources::Source<Digested>> = sources::load_all_with(inputs, Detail::Located).unwrap();
    let located = merge::build(digested).unwrap().doc;
    assert_eq!(located.provenance, whole.provenance);
    assert_eq!(slots(&located.records), slots(&whole.records));
    whole
}

/// Each record's type, run, request and cell.
fn slots<T: Slotted>(records: &[T]) -> Vec<(&'static str, String, u32, CellKey)> {
    records
        .iter()
        .map(|r| (r.record_type(), r.run_id().to_string(), r.request_index(), r.cell().clone()))
        .collect()
}

fn cell_records(records: &[Record]) -> Vec<&Record> {
    records.iter().filter(|r| r.cell() == &cell(1)).collect()
}

#[test]
fn a_half_written_batch_never_beats_an_earlier_complete_one() {
    let dir = tempfile::tempdir().unwrap();
    let (early, late) = complete_then_half_written(dir.path());
    let doc = build(&[late, early]);
    let kept = cell_records(&doc.records);
    assert_eq!(kept.len(), 3, "both members and the group record: {kept:?}");
    assert!(kept.iter().all(|r| r.run_id() == "early"), "{kept:?}");
    assert_eq!(doc.records.iter().filter(|r| r.record_type() == "group").count(), 1);
    let rep = &doc.provenance.replaced[0];
    assert_eq!(rep.kept.run_id, "early");
    assert!(rep.losers[0].reason.contains("partial batch: group record missing"), "{}", rep.losers[0].reason);

    // The binary writes the same choice: the early run's whole batch, the late half-batch named.
    let out = dir.path().join("merged.json");
    let late_dir = dir.path().join("late");
    let early_dir = dir.path().join("early");
    Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&late_dir)
        .arg(&early_dir)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(0);
    let merged = sources::load(&out).unwrap();
    let written = cell_records(&merged.records);
    assert_eq!(written.len(), 3, "{written:?}");
    assert!(written.iter().all(|r| r.run_id() == "early"), "{written:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("partial batch: group record missing"), "the loser's reason is in the file");
}

#[test]
fn a_complete_failing_batch_beats_a_newer_partial_passing_one() {
    let dir = tempfile::tempdir().unwrap();
    let failed = write_run(
        dir.path(),
        "failed",
        &[member("failed", 0, EARLY, true), member("failed", 1, EARLY, false), group("failed", EARLY, false)],
    );
    // Group record and one member, the other member lost.
    let partial =
        write_run(dir.path(), "partial", &[member("partial", 0, LATE, true), group("partial", LATE, true)]);
    let doc = build(&[partial, failed]);
    let kept = cell_records(&doc.records);
    assert!(kept.iter().all(|r| r.run_id() == "failed") && kept.len() == 3, "{kept:?}");
    assert!(doc.provenance.replaced[0].losers[0].reason.contains("partial batch: 1 of 2 member requests"));
}

#[test]
fn among_complete_batches_passing_beats_failing_then_newest_wins() {
    let dir = tempfile::tempdir().unwrap();
    let pass_old = write_run(
        dir.path(),
        "a",
        &[member("a", 0, EARLY, true), member("a", 1, EARLY, true), group("a", EARLY, true)],
    );
    let fail_new = write_run(
        dir.path(),
        "b",
        &[member("b", 0, LATE, true), member("b", 1, LATE, false), group("b", LATE, false)],
    );
    let pass_new = write_run(
        dir.path(),
        "c",
        &[member("c", 0, LATE, true), member("c", 1, LATE, true), group("c", LATE, true)],
    );
    let doc = build(&[pass_old.clone(), fail_new.clone()]);
    assert!(cell_records(&doc.records).iter().all(|r| r.run_id() == "a"));
    let doc = build(&[pass_old, fail_new, pass_new]);
    assert!(cell_records(&doc.records).iter().all(|r| r.run_id() == "c"));
}

fn expect_batch(dir: &Path) -> PathBuf {
    let scenario = dir.join("b2.toml");
    std::fs::write(
        &scenario,
        "contexts = \"1024\"\nmodes = \"streaming\"\ncache_states = \"cold\"\nbatch_sizes = \"2\"\nruns = 1\n",
    )
    .unwrap();
    scenario
}

fn merge_expect(inputs: &[&Path], out: &Path, scenario: &Path) -> (i32, String) {
    let assert = Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .args(inputs)
        .arg("-o")
        .arg(out)
        .arg("--expect")
        .arg(scenario)
        .assert();
    let output = assert.get_output();
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).to_string())
}

#[test]
fn expect_never_counts_a_partial_batch_as_complete() {
    let dir = tempfile::tempdir().unwrap();
    let (early, late) = complete_then_half_written(dir.path());
    let scenario = expect_batch(dir.path());
    let out = dir.path().join("out.json");

    let (code, stdout) = merge_expect(&[&late], &out, &scenario);
    assert_eq!(code, 1, "{stdout}");
    let table = crate::common::table::find(&stdout, "Model");
    assert_eq!(table.row("m").unwrap(), &["m", "0/1", "0/1", "0/0", "Incomplete"], "{stdout}");
    assert!(
        stdout.contains("m concurrent/cold streaming 1024 b2 run 1 (partial batch: group record missing)"),
        "{stdout}"
    );

    let (code, stdout) = merge_expect(&[&late, &early], &out, &scenario);
    assert_eq!(code, 0, "{stdout}");
    let table = crate::common::table::find(&stdout, "Model");
    assert_eq!(table.row("m").unwrap(), &["m", "1/1", "1/1", "0/0", "Complete"], "{stdout}");
}
