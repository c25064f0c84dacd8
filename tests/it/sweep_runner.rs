//! The sweep as a whole against the scripted server: what is found before anything is measured,
//! what `--resume` accepts, how a wedged or silent server and a signal end a run, the run lock,
//! and batches under presets whose reset acts on the whole server.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory;
use common::scripted::{Behaviour, Fault, Logged, Scripted};
use common::{bench, measurements, records, run_dir, stderr};
use serde_json::Value;

/// A one-cell sweep's flags; `extra` replaces the defaults of the same name.
fn sweep_args<'a>(url: &'a str, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["sweep", "--server", url, "--out", out.to_str().unwrap(), "--quiet"];
    for (flag, value) in
        [("--thermal", "off"), ("--contexts", "256"), ("--runs", "1"), ("--output-tokens", "24")]
    {
        if !extra.contains(&flag) {
            all.extend([flag, value]);
        }
    }
    all.extend_from_slice(extra);
    all
}

fn sweep(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    bench(&sweep_args(url, out, extra))
}

fn spawn(args: &[&str]) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child to exit (bounded: a hang is a test failure, not a stuck CI run).
fn wait(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code(), err);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("bench did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

/// A server that accepts connections and never answers.
fn silent_server() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Waits until a client connects to `listener` (bounded: a hang is a test failure). The
/// connection is kept open and never answered, as the silent server's are.
fn wait_for_connection(listener: &std::net::TcpListener, limit: Duration) -> std::net::TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < limit, "bench never connected");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

fn wait_for(path: &Path, limit: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn chats(log: &[Logged]) -> usize {
    log.iter().filter(|l| l.path == "/v1/chat/completions").count()
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

#[test]
fn a_preset_missing_its_environment_stops_before_anything_is_sent() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .env_remove("AGENT_MEMORY_ADMIN_KEY")
        .args(sweep_args(&server.url, dir.path(), &["--preset", "agent-memory"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("AGENT_MEMORY_ADMIN_KEY"), "{}", stderr(&out));
    assert!(server.log().is_empty(), "nothing may reach the server");
    assert_eq!(entries(dir.path()), 0, "a run that measured nothing leaves nothing behind");
}

#[test]
fn a_llama_cpp_server_without_slot_save_path_stops_in_preflight() {
    let server = Scripted::start(Behaviour { no_slot_save_path: true, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--preset", "llama.cpp", "--cache-states", "cold,warm"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--slot-save-path"), "the server's own words: {}", stderr(&out));
    let measured = server.log().iter().filter(|l| l.body["max_tokens"] == 24).count();
    assert_eq!(measured, 0, "no cell was measured");
    assert_eq!(entries(dir.path()), 0);
}

#[test]
fn a_server_that_can_count_no_tokens_stops_in_preflight() {
    let server = Scripted::start(Behaviour { tokenizer: false, usage: false, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("/tokenize") && err.contains("usage"), "{err}");
}

#[test]
fn a_wedged_server_stops_the_sweep_after_three_silent_cells() {
    let server = Scripted::start(Behaviour { fault: Fault::Hang, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out =
        sweep(&server.url, dir.path(), &["--request-timeout", "1s", "--contexts", "256,512", "--runs", "3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("wedged") && err.contains("--resume"), "{err}");
    let run = run_dir(dir.path());
    let ms = measurements(&run);
    assert_eq!(ms.len(), 3, "three cells of the six, then the stop");
    assert!(ms.iter().all(|m| m["error"]["kind"] == "timeout"));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "interrupted");
}

#[test]
fn sigterm_before_the_first_cell_exits_130_with_a_message() {
    let (listener, url) = silent_server();
    let dir = tempfile::tempdir().unwrap();
    let child = spawn(&sweep_args(&url, dir.path(), &[]));
    // Signalled once bench has connected (so it is past start-up and waiting in preflight, its
    // handler installed), not after a fixed sleep that a loaded machine's start-up can outlast.
    let _held = wait_for_connection(&listener, Duration::from_secs(60));
    signal(&child, "TERM");
    let (code, err) = wait(child, Duration::from_secs(60));
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
}

#[test]
fn a_run_directory_is_locked_and_a_run_killed_before_its_first_record_resumes() {
    let (_listener, silent) = silent_server();
    let dir = tempfile::tempdir().unwrap();
    let first = spawn(&sweep_args(&silent, dir.path(), &["--run-id", "locked"]));
    let run = dir.path().join("locked");
    wait_for(&run.join("run.json"), Duration::from_secs(60));

    let second = bench(&["sweep", "--resume", run.to_str().unwrap(), "--quiet"]);
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(stderr(&second).contains("in use"), "{}", stderr(&second));

    // kill -9 while the first waits in preflight: run.json is there, no record yet.
    signal(&first, "KILL");
    wait(first, Duration::from_secs(60));
    assert_eq!(std::fs::read_to_string(run.join("measurements.jsonl")).unwrap_or_default(), "");
    let server = Scripted::start(Behaviour::default());
    let resumed = bench(&["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url, "--quiet"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(measurements(&run).len(), 1);
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["resumed_at"][0]["changed"]["server"], server.url.as_str());
}

/// A sample value for every sweep flag; a flag without one fails the test below, so a new flag
/// cannot slip past the resume policy unreviewed.
fn sample(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "quiet" | "staggered" | "insecure" | "reuse-primes" => "",
        // Written or not from a run's start (run.json config.request_bodies): refused.
        "request-bodies" => "",
        // Replaced by a real PEM file: a CA the resumed run then trusts.
        "ca-cert" => "CA_PEM",
        "server" => "http://127.0.0.1:9",
        "api-key-env" => "TTFT_BENCH_TEST_KEY",
        "request-timeout" => "30s",
        "model" | "preset" => "x",
        "api" => "anthropic",
        "contexts" | "concurrent-max-context" | "stagger-context" => "512",
        "modes" => "non-streaming",
        "cache-states" => "hot",
        "batch-sizes" | "runs" | "output-tokens" | "stagger-runs" | "seed" => "2",
        "stagger-delay" => "1s",
        "thermal" => "off",
        "tolerance" => "0.1",
        "min-cooldown" | "max-cooldown" => "5s",
        "hardware" => "h200",
        "bandwidth-gbps" | "tflops" => "100",
        "model-bytes" => "1GB",
        "params" => "1B",
        "model-file" | "scenario" | "out" => "x.toml",
        // Where warm restores are dropped from the page cache: part of what is measured.
        "slot-dir" => "slots",
        "run-id" => "other",
        // What is measured: the prompts, their sample, and the conversation's length and pauses.
        "dataset" => "prompts.txt",
        "dataset-limit" => "2",
        // How the rows are read and what each asks for: fixed with the run.
        "dataset-strict" | "dataset-output-tokens" => "",
        "turns" => "5",
        "think-time" => "1s",
        // The shard is part of the plan: a resumed shard finishes the slice in its run.json.
        "shard" => "1/2",
        "shard-count" => "2",
        "max-restarts" => "1",
        "server-start-timeout" => "20s",
        // A server that exits at once: the resume applies it and stops on it.
        "server-cmd" => "exit 7 # {port}",
        // A request header says how to reach the server (a proxy's routing, a credential).
        "header" => "X-Trace: resumed",
        "extra-body" => r#"{"top_k": 1}"#,
        "temperature" => "0.5",
        "warmup" | "min-runs" | "max-runs" => "2",
        "target-ci" => "5%",
        _ => return None,
    })
}

#[test]
fn every_sweep_flag_either_applies_on_resume_or_is_refused() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let applies = [
        "server",
        "server-cmd",
        "server-start-timeout",
        "max-restarts",
        "api-key-env",
        "request-timeout",
        "ca-cert",
        "insecure",
        "quiet",
        "header",
    ];
    let ca_pem = dir.path().join("ca.pem");
    std::fs::write(&ca_pem, Scripted::start_tls(Behaviour::default()).ca_pem.unwrap()).unwrap();
    let cli = ttft_bench::command::Cli::command();
    let sweep_cmd = cli.find_subcommand("sweep").unwrap();
    for arg in sweep_cmd.get_arguments() {
        let Some(flag) = arg.get_long() else { continue };
        if matches!(flag, "resume" | "help" | "version") {
            continue;
        }
        let value =
            sample(flag).unwrap_or_else(|| panic!("--{flag} has no sample value: add one and decide"));
        let value = if value == "CA_PEM" { ca_pem.to_str().unwrap() } else { value };
        let dashed = format!("--{flag}");
        let mut argv = vec!["sweep", "--resume", run.to_str().unwrap(), dashed.as_str()];
        if !value.is_empty() {
            argv.push(value);
        }
        if flag != "server" && flag != "server-cmd" {
            argv.extend(["--server", &server.url]);
        }
        let out = assert_cmd::Command::cargo_bin("bench")
            .unwrap()
            .env("TTFT_BENCH_TEST_KEY", "k-0123456789")
            .args(&argv)
            .output()
            .unwrap();
        if applies.contains(&flag) {
            if flag == "server" || flag == "server-cmd" {
                assert_eq!(
                    out.status.code(),
                    Some(3),
                    "--{flag} applies (and no server answers): {}",
                    stderr(&out)
                );
            } else {
                assert!(out.status.success(), "--{flag}: {}", stderr(&out));
            }
        } else {
            assert_eq!(out.status.code(), Some(2), "--{flag} must be refused on resume: {}", stderr(&out));
            assert!(stderr(&out).contains(&dashed), "--{flag}: {}", stderr(&out));
        }
    }
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let changes: Vec<&Value> = meta["resumed_at"].as_array().unwrap().iter().map(|r| &r["changed"]).collect();
    assert!(changes.iter().any(|c| c["request_timeout_s"] == "30"), "{changes:?}");
    assert!(changes.iter().any(|c| c["api_key_env"] == "TTFT_BENCH_TEST_KEY"), "{changes:?}");
    assert!(!std::fs::read_to_string(run.join("run.json")).unwrap().contains("k-0123456789"));
}

/// The cache calls of a sweep, in order, session ids replaced by s0, s1, ... in order of appearance.
fn cache_calls(log: &[Logged]) -> Vec<String> {
    let mut sessions: Vec<String> = Vec::new();
    let mut name = |sid: &str| {
        if !sessions.iter().any(|s| s == sid) {
            sessions.push(sid.to_string());
        }
        format!("s{}", sessions.iter().position(|s| s == sid).unwrap_or(0))
    };
    log.iter()
        .filter(|l| l.path != "/tokenize" && l.path != "/v1/models" && l.path != "/props")
        .map(|l| {
            let sid = l.headers.get("x-session-id").cloned();
            if l.path == "/v1/chat/completions" {
                format!("chat {} {}", sid.map_or("-".into(), |s| name(&s)), l.body["max_tokens"])
            } else if let Some(rest) = l.path.strip_prefix("/v1/agents/oai_") {
                let (sid, query) = rest.split_once('?').unwrap_or((rest, ""));
                format!("{} agent {} {query}", l.method, name(sid))
            } else {
                format!("{} {}", l.method, l.path)
            }
        })
        .collect()
}

#[test]
fn a_warm_batch_under_a_global_reset_is_reset_once_and_every_request_is_confirmed() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .env("AGENT_MEMORY_ADMIN_KEY", "admin-key-0f9e")
        .args(sweep_args(
            &server.url,
            dir.path(),
            &["--preset", "agent-memory", "--cache-states", "warm", "--batch-sizes", "2"],
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let log = server.log();
    let cell = log.iter().rposition(|l| l.path == "/admin/caches").unwrap();
    let calls = cache_calls(&log[cell..]);
    // One global reset before any session is primed; then each session primed and evicted; then
    // the sessions' tiers listed once, after every preparation; then both measured together; then
    // each one's tier listed again and the session cleaned up.
    let expected = [
        "DELETE /admin/caches",
        "chat s0 24",
        "DELETE agent s0 evict_only=true",
        "chat s1 24",
        "DELETE agent s1 evict_only=true",
        "GET /v1/agents/list",
        "chat s0 24",
        "chat s1 24",
        "GET /v1/agents/list",
        "DELETE agent s0 ",
        "GET /v1/agents/stats",
        "GET /v1/agents/list",
        "DELETE agent s1 ",
        "GET /v1/agents/stats",
    ];
    let mut measured = calls[6..8].to_vec();
    measured.sort();
    assert_eq!(measured, ["chat s0 24", "chat s1 24"], "released together, in any order");
    assert_eq!(calls[..6], expected[..6], "{calls:#?}");
    assert_eq!(calls[8..], expected[8..], "{calls:#?}");
    for m in measurements(&run_dir(dir.path())) {
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
        assert_eq!(m["quality_ok"], true, "{m}");
        // Both sessions on disk before the release and loaded after: the server's own word.
        assert_eq!(m["cache_evidence"]["session_before"]["tier"], "on_disk", "{m}");
        assert_eq!(m["cache_evidence"]["session_after"]["tier"], "in_memory", "{m}");
    }
}

#[test]
fn hot_batches_are_confirmed_for_every_preset() {
    for preset in ["llama.cpp", "vllm", "sglang", "agent-memory"] {
        let server = Scripted::start(Behaviour::default());
        let dir = tempfile::tempdir().unwrap();
        let out = assert_cmd::Command::cargo_bin("bench")
            .unwrap()
            .env("AGENT_MEMORY_ADMIN_KEY", "admin-key-0f9e")
            .args(sweep_args(
                &server.url,
                dir.path(),
                &["--preset", preset, "--cache-states", "cold,hot", "--batch-sizes", "2"],
            ))
            .output()
            .unwrap();
        let recs = records(&run_dir(dir.path()));
        assert!(out.status.success(), "{preset}: {:?} {} {recs:#?}", out.status, stderr(&out));
        let ms: Vec<&Value> = recs.iter().filter(|r| r["record_type"] == "measurement").collect();
        assert_eq!(ms.len(), 4, "{preset}");
        for m in ms {
            assert_eq!(m["cache_state_confirmed"], true, "{preset}: {m}");
        }
    }
}

#[test]
fn a_warm_batch_with_a_global_eviction_is_unsupported_not_mislabelled() {
    let preset = "name = \"offload-all\"\n[[evict]]\nmethod = \"POST\"\npath = \"/offload_all\"\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("offload.toml");
    std::fs::write(&path, preset).unwrap();
    let out_dir = dir.path().join("out");
    let server = Scripted::start(Behaviour::default());
    let out = sweep(
        &server.url,
        &out_dir,
        &["--preset", path.to_str().unwrap(), "--cache-states", "warm", "--batch-sizes", "2"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let ms = measurements(&run_dir(&out_dir));
    assert!(ms.iter().all(|m| m["error"]["kind"] == "unsupported"), "{ms:?}");
    assert!(ms[0]["error"]["message"].as_str().unwrap().contains("/offload_all"));
    assert_eq!(server.log().iter().filter(|l| l.body["max_tokens"] == 24).count(), 0, "nothing primed");
}

#[test]
fn the_staggered_delay_defaults_to_half_of_user_a_so_b_overlaps() {
    let server = Scripted::start(Behaviour { first_token_ms: 200, token_ms: 10, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &server.url,
        dir.path(),
        &["--staggered", "--stagger-context", "256", "--stagger-runs", "1", "--cache-states", "cold"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let cal = &meta["stagger_calibration"];
    common::assert_close(cal["share_of_a"].as_f64().unwrap(), 0.5, "share of A");
    let delay = cal["delay_ms"].as_f64().unwrap();
    // Half of A's measured duration: the same number up to the last bits of a float (two values
    // written to run.json and read back), where a wrong share would be off by a factor.
    common::assert_close(delay, cal["a_e2e_ms"].as_f64().unwrap() * 0.5, "delay = 50% of A's E2E");
    let recs = records(&run);
    let batched = recs.iter().find(|r| r["scenario"] == "staggered_batched").unwrap();
    common::assert_close(batched["stagger_delay_ms"].as_f64().unwrap(), delay, "the batched pair's delay");
    assert_eq!(batched["overlapped"], true, "{batched}");
    let sequential = recs.iter().find(|r| r["scenario"] == "staggered_sequential").unwrap();
    assert_eq!(sequential["overlapped"], false, "{sequential}");
}

#[test]
fn credentials_in_the_server_url_never_reach_disk_or_output() {
    let server = Scripted::start(Behaviour::default());
    let url = server.url.replace("http://", "http://bench:hunter2-secret@");
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&url, dir.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!shown.contains("hunter2-secret"), "{shown}");
    let run = run_dir(dir.path());
    for entry in std::fs::read_dir(&run).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        assert!(!text.contains("hunter2-secret"), "credentials written to disk");
    }
    assert!(chats(&server.log()) > 0);
}

/// A sweep killed while it started (its lock taken, its run.json still a temp file: the first
/// fsync): `--resume` says that nothing was measured and how to start again, not only that
/// run.json cannot be read; and starting again with the same --run-id works.
#[test]
fn resuming_a_run_killed_before_its_run_json_landed_says_to_start_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("early");
    std::fs::create_dir(&run).unwrap();
    std::fs::write(run.join(ttft_results::store::LOCK_FILE), "").unwrap();
    std::fs::write(run.join(".run.json.tmp-4242"), "{\"schema_version\": 1, \"run_id\": \"ea").unwrap();
    let server = Scripted::start(Behaviour::default());
    let out = bench(&["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url, "--quiet"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("stopped before its run.json was written") && err.contains("--run-id early"),
        "{err}"
    );
    let again = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--run-id",
        "early",
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--runs",
        "1",
        "--output-tokens",
        "24",
    ]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(measurements(&run).len(), 1);
    let left: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.contains(".tmp-")), "the dead start's temp file is swept: {left:?}");
}
