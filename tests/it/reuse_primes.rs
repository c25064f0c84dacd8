//! `--reuse-primes` against the scripted server: one session lifecycle per (context, mode, run)
//! measures cold, warm and hot in turn, with fewer requests and every state still proven by the
//! server's cache evidence; a failed step hands the next state to a fresh lifecycle.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::scripted::{Behaviour, Logged, Scripted};
use common::{measurements, run_dir, stderr};
use serde_json::Value;

fn sweep(url: &str, out: &Path, preset: &str, states: &str, reuse: bool) -> std::process::Output {
    let mut args = common::quiet_sweep_args(url, out);
    args.extend([
        "--contexts",
        "256,512",
        "--runs",
        "2",
        "--output-tokens",
        "24",
        "--preset",
        preset,
        "--cache-states",
        states,
    ]);
    // On by default: the reused run says nothing, the fresh one turns it off.
    if !reuse {
        args.push("--reuse-primes=false");
    }
    assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .env("AGENT_MEMORY_ADMIN_KEY", "admin-key-0f9e")
        .args(&args)
        .output()
        .unwrap()
}

fn chats(log: &[Logged]) -> usize {
    log.iter().filter(|l| l.path == "/v1/chat/completions" && l.body["max_tokens"] == 24).count()
}

/// The agent-memory calls of one session, in order (X-Session-ID and the agent path name it).
fn calls_of(log: &[Logged], session: &str) -> Vec<String> {
    log.iter()
        .filter_map(|l| {
            if l.path == "/v1/chat/completions" {
                (l.headers.get("x-session-id").map(String::as_str) == Some(session))
                    .then(|| format!("chat {}", l.body["messages"].as_array().map_or(0, Vec::len)))
            } else {
                let rest = l.path.strip_prefix(&format!("/v1/agents/oai_{session}"))?;
                Some(format!("{} agent{rest}", l.method))
            }
        })
        .collect()
}

#[test]
fn one_session_measures_cold_warm_and_hot_with_one_turn_1() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut sent = Vec::new();
    for (reuse, dir) in [false, true].into_iter().zip(&dirs) {
        let server = Scripted::start(Behaviour::default());
        let out = sweep(&server.url, dir.path(), "agent-memory", "cold,warm,hot", reuse);
        assert!(out.status.success(), "reuse {reuse}: {}", stderr(&out));
        sent.push(chats(&server.log()));
        let ms = measurements(&run_dir(dir.path()));
        assert_eq!(ms.len(), 12, "2 contexts x 3 states x 2 runs");
        for m in &ms {
            assert_eq!(m["cache_state_confirmed"], true, "reuse {reuse}: {m}");
            assert_eq!(m["quality_ok"], true, "reuse {reuse}: {m}");
            assert_eq!(m.get("lifecycle_id").is_some(), reuse, "{m}");
        }
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(run_dir(dir.path()).join("run.json")).unwrap())
                .unwrap();
        assert_eq!(run["config"]["reuse_primes"], reuse);
        if !reuse {
            continue;
        }
        // Cold, warm and hot of each (context, run) in turn on one session: 4 lifecycles.
        let ids: BTreeSet<&str> = ms.iter().map(|m| m["lifecycle_id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), 4);
        for chunk in ms.chunks(3) {
            let states: Vec<&str> = chunk.iter().map(|m| m["cache_state"].as_str().unwrap()).collect();
            assert_eq!(states, ["cold", "warm", "hot"]);
            assert!(chunk.iter().all(|m| m["lifecycle_id"] == chunk[0]["lifecycle_id"]));
            assert!(chunk.iter().all(|m| m["nonce"] == chunk[0]["nonce"]), "one prompt");
            // Warm is the same prompt as cold, served from the reloaded session.
            assert_eq!(chunk[1]["input_tokens"], chunk[0]["input_tokens"]);
            assert_eq!(chunk[2]["turns"].as_array().unwrap().len(), 2, "hot keeps turns 1 and 2");
            assert_eq!(chunk[2]["turns"][0]["ttft_ms"], chunk[0]["ttft_ms"], "turn 1 is cold's");
        }
        let session = ms[0]["lifecycle_id"].as_str().unwrap();
        assert_eq!(
            calls_of(&server.log(), session),
            [
                "chat 1", // cold, measured
                "DELETE agent?evict_only=true",
                "chat 1", // warm, measured after the eviction
                "chat 3", // hot turn 2
                "chat 5", // hot turn 3, measured
                "DELETE agent",
            ]
        );
    }
    // Per lifecycle: 1 + 2 + 3 requests on fresh sessions, 1 + 1 + 2 on one.
    assert_eq!(sent, [4 * 6, 4 * 4]);
}

#[test]
fn a_lifecycle_can_start_at_warm_and_llama_cpp_slots_prove_every_state() {
    // Each slot restore takes 40 ms: warm's TTFT must hold it, timed as reload_ms.
    let restore_ms = 40.0;
    let server = Scripted::start(Behaviour { slot_restore_ms: restore_ms as u64, ..Behaviour::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), "llama.cpp", "warm,hot", true);
    assert!(out.status.success(), "{}", stderr(&out));
    // Turn 1 primed unmeasured, warm measured, hot turns 2 and 3: 4 per lifecycle, not 2 + 3.
    assert_eq!(chats(&server.log()), 4 * 4);
    let ms = measurements(&run_dir(dir.path()));
    for pair in ms.chunks(2) {
        assert_eq!(pair[0]["cache_state"], "warm");
        assert_eq!(pair[1]["cache_state"], "hot");
        assert_eq!(pair[0]["lifecycle_id"], pair[1]["lifecycle_id"]);
        for m in pair {
            assert_eq!(m["cache_state_confirmed"], true, "{m}");
            assert_eq!(m["cache_evidence"]["source"], "timings", "{m}");
        }
        let warm = &pair[0];
        let (reload, ttft) = (warm["reload_ms"].as_f64().unwrap(), warm["ttft_ms"].as_f64().unwrap());
        assert!(reload >= restore_ms, "the slot restore is timed: {warm}");
        // Inside the timed window: TTFT holds the restore (a cached prompt's own first token
        // comes within a few ms of the request on this server, far under the restore's 40).
        assert!(ttft >= reload, "the restore is inside TTFT: {warm}");
    }
    let actions: Vec<String> = server
        .log()
        .iter()
        .filter(|l| l.path.starts_with("/slots/"))
        .map(|l| l.path.split('=').nth(1).unwrap_or("").to_string())
        .collect();
    // Per lifecycle: reset (erase), evict (save + erase), reload (restore), cleanup (erase); the
    // calibration before the first cell erases slots of its own.
    let lifecycles = &actions[actions.len() - 4 * 5..];
    for one in lifecycles.chunks(5) {
        assert_eq!(one, ["erase", "save", "erase", "restore", "erase"], "{actions:?}");
    }
}

#[test]
fn a_failed_step_ends_the_lifecycle_and_the_next_state_starts_its_own() {
    // An eviction that works in preflight, then is refused (503): warm fails, and hot must not
    // inherit anything from the session.
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("broken-evict.toml");
    std::fs::write(
        &preset,
        "name = \"broken-evict\"\n[[evict]]\nmethod = \"POST\"\npath = \"/evict/{session}\"\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let server = Scripted::start(Behaviour { refuse_after: Some(("/evict/", 1)), ..Default::default() });
    let out = sweep(&server.url, &out_dir, preset.to_str().unwrap(), "cold,warm,hot", true);
    assert_eq!(out.status.code(), Some(1), "the warm cells failed: {}", stderr(&out));
    let ms = measurements(&run_dir(&out_dir));
    for triple in ms.chunks(3) {
        let [cold, warm, hot] = triple else { panic!("{triple:?}") };
        assert_eq!(cold["quality_ok"], true, "{cold}");
        assert_eq!(warm["error"]["kind"], "preset_action", "{warm}");
        assert_eq!(hot["cache_state_confirmed"], true, "{hot}");
        assert_ne!(hot["lifecycle_id"], cold["lifecycle_id"], "hot started a lifecycle of its own");
        assert_ne!(hot["nonce"], cold["nonce"]);
    }
}
