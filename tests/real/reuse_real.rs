//! `--reuse-primes` against `--reuse-primes` off on the REAL llama.cpp server: the same cells,
//! every cache state confirmed on both, and the server doing the same work for every measured
//! request (the tokens it computed: what makes the two give the same numbers). Skipped with a
//! message when the server is not built locally (tests/common/llama.rs).
//!
//! Timing equivalence is not asserted (shared machines are noisy): `bench compare` of the two
//! runs is printed for a human, and the measured comparison is in docs/reuse-primes.md.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::llama::LlamaServer;
use common::{bench, measurements, stderr};
use serde_json::Value;

fn sweep(url: &str, out: &Path, reuse: bool) -> PathBuf {
    let mut args = vec!["sweep", "--server", url, "--quiet", "--out", out.to_str().unwrap()];
    args.extend(["--preset", "llama.cpp", "--contexts", "512,2048", "--cache-states", "cold,warm,hot"]);
    args.extend(["--modes", "streaming,non-streaming", "--runs", "2", "--output-tokens", "16"]);
    args.extend(["--thermal", "off", "--bandwidth-gbps", "32", "--tflops", "0.17"]);
    // On by default: the reused run says nothing, the fresh one turns it off.
    if !reuse {
        args.push("--reuse-primes=false");
    }
    let done = bench(&args);
    let run = PathBuf::from(String::from_utf8_lossy(&done.stdout).trim());
    if done.status.code() != Some(0) {
        let failed: Vec<String> = measurements(&run)
            .into_iter()
            .filter(|m| m["quality_ok"] != true || m["cache_state_confirmed"] == false)
            .map(|m| {
                format!("{} {} {}: {}", m["cache_state"], m["mode"], m["context_tokens"], m["quality_flags"])
            })
            .collect();
        panic!(
            "reuse {reuse}: exit {:?}: {}\nfailed records: {failed:#?}",
            done.status.code(),
            stderr(&done)
        );
    }
    run
}

/// Per cell (state, mode, context, run): the prompt tokens the server computed for the measured
/// request, and the tokens it had cached.
fn work(run: &Path) -> BTreeMap<(String, String, u64, u64), (u64, u64)> {
    let mut out = BTreeMap::new();
    for m in measurements(run) {
        assert_eq!(m["cache_state_confirmed"], true, "{m}");
        assert_eq!(m["quality_ok"], true, "{m}");
        let key = (
            m["cache_state"].as_str().unwrap().to_string(),
            m["mode"].as_str().unwrap().to_string(),
            m["context_tokens"].as_u64().unwrap(),
            m["run"].as_u64().unwrap(),
        );
        let e = &m["cache_evidence"];
        let tokens = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("no evidence: {m}"));
        out.insert(key, (tokens(&e["prompt_evaluated_tokens"]), tokens(&e["cached_tokens"])));
    }
    out
}

#[test]
fn reused_and_fresh_sessions_make_the_server_do_the_same_work() {
    let Some(server) = LlamaServer::start("reuse_primes", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let fresh = sweep(&server.url, dir.path(), false);
    let reused = sweep(&server.url, dir.path(), true);
    let (a, b) = (work(&fresh), work(&reused));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same 24 cells");
    assert_eq!(a.len(), 24);
    for (cell, (&(computed_a, cached_a), &(computed_b, cached_b))) in a.keys().zip(a.values().zip(b.values()))
    {
        match cell.0.as_str() {
            // The prompt differs only in its nonce: the same size within a few tokens.
            "cold" => {
                assert!(computed_a.abs_diff(computed_b) <= 8, "{cell:?}: {computed_a} vs {computed_b}");
                assert!(cached_a == 0 && cached_b == 0, "{cell:?}: {cached_a} / {cached_b} cached");
            }
            // Warm: the restored session serves all but the last token; hot: turn 3's new turn
            // is fixed text, so the server computes exactly as many tokens either way.
            _ => assert_eq!(computed_a, computed_b, "{cell:?}: fresh {computed_a}, reused {computed_b}"),
        }
    }
    let ids: Vec<Value> = measurements(&reused).iter().map(|m| m["lifecycle_id"].clone()).collect();
    assert!(ids.chunks(3).all(|c| c[0].is_string() && c.iter().all(|id| *id == c[0])), "{ids:?}");
    let out = bench(&["compare", fresh.to_str().unwrap(), reused.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    eprintln!("fresh vs reused:\n{}", String::from_utf8_lossy(&out.stdout));
}
