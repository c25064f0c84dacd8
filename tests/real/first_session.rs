//! A new user's first session, against the REAL llama-server, as the README writes it: no
//! `--preset` (bench detects llama.cpp from its /props and drives its slots), a gateway's header
//! on every call, and warm sessions that leave no slot file on the server's disk.

use crate::common;

use common::llama::LlamaServer;
use common::{bench, measurements, run_dir, run_json, stderr};
use serde_json::Value;

/// `bench sweep` of `plan` against `target` (`--server URL` or `--server-cmd CMD`) into `out`, the
/// thermal gate off.
fn sweep(target: &[&str], plan: &[&str], out: &std::path::Path) -> std::process::Output {
    let mut args = vec!["sweep"];
    args.extend_from_slice(target);
    args.extend_from_slice(plan);
    args.extend(["--thermal", "off", "--out", out.to_str().unwrap()]);
    bench(&args)
}

/// The README's first sweep (its flags, smaller contexts for a CPU), then report and verify of it.
#[test]
fn the_readmes_first_sweep_runs_green_on_llama_cpp_without_a_preset() {
    let Some(server) = LlamaServer::start("first_sweep", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &["--server", &server.url],
        &[
            "--contexts",
            "512,1024",
            "--modes",
            "streaming,non-streaming",
            "--cache-states",
            "cold,warm,hot",
            "--runs",
            "2",
            "--output-tokens",
            "32",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("server detected: preset llama.cpp"), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta = run_json(&run);
    assert_eq!(meta["server"]["preset"], "llama.cpp");
    assert_eq!(meta["config"]["preset"], "llama.cpp");
    let why = meta["server"]["preset_detected"].as_str().unwrap_or_default();
    assert!(why.contains("/props") && why.contains("total_slots"), "{why}");
    let ms = measurements(&run);
    assert_eq!(ms.len(), 24);
    for m in &ms {
        assert_eq!(m["quality_ok"], true, "{m}");
        assert_eq!(m["cache_state_confirmed"], true, "every state proven by the server's timings: {m}");
        assert_eq!(m["cache_evidence"]["source"], "timings", "{m}");
    }
    for verb in ["report", "verify"] {
        let out = bench(&[verb, run.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "bench {verb}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
    }
}

/// The slot files of warm sessions: each measured warm row says how many bytes the server saved
/// and that the restore read the disk; after the sweep the save directory holds none of them.
#[test]
fn warm_sessions_leave_no_slot_file_on_the_servers_disk() {
    let Some(server) = LlamaServer::start("slot_files", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let slots = server.slot_dir();
    let out = sweep(
        &["--server", &server.url],
        &[
            "--slot-dir",
            slots.to_str().unwrap(),
            "--contexts",
            "512,1024",
            "--cache-states",
            "warm",
            "--batch-sizes",
            "1,2",
            "--runs",
            "2",
            "--output-tokens",
            "16",
            "--quiet",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    assert!(ms.len() >= 8, "{}", ms.len());
    for m in &ms {
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
        assert_eq!(m["page_cache"], "evicted", "{m}");
        let bytes = m["saved_bytes"].as_u64().unwrap_or(0);
        // A saved session holds at least its prompt's K and V (the tiny model: 4 layers, 256 wide).
        assert!(bytes > m["input_tokens"].as_u64().unwrap_or(0) * 1000, "{bytes} bytes: {m}");
    }
    let left: Vec<_> = std::fs::read_dir(&slots).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "slot files left on the server's disk: {left:?}");
    // Without --slot-dir the file is out of reach: the size is what the server's save answered
    // (n_written), the same per token as the file's, and the restore may have read memory.
    let blind = tempfile::tempdir().unwrap();
    let out = sweep(
        &["--server", &server.url],
        &["--contexts", "1024", "--cache-states", "warm", "--runs", "2", "--output-tokens", "16", "--quiet"],
        blind.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let per_token =
        |m: &Value| m["saved_bytes"].as_f64().unwrap_or(0.0) / m["input_tokens"].as_f64().unwrap_or(1.0);
    let seen =
        ms.iter().find(|m| m["context_tokens"] == 1024 && m["batch_size"] == 1).map(per_token).unwrap();
    for m in measurements(&run_dir(blind.path())) {
        assert_eq!(m["page_cache"], "unknown", "{m}");
        let said = per_token(&m);
        assert!((said - seen).abs() <= 0.05 * seen, "n_written {said} a token vs the file's {seen}: {m}");
    }
}

/// A sweep interrupted while a saved session waits for its measurement still removes it.
#[test]
fn an_interrupted_sweep_removes_the_slot_files_it_saved() {
    let Some(server) = LlamaServer::start("slot_files_interrupt", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let slots = server.slot_dir();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args([
            "sweep",
            "--server",
            &server.url,
            "--slot-dir",
            slots.to_str().unwrap(),
            "--contexts",
            "2048",
            "--cache-states",
            "warm",
            "--runs",
            "50",
            "--output-tokens",
            "16",
            "--thermal",
            "off",
            "--quiet",
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a session is saved (a file appears in the save directory), then interrupt.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let saved = loop {
        let n = std::fs::read_dir(&slots).map(|d| d.count()).unwrap_or(0);
        if n > 0 || std::time::Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(saved > 0, "no session was ever saved");
    // SAFETY: plain FFI call on a child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let left: Vec<_> = std::fs::read_dir(&slots).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "slot files left after the interrupt: {left:?}");
}

/// A server behind a gateway: every call, not only the measured ones, carries the user's header.
/// llama-server started with --api-key refuses /props, /tokenize, /metrics and /slots without it.
#[test]
fn a_server_that_wants_a_key_on_every_call_is_measured_with_header() {
    let key = "gw-key-5e1d7a";
    let Some(server) = LlamaServer::start("header_everywhere", &["--api-key", key]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let auth = format!("Authorization: Bearer {key}");
    let out = sweep(
        &["--server", &server.url],
        &[
            "--header",
            &auth,
            "--contexts",
            "512",
            "--cache-states",
            "cold,warm,hot",
            "--runs",
            "1",
            "--output-tokens",
            "16",
        ],
        dir.path(),
    );
    // Measured (0, or 1 where a quality flag such as a burst of a loaded machine fails a row):
    // without the key on every call, preflight or sizing fails (2, 3) and nothing is measured.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    assert_eq!(run_json(&run)["server"]["preset"], "llama.cpp", "detected through the key");
    let ms = measurements(&run);
    assert_eq!(ms.len(), 3);
    for m in ms {
        assert!(m["error"].is_null(), "every call of the cell carried the key: {m}");
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
    }
    let mut written = stderr(&out);
    for entry in std::fs::read_dir(&run).unwrap() {
        written += &String::from_utf8_lossy(&std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(!written.contains(key), "the key was written out");
}

/// The README's load lines without `--preset`: detected as llama.cpp, every arrival answered and
/// its cache state confirmed (before detection, 97 of 97 cold arrivals were unconfirmed: the
/// chat template's first tokens are cached across requests unless the slot is erased).
#[test]
fn a_load_without_a_preset_is_driven_as_llama_cpp_and_every_arrival_is_confirmed() {
    let Some(server) = LlamaServer::start("first_load", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "load",
        "--server",
        &server.url,
        "--rates",
        "0.5,1",
        "--duration",
        "6s",
        "--mix",
        "cold=0.5,hot=0.5",
        "--contexts",
        "512",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    assert_eq!(run_json(&run)["server"]["preset"], "llama.cpp");
    let ms = measurements(&run);
    assert!(ms.len() >= 5, "{} arrivals", ms.len());
    for m in &ms {
        assert!(m["error"].is_null(), "{m}");
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
    }
}

/// llama-server started without --slot-save-path refuses every slot action, the erase included:
/// detected as llama.cpp, it is measured with the plain preset, and run.json and stderr say why.
#[test]
fn a_llama_server_without_a_slot_save_path_is_measured_with_the_plain_preset_and_says_why() {
    let Some(cmd) = common::llama::server_command("no_slot_save_path") else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &["--server-cmd", &cmd],
        &["--contexts", "512", "--cache-states", "cold,warm", "--runs", "1", "--output-tokens", "32"],
        dir.path(),
    );
    // Warm unsupported (and a cold the template's shared first tokens may contradict) are findings.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    assert!(stderr(&out).contains("--slot-save-path"), "the server's own words: {}", stderr(&out));
    let run = run_dir(dir.path());
    let meta = run_json(&run);
    assert_eq!(meta["server"]["preset"], "openai");
    assert_eq!(meta["config"]["preset"], "openai", "a resumed run drives the same");
    let why = meta["server"]["preset_detected"].as_str().unwrap_or_default();
    assert!(why.contains("/props") && why.contains("refused the llama.cpp preset"), "{why}");
    let ms = measurements(&run);
    assert_eq!(ms.len(), 2);
    assert!(ms[0]["error"].is_null(), "{}", ms[0]);
    assert_eq!(ms[1]["error"]["kind"], "unsupported", "{}", ms[1]);
}

/// `bench plan` says what the warm cells will save on the server's disk, from the served model's
/// KV size: the peak where bench removes each session (it reaches the directory), all of it where
/// it cannot.
#[test]
fn plan_says_the_disk_the_warm_cells_will_use() {
    let Some(server) = LlamaServer::start("plan_warm_disk", &[]) else { return };
    let slots = server.slot_dir();
    let plan = |extra: &[&str]| {
        let mut args =
            vec!["plan", "--server", &server.url, "--cache-states", "cold,warm", "--contexts", "1k,4k"];
        args.extend_from_slice(extra);
        let out = bench(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let table = String::from_utf8_lossy(&plan(&["--slot-dir", slots.to_str().unwrap()]).stdout).to_string();
    assert!(table.contains("warm: 6 cells save up to") && table.contains("each session removed"), "{table}");
    let json: Value = serde_json::from_slice(&plan(&["--format", "json"]).stdout).unwrap();
    let disk = &json["warm_disk"];
    assert_eq!(disk["reachable"], false, "{disk}");
    assert_eq!(disk["warm_cells"], 6, "{disk}");
    // 3 runs of 1K and 4K (each with its 64 output tokens): the total is the sum, the peak one 4K session.
    let (peak, total) = (disk["peak_bytes"].as_f64().unwrap(), disk["total_bytes"].as_f64().unwrap());
    assert!((total - 3.0 * peak * (1024.0 + 64.0 + 4096.0 + 64.0) / (4096.0 + 64.0)).abs() < 1.0, "{disk}");
}
