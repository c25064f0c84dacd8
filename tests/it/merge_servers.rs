//! Runs of one model measured against different servers, or with different settings, are not
//! pooled silently: `bench merge` lists every disagreement as a conflict and exits 1 without
//! writing (unless `--allow-conflicts`), and `bench report` of several runs names what it pooled.
//! Every run here is a real `bench sweep` against the scripted server.

use crate::common;

use std::path::{Path, PathBuf};

use common::scripted::{Behaviour, Scripted};
use common::{bench, stderr};
use serde_json::Value;

/// A one-cell cold sweep into `out/<run_id>`.
fn sweep(url: &str, out: &Path, run_id: &str, output_tokens: &str) -> PathBuf {
    let args = [
        "sweep",
        "--server",
        url,
        "--out",
        out.to_str().unwrap(),
        "--run-id",
        run_id,
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--modes",
        "streaming",
        "--cache-states",
        "cold",
        "--runs",
        "1",
        "--output-tokens",
        output_tokens,
    ];
    let done = bench(&args);
    assert!(done.status.success(), "{run_id}: {}", stderr(&done));
    out.join(run_id)
}

fn merge(inputs: &[&Path], out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["merge"];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    args.extend(["-o", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    bench(&args)
}

/// Fails when runs against two servers merge with no conflict (the older run's records replaced
/// by the newer's), when runs of 32 and 64 output tokens share cells with exit 0, when a report
/// of several runs does not say what it pooled, or when a URL's password is printed.
#[test]
fn runs_against_other_servers_or_settings_are_conflicts_not_a_silent_merge() {
    let first = Scripted::start(Behaviour::default());
    let second = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let with_password = second.url.replace("http://", "http://bench:hunter2-secret@");
    let a = sweep(&first.url, &runs, "a", "32");
    let again = sweep(&first.url, &runs, "again", "32");
    let other_server = sweep(&with_password, &runs, "other-server", "32");
    let longer = sweep(&first.url, &runs, "longer", "64");
    let out = dir.path().join("merged.json");

    // The same server and settings: one measurement, pooled.
    let same = merge(&[&a, &again], &out, &[]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["conflicts"], serde_json::json!([]));
    std::fs::remove_file(&out).unwrap();

    let redacted = second.url.replace("http://", "http://[redacted]@");
    for (other, setting, values) in [
        (&other_server, "server_url", [first.url.as_str(), redacted.as_str()]),
        (&longer, "output_tokens", ["32", "64"]),
    ] {
        let refused = merge(&[&a, other], &out, &[]);
        let err = stderr(&refused);
        assert_eq!(refused.status.code(), Some(1), "{setting}: {err}");
        assert!(!out.exists(), "{setting}: nothing written without --allow-conflicts");
        assert!(err.contains(&format!("conflict: {setting} differs between sources: ")), "{err}");
        assert!(values.iter().all(|v| err.contains(v)), "{setting}: {err}");
        assert!(err.contains("--allow-conflicts"), "{err}");
        assert!(!err.contains("hunter2-secret"), "{err}");

        let allowed = merge(&[&a, other], &out, &["--allow-conflicts"]);
        assert_eq!(allowed.status.code(), Some(0), "{setting}: {}", stderr(&allowed));
        let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let conflicts = doc["conflicts"].as_array().unwrap();
        let found = conflicts.iter().find(|c| c["setting"] == setting).unwrap_or_else(|| panic!("{doc:#}"));
        assert!(found["model"].is_string(), "the model whose runs disagree: {found}");
        std::fs::remove_file(&out).unwrap();

        let report = bench(&["report", a.to_str().unwrap(), other.to_str().unwrap()]);
        let err = stderr(&report);
        assert_eq!(report.status.code(), Some(0), "{err}");
        let pooled =
            err.lines().find(|l| l.starts_with("note: pooled 2 runs: ")).unwrap_or_else(|| panic!("{err}"));
        let other_id = other.file_name().unwrap().to_str().unwrap();
        assert!(pooled.contains("a (") && pooled.contains(&format!("{other_id} (")), "{pooled}");
        assert!(pooled.contains(&first.url), "{pooled}");
        assert!(err.contains(&format!("warning: conflict: {setting} differs")), "{err}");
        let shown = format!("{}{err}", String::from_utf8_lossy(&report.stdout));
        assert!(!shown.contains("hunter2-secret"), "{shown}");
    }
}

/// A one-cell cold sweep into `out/<run_id>` with `server` (`--server URL` or `--server-cmd CMD`)
/// and `flags`.
fn sweep_with(server: [&str; 2], out: &Path, run_id: &str, flags: &[&str]) -> PathBuf {
    let mut args = vec!["sweep", server[0], server[1], "--out", out.to_str().unwrap(), "--run-id", run_id];
    args.extend([
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--modes",
        "streaming",
        "--cache-states",
        "cold",
        "--runs",
        "1",
        "--output-tokens",
        "8",
    ]);
    args.extend_from_slice(flags);
    let done = bench(&args);
    // What merge compares is the run's settings: a record a loaded machine failed (exit 1) is
    // still a record of that run.
    assert!(matches!(done.status.code(), Some(0 | 1)), "{run_id}: {}", stderr(&done));
    assert!(!common::measurements(&out.join(run_id)).is_empty(), "{run_id}: no record");
    out.join(run_id)
}

/// Fails when any of these pools with exit 0 against a plain run of the same model: a run of
/// a server bench started (`--server-cmd`) against a run of a running server (`--server URL`);
/// two server commands that differ only in a count flag whose name holds "token"
/// (`--max-num-batched-tokens`, `--max-prefill-tokens`); another preset, `--turns`,
/// `--temperature` or `--extra-body`; or a records file without its run.json. Each must be a
/// named conflict, exit 1 and nothing written; each setting alone makes its own conflict.
#[test]
fn every_setting_that_changes_what_was_measured_is_a_conflict_and_records_without_run_json_are_unknown() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let url = ["--server", server.url.as_str()];
    let base = sweep_with(url, &runs, "base", &[]);
    let bin = env!("CARGO_BIN_EXE_bench-scripted-server");
    let command = |flag: &str, value: &str| {
        format!("sh -c '{bin} --port \"$1\" --first-token-ms 5 --token-ms 1' srv {{port}} {flag} {value}")
    };
    let batched_2048 = command("--max-num-batched-tokens", "2048");
    let started = sweep_with(["--server-cmd", &batched_2048], &runs, "started", &[]);
    let batched_4096 = command("--max-num-batched-tokens", "4096");
    let started_4096 = sweep_with(["--server-cmd", &batched_4096], &runs, "started-4096", &[]);
    let prefill_512 = command("--max-prefill-tokens", "512");
    let prefill = sweep_with(["--server-cmd", &prefill_512], &runs, "prefill-512", &[]);
    let prefill_1024 = command("--max-prefill-tokens", "1024");
    let prefill_more = sweep_with(["--server-cmd", &prefill_1024], &runs, "prefill-1024", &[]);
    let preset = sweep_with(url, &runs, "preset", &["--preset", "openai"]);
    let turns = sweep_with(url, &runs, "turns", &["--turns", "5"]);
    let temperature = sweep_with(url, &runs, "temperature", &["--temperature", "0.7"]);
    let extra_body = sweep_with(url, &runs, "extra-body", &["--extra-body", r#"{"top_k": 1}"#]);
    let bare = dir.path().join("bare.jsonl");
    std::fs::copy(sweep_with(url, &runs, "bare", &[]).join("measurements.jsonl"), &bare).unwrap();
    let out = dir.path().join("merged.json");

    // A run against a server is not a run of a server bench started: nothing shows they are one.
    let cases: [(&Path, &Path, &str, &[&str]); 8] = [
        (
            &base,
            &started,
            "server_command",
            &["none (measured a running server", "--max-num-batched-tokens 2048"],
        ),
        (
            &started,
            &started_4096,
            "server_command",
            &["--max-num-batched-tokens 2048", "--max-num-batched-tokens 4096"],
        ),
        (
            &prefill,
            &prefill_more,
            "server_command",
            &["--max-prefill-tokens 512", "--max-prefill-tokens 1024"],
        ),
        (&base, &preset, "preset", &["llama.cpp", "openai"]),
        (&base, &turns, "turns", &["3 (", "5 ("]),
        (&base, &temperature, "temperature", &["0.0 (", "0.7 ("]),
        (&base, &extra_body, "extra_body", &["none (", r#"{"top_k":1}"#]),
        (&base, &bare, "run_json", &["records without their run.json", "bare.jsonl"]),
    ];
    for (one, other, setting, values) in cases {
        let refused = merge(&[one, other], &out, &[]);
        let err = stderr(&refused);
        assert_eq!(refused.status.code(), Some(1), "{setting}: {err}");
        assert!(!out.exists(), "{setting}: nothing written without --allow-conflicts");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("conflict: ")).collect();
        assert_eq!(lines.len(), 1, "{setting} alone differs: {err}");
        assert!(lines[0].starts_with(&format!("conflict: {setting}")), "{err}");
        assert!(values.iter().all(|v| lines[0].contains(v)), "{setting}: {}", lines[0]);
    }

    // The same settings pool, and so does a records file alone (it pools with nothing).
    let same =
        merge(&[&started, &sweep_with(["--server-cmd", &batched_2048], &runs, "again", &[])], &out, &[]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    std::fs::remove_file(&out).unwrap();
    let alone = merge(&[&bare], &out, &[]);
    assert_eq!(alone.status.code(), Some(0), "{}", stderr(&alone));
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["conflicts"], serde_json::json!([]));
}
