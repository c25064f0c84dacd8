//! Without `--preset`, bench detects the server from its own endpoints and drives it with that
//! server's preset, says which and why on stderr and in run.json; `--preset openai` forces the plain
//! one. Against the scripted server's imitations of each server's wire; tests/real holds the same
//! against the real llama-server.

use crate::common;

use common::scripted::{Behaviour, Dialect, Scripted};
use common::{measurements, run_dir, stderr};

/// One 256-token run per cell (see `common::short_sweep`).
fn sweep(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    common::short_sweep(url, out, extra)
}

fn run_json(out: &std::path::Path) -> serde_json::Value {
    common::run_json(&run_dir(out))
}

#[test]
fn each_server_is_detected_by_its_own_endpoints_and_driven_with_its_preset() {
    let cases = [
        (Dialect::LlamaCpp, "llama.cpp", "/props", "cold,hot"),
        (Dialect::Vllm, "vllm", "vllm:", "cold,hot"),
        (Dialect::Sglang, "sglang", "sglang:", "cold,hot"),
        // The OpenAI API caches no prompt under 1024 tokens: hot cannot be shown at 256.
        (Dialect::Openai, "openai", "no llama.cpp", "cold"),
    ];
    for (dialect, preset, why, states) in cases {
        let server =
            Scripted::start(Behaviour { dialect, first_token_ms: 5, token_ms: 5, ..Default::default() });
        let dir = tempfile::tempdir().unwrap();
        let out = sweep(&server.url, dir.path(), &["--cache-states", states]);
        assert!(out.status.success(), "{dialect}: {}", stderr(&out));
        let meta = run_json(dir.path());
        assert_eq!(meta["server"]["preset"], preset, "{dialect}");
        assert_eq!(meta["config"]["preset"], preset, "{dialect}: a resumed run drives the same preset");
        let detected = meta["server"]["preset_detected"].as_str().unwrap_or_default();
        assert!(detected.contains(why), "{dialect}: {detected}");
        assert!(stderr(&out).contains(&format!("server detected: preset {preset}")), "{}", stderr(&out));
        for m in measurements(&run_dir(dir.path())) {
            assert_eq!(m["cache_state_confirmed"], true, "{dialect}: {m}");
        }
        // The preset's own calls were made: llama.cpp's slot erase, vLLM's and SGLang's resets.
        let log = server.log();
        let called = |path: &str| log.iter().any(|l| l.path.starts_with(path));
        assert_eq!(called("/slots/"), preset == "llama.cpp", "{dialect}");
        assert_eq!(called("/reset_prefix_cache"), preset == "vllm", "{dialect}");
        assert_eq!(called("/flush_cache"), preset == "sglang", "{dialect}");
    }
}

#[test]
fn preset_openai_forces_the_plain_preset_on_a_server_detection_would_name() {
    let server = Scripted::start(Behaviour { first_token_ms: 5, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--preset", "openai", "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let meta = run_json(dir.path());
    assert_eq!(meta["server"]["preset"], "openai");
    assert!(meta["server"].get("preset_detected").is_none(), "{}", meta["server"]);
    assert!(!server.log().iter().any(|l| l.path.starts_with("/slots/")), "no llama.cpp action");
}

/// A llama.cpp server that cannot save slots (started without --slot-save-path) is still detected
/// and measured: cold and hot as llama.cpp, warm recorded as unsupported with the reason said.
#[test]
fn a_detected_server_that_cannot_evict_measures_warm_as_unsupported_and_says_why() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 5,
        token_ms: 5,
        no_slot_save_path: true,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--cache-states", "cold,warm"]);
    assert_eq!(out.status.code(), Some(1), "warm unsupported is a finding: {}", stderr(&out));
    assert!(stderr(&out).contains("warm cells will be recorded as unsupported"), "{}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    assert_eq!(ms[0]["cache_state_confirmed"], true, "{}", ms[0]);
    assert_eq!(ms[1]["error"]["kind"], "unsupported", "{}", ms[1]);
}
