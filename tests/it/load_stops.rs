//! `bench load` stopped early: by a signal (every finished record kept, the summary of what
//! finished printed, exit 130), and by a crash of the server it started (`--server-cmd`: the crash
//! recorded and the rate repeated on the restarted server, or, past `--max-restarts`, exit 3).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::scripted::{Behaviour, Scripted};
use common::{measurements, stderr};
use serde_json::Value;

/// Guards against a hang only; nothing here is timed.
const HANG: Duration = Duration::from_secs(120);

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn spawn_load(server: &[&str], out: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg("load")
        .args(server)
        .args(["--out", out.to_str().unwrap(), "--run-id", "load", "--quiet", "--thermal", "off"])
        .args(["--contexts", "256", "--output-tokens", "24", "--mix", "cold=1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn records_in(run: &Path) -> usize {
    std::fs::read_to_string(run.join("measurements.jsonl")).map_or(0, |t| t.lines().count())
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < HANG, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a process this test started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0, "kill {pid}");
}

fn finish(child: Child) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    rx.recv_timeout(HANG).expect("bench load did not end").unwrap()
}

/// Fails when an interrupted load prints no summary, loses records or does not say it was
/// interrupted (before: exit 130 with nothing but a line on stderr).
#[test]
fn a_signal_mid_rate_keeps_every_finished_record_and_summarizes_them() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("load");
    let child = spawn_load(&["--server", &server.url], dir.path(), &["--rates", "4,8", "--duration", "30s"]);
    wait_for("three finished requests", || records_in(&run) >= 3);
    signal(child.id(), libc::SIGINT);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let ms = measurements(&run);
    assert!(ms.len() >= 3);
    assert!(ms.iter().all(|m| m["error"].is_null() && m["run"] == 1), "only finished requests of rate 1");
    let meta = json(&run.join("run.json"));
    assert_eq!(meta["status"], "interrupted");
    assert!(meta["ended_at"].is_string());
    let rates = meta["load"]["rates"].as_array().unwrap();
    let why = rates[0]["stopped"].as_str().unwrap();
    assert!(why.starts_with("interrupted by a signal ") && why.ends_with(" s after it began"), "{why}");
    assert!(rates[1].get("stopped").is_none() && rates[1]["clock_started_at"].is_null(), "never began");
    let summary = json(&run.join("load-summary.json"));
    let summarized = summary["rates"].as_array().unwrap();
    assert_eq!(summarized.len(), 1, "the rate that never began is not summarized");
    assert_eq!(summarized[0]["states"][1]["requests"].as_u64().unwrap() as usize, ms.len());
    assert_eq!(summarized[0]["arrivals_scheduled"], rates[0]["arrivals"].as_array().unwrap().len());
    assert_eq!(summary["knees"][0]["rate_per_s"], Value::Null, "a stopped rate makes no knee");
    let table = stderr(&out);
    assert!(common::table::find(&table, "Rate /s").row_with(&["4 (stopped)", "cold"]).is_some(), "{table}");
    assert!(table.contains(&format!("Rate 4/s (run 1) stopped early, {} of its", ms.len())), "{table}");
    let err = stderr(&out);
    assert!(err.contains(&format!("interrupted: the summary is of the {} requests that finished", ms.len())));
}

/// The scripted server as a `--server-cmd` that writes its pid first (the `exec` keeps the pid),
/// so the test can kill exactly that process.
fn server_cmd(pidfile: &Path) -> String {
    let bin = env!("CARGO_BIN_EXE_bench-scripted-server");
    format!(
        "sh -c 'echo $$ > {}; exec {bin} --port {{port}} --first-token-ms 20 --token-ms 1'",
        pidfile.display()
    )
}

fn pid_in(pidfile: &PathBuf) -> u32 {
    std::fs::read_to_string(pidfile).unwrap().trim().parse().unwrap()
}

/// Fails when a load goes on against a dead server (every later arrival failing to connect)
/// instead of restarting it, or loses the crash.
#[test]
fn a_started_server_that_dies_mid_rate_is_restarted_and_the_rate_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let cmd = server_cmd(&pidfile);
    let run = dir.path().join("load");
    let child = spawn_load(&["--server-cmd", &cmd], dir.path(), &["--rates", "4,3", "--duration", "3s"]);
    wait_for("two finished requests", || records_in(&run) >= 2);
    let first = pid_in(&pidfile);
    signal(first, libc::SIGKILL);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(1), "a rate cut short is a finding: {}", stderr(&out));
    assert_ne!(pid_in(&pidfile), first, "started again");
    let meta = json(&run.join("run.json"));
    assert_eq!(meta["status"], "complete");
    let crash = &meta["server_crashes"][0];
    assert_eq!((crash["signal"].as_i64(), crash["restarted"].as_bool()), (Some(9), Some(true)), "{crash}");
    let in_flight = crash["in_flight"].as_str().unwrap();
    assert!(
        in_flight.starts_with("rate 4/s (run 1), ") && in_flight.ends_with(" s after it began"),
        "{crash}"
    );
    let rates = meta["load"]["rates"].as_array().unwrap();
    assert_eq!(rates.len(), 3, "the cut rate again, as run 3");
    let why = rates[0]["stopped"].as_str().unwrap();
    assert!(why.contains("died of signal 9 (SIGKILL) during rate 4/s") && why.ends_with("repeated as run 3"));
    assert_eq!((rates[2]["run"].as_u64(), rates[2]["repeats_run"].as_u64()), (Some(3), Some(1)));
    assert_eq!(rates[2]["arrivals"], rates[0]["arrivals"], "the same schedule from its first arrival");
    let ms = measurements(&run);
    for run_no in [2, 3] {
        let of_run: Vec<&Value> = ms.iter().filter(|m| m["run"] == run_no).collect();
        let planned = rates[run_no as usize - 1]["arrivals"].as_array().unwrap().len();
        assert_eq!(of_run.len(), planned, "run {run_no} ran whole on the restarted server");
        assert!(of_run.iter().all(|m| m["error"].is_null()), "run {run_no}");
    }
    let summary = json(&run.join("load-summary.json"));
    let summarized: Vec<(u64, bool)> = summary["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["run"].as_u64().unwrap(), r["stopped"].is_string()))
        .collect();
    assert_eq!(summarized, [(1, true), (2, false), (3, false)]);
    // The cut run 1 (4/s, goodput 0) is left out of the knee, so the repeat's 4/s is it; unless the
    // repeat itself was not honestly offered (a busy machine's send lag), which ends the chain at 3/s.
    // (Likewise 3/s itself: a chain that ends before its first rate has no knee.) Whether a run was
    // honestly offered is read from its records' own send lags, not from the summary's flag.
    let honest = |i: usize| {
        let run_no = i as u64 + 1;
        let flagged = summary["rates"][i]["honestly_offered"].as_bool().unwrap();
        let of_run: Vec<&Value> = ms.iter().filter(|m| m["run"] == run_no).collect();
        match honest_from_records(&of_run) {
            Some(honest) => {
                assert_eq!(flagged, honest, "run {run_no}'s send lags say honest={honest}: {summary}");
                honest
            }
            None => flagged, // at the limit: either reading is the rule's
        }
    };
    let knee = match (honest(1), honest(2)) {
        (false, _) => Value::Null,
        (true, false) => 3.0.into(),
        (true, true) => 4.0.into(),
    };
    assert_eq!(summary["knees"][0]["rate_per_s"], knee, "from the repeat, not the cut rate: {summary}");
}

/// Whether a rate's arrivals were honestly offered, from their records alone: the p99 of their
/// send lags (nearest rank) at most 1 ms or 2% of their median TTFT, whichever is more. None
/// when the p99 lies within 25% of that limit, where the rule's own reading of "p99" decides.
fn honest_from_records(of_run: &[&Value]) -> Option<bool> {
    let sorted = |field: &str| {
        let mut v: Vec<f64> = of_run.iter().filter_map(|m| m[field].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (lags, ttfts) = (sorted("send_lag_ms"), sorted("ttft_ms"));
    assert!(!lags.is_empty() && !ttfts.is_empty(), "records with send lags and TTFTs");
    let p99 = lags[((lags.len() as f64 * 0.99).ceil() as usize).clamp(1, lags.len()) - 1];
    let limit = (ttfts[(ttfts.len() - 1) / 2] * 0.02).max(1.0);
    if (p99 - limit).abs() < 0.25 * limit {
        return None;
    }
    Some(p99 <= limit)
}

/// Send lag caused from outside the process: bench stopped (SIGSTOP) for 300 ms mid-rate sends
/// the arrivals due meanwhile late. The records say how late, the rate is named not honestly
/// offered, and it makes no knee; a load reading its arrivals' lag wrongly would call it a knee.
#[test]
fn a_load_stopped_from_outside_mid_rate_is_not_honestly_offered_and_says_so() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("load");
    let slo = ["--slo", "ttft=150ms"];
    let child = spawn_load(
        &["--server", &server.url],
        dir.path(),
        &[&["--rates", "8", "--duration", "3s"][..], &slo].concat(),
    );
    wait_for("two finished requests", || records_in(&run) >= 2);
    signal(child.id(), libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    signal(child.id(), libc::SIGCONT);
    let out = finish(child);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let ms = measurements(&run);
    let refs: Vec<&Value> = ms.iter().collect();
    let max_lag = ms.iter().filter_map(|m| m["send_lag_ms"].as_f64()).fold(0.0, f64::max);
    assert!(max_lag >= 100.0, "arrivals due while bench was stopped went out late: {max_lag} ms");
    assert_eq!(honest_from_records(&refs), Some(false), "by the records' own lags");
    let summary = json(&run.join("load-summary.json"));
    assert_eq!(summary["rates"][0]["honestly_offered"], false, "{summary}");
    assert_eq!(
        summary["knees"][0]["rate_per_s"],
        Value::Null,
        "a rate not honestly offered is no knee: {summary}"
    );
    let table = stderr(&out);
    assert!(table.contains("NOT honestly"), "{table}");
    // Goodput counts TTFT from the scheduled send: an arrival sent 300 ms late missed a 150 ms SLO
    // however fast the server answered it once sent.
    let from_scheduled = |m: &Value| m["send_lag_ms"].as_f64().unwrap() + m["ttft_ms"].as_f64().unwrap();
    let met = ms.iter().filter(|m| m["error"].is_null() && from_scheduled(m) <= 150.0).count();
    assert!(met < ms.len(), "some arrival was late past the SLO: {max_lag} ms");
    let cold =
        summary["rates"][0]["states"].as_array().unwrap().iter().find(|st| st["state"] == "cold").unwrap();
    let scheduled = summary["rates"][0]["arrivals_scheduled"].as_u64().unwrap() as f64;
    common::assert_close(
        cold["goodput"].as_f64().unwrap(),
        met as f64 / scheduled,
        "goodput from the scheduled send",
    );
}

/// Fails when a server that may not be restarted again leaves the load running (or exiting with
/// anything but 3) instead of stopping with what finished.
#[test]
fn past_its_restarts_a_dead_server_stops_the_load_with_exit_3_and_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let cmd = server_cmd(&pidfile);
    let run = dir.path().join("load");
    let child = spawn_load(
        &["--server-cmd", &cmd, "--max-restarts", "0"],
        dir.path(),
        &["--rates", "4,3", "--duration", "3s"],
    );
    wait_for("two finished requests", || records_in(&run) >= 2);
    signal(pid_in(&pidfile), libc::SIGKILL);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("died of signal 9 (SIGKILL) during rate 4/s (run 1), ")
            && err.contains("more than --max-restarts 0 allows; the load stopped there"),
        "{err}"
    );
    assert!(err.contains("the summary is of the"), "{err}");
    let meta = json(&run.join("run.json"));
    assert_eq!(meta["status"], "interrupted");
    assert_eq!(meta["server_crashes"][0]["restarted"], false);
    assert!(meta["load"]["rates"][0]["stopped"].as_str().unwrap().contains("died of signal 9"));
    assert!(measurements(&run).len() >= 2, "what finished is kept");
    let table = stderr(&out);
    assert!(common::table::find(&table, "Rate /s").row_with(&["4 (stopped)", "cold"]).is_some(), "{table}");
}

/// Fails when a load goes on against a server that died (not one bench started): before, it ran
/// the rest of the rate and the whole next rate, every arrival a failed connection, before exit 3.
#[test]
fn a_dead_server_stops_the_load_after_a_few_refused_requests_with_exit_3() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("load");
    let child = spawn_load(&["--server", &server.url], dir.path(), &["--rates", "8,6", "--duration", "4s"]);
    wait_for("three finished requests", || records_in(&run) >= 3);
    drop(server); // its runtime and listener go: every later connection is refused
    let out = finish(child);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("refused 3 requests in a row: it is down"), "{err}");
    let meta = json(&run.join("run.json"));
    assert_eq!(meta["status"], "interrupted");
    let rates = meta["load"]["rates"].as_array().unwrap();
    let why = rates[0]["stopped"].as_str().unwrap_or_else(|| panic!("rate 1 not marked stopped: {meta}"));
    assert!(why.contains("refused 3 requests in a row"), "{why}");
    assert!(rates[1]["clock_started_at"].is_null(), "the next rate never began: {meta}");
    let ms = measurements(&run);
    assert!(ms.iter().all(|m| m["run"] == 1), "no request of the next rate was sent");
    assert!(ms.iter().filter(|m| m["error"].is_null()).count() >= 3, "what finished is kept");
    let planned = rates[0]["arrivals"].as_array().unwrap().len();
    assert!(ms.len() < planned, "the rate stopped early: {} of {planned}", ms.len());
}

/// A server that dies while the thermal gate probes it between two rates: the failed probe ends
/// the gate at once (a failed server, not a hot GPU), the next rate's refused requests stop the
/// load with exit 3, instead of the gate probing a dead server for its 240 s maximum first.
#[test]
fn a_server_dead_at_the_thermal_probe_stops_the_load_without_waiting_out_the_cooldown() {
    // Slow tokens: a probe takes ~0.5 s, long enough to be cut by the server's death.
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 30, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("load");
    let child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["load", "--server", &server.url, "--out", dir.path().to_str().unwrap(), "--run-id", "load"])
        .args(["--quiet", "--contexts", "256", "--output-tokens", "24", "--mix", "cold=1"])
        .args(["--rates", "2,3", "--duration", "2s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the first rate's end", || {
        std::fs::read_to_string(run.join("run.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|m| !m["load"]["rates"][0]["clock_started_at"].is_null())
    });
    drop(server);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = rx.recv_timeout(Duration::from_secs(200)).expect("the load waited out its cooldown").unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let meta = json(&run.join("run.json"));
    assert_eq!(meta["status"], "interrupted", "{meta}");
}

/// A server that takes every request and answers none (wedged): the rate that found it so is
/// marked stopped in run.json with why, and the load exits 3.
#[test]
fn a_wedged_server_s_rate_is_marked_stopped_and_the_load_exits_3() {
    let server = Scripted::start(Behaviour { fault: common::scripted::Fault::Hang, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("load");
    let child = spawn_load(
        &["--server", &server.url],
        dir.path(),
        &["--rates", "4,6", "--duration", "1s", "--request-timeout", "1s"],
    );
    let out = finish(child);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let meta = json(&run.join("run.json"));
    let rates = meta["load"]["rates"].as_array().unwrap();
    let why = rates[0]["stopped"]
        .as_str()
        .unwrap_or_else(|| panic!("the wedged rate is not marked stopped: {meta}"));
    assert!(why.contains("answered none"), "{why}");
    assert!(rates[1]["clock_started_at"].is_null(), "the next rate never began: {meta}");
}
