//! A sweep stopped mid-run, through the binary: by a crash of the server it started
//! (`--server-cmd`: restarted and the spoiled cell measured again, or past `--max-restarts`, exit 3
//! with everything kept) and by SIGINT or SIGTERM (exit 130, run.json `interrupted`, and
//! `--resume` finishing the matrix without touching a record already written).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::scripted::{Behaviour, Scripted};
use common::{measurements, stderr};
use serde_json::Value;

/// Guards against a hang only; nothing here is timed.
const HANG: Duration = Duration::from_secs(120);

/// The swept matrix: one context, cold, streaming, `RUNS` runs, so each run is one cell.
const RUNS: u64 = 6;

fn spawn_sweep(server: &[&str], out: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("sweep")
        .args(server)
        .args(["--out", out.to_str().unwrap(), "--run-id", "run", "--quiet", "--thermal", "off"])
        .args([
            "--contexts",
            "256",
            "--modes",
            "streaming",
            "--cache-states",
            "cold",
            "--output-tokens",
            "16",
        ])
        .args(["--runs", &RUNS.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn lines_in(run: &Path) -> usize {
    std::fs::read_to_string(run.join("measurements.jsonl")).map_or(0, |t| t.lines().count())
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < HANG, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a process this test (or the sweep it started) started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0, "kill {pid}");
}

fn finish(child: Child) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    rx.recv_timeout(HANG).expect("bench sweep did not end").unwrap()
}

fn run_json(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap()
}

/// The scripted server as a `--server-cmd` that writes its pid first (`exec` keeps the pid), so
/// the test kills exactly that process. A slow first token keeps a cell in flight most of the time;
/// tokens 10 ms apart arrive one by one even on a busy machine (not flagged `stream_burst`).
fn server_cmd(pidfile: &Path) -> String {
    let bin = env!("CARGO_BIN_EXE_bench-scripted-server");
    format!(
        "sh -c 'echo $$ > {}; exec {bin} --port {{port}} --first-token-ms 400 --token-ms 10'",
        pidfile.display()
    )
}

fn pid_in(pidfile: &Path) -> u32 {
    std::fs::read_to_string(pidfile).unwrap().trim().parse().unwrap()
}

/// Good and failed records per run (cell) number, in file order (a failed one's error or flags
/// printed, so a failure says why).
fn by_run(records: &[Value]) -> BTreeMap<u64, Vec<bool>> {
    let mut cells: BTreeMap<u64, Vec<bool>> = BTreeMap::new();
    for r in records {
        let good = r["quality_ok"] == true && r["error"].is_null();
        if !good {
            eprintln!("run {} failed: {} {}", r["run"], r["error"], r["quality_flags"]);
        }
        cells.entry(r["run"].as_u64().unwrap()).or_default().push(good);
    }
    cells
}

/// Fails when a sweep goes on against its dead server (every later cell failing to connect),
/// loses the crash, leaves the cell the crash spoiled without a good measurement, or measures a
/// cell again that was answered whole before the crash.
///
/// The server is killed twice over, in two sweeps: as the second record appears (bench may still
/// be syncing it, and sees the crash only after that cell, whose records are all good), and 100 ms
/// later (inside the third cell's 400 ms prefill, or before it connects: either way that cell
/// fails and is the one spoiled).
#[test]
fn a_crashed_server_is_restarted_and_the_spoiled_cell_measured_again() {
    for delay_ms in [0, 100] {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let run = dir.path().join("run");
        let child = spawn_sweep(&["--server-cmd", &server_cmd(&pidfile)], dir.path(), &[]);
        wait_for("two records", || lines_in(&run) >= 2);
        std::thread::sleep(Duration::from_millis(delay_ms));
        let first = pid_in(&pidfile);
        signal(first, libc::SIGKILL);
        let out = finish(child);
        let err = stderr(&out);
        assert_ne!(pid_in(&pidfile), first, "started again: {err}");
        let meta = run_json(&run);
        assert_eq!(meta["status"], "complete", "{err}");
        let crashes = meta["server_crashes"].as_array().unwrap();
        assert_eq!(crashes.len(), 1, "{crashes:?}");
        let crash = (crashes[0]["signal"].as_i64(), crashes[0]["restarted"].as_bool());
        assert_eq!(crash, (Some(9), Some(true)), "{crashes:?}");
        let cells = by_run(&measurements(&run));
        let runs: Vec<u64> = cells.keys().copied().collect();
        assert_eq!(runs, (1..=RUNS).collect::<Vec<_>>(), "after {delay_ms} ms: {cells:?}");
        for (run_no, goods) in &cells {
            let good = goods.iter().filter(|g| **g).count();
            assert_eq!(good, 1, "after {delay_ms} ms, run {run_no}: one good measurement: {goods:?}");
            assert_eq!(
                goods.last(),
                Some(&true),
                "run {run_no}: measured again after its failure: {goods:?}"
            );
        }
        let spoiled: Vec<u64> = cells.iter().filter(|(_, g)| g.len() > 1).map(|(r, _)| *r).collect();
        if delay_ms > 0 {
            // The third cell, unless a starved test thread slept past its 400 ms prefill.
            assert_eq!(spoiled.len(), 1, "the cell in flight at the crash, measured twice: {cells:?}");
            assert!(spoiled[0] >= 3, "not one recorded before the kill: {cells:?}");
            let in_flight = crashes[0]["in_flight"].as_str().unwrap();
            assert!(in_flight.contains(&format!("run {}", spoiled[0])), "{in_flight}");
            // Its failed record is a finding.
            assert_eq!(out.status.code(), Some(1), "{err}");
        } else if spoiled.is_empty() {
            assert_eq!(out.status.code(), Some(0), "nothing failed: {err}");
        }
    }
}

/// Fails when a server that may not be restarted again leaves the sweep going (or exiting with
/// anything but 3), loses a record written before the crash, or leaves run.json `running`.
#[test]
fn past_max_restarts_a_crashed_server_stops_the_sweep_with_exit_3_and_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let run = dir.path().join("run");
    let cmd = server_cmd(&pidfile);
    let child = spawn_sweep(&["--server-cmd", &cmd], dir.path(), &["--max-restarts", "0"]);
    wait_for("two records", || lines_in(&run) >= 2);
    let before = std::fs::read_to_string(run.join("measurements.jsonl")).unwrap();
    let first = pid_in(&pidfile);
    signal(first, libc::SIGKILL);
    let out = finish(child);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--max-restarts") && err.contains("--resume"), "{err}");
    assert_eq!(pid_in(&pidfile), first, "not started again");
    let after = std::fs::read_to_string(run.join("measurements.jsonl")).unwrap();
    assert!(after.starts_with(&before), "every record written before the crash kept, byte for byte");
    let cells = by_run(&measurements(&run));
    assert!(cells.len() < RUNS as usize, "the sweep stopped: {cells:?}");
    let meta = run_json(&run);
    assert_eq!(meta["status"], "interrupted");
    assert_eq!(meta["server_crashes"][0]["restarted"], false, "{meta:#}");
}

/// Fails when a signal mid-sweep loses or rewrites a record, leaves run.json `running`, or
/// `--resume` measures a cell that was already good (or misses one).
#[test]
fn a_signal_mid_sweep_leaves_an_interrupted_run_that_resume_finishes_with_every_cell_once() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let server = Scripted::start(Behaviour { first_token_ms: 150, token_ms: 10, ..Default::default() });
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let child = spawn_sweep(&["--server", &server.url], dir.path(), &[]);
        wait_for("two records", || lines_in(&run) >= 2);
        signal(child.id(), sig);
        let out = finish(child);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(130), "signal {sig}: {err}");
        assert!(err.contains(&format!("bench sweep --resume {}", run.display())), "{err}");
        assert_eq!(run_json(&run)["status"], "interrupted", "signal {sig}");
        let before = std::fs::read_to_string(run.join("measurements.jsonl")).unwrap();
        let kept = by_run(&measurements(&run));
        assert!(kept.len() < RUNS as usize, "stopped before the end: {kept:?}");

        let resumed = common::bench(&["sweep", "--resume", run.to_str().unwrap(), "--quiet"]);
        assert_eq!(resumed.status.code(), Some(0), "signal {sig}: {}", stderr(&resumed));
        let after = std::fs::read_to_string(run.join("measurements.jsonl")).unwrap();
        assert!(after.starts_with(&before), "signal {sig}: the earlier records untouched, byte for byte");
        let cells = by_run(&measurements(&run));
        assert_eq!(cells.keys().copied().collect::<Vec<_>>(), (1..=RUNS).collect::<Vec<_>>(), "{cells:?}");
        for (run_no, goods) in &cells {
            assert_eq!(goods.iter().filter(|g| **g).count(), 1, "signal {sig}, run {run_no}: {goods:?}");
            if kept.get(run_no).is_some_and(|g| g.contains(&true)) {
                assert_eq!(
                    goods.len(),
                    kept[run_no].len(),
                    "signal {sig}, run {run_no}: a good cell is not re-run"
                );
            }
        }
        let meta = run_json(&run);
        assert_eq!(meta["status"], "complete", "signal {sig}");
        assert_eq!(meta["resumed_at"].as_array().map(Vec::len), Some(1), "signal {sig}: {meta:#}");
    }
}
