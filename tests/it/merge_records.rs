//! `bench merge` over our own records: which duplicate wins, conflicts, determinism, completeness,
//! corrupted inputs.

use std::path::{Path, PathBuf};

use crate::common;

use assert_cmd::Command;
use serde_json::json;
use ttft_bench::merge;
use ttft_model::record::{
    CacheState, CellKey, ErrorInfo, ErrorKind, Measurement, Mode, QualityFlag, Record, SCHEMA_VERSION,
    Scenario, StaggeredRecord,
};
use ttft_results::results::sources;

fn cell(context_tokens: u32, run: u32) -> CellKey {
    CellKey {
        dataset_row: None,
        model: "m".into(),
        scenario: Scenario::Cold,
        cache_state: CacheState::Cold,
        mode: Mode::Streaming,
        context_tokens,
        batch_size: 1,
        run,
    }
}

fn measurement(run_id: &str, cell: CellKey, started_at: &str, ok: bool) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.into(),
        cell,
        started_at: started_at.into(),
        ttft_ms: Some(100.0),
        e2e_ms: Some(740.0),
        token_offsets_ms: vec![100.0, 110.0, 120.5],
        output_tokens: Some(65),
        quality_ok: ok,
        quality_flags: if ok {
            vec![]
        } else {
            vec![QualityFlag { flag: "empty_output".into(), reason: "0 chars".into(), fails_gate: true }]
        },
        ..Default::default()
    }))
}

/// A run directory as a sweep leaves it (`common::runs`), with `--thermal-tolerance` where given.
fn write_run(dir: &Path, name: &str, records: &[Record], tolerance: Option<f64>) -> PathBuf {
    let tolerance = tolerance.map(|t| t.to_string());
    let mut flags = vec!["--output-tokens", "64"];
    if let Some(t) = &tolerance {
        flags.extend(["--tolerance", t.as_str()]);
    }
    common::runs::write_with(dir, name, &common::runs::meta(name, &flags), records)
}

fn kept(doc: &ttft_results::results::canonical::Canonical, c: &CellKey) -> Record {
    let found: Vec<&Record> = doc.records.iter().filter(|r| r.cell() == c).collect();
    assert_eq!(found.len(), 1, "one record per slot");
    found[0].clone()
}

#[test]
fn a_passing_duplicate_beats_a_newer_failure() {
    let dir = tempfile::tempdir().unwrap();
    let a =
        write_run(dir.path(), "a", &[measurement("a", cell(1024, 1), "2026-01-01T00:00:00Z", true)], None);
    let b =
        write_run(dir.path(), "b", &[measurement("b", cell(1024, 1), "2026-01-02T00:00:00Z", false)], None);
    let doc = merge::build(sources::load_all(&[a, b]).unwrap()).unwrap().doc;
    let r = kept(&doc, &cell(1024, 1));
    assert_eq!(r.run_id(), "a");
    assert!(r.is_good());
    let rep = &doc.provenance.replaced[0];
    assert_eq!(rep.beat, 1);
    assert!(!rep.losers[0].candidate.good);
    assert!(rep.losers[0].reason.contains("failed"), "{}", rep.losers[0].reason);
}

#[test]
fn a_newer_rerun_replaces_an_older_failure_and_an_older_pass() {
    let dir = tempfile::tempdir().unwrap();
    let old = write_run(
        dir.path(),
        "old",
        &[
            measurement("old", cell(1024, 1), "2026-01-01T00:00:00Z", false),
            measurement("old", cell(2048, 1), "2026-01-01T00:00:00Z", true),
        ],
        None,
    );
    let new = write_run(
        dir.path(),
        "new",
        &[
            measurement("new", cell(1024, 1), "2026-01-03T00:00:00.5Z", true),
            measurement("new", cell(2048, 1), "2026-01-03T00:00:00Z", true),
        ],
        None,
    );
    let doc = merge::build(sources::load_all(&[old, new]).unwrap()).unwrap().doc;
    assert_eq!(kept(&doc, &cell(1024, 1)).run_id(), "new");
    assert_eq!(kept(&doc, &cell(2048, 1)).run_id(), "new");
    let older = doc.provenance.replaced.iter().find(|r| r.slot.contains(" 2048 ")).unwrap();
    assert!(older.losers[0].reason.starts_with("older"), "{}", older.losers[0].reason);
    assert_eq!(doc.provenance.kept_by_source.values().sum::<usize>(), 2);
}

#[test]
fn conflicting_tolerances_are_listed_in_the_file_and_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_run(
        dir.path(),
        "a",
        &[measurement("a", cell(1024, 1), "2026-01-01T00:00:00Z", true)],
        Some(0.05),
    );
    let b = write_run(
        dir.path(),
        "b",
        &[measurement("b", cell(2048, 1), "2026-01-01T00:00:00Z", true)],
        Some(0.2),
    );
    let out = dir.path().join("out.json");
    let assert = Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&out)
        .arg("--allow-conflicts")
        .assert()
        .code(0);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(stderr.contains("conflict: thermal_tolerance differs between sources: 0.05"), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["kind"], "ttft-bench-canonical");
    let conflicts = doc["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "output tokens and harness agree: {conflicts:?}");
    assert_eq!(conflicts[0]["setting"], "thermal_tolerance");
    assert_eq!(conflicts[0]["values"][1]["value"], "0.2");
    assert_eq!(doc["sources"].as_array().unwrap().len(), 2);
    assert_eq!(doc["sources"][0]["run_meta"][0]["config"]["thermal"]["tolerance"], 0.05);
}

fn staggered() -> Record {
    Record::Staggered(Box::new(StaggeredRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "s".into(),
        cell: CellKey {
            scenario: Scenario::StaggeredBatched,
            batch_size: 2,
            context_tokens: 4096,
            run: 1,
            ..cell(0, 0)
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        stagger_delay_ms: Some(2000.0),
        user_a_ttft_ms: Some(1.5),
        user_a_e2e_ms: Some(2.5),
        user_b_ttft_ms: Some(3.5),
        user_b_e2e_ms: Some(4.5),
        user_b_arrival_ms: Some(2001.0),
        user_b_ttft_from_wall_start_ms: Some(2004.5),
        overlapped: None,
        overlap_ms: None,
        total_wall_ms: Some(2006.0),
        user_a_output_tokens: Some(64),
        user_b_output_tokens: Some(63),
        user_a_token_offsets_ms: vec![1.5, 2.0],
        user_b_token_offsets_ms: vec![3.5, 4.0],
        system_tps: Some(12.25),
        quality_ok: true,
        quality_flags: vec![],
        thermal: None,
        error: Some(ErrorInfo::new(ErrorKind::Timeout, "kept as is")),
        user_a_cache: None,
        user_b_cache: None,
    }))
}

#[test]
fn staggered_fields_and_raw_offsets_survive_a_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let m = measurement("a", cell(1024, 1), "2026-01-01T00:00:00Z", true);
    let a = write_run(dir.path(), "a", &[staggered(), m.clone()], None);
    let out = dir.path().join("c.json");
    Command::cargo_bin("bench").unwrap().arg("merge").arg(&a).arg("-o").arg(&out).assert().code(0);
    let back = sources::load(&out).unwrap();
    assert_eq!(back.kind, sources::SourceKind::Canonical);
    assert!(back.records.contains(&staggered()), "every staggered field kept");
    assert!(back.records.contains(&m), "token_offsets_ms kept");
    // Merging the canonical file with its own source: identical copies, not new records.
    let doc = merge::build(sources::load_all(&[out.clone(), a]).unwrap()).unwrap().doc;
    assert_eq!(doc.records.len(), 2);
    assert!(doc.provenance.replaced.iter().all(|r| r.losers[0].reason == "identical copy"));
}

#[test]
fn shuffled_inputs_give_byte_identical_output() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_run(
        dir.path(),
        "a",
        &[
            measurement("a", cell(2048, 1), "2026-01-01T00:00:00Z", true),
            measurement("a", cell(1024, 1), "2026-01-01T00:00:00Z", false),
        ],
        Some(0.05),
    );
    let b = write_run(
        dir.path(),
        "b",
        &[measurement("b", cell(1024, 1), "2026-01-02T00:00:00Z", true), staggered()],
        Some(0.2),
    );
    let c =
        write_run(dir.path(), "c", &[measurement("c", cell(1024, 2), "2026-01-02T00:00:00Z", true)], None);
    let run = |order: [&PathBuf; 3], name: &str| {
        let out = dir.path().join(name);
        Command::cargo_bin("bench")
            .unwrap()
            .arg("merge")
            .args(order)
            .arg("-o")
            .arg(&out)
            .arg("--allow-conflicts")
            .assert()
            .code(0);
        std::fs::read(out).unwrap()
    };
    let first = run([&a, &b, &c], "1.json");
    assert_eq!(first, run([&c, &a, &b], "2.json"));
    assert_eq!(first, run([&b, &c, &a], "3.json"));
}

#[test]
fn completeness_table_counts_cells_and_lists_the_missing() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.toml");
    std::fs::write(&scenario, "contexts = \"1024..2048\"\nruns = 2\nstaggered = true\nstagger_runs = 1\n")
        .unwrap();
    let a = write_run(
        dir.path(),
        "a",
        &[
            measurement("a", cell(1024, 1), "2026-01-01T00:00:00Z", true),
            measurement("a", cell(1024, 2), "2026-01-01T00:00:00Z", true),
            measurement("a", cell(2048, 1), "2026-01-01T00:00:00Z", false),
            staggered(),
        ],
        None,
    );
    let out = dir.path().join("c.json");
    let assert = Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&a)
        .arg("-o")
        .arg(&out)
        .arg("--expect")
        .arg(&scenario)
        .assert()
        .code(1);
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    let table = common::table::find(&stdout, "Model");
    assert_eq!(table.header, ["Model", "Total", "Quality OK", "Staggered", "Status"], "{stdout}");
    assert_eq!(table.row("m").unwrap(), &["m", "3/4", "2/4", "1/2", "Incomplete"], "{stdout}");
    assert!(stdout.contains("missing (2):"), "{stdout}");
    assert!(stdout.contains("m cold/cold streaming 2048 b1 run 2"), "{stdout}");
    assert!(stdout.contains("m staggered_sequential/cold streaming 4096 b2 run 1"), "{stdout}");
    // The 2048 run failed quality; the staggered pair carries an error.
    assert!(stdout.contains("failed (no passing record) (2):"), "{stdout}");
    assert!(stdout.contains("  m cold/cold streaming 2048 b1 run 1\n"), "{stdout}");
    assert!(out.exists());
    std::fs::remove_file(&out).unwrap();
    let mut cmd = Command::cargo_bin("bench").unwrap();
    cmd.arg("merge").arg(&a).arg("-o").arg(&out).arg("--expect").arg(&scenario).arg("--allow-incomplete");
    cmd.assert().code(0);
    assert!(out.exists(), "--allow-incomplete still writes the file");
}

fn refuse(dir: &Path, bad: &Path, expect_in_stderr: &str) {
    let good = write_run(dir, "good", &[measurement("g", cell(1024, 1), "2026-01-01T00:00:00Z", true)], None);
    let out = dir.join("never.json");
    let assert = Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&good)
        .arg(bad)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(stderr.contains(expect_in_stderr), "wanted {expect_in_stderr:?} in {stderr}");
    assert!(!out.exists(), "nothing written on bad input");
}

#[test]
fn a_truncated_json_line_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    let line = serde_json::to_string(&measurement("x", cell(1024, 1), "2026-01-01T00:00:00Z", true)).unwrap();
    std::fs::write(&bad, format!("{line}\n{}", &line[..40])).unwrap();
    refuse(dir.path(), &bad, &format!("{}:2: truncated JSON line", bad.display()));
}

#[test]
fn a_wrong_schema_version_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("old.jsonl");
    let mut v = serde_json::to_value(measurement("x", cell(1024, 1), "2026-01-01T00:00:00Z", true)).unwrap();
    let ok = v.to_string();
    v["schema_version"] = json!(0);
    std::fs::write(&bad, format!("{ok}\n{ok}\n{v}\n")).unwrap();
    refuse(dir.path(), &bad, &format!("{}:3: schema_version 0", bad.display()));

    // The same inside a canonical file: the record's own line (one record per line).
    let canonical = dir.path().join("c.json");
    let src =
        write_run(dir.path(), "c", &[measurement("c", cell(1024, 1), "2026-01-01T00:00:00Z", true)], None);
    Command::cargo_bin("bench").unwrap().arg("merge").arg(&src).arg("-o").arg(&canonical).assert().code(0);
    let text = std::fs::read_to_string(&canonical).unwrap();
    let at = text.lines().position(|l| l.contains("\"record_type\":\"measurement\"")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[at] = lines[at].replace("\"schema_version\":1", "\"schema_version\":7");
    std::fs::write(&canonical, lines.join("\n")).unwrap();
    refuse(dir.path(), &canonical, &format!("{}:{}: record schema_version 7", canonical.display(), at + 1));

    // The same canonical document pretty-printed (as older versions wrote it): the line where the
    // record starts.
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pretty = serde_json::to_string_pretty(&doc).unwrap();
    let line =
        pretty.lines().position(|l| l.contains("\"schema_version\": 1") && l.starts_with("      ")).unwrap();
    let mut lines: Vec<String> = pretty.lines().map(str::to_string).collect();
    lines[line] = lines[line].replace("\"schema_version\": 1", "\"schema_version\": 7");
    std::fs::write(&canonical, lines.join("\n")).unwrap();
    let record_start =
        pretty.lines().take(line).collect::<Vec<_>>().iter().rposition(|l| l.trim() == "{").unwrap() + 1;
    refuse(
        dir.path(),
        &canonical,
        &format!("{}:{record_start}: record schema_version 7", canonical.display()),
    );
}

#[test]
fn empty_and_unknown_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "").unwrap();
    refuse(dir.path(), &empty, &format!("{}:0: empty file", empty.display()));
    let unknown = dir.path().join("unknown.json");
    std::fs::write(&unknown, "{\"hello\": 1}\n").unwrap();
    refuse(dir.path(), &unknown, "unrecognised JSON");
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, "{\n  \"metadata\": {},\n  \"measurements\": [\n").unwrap();
    refuse(dir.path(), &cut, &format!("{}:4: not valid JSON (truncated?)", cut.display()));
}
