//! `bench verify PUBLISHED --sources RAW...`: the provenance audit. Small synthetic cases (one per
//! finding kind, built from the hand-made origin fixtures) and the origin's real merged files,
//! (tests/fixtures/origin-results/).

use std::path::{Path, PathBuf};

use crate::common;

use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/origin").join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write_json(dir: &Path, name: &str, doc: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    path
}

/// `bench verify PUBLISHED --format json --sources SOURCES...`: exit code and report.
fn audit(published: &Path, sources: &[&Path]) -> (i32, Value) {
    let mut args = vec!["verify".to_string(), published.display().to_string()];
    args.extend(["--format".into(), "json".into(), "--sources".into()]);
    args.extend(sources.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::bench(&args);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn findings(report: &Value, rule: &str) -> Vec<Value> {
    let all = report["findings"].as_array().unwrap();
    all.iter().filter(|f| f["rule"] == rule).cloned().collect()
}

fn provenance(report: &Value) -> Vec<Value> {
    let all = report["findings"].as_array().unwrap();
    all.iter().filter(|f| f["rule"].as_str().unwrap().starts_with("provenance_")).cloned().collect()
}

#[test]
fn a_faithful_copy_traces_to_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let published = write_json(dir.path(), "published.json", &read_json(&fixture("small_first.json")));
    let (code, report) = audit(&published, &[&fixture("small_first.json")]);
    assert_eq!(provenance(&report), Vec::<Value>::new(), "{report:#}");
    assert_eq!(report["sources"][0]["kind"], "origin");
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn a_record_in_no_source_is_an_error_naming_the_file_the_cell_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = read_json(&fixture("small_first.json"));
    let mut extra = doc["measurements"][0].clone();
    extra["context_tokens"] = json!(2048);
    extra["pass_id"] = json!("p2_1770599999");
    doc["measurements"].as_array_mut().unwrap().push(extra);
    let published = write_json(dir.path(), "published.json", &doc);
    let (code, report) = audit(&published, &[&fixture("small_first.json"), &fixture("small_rerun.json")]);
    assert_eq!(code, 1, "an error fails the run");
    let found = provenance(&report);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!((f["rule"].as_str(), f["severity"].as_str()), (Some("provenance_no_source"), Some("error")));
    assert_eq!((f["cell"]["context_tokens"].as_u64(), f["cell"]["run"].as_u64()), (Some(2048), Some(3)));
    assert_eq!(f["file"], published.display().to_string());
    assert_eq!(f["run_id"], "published");
    let message = f["message"].as_str().unwrap();
    for name in ["published.json", "small_first.json", "small_rerun.json"] {
        assert!(message.contains(name), "{message}");
    }
}

#[test]
fn edited_numbers_are_named_with_both_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = read_json(&fixture("small_first.json"));
    doc["measurements"][0]["ttft_ms"] = json!(900.0);
    let published = write_json(dir.path(), "published.json", &doc);
    let (code, report) = audit(&published, &[&fixture("small_first.json")]);
    assert_eq!(code, 1);
    let found = provenance(&report);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(f["rule"], "provenance_numbers_differ");
    assert_eq!(
        (f["cell"]["context_tokens"].as_u64(), f["cell"]["mode"].as_str()),
        (Some(1024), Some("streaming"))
    );
    let message = f["message"].as_str().unwrap();
    assert!(message.contains("ttft_ms 900 published, 1000 in"), "{message}");
    assert!(message.contains("small_first.json"), "{message}");
    // decode_tps follows from ttft: (64 - 1) / 1.36 s published, / 1.26 s in the source.
    assert!(message.contains("decode_tps 46.3"), "{message}");
}

#[test]
fn a_published_value_rounded_from_its_source_is_the_same_number() {
    let dir = tempfile::tempdir().unwrap();
    let mut source = read_json(&fixture("small_first.json"));
    source["measurements"][0]["ttft_ms"] = json!(1000.04);
    let source = write_json(dir.path(), "raw.json", &source);
    let published = write_json(dir.path(), "published.json", &read_json(&fixture("small_first.json")));
    let (code, report) = audit(&published, &[&source]);
    assert_eq!(provenance(&report), Vec::<Value>::new(), "1000.0 is 1000.04 at one decimal");
    assert_eq!(code, 0);
    // The other way round, the published file claims a precision its source never had.
    let (code, report) = audit(&source, &[&published]);
    assert_eq!(findings(&report, "provenance_numbers_differ").len(), 1, "{report:#}");
    assert_eq!(code, 1);
}

#[test]
fn the_first_runs_metadata_over_a_reruns_records_is_a_conflict() {
    // What the origin's merge did: the re-run's batch row replaces the first run's failed one,
    // under the first run's metadata.
    let dir = tempfile::tempdir().unwrap();
    let mut doc = read_json(&fixture("small_first.json"));
    let rerun = read_json(&fixture("small_rerun.json"));
    doc["measurements"][2] = rerun["measurements"][0].clone();
    let published = write_json(dir.path(), "published.json", &doc);
    let (code, report) = audit(&published, &[&fixture("small_first.json"), &fixture("small_rerun.json")]);
    assert_eq!(code, 1);
    let found = provenance(&report);
    let messages: Vec<&str> = found.iter().map(|f| f["message"].as_str().unwrap()).collect();
    assert_eq!(found.len(), 2, "{messages:#?}");
    assert!(found.iter().all(|f| f["rule"] == "provenance_metadata_conflict" && f["severity"] == "error"));
    let tolerance = messages.iter().find(|m| m.contains("thermal tolerance")).unwrap();
    assert!(tolerance.contains("states thermal tolerance 0.05"), "{tolerance}");
    assert!(tolerance.contains("1 of its measurements"), "{tolerance}");
    assert!(tolerance.contains("small_rerun.json, whose metadata says 0.2"), "{tolerance}");
    let sha = messages.iter().find(|m| m.contains("harness git sha")).unwrap();
    assert!(sha.contains("aaaaaaa") && sha.contains("says bbbbbbb"), "{sha}");
}

#[test]
fn a_canonical_merge_traces_to_its_sources() {
    let dir = tempfile::tempdir().unwrap();
    let merged = dir.path().join("merged.json");
    let (first, rerun) = (fixture("small_first.json"), fixture("small_rerun.json"));
    let out = common::bench(&[
        "merge",
        first.to_str().unwrap(),
        rerun.to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
        "--allow-conflicts",
    ]);
    assert!(merged.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, report) = audit(&merged, &[&first, &rerun]);
    assert_eq!(provenance(&report), Vec::<Value>::new(), "a canonical file keeps every source's metadata");
    assert_eq!(report["inputs"][0]["kind"], "canonical");
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn an_unreadable_source_is_bad_input() {
    let out = common::bench(&[
        "verify",
        fixture("small_first.json").to_str().unwrap(),
        "--sources",
        "/nonexistent/raw.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--sources") && stderr.contains("/nonexistent/raw.json"), "{stderr}");
}

fn origin(name: &str) -> PathBuf {
    common::origin::real(name)
}

#[test]
fn the_origin_deepseek_merged_file_holds_35_batches_from_no_source() {
    let (merged, first, rerun) = (
        origin("colm_full_deepseek_merged.json"),
        origin("colm_full_deepseek_20260208_152120.json"),
        origin("colm_full_deepseek_20260209_155053.json"),
    );
    let (code, report) = audit(&merged, &[&first, &rerun]);
    assert_eq!(code, 1);
    let none = findings(&report, "provenance_no_source");
    assert_eq!(none.len(), 35, "{none:#?}");
    assert!(none.iter().all(|f| f["cell"]["batch_size"] == 2 && f["run_id"] == "colm_full_deepseek_merged"));
    assert_eq!(findings(&report, "provenance_numbers_differ"), Vec::<Value>::new());
    let meta: Vec<String> = findings(&report, "provenance_metadata_conflict")
        .iter()
        .map(|f| f["message"].as_str().unwrap().to_string())
        .collect();
    assert!(meta.iter().any(|m| m.contains("thermal tolerance 0.05") && m.contains("says 0.2")), "{meta:#?}");
    assert!(meta.iter().any(|m| m.contains("git sha ee24513") && m.contains("says 371aaa0")), "{meta:#?}");
    assert!(meta.iter().all(|m| m.contains("colm_full_deepseek_20260209_155053.json")), "{meta:#?}");
}

#[test]
fn the_origin_gemma_merged_file_holds_a_warm_batch_found_in_neither_input() {
    let (merged, first, rerun) = (
        origin("colm_full_gemma_merged.json"),
        origin("colm_full_gemma_20260208_152120.json"),
        origin("colm_full_gemma_20260209_154125.json"),
    );
    let (code, report) = audit(&merged, &[&first, &rerun]);
    assert_eq!(code, 1);
    let none = findings(&report, "provenance_no_source");
    assert_eq!(none.len(), 1, "{none:#?}");
    let f = &none[0];
    let c = &f["cell"];
    assert_eq!(
        (
            c["cache_state"].as_str(),
            c["mode"].as_str(),
            c["context_tokens"].as_u64(),
            c["batch_size"].as_u64()
        ),
        (Some("warm"), Some("streaming"), Some(1024), Some(2))
    );
    assert_eq!(c["run"], 2);
    let message = f["message"].as_str().unwrap();
    assert!(message.contains("group avg_ttft_ms 798.6 published"), "{message}");
    assert_eq!(findings(&report, "provenance_numbers_differ"), Vec::<Value>::new());
    let meta = findings(&report, "provenance_metadata_conflict");
    assert_eq!(meta.len(), 2, "{meta:#?}");
}

/// Two sources hold the same measurement: the first rounded (1000.04 where the published copy
/// says 1000.0), the second exactly. The published copy comes from the first, as the audit has
/// always read it (the first source that holds it), so its metadata, the first's, conflicts with
/// nothing; taken from the exact copy (the second, whose metadata says tolerance 0.2), it would.
#[test]
fn a_copy_is_traced_to_the_first_source_that_holds_it_even_rounded() {
    let dir = tempfile::tempdir().unwrap();
    let first = read_json(&fixture("small_first.json"));
    let mut rounded = first.clone();
    rounded["measurements"][0]["ttft_ms"] = json!(1000.04);
    let rounded = write_json(dir.path(), "rounded.json", &rounded);
    let mut exact = first.clone();
    exact["metadata"] = read_json(&fixture("small_rerun.json"))["metadata"].clone();
    let exact = write_json(dir.path(), "exact.json", &exact);
    let published = write_json(dir.path(), "published.json", &first);
    let (code, report) = audit(&published, &[&rounded, &exact]);
    assert_eq!(provenance(&report), Vec::<Value>::new(), "{report:#}");
    assert_eq!(code, 0);
    // The exact copy first: every record comes from it, under other metadata.
    let (code, report) = audit(&published, &[&exact, &rounded]);
    assert_eq!(findings(&report, "provenance_metadata_conflict").len(), 2, "{report:#}");
    assert_eq!(code, 1);
}
