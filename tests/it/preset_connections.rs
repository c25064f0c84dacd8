//! Preset actions next to streams, against a server that ends the connection after every streamed
//! response without announcing it (llama-server does; the scripted server's `CloseAfterStream`
//! keeps such a connection open but deaf a while, so the race llama-server loses now and then is
//! lost every time): the cleanup right after a stream must not go out on that connection, and a
//! cleanup that fails anyway never costs the measurement that ended before it.

use crate::common;

use common::scripted::{Behaviour, Fault, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

/// How long a connection stays open, reading nothing, after its stream ended.
const DEAF_MS: u64 = 400;

fn server() -> Scripted {
    Scripted::start(Behaviour {
        first_token_ms: 20,
        token_ms: 5,
        fault: Fault::CloseAfterStream(DEAF_MS),
        ..Default::default()
    })
}

fn sweep(url: &str, out: &std::path::Path, preset: &str, states: &str) -> std::process::Output {
    bench(&[
        "sweep",
        "--server",
        url,
        "--out",
        out.to_str().unwrap(),
        "--thermal",
        "off",
        "--quiet",
        "--contexts",
        "256",
        "--runs",
        "2",
        "--output-tokens",
        "24",
        "--preset",
        preset,
        "--cache-states",
        states,
    ])
}

fn flags(m: &Value) -> Vec<&str> {
    m["quality_flags"].as_array().unwrap().iter().filter_map(|f| f["flag"].as_str()).collect()
}

/// The llama.cpp preset says its server ends streamed connections: every streamed request asks
/// for `Connection: close` (its connection then never returns to the pool), no other request does
/// (their connections are reused). The sweep reads the server's counters right after each stream
/// and retries that read once, which is what hid this race from sweeps; `bench load` does not
/// read them, so its cleanup met the dead connection (tests/it/load_cli.rs pins that behaviour).
#[test]
fn the_llama_cpp_preset_asks_to_close_every_streamed_connection_and_only_those() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), "llama.cpp", "cold,warm,hot");
    assert!(out.status.success(), "{}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    assert_eq!(ms.len(), 6);
    for m in &ms {
        assert!(m["error"].is_null(), "{} {}", m["cache_state"], m["error"]);
        assert!(!flags(m).contains(&"cleanup_failed"), "{}", m["quality_flags"]);
        assert_eq!(m["cache_state_confirmed"], true, "{}", m["cache_evidence"]);
    }
    let log = server.log();
    let chats = log.iter().filter(|l| l.path == "/v1/chat/completions");
    let (streams, whole): (Vec<_>, Vec<_>) = chats.partition(|l| l.body["stream"] == true);
    assert!(streams.len() >= 6 && !whole.is_empty());
    for s in streams {
        assert_eq!(s.headers.get("connection").map(String::as_str), Some("close"), "{:?}", s.headers);
    }
    for w in whole {
        assert_eq!(w.headers.get("connection"), None, "a whole answer's connection is kept for reuse");
    }
}

/// A preset file can say so too; without metrics to read after the stream, the cleanup is the
/// first request after it. Fails when the field is unknown or ignored.
#[test]
fn a_preset_file_that_says_streams_end_their_connection_loses_no_cleanup() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("closing.toml");
    std::fs::write(
        &preset,
        "name = \"closing\"\nstream_closes_connection = true\n\
         [request]\nbody = { id_slot = \"{slot}\", cache_prompt = true }\n\
         [[reset]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=erase\"\n\
         [[cleanup]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=erase\"\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = sweep(&server.url, &out_dir, preset.to_str().unwrap(), "cold,hot");
    let ms = measurements(&run_dir(&out_dir));
    assert!(out.status.success(), "{:?} {} {ms:#?}", out.status, stderr(&out));
    assert_eq!(ms.len(), 4);
    for m in &ms {
        assert!(m["error"].is_null(), "{} {}", m["cache_state"], m["error"]);
        assert!(!flags(m).contains(&"cleanup_failed"), "{}", m["quality_flags"]);
    }
}

/// A cleanup that fails after the measurement ended (here: the server stops accepting the
/// preset's cleanup once the first measured request is under way, after preflight tried it) is
/// recorded as what it is, on a measurement that stays good. Fails when a cleanup failure fails
/// the measurement, as it did.
#[test]
fn a_failed_cleanup_is_recorded_and_the_measurement_before_it_kept() {
    let behaviour = Behaviour { first_token_ms: 300, token_ms: 5, ..Default::default() };
    let server = Scripted::start(behaviour.clone());
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("saving.toml");
    // The cleanup saves the slot: llama-server refuses that without --slot-save-path.
    std::fs::write(
        &preset,
        "name = \"saving\"\n\
         [request]\nbody = { id_slot = \"{slot}\", cache_prompt = true }\n\
         [[reset]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=erase\"\n\
         [[cleanup]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=save\"\nbody = { filename = \"{session}.bin\" }\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let mut args: Vec<String> = ["sweep", "--server", &server.url, "--out", out_dir.to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for a in ["--thermal", "off", "--quiet", "--contexts", "256", "--runs", "2", "--output-tokens", "24"] {
        args.push(a.to_string());
    }
    args.extend(["--preset".to_string(), preset.to_str().unwrap().to_string()]);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let measuring = |s: &Scripted| s.measured_requests() > 0;
    let waited = std::time::Instant::now();
    while !measuring(&server) && waited.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Normally within the first measured request's 300 ms to its first token, so its cleanup is
    // refused; a loaded machine may wake this thread later, and then the second run's is. Either
    // way every cleanup after the switch fails, and the last one always comes after it.
    server.set(Behaviour { no_slot_save_path: true, ..behaviour });
    let out = child.wait_with_output().unwrap();
    let ms = measurements(&run_dir(&out_dir));
    assert!(out.status.success(), "nothing measured failed: {} {ms:#?}", stderr(&out));
    assert_eq!(ms.len(), 2);
    let cleanup_failed = |m: &Value| {
        m["quality_flags"].as_array().unwrap().iter().find(|f| f["flag"] == "cleanup_failed").cloned()
    };
    let last = ms.last().unwrap();
    assert!(
        cleanup_failed(last).is_some(),
        "no cleanup_failed flag on the last run: {}",
        last["quality_flags"]
    );
    for m in &ms {
        assert!(m["error"].is_null(), "{}", m["error"]);
        assert_eq!(m["quality_ok"], true, "{}", m["quality_flags"]);
        assert!(m["ttft_ms"].as_f64().unwrap() >= 300.0);
        let Some(flag) = cleanup_failed(m) else { continue };
        assert_eq!(flag["fails_gate"], false);
        let reason = flag["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("cleanup: preset action failed: POST /slots/0?action=save: HTTP 501"),
            "{reason}"
        );
    }
}
