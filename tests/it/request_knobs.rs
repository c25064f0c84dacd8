//! Request knobs of the command line reach every request bench sends, are recorded in run.json,
//! and keep their secrets: `--extra-body`, `--temperature`, `--header`, `--warmup`, and
//! `--api openai-completions`.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

/// One 256-token run per cell (see `common::short_sweep`).
fn sweep(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    common::short_sweep(url, out, extra)
}

fn run_json(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

/// Every file under `dir`, as text.
fn all_text(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    text
}

const SECRET: &str = "sk-knob-secret-4242";

#[test]
fn extra_body_temperature_and_headers_reach_every_request_and_run_json_without_the_secret() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {SECRET}");
    let out = sweep(
        &server.url,
        dir.path(),
        &[
            "--extra-body",
            r#"{"ignore_eos": true, "top_k": 1}"#,
            "--temperature",
            "0.7",
            "--header",
            "X-Trace: knobs-1",
            "--header",
            &auth,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let chats: Vec<_> = server.log().into_iter().filter(|l| l.path == "/v1/chat/completions").collect();
    assert!(chats.len() >= 3, "warm-up, calibration and the measurement: {}", chats.len());
    for l in &chats {
        assert_eq!(l.body["ignore_eos"], true, "{}", l.body);
        assert_eq!(l.body["top_k"], 1, "{}", l.body);
        assert_eq!(l.body["temperature"], 0.7, "{}", l.body);
        assert_eq!(l.headers.get("x-trace").map(String::as_str), Some("knobs-1"));
        assert_eq!(l.headers.get("authorization"), Some(&format!("Bearer {SECRET}")));
    }
    let run = run_dir(dir.path());
    let config = &run_json(&run)["config"];
    assert_eq!(config["extra_body"], serde_json::json!({"ignore_eos": true, "top_k": 1}));
    assert_eq!(config["temperature"], 0.7);
    assert_eq!(config["headers"], serde_json::json!(["X-Trace: knobs-1", "Authorization: [redacted]"]));
    let written = all_text(&run) + &String::from_utf8_lossy(&out.stdout) + &stderr(&out);
    assert!(!written.contains("knob-secret"), "the header's credential was written out");
    assert_eq!(measurements(&run)[0]["quality_ok"], true);
}

/// A server behind a gateway refuses any call without the gateway's key, so `--header` goes with
/// every call bench makes, not only the measured ones: preflight (/v1/models, /props), detection,
/// prompt sizing (/tokenize), the Prometheus counters, and every preset action.
#[test]
fn a_header_reaches_every_call_bench_makes_not_only_the_measured_ones() {
    let server = Scripted::start(Behaviour { first_token_ms: 5, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &server.url,
        dir.path(),
        &["--header", "X-Api-Key: gw-secret-77", "--cache-states", "cold,warm,hot"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let log = server.log();
    let paths: std::collections::BTreeSet<&str> =
        log.iter().map(|l| l.path.split('?').next().unwrap()).collect();
    for needed in ["/v1/models", "/props", "/tokenize", "/metrics", "/v1/chat/completions"] {
        assert!(paths.contains(needed), "bench never called {needed}: {paths:?}");
    }
    assert!(paths.iter().any(|p| p.starts_with("/slots/")), "no preset action: {paths:?}");
    let bare: Vec<String> = log
        .iter()
        .filter(|l| l.headers.get("x-api-key").map(String::as_str) != Some("gw-secret-77"))
        .map(|l| format!("{} {}", l.method, l.path))
        .collect();
    assert!(bare.is_empty(), "calls without the user's header: {bare:?}");
    let written = all_text(&run_dir(dir.path())) + &String::from_utf8_lossy(&out.stdout) + &stderr(&out);
    assert!(!written.contains("gw-secret-77"), "the gateway key was written out");
}

#[test]
fn an_extra_body_key_bench_sets_itself_is_refused_naming_the_flag_that_sets_it() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--extra-body", r#"{"max_tokens": 5}"#]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--extra-body") && err.contains("max_tokens") && err.contains("--output-tokens"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing created");
    let out = sweep(&server.url, dir.path(), &["--extra-body", "[1, 2]"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--extra-body"), "{}", stderr(&out));
    let out = sweep(&server.url, dir.path(), &["--header", "no colon here"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--header"), "{}", stderr(&out));
}

/// The warm-up request: non-streaming, 8 output tokens (calibration asks for 1, probes for 16).
fn warmups(server: &Scripted) -> usize {
    server.log().iter().filter(|l| l.path.starts_with("/v1/") && l.body["max_tokens"] == 8).count()
}

#[test]
fn warmup_sends_that_many_discarded_requests_and_is_recorded() {
    let server = Scripted::start(Behaviour { first_token_ms: 10, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, &dir.path().join("a"), &["--warmup", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(warmups(&server), 3);
    assert_eq!(run_json(&run_dir(&dir.path().join("a")))["config"]["warmup"], 3);
    server.clear_log();
    let out = sweep(&server.url, &dir.path().join("b"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(warmups(&server), 1, "one by default");
    assert_eq!(run_json(&run_dir(&dir.path().join("b")))["config"]["warmup"], 1);
}

#[test]
fn openai_completions_sends_a_prompt_string_and_reads_text_chunks_and_usage() {
    let server = Scripted::start(Behaviour { first_token_ms: 30, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &server.url,
        dir.path(),
        &[
            "--api",
            "openai-completions",
            "--modes",
            "streaming,non-streaming",
            "--extra-body",
            r#"{"top_k": 1}"#,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let log = server.log();
    let sent: Vec<_> = log.iter().filter(|l| l.path == "/v1/completions").collect();
    assert!(!sent.is_empty() && log.iter().all(|l| l.path != "/v1/chat/completions"));
    for l in &sent {
        assert!(l.body["prompt"].is_string() && l.body.get("messages").is_none(), "{}", l.body);
        assert_eq!(l.body["top_k"], 1);
    }
    let run = run_dir(dir.path());
    assert_eq!(run_json(&run)["config"]["api"], "openai-completions");
    let ms = measurements(&run);
    assert_eq!(ms.len(), 2);
    for m in &ms {
        assert_eq!(m["output_tokens"], 24, "{m}");
        assert_eq!(m["input_tokens"], 256, "{m}");
        assert_eq!(m["quality_ok"], true, "{m}");
    }
    let streamed = ms.iter().find(|m| m["mode"] == "streaming").unwrap();
    assert!(streamed["ttft_ms"].as_f64().unwrap() >= 30.0, "{streamed}");
    assert_eq!(streamed["delta_count"], 24);
}

#[test]
fn a_resumed_run_asks_again_for_a_credential_header_it_never_wrote_down() {
    let server = Scripted::start(Behaviour { first_token_ms: 10, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let auth = format!("X-Api-Key: {SECRET}");
    let out = sweep(&server.url, dir.path(), &["--header", &auth]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let resume = |extra: &[&str]| {
        let mut args = vec!["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url];
        args.extend_from_slice(extra);
        bench(&args)
    };
    let out = resume(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("pass --header again"), "{}", stderr(&out));
    server.clear_log();
    let out = resume(&["--header", &auth]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    assert!(
        server
            .log()
            .iter()
            .filter(|l| l.path == "/v1/chat/completions")
            .all(|l| l.headers["x-api-key"] == SECRET)
    );
    let meta = run_json(&run);
    assert_eq!(
        meta["resumed_at"][0]["changed"]["headers"], "X-Api-Key: [redacted]",
        "{}",
        meta["resumed_at"]
    );
    assert!(!all_text(&run).contains("knob-secret"));
}
