//! The thermal gate's defaults fit the machine: the probe decides (no minimum wait), the sweep
//! says up front what the gate will cost and how to turn it off, and the shipped paper scenario
//! keeps the origin's 10 s minimum.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, run_dir, stderr};
use serde_json::Value;

fn run_json(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

#[test]
fn the_probe_decides_by_default_and_the_sweep_says_what_the_gate_costs() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--contexts",
        "256",
        "--runs",
        "2",
        "--output-tokens",
        "24",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_json(&run_dir(dir.path()));
    assert_eq!(run["config"]["thermal"]["policy"], "probe", "{}", run["config"]);
    assert_eq!(run["config"]["thermal"]["min_cooldown_s"], 0.0, "{}", run["config"]);
    let err = stderr(&out);
    let line = err.lines().find(|l| l.starts_with("thermal gate:")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("expected to cost") && line.contains("--thermal off"), "{line}");
}

#[test]
fn the_paper_scenario_keeps_the_origins_ten_second_minimum() {
    let paper = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/paper.toml");
    let out = bench(&["plan", "--scenario", paper, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = plan.to_string();
    assert!(text.contains("\"min_cooldown_s\":10.0"), "{text}");
}
