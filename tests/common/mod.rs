//! Shared test helpers: the scripted server, the real llama-server, and reading results.

#![allow(dead_code)]

pub mod ingest_records;
pub mod llama;
pub mod origin;
pub mod runs;
pub mod scripted;
pub mod table;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Runs `bench` with `args`, returning the command's output.
pub fn bench(args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("bench").unwrap().args(args).output().unwrap()
}

/// The single run directory under `out`.
pub fn run_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert_eq!(dirs.len(), 1, "expected one run directory in {}: {dirs:?}", out.display());
    dirs[0].clone()
}

/// Every line of measurements.jsonl as JSON (panics on an invalid line: that is a test failure).
pub fn records(run_dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run_dir.join("measurements.jsonl")).unwrap();
    text.lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}: {l}", i + 1)))
        .collect()
}

/// A run directory's run.json.
pub fn run_json(run_dir: &Path) -> Value {
    let text = std::fs::read_to_string(run_dir.join("run.json")).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", run_dir.display()))
}

pub fn measurements(run_dir: &Path) -> Vec<Value> {
    records(run_dir).into_iter().filter(|r| r["record_type"] == "measurement").collect()
}

pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// A validator for the published record schema (schema/record.schema.json).
pub fn schema_validator() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/record.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

/// Asserts two floats agree up to rounding (relative 1e-9, and 1e-9 absolute near zero). For
/// values computed two ways from one measurement (a product, a sum, a subtraction, or a value
/// that went through a JSON file's text and back): they differ in the last bits of a float only,
/// while any real disagreement (a wrong share, a wrong operand) is far beyond this.
#[track_caller]
pub fn assert_close(a: f64, b: f64, what: &str) {
    let scale = a.abs().max(b.abs()).max(1.0);
    assert!((a - b).abs() <= 1e-9 * scale, "{what}: {a} vs {b}");
}

/// The arguments of a quiet `bench sweep` against `url` into `out` without a thermal gate: each
/// test's own sweep adds its matrix and preset.
pub fn quiet_sweep_args<'a>(url: &'a str, out: &'a Path) -> Vec<&'a str> {
    vec!["sweep", "--server", url, "--out", out.to_str().unwrap(), "--quiet", "--thermal", "off"]
}

/// `bench sweep` against `url` into `out`: one run per cell at 256 tokens, 24 output tokens, no
/// thermal gate, then `extra`.
pub fn short_sweep(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let out = out.to_str().unwrap();
    let mut args = vec!["sweep", "--server", url, "--out", out, "--contexts", "256", "--runs", "1"];
    args.extend(["--output-tokens", "24", "--thermal", "off"]);
    args.extend_from_slice(extra);
    bench(&args)
}
