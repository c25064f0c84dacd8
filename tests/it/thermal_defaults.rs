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
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 5, ..Default::default() });
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

/// A server that dies mid-sweep under the default thermal gate: the gate's next probe fails, and
/// a failed probe is a failed server, not a hot GPU, so the gate stops waiting at once instead of
/// probing for its whole 240 s maximum per cell (the sweep then stops on the refused measurement,
/// exit 3). The run ends well inside the guard below, which waiting out the maximum once exceeds.
#[test]
fn a_server_that_dies_mid_sweep_is_noticed_at_the_first_failed_probe_not_after_the_cooldown() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap(), "--run-id", "dies"])
        .args(["--contexts", "256,512,1024", "--runs", "2", "--output-tokens", "24", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = dir.path().join("dies");
    let records = || std::fs::read_to_string(run.join("measurements.jsonl")).map_or(0, |t| t.lines().count());
    let guard = Instant::now();
    while records() < 1 {
        assert!(guard.elapsed() < Duration::from_secs(120), "no first record");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(server); // every later connection is refused
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = rx.recv_timeout(Duration::from_secs(200)).expect("the sweep waited out its cooldown").unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(run_json(&run)["status"], "interrupted");
    let ms = common::measurements(&run);
    let failed =
        ms.iter().find(|m| !m["error"].is_null()).unwrap_or_else(|| panic!("no failed record: {ms:#?}"));
    let thermal = &failed["thermal"];
    assert_eq!(thermal["recovered"], false, "{failed:#}");
    let max = run_json(&run)["config"]["thermal"]["max_cooldown_s"].as_f64().unwrap();
    assert!(thermal["cooldown_s"].as_f64().unwrap() < max, "the gate waited out its maximum: {failed:#}");
}
