//! `bench verify` on the origin benchmark's published result files (tests/fixtures/origin-results/),
//! and a small committed extract (three rows, numbers verbatim) that reproduces the same case.

use std::path::{Path, PathBuf};

use crate::common;

use assert_cmd::Command;
use serde_json::Value;

/// The directory of the origin's result files, or None (with a message) when it is absent.
fn origin_dir() -> PathBuf {
    common::origin::dir()
}

fn verify_json(inputs: &[&Path]) -> (i32, Value) {
    let out = Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .args(inputs)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), report)
}

/// The run_outlier findings about batch (concurrent) records.
fn batch_outliers(report: &Value) -> Vec<Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "run_outlier" && f["cell"]["scenario"] == "concurrent")
        .cloned()
        .collect()
}

/// The Gemma warm/streaming/1K batch-2 record at 798.6 ms (its siblings 1837.6 and 1920.9 ms).
fn is_the_gemma_batch(f: &Value) -> bool {
    let c = &f["cell"];
    c["cache_state"] == "warm"
        && c["mode"] == "streaming"
        && c["context_tokens"] == 1024
        && c["batch_size"] == 2
        && f["value"] == 798.6
}

#[test]
fn the_gemma_batch_outlier_is_found_in_the_committed_extract() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/verify/origin_gemma_batch_outlier.json");
    let (code, report) = verify_json(&[&path]);
    assert_eq!(code, 0, "a warning alone passes");
    let found = batch_outliers(&report);
    assert_eq!(found.len(), 1, "{report:#}");
    let f = &found[0];
    assert!(is_the_gemma_batch(f), "{f}");
    assert_eq!(
        (f["run_id"].as_str(), f["cell"]["run"].as_u64()),
        (Some("origin_gemma_batch_outlier"), Some(2))
    );
    assert!(f["message"].as_str().unwrap().contains("origin_gemma_batch_outlier.json"), "{f}");
}

#[test]
fn the_gemma_batch_outlier_is_found_in_the_published_file() {
    let dir = origin_dir();
    let merged = dir.join("colm_full_gemma_merged.json");
    let (_, report) = verify_json(&[&merged]);
    let found: Vec<Value> = batch_outliers(&report).into_iter().filter(is_the_gemma_batch).collect();
    assert_eq!(found.len(), 1, "{:#}", report["findings"]);
    let f = &found[0];
    assert_eq!((f["run_id"].as_str(), f["cell"]["run"].as_u64()), (Some("colm_full_gemma_merged"), Some(2)));
    assert!(f["file"].as_str().unwrap().ends_with("colm_full_gemma_merged.json"), "{f}");
    let z: f64 = f["message"]
        .as_str()
        .and_then(|m| m.split("robust z ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|z| z.parse().ok())
        .unwrap_or(0.0);
    assert!(z > 5.0, "robust z {z}: {f}");
}

#[test]
fn the_origin_files_batched_staggered_pairs_did_overlap() {
    // On the origin's M4 Pro, user A ran 8-36 s: B, sent at ~2 s, always overlapped it.
    let dir = origin_dir();
    let paths: Vec<PathBuf> = ["colm_full_gemma_merged.json", "colm_full_deepseek_merged.json"]
        .iter()
        .map(|f| dir.join(f))
        .collect();
    let inputs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let (_, report) = verify_json(&inputs);
    let rules: Vec<&str> =
        report["findings"].as_array().unwrap().iter().filter_map(|f| f["rule"].as_str()).collect();
    assert!(!rules.contains(&"staggered_not_overlapped"), "{rules:?}");
    assert!(!rules.contains(&"batch_incomplete"), "imported batch stand-ins are complete batches");
}
