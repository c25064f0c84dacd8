//! End to end against the REAL agent-memory server, the origin benchmark's own (installed and started
//! by scripts/agent-memory.sh from its source, with a generated random-weight model; docs/agent-memory.md).
//! Skipped with a message when it is not set up locally; never skipped in CI
//! (TTFT_BENCH_REQUIRE_AGENT_MEMORY=1).
//!
//! Every test drives the `bench` binary (with `--preset agent-memory`, or without a preset to
//! detect the server) and judges only what bench wrote: the records, run.json and `bench
//! verify`'s report of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use crate::common::{measurements, records, run_dir, stderr};
use serde_json::Value;

/// One server at a time: on a 2-core machine two MLX servers (or a server and another test's
/// llama-server) starve each other, and a starved stream arrives in bursts the gate rightly fails.
static ONE_SERVER: Mutex<()> = Mutex::new(());

/// The prompt size of every test: the server prefills ~250 tokens in ~0.2 s here.
const CONTEXT: &str = "256";

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/agent-memory.sh")
}

struct AgentMemory {
    url: String,
    /// The admin key the server was started with (and that bench reads from the environment).
    key: String,
    state_dir: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

impl AgentMemory {
    /// Starts a private server (own port, own cache directory), or says why not: a skip, or a
    /// failure under TTFT_BENCH_REQUIRE_AGENT_MEMORY=1.
    fn start(test: &str) -> Option<AgentMemory> {
        let available = Command::new("bash").arg(script()).arg("available").output().unwrap();
        if !available.status.success() {
            let why = String::from_utf8_lossy(&available.stderr).trim().to_string();
            if std::env::var("TTFT_BENCH_REQUIRE_AGENT_MEMORY").as_deref() == Ok("1") {
                panic!("{test}: agent-memory is required (TTFT_BENCH_REQUIRE_AGENT_MEMORY=1) but: {why}");
            }
            eprintln!(
                "SKIPPED {test}: agent-memory not set up ({why}); `just agent-memory-setup` sets it up"
            );
            return None;
        }
        let turn = ONE_SERVER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let state_dir = tempfile::tempdir().unwrap();
        let key = format!("am-admin-{}-{}", std::process::id(), test.len());
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg("--state-dir")
            .arg(state_dir.path())
            .env("AGENT_MEMORY_ADMIN_KEY", &key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{test}: agent-memory did not start:\n{}", stderr(&out));
        let url = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_string();
        assert!(url.starts_with("http://"), "{test}: no URL from the start script: {url:?}");
        Some(AgentMemory { url, key, state_dir, _turn: turn })
    }

    /// The server's cache directory (SEMANTIC_AGENT_CACHE_DIR), where the evict leaves its file.
    fn cache_dir(&self) -> PathBuf {
        self.state_dir.path().join("caches")
    }

    /// `bench` with the admin key in its environment, as a user runs it.
    fn bench(&self, args: &[&str]) -> Output {
        assert_cmd::Command::cargo_bin("bench")
            .unwrap()
            .env("AGENT_MEMORY_ADMIN_KEY", &self.key)
            .args(args)
            .output()
            .unwrap()
    }

    /// One sweep of every cache state, both modes, a batch of 2 and the staggered pair, on `api`
    /// with `preset`; returns bench's output and the run directory.
    fn sweep(&self, api: &str, preset: &str, out: &Path) -> (Output, PathBuf) {
        let cache_dir = self.cache_dir();
        let out_text = self.bench(&[
            "sweep",
            "--server",
            &self.url,
            "--api",
            api,
            "--preset",
            preset,
            "--slot-dir",
            cache_dir.to_str().unwrap(),
            "--contexts",
            CONTEXT,
            "--cache-states",
            "cold,warm,hot",
            "--modes",
            "streaming,non-streaming",
            "--batch-sizes",
            "1,2",
            "--staggered",
            "--stagger-context",
            CONTEXT,
            "--stagger-runs",
            "1",
            "--runs",
            "1",
            "--output-tokens",
            "8",
            "--thermal",
            "off",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        let run = run_dir(out);
        (out_text, run)
    }

    /// `bench verify --format json` of a run: its report.
    fn verify(&self, run: &Path) -> Value {
        let out = self.bench(&["verify", "--format", "json", run.to_str().unwrap()]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("verify JSON: {e}: {}", stderr(&out)))
    }
}

impl Drop for AgentMemory {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg("--state-dir")
            .arg(self.state_dir.path())
            .output();
    }
}

/// The tier the server's own listing gave for the session, before or after the request.
fn tier<'a>(evidence: &'a Value, when: &str) -> &'a str {
    evidence[when]["tier"].as_str().unwrap_or_else(|| panic!("no {when} tier in {evidence}"))
}

/// The cache evidence of every measured request of a run: each measurement's, and each staggered
/// user's, with the cache state its cell claims and a label for messages.
fn every_request(run: &Path) -> Vec<(String, String, Value, Value)> {
    let mut out = Vec::new();
    for r in records(run) {
        let state = r["cache_state"].as_str().unwrap().to_string();
        let label = format!("{} {} {} b{}", r["scenario"], state, r["mode"], r["batch_size"]);
        match r["record_type"].as_str().unwrap() {
            "measurement" => out.push((label, state, r.clone(), r["cache_evidence"].clone())),
            "staggered" => {
                for user in ["user_a_cache", "user_b_cache"] {
                    let u = &r[user];
                    out.push((
                        format!("{label} {user}"),
                        state.clone(),
                        u.clone(),
                        u["cache_evidence"].clone(),
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// What every run of the sweep above holds: 6 single requests, 6 batches of 2 with their group
/// records, and the staggered pairs (batched and sequential).
fn check_the_matrix(run: &Path) {
    let recs = records(run);
    let count = |t: &str| recs.iter().filter(|r| r["record_type"] == t).count();
    assert_eq!(count("measurement"), 6 + 12, "3 states x 2 modes, alone and in batches of 2");
    assert_eq!(count("group"), 6, "one group record per batch");
    assert_eq!(count("staggered"), 2, "the batched and the sequential pair");
    for r in &recs {
        assert_eq!(r["error"], Value::Null, "{r}");
        if r["record_type"] != "group" {
            assert_eq!(r["quality_ok"], true, "{r}");
        }
    }
}

/// The verify report of a clean run: no errors (warnings about prompt sizing are expected: the
/// server has no tokenizer endpoint, so prompts are sized by calibration).
fn assert_verify_clean(server: &AgentMemory, run: &Path) {
    let report = server.verify(run);
    assert_eq!(report["summary"]["errors"], 0, "bench verify found errors: {report:#}");
    assert_eq!(report["summary"]["exit_code"], 0, "{report:#}");
}

/// The admin key reaches the server in a header and never a file bench writes nor its output.
fn assert_key_kept_secret(server: &AgentMemory, run: &Path, out: &Output) {
    for entry in std::fs::read_dir(run).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).to_string();
            assert!(!text.contains(&server.key), "the admin key is written in {}", path.display());
        }
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&server.key));
    assert!(!stderr(out).contains(&server.key));
}

#[test]
fn agent_memory_openai_every_state_confirmed_by_the_servers_session_state() {
    let Some(server) = AgentMemory::start("agent_memory_openai") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (out, run) = server.sweep("openai", "agent-memory", dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    check_the_matrix(&run);
    for (label, state, holder, ev) in every_request(&run) {
        assert_eq!(holder["cache_state_confirmed"], true, "{label}: {holder}");
        // The OpenAI API's usage says nothing of a cache: the server's own listing is the evidence.
        assert_eq!(ev["source"], "session_state", "{label}: {ev}");
        assert_eq!(tier(&ev, "session_after"), "in_memory", "{label}: {ev}");
        match state.as_str() {
            "cold" => {
                assert_eq!(tier(&ev, "session_before"), "absent", "{label}: {ev}");
                assert_eq!(ev["cached_tokens"], 0, "{label}: {ev}");
            }
            "warm" => {
                assert_eq!(tier(&ev, "session_before"), "on_disk", "{label}: {ev}");
                assert!(ev["session_before"]["file_bytes"].as_u64().unwrap() > 0, "{label}: {ev}");
            }
            _ => {
                assert_eq!(tier(&ev, "session_before"), "in_memory", "{label}: {ev}");
                // Turns 1 and 2 were in memory: all of turn 3 but its new part.
                let (held, input) = (
                    ev["session_before"]["tokens"].as_u64().unwrap(),
                    holder["input_tokens"].as_u64().unwrap(),
                );
                assert!(held < input && input - held <= 64, "{label}: {held} of {input} tokens held: {ev}");
            }
        }
    }
    for m in records(&run).iter().filter(|r| r["record_type"] == "measurement" && r["cache_state"] == "warm")
    {
        // The evict's file was dropped from the OS page cache, so the reload read the disk.
        assert_eq!(m["page_cache"], "evicted", "{m}");
    }
    assert_verify_clean(&server, &run);
    assert_key_kept_secret(&server, &run, &out);
}

#[test]
fn agent_memory_anthropic_every_state_confirmed_by_usage_and_session_state() {
    let Some(server) = AgentMemory::start("agent_memory_anthropic") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (out, run) = server.sweep("anthropic", "agent-memory", dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    check_the_matrix(&run);
    let nominal: f64 = CONTEXT.parse().unwrap();
    for (label, state, holder, ev) in every_request(&run) {
        assert_eq!(holder["cache_state_confirmed"], true, "{label}: {holder}");
        // Anthropic's usage counts the cache reads; the session listing is kept beside them.
        assert_eq!(ev["source"], "usage.cached_tokens", "{label}: {ev}");
        assert!(ev["session_before"].is_object() && ev["session_after"].is_object(), "{label}: {ev}");
        let input = holder["input_tokens"].as_f64().unwrap();
        let cached = ev["cached_tokens"].as_f64().unwrap();
        if state == "cold" {
            assert_eq!(cached, 0.0, "{label}: {ev}");
            // The server's input_tokens is the whole prompt, not the part after its cache: read as
            // Anthropic's meaning it would count the prompt twice (with cache_creation_input_tokens).
            assert!((input - nominal).abs() <= nominal * 0.05, "{label}: {input} input tokens for {nominal}");
        } else {
            assert!(cached >= 0.9 * input, "{label}: {cached} of {input} from the cache: {ev}");
        }
        let before = tier(&ev, "session_before");
        let expected = match state.as_str() {
            "cold" => "absent",
            "warm" => "on_disk",
            _ => "in_memory",
        };
        assert_eq!(before, expected, "{label}: {ev}");
    }
    assert_verify_clean(&server, &run);
    assert_key_kept_secret(&server, &run, &out);
}

/// A preset whose "evict" evicts nothing: the session stays in memory, and bench must say its warm
/// rows are not warm (the server's listing shows it in memory before the request), however fast
/// they are, and verify must report it.
#[test]
fn agent_memory_a_warm_never_evicted_is_not_confirmed() {
    let Some(server) = AgentMemory::start("agent_memory_no_evict") else { return };
    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../presets/agent-memory.toml")
        .replace("path = \"/v1/agents/{agent}?evict_only=true\"", "path = \"/v1/agents/stats\"")
        .replace(
            "method = \"DELETE\"\npath = \"/v1/agents/stats\"",
            "method = \"GET\"\npath = \"/v1/agents/stats\"",
        );
    assert!(text.contains("method = \"GET\"\npath = \"/v1/agents/stats\"\nscope = \"session\""), "{text}");
    let preset = dir.path().join("no-evict.toml");
    std::fs::write(&preset, text).unwrap();
    let out_dir = dir.path().join("out");
    let out = server.bench(&[
        "sweep",
        "--server",
        &server.url,
        "--preset",
        preset.to_str().unwrap(),
        "--contexts",
        CONTEXT,
        "--cache-states",
        "warm",
        "--modes",
        "streaming",
        "--runs",
        "1",
        "--output-tokens",
        "8",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    // Exit 1: the sweep measured, and found rows that fail the gate.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = run_dir(&out_dir);
    let ms: Vec<Value> = records(&run).into_iter().filter(|r| r["record_type"] == "measurement").collect();
    assert_eq!(ms.len(), 1);
    let m = &ms[0];
    assert_eq!(m["cache_state_confirmed"], false, "{m}");
    assert_eq!(tier(&m["cache_evidence"], "session_before"), "in_memory", "{m}");
    assert_eq!(m["quality_ok"], false, "{m}");
    assert!(
        m["quality_flags"].as_array().unwrap().iter().any(|f| f["flag"] == "cache_state_unconfirmed"),
        "{m}"
    );
    let report = server.verify(&run);
    let findings = report["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["rule"] == "cache_state_unconfirmed" && f["severity"] == "error"),
        "{report:#}"
    );
}

/// Without `--preset`, bench finds agent-memory by its own cache statistics endpoint and drives it
/// with its preset: cold and hot confirmed by the server's session state.
#[test]
fn agent_memory_is_detected_without_a_preset() {
    let Some(server) = AgentMemory::start("agent_memory_detected") else { return };
    let out = tempfile::tempdir().unwrap();
    let done = server.bench(&[
        "sweep",
        "--server",
        &server.url,
        "--contexts",
        CONTEXT,
        "--cache-states",
        "cold,hot",
        "--runs",
        "1",
        "--output-tokens",
        "8",
        "--thermal",
        "off",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(done.status.success(), "{}", stderr(&done));
    assert!(stderr(&done).contains("server detected: preset agent-memory"), "{}", stderr(&done));
    let run = run_dir(out.path());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["server"]["preset"], "agent-memory");
    assert!(meta["server"]["preset_detected"].as_str().unwrap_or_default().contains("/v1/agents/stats"));
    for m in measurements(&run) {
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
    }
}
