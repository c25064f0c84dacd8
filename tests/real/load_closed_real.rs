//! `bench load --concurrency` against the real llama-server: one and two users in a closed loop
//! over cold and hot sessions, each request's cache state proven by the server's own counts, each
//! record naming its level and its user.

use crate::common;

use common::llama::LlamaServer;
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

#[test]
fn a_real_server_in_a_closed_loop_serves_each_user_in_turn_as_claimed() {
    let Some(server) = LlamaServer::start("load_closed_real", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "load",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--concurrency",
        "1,2",
        "--duration",
        "4s",
        "--warmup-duration",
        "500ms",
        "--mix",
        "cold=0.5,hot=0.5",
        "--contexts",
        "512",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let levels: Vec<u64> = meta["load"]["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(levels, [1, 2]);
    assert_eq!(meta["load"]["warmup_s"], 0.5);
    let ms = measurements(&run);
    for level in [1u64, 2] {
        let mine: Vec<&Value> = ms.iter().filter(|m| m["concurrency"] == level).collect();
        assert!(mine.len() >= 2, "level {level}: {} requests", mine.len());
        for user in 0..level {
            assert!(mine.iter().any(|m| m["user_id"] == user), "user {user} of {level} sent nothing");
        }
    }
    for m in &ms {
        assert_eq!(m["scenario"], "load");
        assert!(m["error"].is_null(), "{}: {}", m["cache_state"], m["error"]);
        assert_eq!(m["cache_state_confirmed"], true, "{} {}", m["cache_state"], m["cache_evidence"]);
        assert!(m["user_id"].as_u64().unwrap() < m["concurrency"].as_u64().unwrap());
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("load-summary.json")).unwrap()).unwrap();
    for r in summary["rates"].as_array().unwrap() {
        let all = r["states"].as_array().unwrap().last().unwrap();
        assert!(all["output_tps"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(run.join("load-throughput-latency.svg").exists());
}
