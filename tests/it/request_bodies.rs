//! `bench sweep --request-bodies`: every measured request's body, byte for byte as the server
//! received it, in request-bodies.jsonl beside the records (joined by nonce), so another client can
//! replay it (scripts/parity.py); a body that carries a secret is withheld.

use crate::common;

use std::path::Path;

use common::scripted::{Behaviour, Scripted};
use common::{measurements, run_dir, stderr};
use serde_json::Value;

fn sweep(url: &str, out: &Path, preset: &str, states: &str, env: (&str, &str)) -> std::process::Output {
    let mut args = common::quiet_sweep_args(url, out);
    args.extend([
        "--contexts",
        "256",
        "--runs",
        "1",
        "--output-tokens",
        "16",
        "--preset",
        preset,
        "--cache-states",
        states,
        "--request-bodies",
    ]);
    assert_cmd::Command::cargo_bin("bench").unwrap().env(env.0, env.1).args(&args).output().unwrap()
}

fn bodies(run: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run.join("request-bodies.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

#[test]
fn each_measured_body_is_written_as_the_server_received_it() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), "llama.cpp", "cold,warm,hot", ("TTFT_BENCH_UNUSED", ""));
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let (records, lines) = (measurements(&run), bodies(&run));
    assert_eq!(records.len(), 3);
    assert_eq!(lines.len(), records.len(), "one body per measured request: {lines:#?}");
    let log = server.log();
    for m in &records {
        let state = m["cache_state"].as_str().unwrap();
        let line = lines
            .iter()
            .find(|l| l["nonce"] == m["nonce"] && l["cache_state"] == state)
            .unwrap_or_else(|| panic!("no body for {state} nonce {}", m["nonce"]));
        assert_eq!(line["context_tokens"], m["context_tokens"]);
        assert_eq!(line["path"], "/v1/chat/completions");
        let body = line["body"].as_str().unwrap();
        assert_eq!(line["body_bytes"], body.len());
        assert_eq!(line["body_crc32"], format!("{:08x}", crc32fast::hash(body.as_bytes())));
        assert!(body.contains(m["nonce"].as_str().unwrap()), "the prompt opens with the record's nonce");
        // The measured request the server logged is this body (the streamed one, not the prime).
        let sent: Value = serde_json::from_str(body).unwrap();
        assert_eq!(sent["stream"], true);
        // One lifecycle measures cold and warm with the same request (--reuse-primes): the server
        // got each body as often as it was measured.
        let received = log.iter().filter(|l| l.path == "/v1/chat/completions" && l.body == sent).count();
        let measured = lines.iter().filter(|l| l["body"] == line["body"]).count();
        assert_eq!(received, measured, "{state}: the server received this body as often as it was measured");
        if state == "hot" {
            assert_eq!(sent["messages"].as_array().unwrap().len(), 5, "turn 3 is the measured body");
        }
    }
    let run_json: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["config"]["request_bodies"], true);
}

#[test]
fn a_body_carrying_a_secret_is_withheld_and_without_the_flag_nothing_is_written() {
    const SECRET: &str = "body-secret-9d41c7";
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("tagged.toml");
    std::fs::write(
        &preset,
        "name = \"tagged\"\ndescription = \"OpenAI with a user tag from the environment\"\n\
         [request]\nbody = { user = \"{env:TTFT_BENCH_BODY_TAG}\" }\n",
    )
    .unwrap();
    let out_dir = dir.path().join("runs");
    let out = sweep(&server.url, &out_dir, preset.to_str().unwrap(), "cold", ("TTFT_BENCH_BODY_TAG", SECRET));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(server.log().iter().any(|l| l.body["user"] == SECRET), "the server did get the tag");
    let run = run_dir(&out_dir);
    let lines = bodies(&run);
    assert_eq!(lines.len(), 1);
    assert!(lines[0]["body"].is_null() && lines[0]["body_crc32"].is_null(), "{}", lines[0]);
    assert!(lines[0]["withheld"].as_str().unwrap().contains("secret"), "{}", lines[0]);
    for entry in std::fs::read_dir(&run).unwrap() {
        let text = String::from_utf8_lossy(&std::fs::read(entry.unwrap().path()).unwrap()).to_string();
        assert!(!text.contains(SECRET));
    }

    // Off by default: no file.
    let plain = dir.path().join("plain");
    let args = ["sweep", "--server", &server.url, "--out", plain.to_str().unwrap(), "--quiet"];
    let out = common::bench(&[&args[..], &["--thermal", "off", "--contexts", "256", "--runs", "1"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!run_dir(&plain).join("request-bodies.jsonl").exists());
}
