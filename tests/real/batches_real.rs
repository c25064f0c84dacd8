//! Warm and hot batches of a sweep, and warm arrivals of `bench load`, on the real llama-server
//! (tiny model, small contexts): each request's cache state proven by the server's own counts
//! (timings.cache_n / prompt_n), where the scripted server can only play them.

use crate::common;

use common::llama::LlamaServer;
use common::{bench, records, run_dir, stderr};
use serde_json::Value;

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"))
}

/// Fails when a warm or hot batch on the real server is not released as one unit (a member or
/// its group record missing), or a member's cache state is not confirmed by the server's counts:
/// a warm member restored from its slot file, a hot one served from memory, each computing only
/// a few of its prompt's tokens.
#[test]
fn warm_and_hot_batches_on_the_real_server_are_confirmed_by_its_own_counts() {
    let Some(server) = LlamaServer::start("batches_real", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--contexts",
        "512",
        "--modes",
        "streaming",
        "--cache-states",
        "warm,hot",
        "--batch-sizes",
        "2",
        "--runs",
        "1",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&run_dir(dir.path()));
    for state in ["warm", "hot"] {
        let of = |kind: &str| -> Vec<&Value> {
            recs.iter().filter(|r| r["record_type"] == kind && r["cache_state"] == state).collect()
        };
        let (members, groups) = (of("measurement"), of("group"));
        assert_eq!((members.len(), groups.len()), (2, 1), "{state}: {recs:#?}");
        let group = groups[0];
        assert_eq!((group["requests_ok"].as_u64(), group["requests_failed"].as_u64()), (Some(2), Some(0)));
        assert_eq!(group["total_output_tokens"], 32, "{group}");
        for m in members {
            assert_eq!(m["group_id"], group["group_id"], "{m}");
            assert!(m["error"].is_null() && m["quality_ok"] == true, "{state}: {m}");
            assert_eq!(m["cache_state_confirmed"], true, "{state}: {}", m["cache_evidence"]);
            let (evidence, input) = (&m["cache_evidence"], f(m, "input_tokens"));
            assert_eq!(evidence["source"], "timings", "{state}: {evidence}");
            let computed = f(evidence, "prompt_evaluated_tokens");
            assert!(computed < input * 0.1, "{state}: computed {computed} of {input}: {evidence}");
        }
    }
}

/// Fails when a warm arrival of `bench load` on the real server is not what it claims: every
/// request answered and its restore confirmed by the server's counts.
#[test]
fn warm_arrivals_under_load_on_the_real_server_are_confirmed_by_its_own_counts() {
    let Some(server) = LlamaServer::start("batches_real_load", &[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "load",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--rates",
        "0.5",
        "--duration",
        "6s",
        "--mix",
        "warm=1",
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
    let run = run_dir(dir.path());
    let ms: Vec<Value> = records(&run).into_iter().filter(|r| r["record_type"] == "measurement").collect();
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let scheduled = meta["load"]["rates"][0]["arrivals"].as_array().unwrap().len();
    assert!(scheduled > 0, "the seeded schedule has arrivals at 0.5/s over 6 s: {meta:#}");
    assert_eq!(ms.len(), scheduled, "{}", stderr(&out));
    for m in &ms {
        assert_eq!(m["cache_state"], "warm", "{m}");
        assert!(m["error"].is_null(), "{}", m["error"]);
        assert_eq!(m["cache_state_confirmed"], true, "{}", m["cache_evidence"]);
        let computed = f(&m["cache_evidence"], "prompt_evaluated_tokens");
        assert!(computed < f(m, "input_tokens") * 0.1, "computed {computed}: {}", m["cache_evidence"]);
    }
    // Exit 1 is possible only as a finding about the client's schedule on a loaded machine.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
}
