//! The GGUF reader on the project's own generated model (scripts/gen_model.py "tiny": 4 layers,
//! 256 wide, 4 heads, f16, 64K context), and `bench verify --model-file` with it. Skips with a
//! message when the model has not been generated on this machine, and fails instead under
//! TTFT_BENCH_REQUIRE_LLAMA=1 (CI always generates it).

use crate::common;

use std::path::PathBuf;

use ttft_results::physics::model;

fn tiny_model(test: &str) -> Option<PathBuf> {
    common::llama::tiny_model(test)
}

/// Fails when a missing model is skipped although TTFT_BENCH_REQUIRE_LLAMA=1 promised it (a CI run
/// that could not generate it would pass with nothing checked).
#[test]
fn a_missing_model_fails_where_the_real_server_is_required() {
    let empty = tempfile::tempdir().unwrap();
    assert!(common::llama::tiny_model_in(Some(empty.path()), "t", false).is_none(), "skipped");
    let required = std::panic::catch_unwind(|| common::llama::tiny_model_in(Some(empty.path()), "t", true));
    let why = *required.expect_err("a failure when required").downcast::<String>().unwrap();
    assert!(why.contains("TTFT_BENCH_REQUIRE_LLAMA=1") && why.contains("models/tiny.gguf"), "{why}");
}

#[test]
fn the_tiny_generated_model_profiles_as_its_generator_built_it() {
    let Some(path) = tiny_model("the_tiny_generated_model_profiles_as_its_generator_built_it") else {
        return;
    };
    let m = model::from_file(&path).unwrap();
    assert_eq!((m.n_layer, m.n_embd, m.n_head, m.head_dim), (Some(4), Some(256), Some(4), Some(64)));
    assert_eq!(m.context_length, Some(65536));
    // f16 weights: two bytes per parameter, about 38 MB in all.
    assert!((m.weight_bytes / m.params - 2.0).abs() < 0.01, "{m:?}");
    assert!((30e6..50e6).contains(&m.weight_bytes), "{m:?}");
    // 2 (K,V) x 4 layers x kv heads x 64 dim x 2 bytes.
    let kv_heads = f64::from(m.n_head_kv.unwrap());
    assert_eq!(m.kv_bytes_per_token, Some(2.0 * 4.0 * kv_heads * 64.0 * 2.0));
}

#[test]
fn a_file_that_is_neither_gguf_nor_json_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weights.bin");
    std::fs::write(&path, b"\x00\x01binary").unwrap();
    let err = model::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("weights.bin") && err.contains("neither GGUF nor JSON"), "{err}");
    assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args(["verify", "tests/fixtures/verify/clean_m4_pro.jsonl", "--hardware", "m4-pro", "--model-file"])
        .arg(&path)
        .assert()
        .code(2);
}
