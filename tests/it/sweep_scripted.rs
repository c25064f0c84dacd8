//! `bench sweep` (cold) end to end against the scripted server: timing, SSE edge cases, every
//! error kind, resume, and kill -9.

use crate::common;

use common::scripted::{Behaviour, Fault, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

/// Runs a one-cell cold sweep; `extra` flags replace the defaults of the same name.
fn sweep(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let defaults = [
        ("--contexts", "256"),
        ("--modes", "streaming"),
        ("--runs", "1"),
        ("--output-tokens", "32"),
        ("--thermal", "off"),
    ];
    let mut args = vec!["sweep", "--server", url, "--out", out.to_str().unwrap()];
    for (flag, value) in defaults {
        if !extra.contains(&flag) {
            args.extend([flag, value]);
        }
    }
    args.extend_from_slice(extra);
    bench(&args)
}

fn only(out: &std::path::Path) -> Value {
    let ms = measurements(&run_dir(out));
    assert_eq!(ms.len(), 1, "{ms:?}");
    ms[0].clone()
}

#[test]
fn streaming_ttft_follows_the_scripted_delay_not_the_role_chunk() {
    let server = Scripted::start(Behaviour { first_token_ms: 300, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = only(dir.path());
    let ttft = m["ttft_ms"].as_f64().unwrap();
    let first_event = m["first_event_ms"].as_f64().unwrap();
    // Loose bounds: the scripted prefill is 300 ms; the machine may be busy.
    assert!((300.0..1300.0).contains(&ttft), "ttft {ttft}");
    assert!(
        first_event < ttft - 200.0,
        "role-only chunk ({first_event} ms) must not count as the first token ({ttft} ms)"
    );
    assert_eq!(m["delta_count"], 32);
    assert_eq!(m["token_offsets_ms"].as_array().unwrap().len(), 32);
    assert_eq!(m["output_tokens"], 32);
    assert_eq!(m["input_tokens"], 256, "prompt sized exactly, chat template included");
    assert_eq!(m["expected_input_tokens"], 256);
    assert!(m["e2e_ms"].as_f64().unwrap() >= ttft);
    let decode = m["decode_tps"].as_f64().unwrap();
    let expected = 31.0 / ((m["e2e_ms"].as_f64().unwrap() - ttft) / 1000.0);
    assert!((decode - expected).abs() < 1e-6);
    assert_eq!(m["quality_ok"], true, "{m}");
    assert!(m["error"].is_null());
    assert!(m["nonce"].as_str().unwrap().len() == 12);
}

#[test]
fn non_streaming_ttft_is_null_not_zero() {
    let server = Scripted::start(Behaviour { first_token_ms: 100, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--modes", "non-streaming"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = only(dir.path());
    assert_eq!(m["mode"], "non-streaming");
    assert!(m["ttft_ms"].is_null());
    assert!(m["first_event_ms"].is_null());
    assert!(m["decode_tps"].is_null());
    assert!(m["e2e_ms"].as_f64().unwrap() >= 100.0);
    assert_eq!(m["output_tokens"], 32);
}

#[test]
fn missing_usage_is_recorded_and_fails_the_gate() {
    let server = Scripted::start(Behaviour { usage: false, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "failed measurements exit 1: {}", stderr(&out));
    let m = only(dir.path());
    assert!(m["input_tokens"].is_null() && m["output_tokens"].is_null());
    assert_eq!(m["delta_count"], 32, "deltas still counted");
    assert_eq!(m["quality_ok"], false);
    let flags: Vec<&str> =
        m["quality_flags"].as_array().unwrap().iter().map(|f| f["flag"].as_str().unwrap()).collect();
    assert!(flags.contains(&"usage_missing"), "{flags:?}");
}

#[test]
fn multi_token_chunks_and_keep_alives_are_counted_by_usage() {
    let server =
        Scripted::start(Behaviour { tokens_per_chunk: 4, fault: Fault::KeepAlive, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = only(dir.path());
    assert_eq!(m["delta_count"], 8);
    assert_eq!(m["output_tokens"], 32);
    assert_eq!(m["quality_ok"], true, "{m}");
}

fn error_of(behaviour: Behaviour, extra: &[&str]) -> Value {
    let server = Scripted::start(behaviour);
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), extra);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let m = only(dir.path());
    assert_eq!(m["quality_ok"], false);
    m["error"].clone()
}

#[test]
fn http_errors_keep_status_and_body() {
    let e =
        error_of(Behaviour { fault: Fault::Status(500, "boom: out of memory"), ..Default::default() }, &[]);
    assert_eq!(e["kind"], "http_status");
    assert_eq!(e["http_status"], 500);
    assert!(e["message"].as_str().unwrap().contains("boom: out of memory"), "{e}");
    let e = error_of(Behaviour { fault: Fault::Status(429, "slow down"), ..Default::default() }, &[]);
    assert_eq!(e["http_status"], 429);
}

/// A chat request the server redirects is recorded as not followed, with what to do in bench's
/// own flag: the transport says what failed, the binary adds the advice to the record.
#[test]
fn a_redirected_measured_request_is_recorded_with_what_to_do() {
    let e = error_of(Behaviour { fault: Fault::Status(308, ""), ..Default::default() }, &[]);
    assert_eq!(e["http_status"], 308);
    let message = e["message"].as_str().unwrap_or_default();
    assert!(message.contains("not followed"), "{e}");
    assert!(message.ends_with("; point --server at the address it leads to"), "{e}");
}

#[test]
fn an_error_inside_a_200_stream_is_not_a_success() {
    let e = error_of(Behaviour { fault: Fault::ErrorInStream, ..Default::default() }, &[]);
    assert_eq!(e["kind"], "stream_error");
    assert!(e["message"].as_str().unwrap().contains("scripted failure"));
}

#[test]
fn a_stream_without_done_is_truncated() {
    let e = error_of(Behaviour { fault: Fault::Truncate, ..Default::default() }, &[]);
    assert_eq!(e["kind"], "stream_truncated");
}

#[test]
fn a_hanging_server_times_out() {
    let e = error_of(Behaviour { fault: Fault::Hang, ..Default::default() }, &["--request-timeout", "1s"]);
    assert_eq!(e["kind"], "timeout");
}

#[test]
fn an_unreachable_server_exits_3_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let out = sweep("http://127.0.0.1:9", dir.path(), &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("cannot reach the server"), "{}", stderr(&out));
}

/// Every verb that writes a run lives it the same way: against a server that is not there, sweep,
/// soak and load each exit 3 naming it, and leave no run directory behind (a typo in --server
/// costs nothing).
#[test]
fn sweep_soak_and_load_against_no_server_exit_3_and_leave_no_run() {
    let verbs: [&[&str]; 3] = [
        &["sweep", "--thermal", "off"],
        &["soak", "--iterations", "1"],
        &["load", "--concurrency", "1", "--duration", "1s", "--thermal", "off"],
    ];
    for verb in verbs {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        let mut args = verb.to_vec();
        args.extend([
            "--server",
            "http://127.0.0.1:9",
            "--contexts",
            "256",
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        let out = bench(&args);
        assert_eq!(out.status.code(), Some(3), "{}: {}", verb[0], stderr(&out));
        assert!(stderr(&out).contains("cannot reach the server"), "{}: {}", verb[0], stderr(&out));
        let left: Vec<_> =
            std::fs::read_dir(&out_dir).map_or(vec![], |d| d.flatten().map(|e| e.path()).collect());
        assert!(left.is_empty(), "{}: a run was left behind: {left:?}", verb[0]);
    }
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = sweep("http://127.0.0.1:9", dir.path(), &["--contexts", "1k..3k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--contexts"), "{}", stderr(&out));
}

#[test]
fn resume_skips_good_cells_and_reruns_failed_ones() {
    let server = Scripted::start(Behaviour { fault: Fault::Status(500, "flaky"), ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--contexts", "256,512", "--run-id", "r1"]);
    assert_eq!(out.status.code(), Some(1));
    let run = run_dir(dir.path());
    assert_eq!(measurements(&run).len(), 2);

    // Keep the first (failed) record, turn it good, and drop the second: resume must measure
    // only 512 and leave 256 alone.
    let mut lines: Vec<Value> = measurements(&run);
    lines.truncate(1);
    lines[0]["quality_ok"] = Value::Bool(true);
    lines[0]["error"] = Value::Null;
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(run.join("measurements.jsonl"), text).unwrap();

    server.set(Behaviour::default());
    server.clear_log();
    let out = bench(&["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let measured: Vec<u64> = server
        .log()
        .iter()
        .filter(|l| l.path == "/v1/chat/completions" && l.body["max_tokens"] == 32)
        .map(|l| l.body["messages"][0]["content"].as_str().unwrap().split_whitespace().count() as u64)
        .collect();
    assert_eq!(measured.len(), 1, "only the missing cell is measured again");
    let ms = measurements(&run);
    assert_eq!(ms.len(), 2);
    assert_eq!(ms[1]["context_tokens"], 512);
    assert_eq!(ms[1]["quality_ok"], true);
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["resumed_at"].as_array().unwrap().len(), 1);
}

#[test]
fn resume_refuses_matrix_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&["sweep", "--resume", dir.path().to_str().unwrap(), "--contexts", "1k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--contexts cannot be combined with --resume"), "{}", stderr(&out));
}

#[test]
fn kill_9_mid_sweep_leaves_valid_lines_and_resume_finishes() {
    let server = Scripted::start(Behaviour { first_token_ms: 150, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args([
            "sweep",
            "--server",
            &server.url,
            "--contexts",
            "256",
            "--runs",
            "40",
            "--output-tokens",
            "32",
            "--thermal",
            "off",
            "--quiet",
            "--run-id",
            "killed",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let jsonl = dir.path().join("killed/measurements.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let n = std::fs::read_to_string(&jsonl).map(|t| t.lines().count()).unwrap_or(0);
        if n >= 3 || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    let run = dir.path().join("killed");
    let before = common::records(&run); // panics on any invalid line
    assert!(before.len() >= 3 && before.len() < 40, "{} records", before.len());
    let out = bench(&["sweep", "--resume", run.to_str().unwrap(), "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let after = measurements(&run);
    assert_eq!(after.len(), 40, "resume completes the matrix without duplicating kept cells");
    let runs: std::collections::BTreeSet<u64> = after.iter().map(|m| m["run"].as_u64().unwrap()).collect();
    assert_eq!(runs.len(), 40);
}

#[test]
fn a_server_that_dies_mid_sweep_stops_the_sweep_with_everything_kept() {
    let server = Scripted::start(Behaviour { first_token_ms: 100, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args([
            "sweep",
            "--server",
            &server.url,
            "--contexts",
            "256",
            "--runs",
            "30",
            "--output-tokens",
            "32",
            "--thermal",
            "off",
            "--run-id",
            "crash",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let jsonl = dir.path().join("crash/measurements.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(&jsonl).map(|t| t.lines().count()).unwrap_or(0) < 3 {
        assert!(std::time::Instant::now() < deadline, "no records appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(server); // the server crashes mid-sweep: its port now refuses connections
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("refused 3 cells in a row"), "{}", stderr(&out));
    let run = dir.path().join("crash");
    let ms = measurements(&run);
    assert!(ms.len() < 30, "the sweep stopped instead of recording every remaining cell");
    let good = ms.iter().filter(|m| m["quality_ok"] == true).count();
    assert!(good >= 3, "measurements before the crash are kept");
    assert!(ms[ms.len() - 3..].iter().all(|m| !m["error"].is_null()));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "interrupted");
}

#[test]
fn connection_refused_is_an_error_kind_not_a_panic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = ttft_client::Client::new(
        "http://127.0.0.1:9",
        ttft_model::spec::Api::Openai,
        None,
        std::time::Duration::from_secs(5),
        Default::default(),
    )
    .unwrap();
    let req =
        ttft_client::ChatRequest { model: "m".into(), max_tokens: 4, stream: true, ..Default::default() };
    let ex = rt.block_on(client.send(client.prepare(&req).unwrap()));
    let err = ex.error.unwrap();
    assert_eq!(err.kind, ttft_model::record::ErrorKind::Connect);
    assert!(ex.ttft_ms.is_none() && ex.e2e_ms.is_none());
}

#[test]
fn a_warm_restore_bench_cannot_drop_from_the_page_cache_says_unknown_and_a_missing_save_fails_by_name() {
    let server = Scripted::start(Behaviour::default());
    // The server's save directory unknown: the restore may read memory; verify counts it.
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--preset", "llama.cpp", "--cache-states", "warm"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = only(dir.path());
    assert_eq!(m["page_cache"], "unknown", "{m}");
    let run = run_dir(dir.path());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["config"]["page_cache"], "unknown", "{}", meta["config"]);
    let out = bench(&["verify", run.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("warm_page_cache_unknown") && text.contains("1 of 1 warm records"), "{text}");
    assert_eq!(out.status.code(), Some(0), "info never fails a run: {text}");

    // A save directory that does not hold the saved session (this server keeps it in memory): the
    // warm measurement fails naming the file, instead of passing as a disk read it was not.
    let slots = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let slot_dir = slots.path().to_str().unwrap();
    let out = sweep(
        &server.url,
        dir.path(),
        &["--preset", "llama.cpp", "--cache-states", "warm", "--slot-dir", slot_dir],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let m = only(dir.path());
    let message = m["error"]["message"].as_str().unwrap_or_else(|| panic!("{m}"));
    assert!(message.contains("cannot drop the saved session") && message.contains(slot_dir), "{message}");
    assert!(message.contains(".bin"), "{message}");
}
