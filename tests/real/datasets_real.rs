//! `bench sweep --dataset --turns N` on the REAL llama.cpp server: each ShareGPT row measured at
//! the length the server itself counts, and hot turn N of a row's own conversation served from
//! the slot's cache by the server's own evidence. Skipped with a message when the server is not
//! built locally (tests/common/llama.rs).

use crate::common;

use std::path::{Path, PathBuf};

use common::llama::LlamaServer;
use common::{bench, measurements, stderr};
use serde_json::Value;

#[test]
fn a_dataset_sweep_with_five_turns_is_proven_by_llama_servers_own_cache_evidence() {
    let Some(server) = LlamaServer::start("datasets_real", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datasets/sharegpt.json");
    let mut args = vec!["sweep", "--server", &server.url, "--quiet", "--out", dir.path().to_str().unwrap()];
    args.extend(["--preset", "llama.cpp", "--dataset", file.to_str().unwrap(), "--cache-states", "cold,hot"]);
    args.extend(["--turns", "5", "--think-time", "100ms", "--runs", "1", "--output-tokens", "16"]);
    args.extend(["--thermal", "off"]);
    let done = bench(&args);
    let run = PathBuf::from(String::from_utf8_lossy(&done.stdout).trim());
    let failed: Vec<String> = measurements(&run)
        .iter()
        .filter(|m| m["quality_ok"] != true || m["cache_state_confirmed"] != true)
        .map(|m| {
            format!(
                "row {} {}: {} {} {}",
                m["dataset_row"], m["cache_state"], m["quality_flags"], m["cache_evidence"], m["error"]
            )
        })
        .collect();
    assert_eq!(done.status.code(), Some(0), "{}\nfailed: {failed:#?}", stderr(&done));
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let rows = meta["config"]["dataset"]["rows"].as_array().unwrap().clone();
    let ms = measurements(&run);
    assert_eq!(ms.len(), 2 * rows.len());
    for (row, pair) in rows.iter().zip(ms.chunks(2)) {
        let (cold, hot) = (&pair[0], &pair[1]);
        for m in pair {
            assert_eq!(m["dataset_row"], row["row"], "{m}");
            assert_eq!(m["context_tokens"], row["tokens"], "{m}");
            assert_eq!(m["cache_state_confirmed"], true, "{m}");
            assert_eq!(m["quality_ok"], true, "{m}");
        }
        // The row's count is what the server counted for the prompt it was sent (within 2: the
        // nonce's digits may tokenize differently from the count's zeros).
        let input = cold["input_tokens"].as_u64().unwrap();
        assert!(input.abs_diff(row["tokens"].as_u64().unwrap()) <= 2, "{row} vs {cold}");
        assert_eq!(cold["cache_evidence"]["cached_tokens"], 0, "{cold}");
        // Turn 5 on the slot's cache: llama.cpp computed only the new tail.
        let evidence = &hot["cache_evidence"];
        assert_eq!(evidence["source"], "timings", "{hot}");
        assert!(
            evidence["cached_tokens"].as_u64().unwrap() >= input,
            "turn 1 and more came from the cache: {hot}"
        );
        let turns = hot["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 4, "{hot}");
        for t in &turns[1..] {
            assert!(t["ttft_ms"].as_f64().is_some() && t["think_ms"].as_f64().unwrap() >= 100.0, "{t}");
        }
        assert!(hot["think_ms"].as_f64().unwrap() >= 100.0, "{hot}");
    }
}

/// A conversation whose measured turn is long (the real server: "cached 418, evaluated 218 of
/// 636" failed the old fixed 10% rule and the sweep exited 1): on llama-server's own counts, hot is
/// confirmed against what the turn adds to the cached conversation.
#[test]
fn a_long_last_turn_is_confirmed_hot_on_llama_servers_own_counts() {
    let Some(server) = LlamaServer::start("datasets_long_turn", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("long-turn.json");
    let note: String = (0..60).map(|i| format!("the river number {i} runs to the sea, ")).collect();
    let rows = serde_json::json!([{"conversations": [
        {"from": "human", "value": "What does a prefix cache keep between two requests?"},
        {"from": "gpt", "value": "The keys and values of the prompt's beginning."},
        {"from": "human", "value": format!("Now read this long note and summarize it: {note}")}
    ]}]);
    std::fs::write(&file, rows.to_string()).unwrap();
    let mut args = vec!["sweep", "--server", &server.url, "--quiet", "--out", dir.path().to_str().unwrap()];
    args.extend(["--preset", "llama.cpp", "--dataset", file.to_str().unwrap(), "--cache-states", "hot"]);
    args.extend(["--turns", "2", "--runs", "1", "--output-tokens", "16", "--thermal", "off"]);
    let done = bench(&args);
    let run = PathBuf::from(String::from_utf8_lossy(&done.stdout).trim());
    let ms = measurements(&run);
    assert_eq!(ms.len(), 1, "{}", stderr(&done));
    let hot = &ms[0];
    let evidence = &hot["cache_evidence"];
    let (input, evaluated) =
        (hot["input_tokens"].as_u64().unwrap(), evidence["prompt_evaluated_tokens"].as_u64().unwrap());
    assert!(evaluated > 64 && evaluated as f64 > 0.1 * input as f64, "the new turn is long: {hot}");
    assert_eq!(hot["cache_state_confirmed"], true, "{hot}");
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
}
