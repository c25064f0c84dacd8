//! Parity with a raw client, as a standing check on the REAL llama.cpp server: scripts/parity.py
//! runs bench one cell at a time with `--request-bodies` and replays each measured body from
//! Python's http.client on the same server (bench, raw, bench, raw, ...), cold and warm. Skipped
//! with a message when the server is not built locally (tests/common/llama.rs).
//!
//! What is asserted is that the comparison is made from bench's real bodies and measured on both
//! sides, never a speed ratio (shared machines are noisy): every replayed body is the one bench
//! wrote for that record (length, CRC-32, and the SHA-256 the script computed of what it sent),
//! both TTFT columns are there for every context and state, and the server's own evidence shows the
//! raw replay was as cold or as warm as bench's. The measured numbers are in docs/reference.md.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::llama::LlamaServer;
use serde_json::Value;

fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    // No hashing crate here: the test asks the system's sha256sum, an implementation independent
    // of the script's.
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

#[test]
fn parity_replays_benchs_own_bodies_cold_and_warm_at_every_context() {
    let Some(server) = LlamaServer::start("parity", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("parity");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/parity.py");
    let slot_dir = server.slot_dir();
    let done = Command::new("python3")
        .arg(&script)
        .args(["--bench", env!("CARGO_BIN_EXE_bench"), "--server", &server.url])
        .args(["--contexts", "512,2048", "--states", "cold,warm", "--rounds", "2", "--output-tokens", "16"])
        .args([
            "--tokenize-reps",
            "3",
            "--slot-dir",
            slot_dir.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&done.stdout), String::from_utf8_lossy(&done.stderr));
    eprintln!("{stdout}");
    assert_eq!(done.status.code(), Some(0), "parity.py failed:\n{stderr}");

    // Every pair: the body replayed is the one bench wrote beside the record it measured.
    let pairs = lines(&out.join("pairs.jsonl"));
    assert_eq!(pairs.len(), 2 * 2 * 2, "contexts x states x rounds");
    for p in &pairs {
        let run = Path::new(p["bench_run"].as_str().unwrap());
        let records: Vec<Value> = lines(&run.join("measurements.jsonl"))
            .into_iter()
            .filter(|r| r["record_type"] == "measurement")
            .collect();
        assert_eq!(records.len(), 1, "{}", run.display());
        let record = &records[0];
        assert_eq!(record["nonce"], p["nonce"]);
        assert_eq!(record["ttft_ms"], p["bench_ttft_ms"], "the bench column is the record's own TTFT");
        let bodies = lines(&run.join("request-bodies.jsonl"));
        assert_eq!(bodies.len(), 1);
        let body = bodies[0]["body"].as_str().unwrap().as_bytes();
        assert_eq!(bodies[0]["nonce"], record["nonce"]);
        assert_eq!(p["replayed_bytes"], body.len());
        assert_eq!(p["replayed_crc32"], format!("{:08x}", crc32fast::hash(body)));
        assert_eq!(p["replayed_crc32"], bodies[0]["body_crc32"]);
        assert_eq!(p["replayed_sha256"], sha256_hex(body), "the raw client sent bench's bytes");
        assert!(p["raw_ttft_ms"].as_f64().is_some_and(|t| t > 0.0), "{p}");
        assert!(p["error"].is_null(), "{p}");
        // The server's own word: the replay was as cold (nothing cached) or warm (restored) as bench's.
        let (prompt_n, cache_n) = (p["raw_prompt_n"].as_u64().unwrap(), p["raw_cache_n"].as_u64().unwrap());
        match p["state"].as_str().unwrap() {
            "cold" => assert_eq!(cache_n, 0, "{p}"),
            "warm" => assert!(cache_n > 0 && prompt_n <= 2, "{p}"),
            other => panic!("state {other}"),
        }
        assert_eq!(record["cache_state_confirmed"], true, "{record}");
    }

    // The report: both TTFT columns for every context, cold and warm, and the tokenization time.
    let report: Value = serde_json::from_slice(&std::fs::read(out.join("parity.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let mut cells: Vec<(u64, String)> = rows
        .iter()
        .map(|r| (r["context_tokens"].as_u64().unwrap(), r["state"].as_str().unwrap().into()))
        .collect();
    cells.sort();
    let want: Vec<(u64, String)> =
        [512, 2048].iter().flat_map(|&c| [(c, "cold".to_string()), (c, "warm".to_string())]).collect();
    assert_eq!(cells, want);
    for r in rows {
        assert!(r["bench_ttft_ms"].as_f64().is_some() && r["raw_ttft_ms"].as_f64().is_some(), "{r}");
        assert_eq!(r["bodies_matched"], r["pairs"], "{r}");
        assert!(r["tokenize_ms"].as_f64().is_some() && r["tokenized_tokens"].as_u64().is_some(), "{r}");
    }
    let table = std::fs::read_to_string(out.join("parity.md")).unwrap();
    assert_eq!(table.lines().count(), 2 + 4, "{table}");
    assert_eq!(stdout, table, "the table is printed as written");
}
