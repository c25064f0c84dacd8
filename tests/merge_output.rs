//! What merge does with inputs that hold no records, and with a stdout closed early.

use std::path::{Path, PathBuf};
use std::process::{Command as Std, Stdio};

use assert_cmd::Command;
use assert_cmd::cargo::CommandCargoExt;
use ttft_bench::record::{CacheState, CellKey, Measurement, Mode, Record, SCHEMA_VERSION, Scenario};

fn record(context_tokens: u32) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r".into(),
        cell: CellKey {
            model: "m".into(),
            scenario: Scenario::Cold,
            cache_state: CacheState::Cold,
            mode: Mode::Streaming,
            context_tokens,
            batch_size: 1,
            run: 1,
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        quality_ok: true,
        ..Default::default()
    }))
}

fn run_dir(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    let run = dir.join(name);
    std::fs::create_dir_all(&run).unwrap();
    let text: String = records.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
    std::fs::write(run.join("measurements.jsonl"), text).unwrap();
    run
}

#[test]
fn inputs_without_records_are_refused_unless_allowed_and_nothing_empty_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let empty = run_dir(dir.path(), "empty", &[]);
    let good = run_dir(dir.path(), "good", &[record(1024)]);
    let out = dir.path().join("out.json");
    for inputs in [vec![&empty], vec![&good, &empty]] {
        let assert = Command::cargo_bin("bench")
            .unwrap()
            .arg("merge")
            .args(&inputs)
            .arg("-o")
            .arg(&out)
            .assert()
            .code(2);
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
        assert!(stderr.contains(&format!("no records in {}", empty.display())), "{stderr}");
        assert!(!out.exists(), "no canonical file without --allow-empty");
    }
    Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&empty)
        .arg("-o")
        .arg(&out)
        .arg("--allow-empty")
        .assert()
        .code(0);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["records"], serde_json::json!([]));
}

/// Fails when a reader that went away turns an incomplete merge into exit 0.
#[test]
fn a_closed_stdout_keeps_merges_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path(), "r", &[record(1024)]);
    let scenario = dir.path().join("s.toml");
    // 32 contexts x 3 runs: a completeness table that lists 95 missing cells on stdout.
    std::fs::write(&scenario, "contexts = \"1k..32k\"\nruns = 3\n").unwrap();
    for (extra, want) in [(None, 1), (Some("--allow-incomplete"), 0)] {
        let out_file = dir.path().join("out.json");
        let mut child = Std::cargo_bin("bench")
            .unwrap()
            .arg("merge")
            .arg(&run)
            .arg("-o")
            .arg(&out_file)
            .arg("--expect")
            .arg(&scenario)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before merge writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(want), "{extra:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("incomplete against") == (want == 1), "{stderr}");
        assert!(out_file.exists(), "the merge itself was done");
    }
}
