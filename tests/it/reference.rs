//! The committed GPU reference run (results/reference/, docs/reference.md) stays trustworthy:
//! `bench verify` finds no error in it, against the ceilings measured on the same GPU
//! (results/reference/probe.json, the sweep's own physics) and against the datasheet, and a copy
//! with one decode number pushed past what the memory bandwidth allows is caught. No GPU needed.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

fn reference(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/reference").join(name)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The served model's shape, as the sweep read it from the GGUF (which stays on the GPU machine):
/// results/reference/model-config.json and the weight bytes and parameters from run.json.
fn model_flags() -> Vec<String> {
    let run = read_json(&reference("run.json"));
    let model = &run["physics"]["model"];
    vec![
        "--model-file".into(),
        reference("model-config.json").display().to_string(),
        "--model-bytes".into(),
        model["active_weight_bytes"].as_f64().unwrap().to_string(),
        "--params".into(),
        model["active_params"].as_f64().unwrap().to_string(),
    ]
}

/// Runs `bench verify --format json FILE MODEL FLAGS`; returns (exit code, report).
fn verify(file: &Path, flags: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .arg(file)
        .args(model_flags())
        .args(flags)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), report)
}

fn rules(report: &Value, severity: &str) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == severity)
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

/// The measured ceilings, as `bench verify` takes them.
fn measured_ceilings() -> (String, String) {
    let probe = read_json(&reference("probe.json"));
    let c = &probe["ceilings"];
    (c["bandwidth_gbps"].to_string(), c["tflops"].to_string())
}

#[test]
fn reference_run_verifies_with_no_error_against_the_measured_ceilings() {
    // The sweep's physics are the ceilings the probe measured on the same GPU just before it
    // (scripts/gpu-reference.sh sweep), kept in the canonical file's run.json.
    let (code, report) = verify(&reference("gpu-reference.json"), &[]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(rules(&report, "error"), Vec::<String>::new(), "{report:#}");
    assert_eq!(report["summary"]["records"], 186, "72 cells (batches count each member) + 6 staggered");
    let (bw, tf) = measured_ceilings();
    let hardware = &report["physics"][0]["hardware"];
    assert_eq!(hardware["name"], "h200", "{hardware:#}");
    assert_eq!(hardware["bandwidth_gbps"].to_string(), bw, "{hardware:#}");
    assert_eq!(hardware["tflops"].to_string(), tf, "{hardware:#}");
}

/// `bench verify results/reference/gpu-reference.json`, exactly, from the repository root.
fn verify_without_flags(file: &str) -> (i32, String) {
    let out = Command::cargo_bin("bench")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["verify", file])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn the_reference_verifies_without_flags_by_its_recorded_model_profile() {
    // The GGUF the sweep read stays on the GPU machine; run.json carries the profile read from it
    // (physics.model), so verify anywhere applies the physics the machine did.
    let (code, text) = verify_without_flags("results/reference/gpu-reference.json");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("summary: 0 error(s)"), "{text}");
    assert!(!text.contains("the cache did nothing"), "{text}");
    assert!(!text.contains("model profile unusable"), "the recorded profile is used: {text}");
}

/// Fails when `--strict` fails the clean reference: its hot batches of 4 are one number per run,
/// three runs a cell, and a record judged against two siblings has no spread to be judged by
/// (26.3 ms beside two runs near 19.3 is one member a decode step behind, not another machine).
#[test]
fn the_reference_passes_strict_with_no_warning() {
    let out = Command::cargo_bin("bench")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["verify", "--strict", "results/reference/gpu-reference.json", "--format", "json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(rules(&report, "error"), Vec::<String>::new(), "{report:#}");
    assert_eq!(rules(&report, "warning"), Vec::<String>::new(), "{report:#}");
    assert_eq!(report["summary"]["records"], 186);
}

#[test]
fn without_a_recorded_model_profile_warm_is_judged_by_the_cache_evidence() {
    // A run.json written before the profile was recorded: the physics cannot price the reload,
    // but every warm record's evidence shows the restored slot served the prompt.
    let mut doc = read_json(&reference("gpu-reference.json"));
    for meta in doc["sources"].as_array_mut().unwrap() {
        for run in meta["run_meta"].as_array_mut().unwrap() {
            run.as_object_mut().unwrap().remove("physics");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("no-profile.json");
    std::fs::write(&copy, serde_json::to_vec(&doc).unwrap()).unwrap();
    let (code, text) = verify_without_flags(copy.to_str().unwrap());
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("the cache did nothing"), "{text}");
    let served = text.lines().filter(|l| l.contains("evidence shows the cache served the prompt")).count();
    assert_eq!(
        served, 8,
        "the eight warm cells slower than cold (each restore read its slot file from disk), each explained by its evidence: {text}"
    );
}

#[test]
fn reference_run_verifies_with_no_error_against_the_datasheet() {
    let (code, report) = verify(&reference("gpu-reference.json"), &["--hardware", "h200"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(rules(&report, "error"), Vec::<String>::new(), "{report:#}");
}

#[test]
fn a_decode_number_above_the_bandwidth_ceiling_is_caught() {
    let mut doc = read_json(&reference("gpu-reference.json"));
    let records = doc["records"].as_array_mut().unwrap();
    let target = records
        .iter_mut()
        .find(|r| {
            r["record_type"] == "measurement"
                && r["cache_state"] == "cold"
                && r["context_tokens"] == 1024
                && r["batch_size"] == 1
        })
        .expect("a cold 1K record");
    let ceiling = target["physics"]["decode_ceiling_tps"].as_f64().unwrap();
    // 10% above what the measured 4.5 TB/s can stream 14.2 GB of weights (and the KV cache) at.
    target["decode_tps"] = Value::from(ceiling * 1.10);
    let run = target["run"].clone();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tampered.json");
    std::fs::write(&copy, serde_json::to_vec(&doc).unwrap()).unwrap();

    let (code, report) = verify(&copy, &[]);
    assert_eq!(code, 1, "{report:#}");
    // Caught twice: above the ceiling, and its stored decode_fraction no longer what it says.
    assert_eq!(
        rules(&report, "error"),
        vec!["decode_above_ceiling".to_string(), "stored_verdict_disagrees".to_string()],
        "{report:#}"
    );
    let finding =
        report["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "decode_above_ceiling").unwrap();
    assert_eq!(finding["cell"]["context_tokens"], 1024, "{finding:#}");
    assert_eq!(finding["cell"]["run"], run, "{finding:#}");

    // The untouched file has no error (the test above), so the change alone is what was caught.
}

#[test]
fn probe_measured_both_ceilings_on_the_same_gpu() {
    let probe = read_json(&reference("probe.json"));
    let run = read_json(&reference("run.json"));
    assert!(probe["gpu"].as_str().unwrap().contains("H200"), "{probe:#}");
    assert!(probe["hbm_read"]["bytes"].as_f64().unwrap() >= 8.0 * 1024.0 * 1024.0 * 1024.0);
    let bw = probe["ceilings"]["bandwidth_gbps"].as_f64().unwrap();
    let tf = probe["ceilings"]["tflops"].as_f64().unwrap();
    // Physically plausible for an H200 (datasheet 4800 GB/s, 989 TFLOP/s dense fp16).
    assert!((3000.0..4800.0).contains(&bw), "{bw}");
    assert!((300.0..989.0).contains(&tf), "{tf}");
    // The run's physics are exactly the probe's numbers.
    crate::common::assert_close(
        run["physics"]["hardware"]["bandwidth_gbps"].as_f64().unwrap(),
        bw,
        "bandwidth_gbps",
    );
    crate::common::assert_close(run["physics"]["hardware"]["tflops"].as_f64().unwrap(), tf, "tflops");
}

/// Warm in the reference is a disk number: every warm record's restore read its slot file after
/// bench dropped it from the page cache, and says how large the file was (4.3 GB at 32K).
#[test]
fn every_warm_record_of_the_reference_read_the_disk() {
    let doc = read_json(&reference("gpu-reference.json"));
    let warm: Vec<&Value> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["record_type"] == "measurement" && r["cache_state"] == "warm")
        .collect();
    assert_eq!(warm.len(), 48, "12 warm cells x 3 runs, batches counting each member");
    for r in &warm {
        assert_eq!(r["page_cache"], "evicted", "{r}");
        let per_token = r["saved_bytes"].as_f64().unwrap_or(0.0) / r["input_tokens"].as_f64().unwrap_or(1.0);
        // The 8B shape's f16 K and V: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131072 a token.
        assert!((120_000.0..160_000.0).contains(&per_token), "{per_token} bytes a token: {r}");
    }
    let run = read_json(&reference("run.json"));
    assert_eq!(run["config"]["page_cache"], "evicted");
}
