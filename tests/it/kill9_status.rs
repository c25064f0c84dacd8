//! A run killed with kill -9 cannot write `interrupted` into its run.json: the readers tell it from
//! the lock nobody holds any more, and say so.

#![cfg(unix)]

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::scripted::{Behaviour, Scripted};
use common::{bench, stderr};
use serde_json::Value;

/// Guards against a hang only; nothing here is timed.
const HANG: Duration = Duration::from_secs(120);

/// Fails when a run killed with kill -9 reads as still `running` in verify, report, merge or on
/// --resume (run.json itself cannot be changed by a process that was killed outright).
#[test]
fn a_run_killed_with_kill_9_reads_as_interrupted_everywhere() {
    let server = Scripted::start(Behaviour { first_token_ms: 100, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = out.join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["sweep", "--server", &server.url, "--out", out.to_str().unwrap(), "--run-id", "run"])
        .args(["--quiet", "--thermal", "off", "--contexts", "256", "--output-tokens", "24", "--runs", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::fs::metadata(run.join("measurements.jsonl")).map_or(true, |m| m.len() == 0) {
        assert!(start.elapsed() < HANG, "no record");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "running", "what a killed process leaves in run.json");
    let run_s = run.to_str().unwrap();

    let verify = bench(&["verify", run_s]);
    let said = String::from_utf8_lossy(&verify.stdout).to_string() + &stderr(&verify);
    assert!(
        said.contains("no bench process holds the run")
            && said.contains("read as interrupted")
            && said.contains("finish it with bench sweep --resume"),
        "{said}"
    );

    // The table report says so too (on stderr, beside its other notes).
    let table = bench(&["report", run_s]);
    assert!(table.status.success(), "{}", stderr(&table));
    let notes = stderr(&table);
    assert!(notes.contains("is interrupted") && notes.contains("no bench process holds the run"), "{notes}");
    assert!(notes.contains("finish it with bench sweep --resume"), "what to do: {notes}");

    let html = dir.path().join("report.html");
    let report = bench(&["report", run_s, "--format", "html", "-o", html.to_str().unwrap()]);
    assert!(report.status.success(), "{}", stderr(&report));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("interrupted") && !page.contains(">running<"), "the report's status");

    let merged = dir.path().join("merged.json");
    let merge = bench(&["merge", run_s, "-o", merged.to_str().unwrap()]);
    assert!(merge.status.success(), "{}", stderr(&merge));
    let text = std::fs::read_to_string(&merged).unwrap();
    assert!(
        text.contains("\"interrupted\"") && !text.contains("\"running\""),
        "the merged run_meta's status"
    );

    let resume = bench(&["sweep", "--resume", run_s, "--server", &server.url, "--quiet"]);
    assert_eq!(resume.status.code(), Some(0), "{}", stderr(&resume));
    assert!(stderr(&resume).contains("read as interrupted; resuming it"), "{}", stderr(&resume));
}
