//! End to end against the REAL llama.cpp llama-server (built by scripts/llama-server.sh, with the
//! project's generated model). Skipped with a message when it is not built locally; never skipped
//! in CI (TTFT_BENCH_REQUIRE_LLAMA=1).

use crate::common;

use common::llama::LlamaServer;
use common::{bench, measurements, records, run_dir, stderr};
use serde_json::Value;

/// This machine class's measured ceilings (scripts/host_profile.py on the 2-core CI machine:
/// 26-32 GB/s multi-threaded read, 166 GFLOP/s f32 GEMM). Ceilings are upper bounds, so a busy
/// machine can only sit further below them.
const HOST: [&str; 4] = ["--bandwidth-gbps", "32", "--tflops", "0.17"];

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// The project's one median (an even count averages the middle two).
fn median(v: Vec<f64>) -> f64 {
    ttft_model::stats::median(&v).expect("at least one value")
}

#[test]
fn cold_sweep_sizes_prompts_exactly_and_verifies_clean() {
    let Some(server) = LlamaServer::start("cold_sweep", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "sweep",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--contexts",
        "512..2048",
        "--modes",
        "streaming,non-streaming",
        "--runs",
        "2",
        "--output-tokens",
        "32",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ];
    args.extend_from_slice(&HOST);
    let out = bench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let ms = measurements(&run);
    assert_eq!(ms.len(), 12);
    for m in &ms {
        let nominal = f(m, "context_tokens");
        let input = f(m, "input_tokens");
        assert!((input - nominal).abs() <= nominal * 0.01, "input {input} vs nominal {nominal}: {m}");
        assert_eq!(m["output_tokens"], 32, "max_tokens honoured");
        assert_eq!(m["quality_ok"], true, "{m}");
        assert_eq!(m["cache_state_confirmed"], true, "cold must show nothing cached: {m}");
        assert_eq!(m["cache_evidence"]["source"], "timings");
        let physics = &m["physics"];
        assert!(f(physics, "decode_ceiling_tps") > 0.0, "{m}");
        if m["mode"] == "streaming" {
            assert!(f(m, "ttft_ms") > 0.0 && f(m, "ttft_ms") <= f(m, "e2e_ms"));
            assert!(f(m, "first_event_ms") <= f(m, "ttft_ms"));
            assert_eq!(m["delta_count"], 32, "llama.cpp sends one token per chunk");
            assert!(f(physics, "decode_fraction") < 1.0 && f(physics, "prefill_fraction") < 1.0, "{m}");
        } else {
            assert!(m["ttft_ms"].is_null());
        }
    }
    // Records validate against the published schema.
    let validator = common::schema_validator();
    for r in records(&run) {
        assert!(validator.is_valid(&r), "{r}");
    }
    // run.json: what the server said about itself, and the host.
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "complete");
    assert!(meta["server"]["props"]["build_info"].is_string());
    assert!(meta["server"]["props"]["default_generation_settings"]["n_ctx"].as_u64().unwrap() >= 2048);
    assert_eq!(meta["server"]["props"]["total_slots"], 2);
    assert!(meta["host"]["cpu_cores_logical"].as_u64().unwrap() >= 1);
    assert!(meta["config"]["physics"]["model_file"].as_str().unwrap().ends_with(".gguf"));
    assert!(meta["harness"]["git_sha"].is_string());

    // The same run, verified with this machine's figures: nothing flagged.
    let out = bench(&["verify", run.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["summary"]["errors"], 0, "{report}");
    assert_eq!(report["summary"]["warnings"], 0, "{report}");
    assert!(report["physics"][0]["hardware"]["bandwidth_gbps"].as_f64().is_some(), "run.json physics used");
}

#[test]
fn warm_and_hot_beat_cold_with_confirmed_cache_states() {
    let Some(server) = LlamaServer::start("cache_states", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--contexts",
        "4096",
        "--modes",
        "streaming",
        "--cache-states",
        "cold,warm,hot",
        "--runs",
        "3",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    let ttft = |state: &str| {
        median(ms.iter().filter(|m| m["cache_state"] == state).map(|m| f(m, "ttft_ms")).collect())
    };
    let (cold, warm, hot) = (ttft("cold"), ttft("warm"), ttft("hot"));
    eprintln!("median TTFT at 4K: cold {cold:.1} ms, warm {warm:.1} ms (restore inside), hot {hot:.1} ms");
    assert!(warm < cold / 3.0, "warm {warm} vs cold {cold}");
    assert!(hot < cold / 3.0, "hot {hot} vs cold {cold}");
    for m in &ms {
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
        if m["cache_state"] == "warm" {
            assert!(
                f(m, "reload_ms") > 0.0 && f(m, "reload_ms") < f(m, "ttft_ms"),
                "reload inside TTFT: {m}"
            );
            assert!(f(&m["cache_evidence"], "prompt_evaluated_tokens") <= 2.0, "{m}");
        }
        // The server's own counters (/metrics, started with --metrics) tell the same story as
        // the response's timings: cold computed its whole prompt, warm almost nothing.
        let computed = f(&m["server_metrics"], "computed_tokens");
        let input = f(m, "input_tokens");
        match m["cache_state"].as_str() {
            Some("cold") => assert!(computed >= input * 0.99, "cold computed {computed} of {input}: {m}"),
            Some("warm") => assert!(computed <= 2.0, "warm computed {computed}: {m}"),
            _ => assert!(computed < input * 0.1, "hot computed {computed} of {input}: {m}"),
        }
    }
    // Hot vs warm is not asserted: here a 16 MB slot file restores from the page cache in ~8 ms,
    // while hot's turn 3 must prefill its new tokens; verify explains it (hot_slower_explained).

    // A broken warm: evicted but never restored -> the server re-prefills and the row says so.
    let preset = dir.path().join("broken.toml");
    std::fs::write(
        &preset,
        "name = \"llama.cpp-no-restore\"\n[request]\nbody = { id_slot = \"{slot}\", cache_prompt = true }\n\
         [[reset]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=erase\"\n\
         [[evict]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=erase\"\n",
    )
    .unwrap();
    let broken = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--preset",
        preset.to_str().unwrap(),
        "--contexts",
        "1024",
        "--cache-states",
        "warm",
        "--runs",
        "1",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        broken.path().to_str().unwrap(),
    ]);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", stderr(&out));
    let m = &measurements(&run_dir(broken.path()))[0];
    assert_eq!(m["cache_state_confirmed"], false, "{m}");
    let out = bench(&["verify", run_dir(broken.path()).to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "verify fails an unconfirmed warm row");
    assert!(String::from_utf8_lossy(&out.stdout).contains("cache_state_unconfirmed"));
}

/// A warm sweep of `extra` on the real server, into `out`: its measurements and run.json.
fn warm_sweep(connect: &[&str], out: &std::path::Path, extra: &[&str]) -> (Vec<Value>, Value) {
    let mut args = vec!["sweep"];
    args.extend_from_slice(connect);
    args.extend_from_slice(&[
        "--preset",
        "llama.cpp",
        "--contexts",
        "1024",
        "--cache-states",
        "warm",
        "--runs",
        "2",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    args.extend_from_slice(extra);
    let done = bench(&args);
    let run = run_dir(out);
    let records = std::fs::read_to_string(run.join("measurements.jsonl")).unwrap_or_default();
    assert!(done.status.success(), "{}\nrecords:\n{records}", stderr(&done));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    (measurements(&run), meta)
}

/// verify's text on the one run under `out`.
fn verify_text(out: &std::path::Path) -> String {
    let done = bench(&["verify", run_dir(out).to_str().unwrap()]);
    String::from_utf8_lossy(&done.stdout).to_string()
}

#[test]
fn warm_says_whether_its_restore_read_the_disk_or_maybe_the_page_cache() {
    let Some(server) = LlamaServer::start("page_cache", &[]) else { return };
    let slots = server.slot_dir();
    let slots_arg = slots.to_str().unwrap();
    let connect = ["--server", server.url.as_str()];

    // The save directory given: each saved session is dropped from the page cache before its restore.
    let known = tempfile::tempdir().unwrap();
    let (ms, meta) = warm_sweep(&connect, known.path(), &["--slot-dir", slots_arg]);
    assert_eq!(ms.len(), 2);
    for m in &ms {
        assert_eq!(m["page_cache"], "evicted", "{m}");
        assert_eq!(m["cache_state_confirmed"], true, "still restored, from disk: {m}");
    }
    assert_eq!(meta["config"]["page_cache"], "evicted", "{}", meta["config"]);
    assert_eq!(meta["config"]["slot_dir"], slots_arg, "{}", meta["config"]);
    assert!(!verify_text(known.path()).contains("warm_page_cache_unknown"));

    // Without it bench cannot reach the file: unknown, and verify counts those records per run.
    let unknown = tempfile::tempdir().unwrap();
    let (ms, meta) = warm_sweep(&connect, unknown.path(), &[]);
    for m in &ms {
        assert_eq!(m["page_cache"], "unknown", "{m}");
    }
    assert_eq!(meta["config"]["page_cache"], "unknown");
    let text = verify_text(unknown.path());
    assert!(text.contains("warm_page_cache_unknown") && text.contains("2 of 2 warm records"), "{text}");

    // A server bench starts itself with --slot-save-path: found in the command, fresh sessions too.
    let Some(command) = common::llama::server_command("page_cache") else { return };
    let saves = tempfile::tempdir().unwrap();
    let command = format!("{command} --slot-save-path {}", saves.path().display());
    let own = tempfile::tempdir().unwrap();
    let (ms, meta) = warm_sweep(&["--server-cmd", &command], own.path(), &["--reuse-primes", "false"]);
    for m in &ms {
        assert_eq!(m["page_cache"], "evicted", "{m}");
    }
    assert_eq!(meta["config"]["slot_dir"], saves.path().to_str().unwrap());
}

#[test]
fn concurrent_and_staggered_on_the_real_server() {
    let Some(server) = LlamaServer::start("concurrent", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--contexts",
        "1024",
        "--batch-sizes",
        "2",
        "--runs",
        "1",
        "--output-tokens",
        "32",
        "--thermal",
        "off",
        "--quiet",
        "--staggered",
        "--stagger-context",
        "2048",
        "--stagger-runs",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let recs = records(&run_dir(dir.path()));
    let group = recs.iter().find(|r| r["record_type"] == "group").unwrap();
    assert_eq!(group["requests_ok"], 2);
    assert_eq!(group["total_output_tokens"], 64);
    assert!(f(&group["server_metrics"], "computed_tokens") >= 2.0 * 1024.0 * 0.99, "{group}");
    let batched = recs.iter().find(|r| r["scenario"] == "staggered_batched").unwrap();
    let sequential = recs.iter().find(|r| r["scenario"] == "staggered_sequential").unwrap();
    // The default delay is half of A's own duration, calibrated first, so B arrives while A runs;
    // whether it did is recorded (not asserted: on a shared machine A's duration varies).
    let delay = f(batched, "stagger_delay_ms");
    assert!(f(batched, "user_b_arrival_ms") >= delay);
    // The overlap's arithmetic is held to literals in quality's and runner::batch's unit tests;
    // here, what it must mean on a real server: B overlapped A for some time only if the pair is
    // called overlapped, and never longer than A ran after B was sent.
    let overlap_ms = f(batched, "overlap_ms");
    assert_eq!(batched["overlapped"], overlap_ms > 0.0, "{batched}");
    // Give or take the microsecond each of the three recorded times is rounded to.
    assert!(overlap_ms <= f(batched, "user_a_e2e_ms") - delay + 0.002, "{batched}");
    assert!(f(sequential, "user_b_arrival_ms") >= f(sequential, "user_a_e2e_ms"));
    assert_eq!(sequential["overlapped"], false, "{sequential}");
    assert_eq!(batched["quality_ok"], true, "{batched}");
}
