//! A sharded sweep end to end on the REAL llama.cpp server: four shards (as four pods of an
//! Indexed Job would run them) merge to a complete matrix. Skipped with a message when the server
//! is not built locally (tests/common/llama.rs), like tests/real/real_llama.rs.

use crate::common;

use std::collections::BTreeSet;

use common::llama::LlamaServer;
use common::{bench, measurements, stderr};

/// 2 contexts x cold/hot x 1 run: 4 units, one per shard.
const SCENARIO: &str = r#"
preset = "llama.cpp"
contexts = "512,1024"
cache_states = "cold,hot"
runs = 1
output_tokens = 16
thermal = "off"
"#;

#[test]
fn four_shards_on_the_real_server_merge_to_complete() {
    let Some(server) = LlamaServer::start("sharded_sweep", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out_dir = dir.path().join("results");
    let mut runs = Vec::new();
    let mut seen = BTreeSet::new();
    for index in 0..4 {
        // Each shard reads its index the way a Kubernetes pod does.
        let out = assert_cmd::Command::cargo_bin("bench")
            .unwrap()
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("TTFT_BENCH_SHARD_COUNT", "4")
            .args(["sweep", "--shard", "auto", "--server", &server.url, "--quiet", "--run-id", "job"])
            .args(["--scenario", scenario.to_str().unwrap(), "--out", out_dir.to_str().unwrap()])
            .args(["--bandwidth-gbps", "32", "--tflops", "0.17"])
            // Fresh sessions: each cache state its own unit, so the matrix fills 4 shards.
            .args(["--reuse-primes=false"])
            .output()
            .unwrap();
        let run = out_dir.join(format!("job-shard{}of4", index + 1));
        let ms = measurements(&run);
        let flags: Vec<String> =
            ms.iter().map(|m| format!("{} {}", m["cache_state"], m["quality_flags"])).collect();
        assert!(out.status.success(), "shard {}: {:?} {}{flags:#?}", index + 1, out.status, stderr(&out));
        assert!(!ms.is_empty(), "shard {} measured nothing", index + 1);
        for m in &ms {
            let key = (m["cache_state"].to_string(), m["context_tokens"].as_u64(), m["run"].as_u64());
            assert!(seen.insert(key.clone()), "{key:?} measured by two shards");
        }
        runs.push(run);
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    let merged = dir.path().join("merged.json");
    let mut args = vec!["merge"];
    args.extend(runs.iter().map(|r| r.to_str().unwrap()));
    args.extend(["-o", merged.to_str().unwrap(), "--expect", scenario.to_str().unwrap()]);
    let out = bench(&args);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Complete"));
    let out = bench(&["verify", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}
