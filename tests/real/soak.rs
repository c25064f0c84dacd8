//! `bench soak` and `--server-cmd`: concurrent load with correctness against a serial reference,
//! and a server bench starts, watches, and restarts after a real crash (kill -SEGV).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::scripted::{Behaviour, Scripted};
use common::{bench, records, run_dir, stderr};
use serde_json::Value;

fn run_json(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap()
}

fn soak(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["soak", "--server", url, "--out", out.to_str().unwrap(), "--quiet"];
    args.extend_from_slice(&["--contexts", "256", "--output-tokens", "24"]);
    args.extend_from_slice(extra);
    bench(&args)
}

#[test]
fn a_soak_that_stays_correct_passes_every_request() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = soak(&server.url, dir.path(), &["--concurrency", "4", "--iterations", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stderr(&out);
    let soak = common::table::find(&table, "Soak");
    assert_eq!(soak.cell("PASS 12/12 (3 iterations x 4)", "Requests passed"), Some("12/12"), "{table}");
    let run = run_dir(dir.path());
    let recs = records(&run);
    let ms: Vec<&Value> = recs.iter().filter(|r| r["record_type"] == "measurement").collect();
    assert_eq!(ms.len(), 12);
    assert!(ms.iter().all(|m| m["scenario"] == "soak" && m["batch_size"] == 4 && m["quality_ok"] == true));
    assert_eq!(
        recs.iter().filter(|r| r["record_type"] == "group").count(),
        3,
        "one group record per iteration"
    );
    let runs: std::collections::BTreeSet<u64> = ms.iter().map(|m| m["run"].as_u64().unwrap()).collect();
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), [1, 2, 3], "run = iteration");
    let summary = &run_json(&run)["soak"];
    assert_eq!((summary["requests"].as_u64(), summary["passed"].as_u64()), (Some(12), Some(12)));
    assert!(summary["speedup"].as_f64().is_some() && summary["efficiency"].as_f64().is_some(), "{summary}");
    let stamps = &run_json(&run)["arrival_stamps"];
    assert_eq!(stamps["transport"], "direct", "plain HTTP reads are the direct path's: {stamps}");
    assert!(
        stamps["reads_kernel_stamped"].as_u64().unwrap_or(0)
            + stamps["reads_stamped_on_return"].as_u64().unwrap_or(0)
            > 0,
        "{stamps}"
    );
    // Greedy: every request asked for temperature 0.
    assert!(server.log().iter().filter(|l| l.body["max_tokens"] == 24).all(|l| l.body["temperature"] == 0));
}

#[test]
fn different_greedy_text_under_load_is_a_finding_even_without_a_crash() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 20,
        token_ms: 1,
        // The serial pass sends each of the 2 prompts twice (the second times the lone stream).
        diverge_after: Some(4),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = soak(&server.url, dir.path(), &["--concurrency", "2", "--iterations", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let soak = common::table::find(&stderr(&out), "Soak");
    assert!(soak.rows[0][0].starts_with("FAIL 0/4 "), "{}", stderr(&out));
    let recs = records(&run_dir(dir.path()));
    let m = recs.iter().find(|r| r["record_type"] == "measurement").unwrap();
    let flag =
        m["quality_flags"].as_array().unwrap().iter().find(|f| f["flag"] == "output_mismatch").unwrap();
    assert!(flag["reason"].as_str().unwrap().contains("at character 4"), "{flag}");
    assert_eq!(run_json(&run_dir(dir.path()))["soak"]["mismatches"], 4);
}

fn wait_until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what} did not happen within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_real_server_killed_with_sigsegv_mid_soak_is_recorded_and_survived() {
    let Some(cmd) = common::llama::server_command("soak") else { return };
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args(["soak", "--server-cmd", &cmd, "--concurrency", "2", "--iterations", "40", "--contexts", "256"])
        .args([
            "--output-tokens",
            "128",
            "--quiet",
            "--run-id",
            "soak",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = dir.path().join("soak");
    let lines = || std::fs::read_to_string(run.join("measurements.jsonl")).map_or(0, |t| t.lines().count());
    wait_until(Duration::from_secs(240), "two soak iterations", || lines() >= 6);
    let command = run_json(&run)["server"]["command"].as_str().unwrap().to_string();
    let port = command.split("--port ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    // The pattern must not start with "--", which pkill would read as an option.
    let killed = Command::new("pkill").args(["-SEGV", "-f", &format!("port {port} ")]).status().unwrap();
    assert!(killed.success(), "no server process on port {port}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a crash is a finding: {}", String::from_utf8_lossy(&out.stderr));
    let meta = run_json(&run);
    let crash = &meta["server_crashes"][0];
    assert_eq!(crash["signal"], 11, "{crash}");
    assert_eq!(crash["restarted"], true);
    assert!(crash["in_flight"].as_str().unwrap().starts_with("iteration "), "{crash}");
    assert_eq!(meta["soak"]["crashes"], 1);
    assert_eq!(meta["soak"]["iterations_run"], 40, "the soak went on after the restart");
    let recs = records(&run);
    let last = recs.iter().rev().find(|r| r["record_type"] == "measurement").unwrap();
    assert_eq!(last["quality_ok"], true, "the restarted server answered: {last}");
    let soak = common::table::find(&stderr(&out), "Soak");
    assert!(soak.rows[0][0].starts_with("FAIL "), "{}", stderr(&out));
}

#[test]
fn a_sweep_can_start_its_own_server_and_records_the_command() {
    let Some(cmd) = common::llama::server_command("soak") else { return };
    let dir = tempfile::tempdir().unwrap();
    let slots = tempfile::tempdir().unwrap();
    // The llama.cpp preset evicts and restores slots, which needs a save directory.
    let cmd = format!("{cmd} --slot-save-path {}", slots.path().display());
    let out = bench(&[
        "sweep",
        "--server-cmd",
        &cmd,
        "--preset",
        "llama.cpp",
        "--contexts",
        "256",
        "--runs",
        "1",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let meta = run_json(&run_dir(dir.path()));
    let command = meta["server"]["command"].as_str().unwrap();
    assert!(command.contains("--port ") && !command.contains("{port}"), "{command}");
    assert!(meta["config"]["server"].as_str().unwrap().starts_with("http://127.0.0.1:"));
    assert_eq!(meta["server_crashes"].as_array().unwrap().len(), 0);
}
