//! The GGUF reader on the project's own generated model (scripts/gen_model.py "tiny": 4 layers,
//! 256 wide, 4 heads, f16, 64K context), and `bench verify --model-file` with it. Skips with a
//! message when the model has not been generated on this machine (CI always generates it).

use std::path::PathBuf;

use ttft_bench::physics::model;

fn tiny_model() -> Option<PathBuf> {
    let cache = std::env::var_os("TTFT_BENCH_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ttft-bench")))?;
    let path = cache.join("models/tiny.gguf");
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("SKIP: {} absent (bash scripts/llama-server.sh model tiny generates it)", path.display());
        None
    }
}

#[test]
fn the_tiny_generated_model_profiles_as_its_generator_built_it() {
    let Some(path) = tiny_model() else { return };
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
