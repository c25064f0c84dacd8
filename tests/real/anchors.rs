//! The anchors (docs/anchors.md): AIPerf and GuideLLM, unchanged, complete against
//! bench-scripted-server, and the server's timing log holds every request they sent, by the
//! prompt's nonce (what `just bench-anchors` measures their TTFT error against).
//!
//! Skips with a message when the clients are not installed (`bash scripts/anchors.sh install`),
//! unless TTFT_BENCH_REQUIRE_ANCHORS requires that client: `1` (both) or a comma list (`aiperf`;
//! CI installs AIPerf only, since GuideLLM brings PyTorch with its CUDA libraries, ~5.6 GB).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// One client at a time: each spawns several processes, and two at once on a 2-core machine
/// starve the server of the core it streams from.
static ONE_CLIENT: Mutex<()> = Mutex::new(());

const REQUESTS: usize = 6;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/anchors.py")
}

/// Whether `client` is installed; false after saying why (a failure where
/// TTFT_BENCH_REQUIRE_ANCHORS requires it).
fn available(test: &str, client: &str) -> bool {
    let out = Command::new("python3").arg(script()).args(["available", client]).output().unwrap();
    if out.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let required = std::env::var("TTFT_BENCH_REQUIRE_ANCHORS").unwrap_or_default();
    if required == "1" || required.split(',').any(|c| c.trim() == client) {
        panic!("{test}: {client} is required (TTFT_BENCH_REQUIRE_ANCHORS={required}) but: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// bench-scripted-server with a timing log; SIGTERM on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(log: &Path) -> Server {
        // BENCH_SCRIPTED_SERVER: another build of the server (as in benches/external.rs), e.g. an
        // older one, to see which server versions the clients accept.
        let server = std::env::var_os("BENCH_SCRIPTED_SERVER")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_bench-scripted-server").into());
        let mut child = Command::new(server)
            .args(["--port", "0", "--first-token-ms", "20", "--token-ms", "1", "--log"])
            .arg(log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut url = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
        Server { child, url: url.trim().to_string() }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Runs `client` through the anchors script (the same invocation as the table) against a fresh
/// server: its output directory, the script's summary line, and the server's log.
fn run_client(client: &str, dir: &Path) -> (PathBuf, Value, String) {
    let _turn = ONE_CLIENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let log = dir.join("server.jsonl");
    let server = Server::start(&log);
    let out_dir = dir.join(client);
    let out = Command::new("python3")
        .arg(script())
        .args(["client", client, "--url", &server.url, "--out"])
        .arg(&out_dir)
        .args(["--requests", &REQUESTS.to_string(), "--concurrency", "2", "--words", "120"])
        .args(["--output-tokens", "16", "--timeout", "300", "--server-log"])
        .arg(&log)
        .output()
        .unwrap();
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value =
        stdout.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| {
            let stderr = String::from_utf8_lossy(&out.stderr);
            panic!("{client}: no summary; stderr: {stderr}\n{client}'s log:\n{}", tail(&out_dir, client))
        });
    (out_dir, summary, std::fs::read_to_string(&log).unwrap_or_default())
}

/// The tool's log tail, for a failure message.
fn tail(out_dir: &Path, client: &str) -> String {
    let text = std::fs::read_to_string(out_dir.join(format!("{client}.log"))).unwrap_or_default();
    let start = text.len().saturating_sub(4000);
    text.get(start..).unwrap_or(&text).to_string()
}

/// Every request of the server's log that completed a stream and carried a nonce.
fn logged_streams(log: &str) -> usize {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|t| t["record_type"] == "request" && t["completed"] == true && t["nonce"].is_string())
        .filter(|t| t["first_content_ns"].is_u64())
        .count()
}

#[test]
fn aiperf_completes_against_the_scripted_server_and_every_request_is_in_its_log() {
    if !available("anchors::aiperf", "aiperf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (out, summary, log) = run_client("aiperf", dir.path());
    let why = tail(&out, "aiperf");
    assert_eq!(summary["exit_code"], 0, "{summary}\n{why}");
    // AIPerf's own aggregate: the requests it counted, and no error among them.
    let aggregate: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("aiperf/profile_export_aiperf.json")).unwrap(),
    )
    .unwrap();
    let count = aggregate["request_count"]["avg"].as_f64().unwrap_or(0.0);
    assert_eq!(count as usize, REQUESTS, "{aggregate}\n{why}");
    assert!(aggregate["error_request_count"].is_null() || aggregate["error_request_count"]["avg"] == 0.0);
    // Its per-request records: each with a TTFT and content.
    let records = std::fs::read_to_string(out.join("aiperf/profile_export.jsonl")).unwrap();
    let records: Vec<Value> = records.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), REQUESTS, "{why}");
    for r in &records {
        assert!(r["error"].is_null(), "{r}");
        assert!(r["metrics"]["time_to_first_token"]["value"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["metrics"]["output_sequence_length"]["value"], 16, "{r}");
    }
    // Every request it reported is one the server logged, by nonce: the table's match.
    assert_eq!(logged_streams(&log), REQUESTS, "{log}");
    assert_eq!(summary["matched"], REQUESTS, "{summary}");
}

#[test]
fn guidellm_completes_against_the_scripted_server_and_every_request_is_in_its_log() {
    if !available("anchors::guidellm", "guidellm") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (out, summary, log) = run_client("guidellm", dir.path());
    let why = tail(&out, "guidellm");
    assert_eq!(summary["exit_code"], 0, "{summary}\n{why}");
    // GuideLLM's own report: requests completed, none errored or left incomplete.
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("benchmarks.json")).unwrap()).unwrap();
    let made = &report["benchmarks"][0]["scheduler_metrics"]["requests_made"];
    assert_eq!(made["successful"], REQUESTS, "{made}\n{why}");
    assert_eq!(made["errored"], 0, "{made}");
    assert_eq!(made["incomplete"], 0, "{made}");
    for r in report["benchmarks"][0]["requests"]["successful"].as_array().unwrap() {
        assert!(r["time_to_first_token_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["output_tokens"], 16, "{}", r["output_tokens"]);
        assert!(!r["output"].as_str().unwrap_or("").is_empty(), "{r}");
    }
    assert_eq!(logged_streams(&log), REQUESTS, "{log}");
    assert_eq!(summary["matched"], REQUESTS, "{summary}");
}
