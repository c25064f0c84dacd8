//! Ceilings checked against real measurements (docs/hardware.md: the H200 llama.cpp run, the
//! origin benchmark's M4 Pro numbers).

use super::*;
use ttft_model::record::{CacheEvidence, CellKey, Mode, Scenario};

fn h200_measured() -> Hardware {
    // The ceilings measured on the lent H200: 4,214 GB/s read, 770 TFLOP/s fp16 matmul.
    Hardware { name: "custom".into(), bandwidth_gbps: 4214.0, tflops: Some(770.0) }
}

fn llama_8b_shape() -> ModelProfile {
    ModelProfile {
        name: "random 8B shape".into(),
        weight_bytes: 14.48e9,
        params: 7.24e9,
        n_layer: Some(32),
        n_embd: Some(4096),
        n_head: Some(32),
        n_head_kv: Some(8),
        head_dim: Some(128),
        kv_bytes_per_token: Some(model::kv_bytes_per_token(32, 8, 128, 2.0)),
        ..Default::default()
    }
}

fn m4_pro_gemma() -> (Hardware, ModelProfile) {
    let hw = resolve_hardware(Some("m4-pro"), None, None).unwrap().unwrap();
    let model = resolve_model(Some("8.03GB"), Some("12B"), None).unwrap().unwrap();
    (hw, model)
}

fn measurement(state: CacheState, input: u64, ttft_ms: f64, decode_tps: f64) -> Measurement {
    Measurement {
        cell: CellKey {
            dataset_row: None,
            model: "m".into(),
            scenario: Scenario::Cold,
            cache_state: state,
            mode: Mode::Streaming,
            context_tokens: input as u32,
            batch_size: 1,
            run: 1,
        },
        input_tokens: Some(input),
        output_tokens: Some(128),
        ttft_ms: Some(ttft_ms),
        decode_tps: Some(decode_tps),
        ..Default::default()
    }
}

#[test]
fn h200_decode_sits_at_71_and_67_percent_of_its_ceiling() {
    let (hw, m) = (h200_measured(), llama_8b_shape());
    let at_1k = ceilings(&hw, &m, &measurement(CacheState::Cold, 1040, 55.0, 206.0));
    let frac = at_1k.decode_fraction.unwrap();
    assert!((0.70..0.73).contains(&frac), "1K: {frac}");
    let at_32k = ceilings(&hw, &m, &measurement(CacheState::Cold, 32_784, 2324.0, 151.0));
    let frac = at_32k.decode_fraction.unwrap();
    assert!((0.66..0.69).contains(&frac), "32K: {frac}");
}

#[test]
fn h200_prefill_at_32k_is_about_43_percent_once_attention_counts() {
    let (hw, m) = (h200_measured(), llama_8b_shape());
    // 32,784 tokens at 14.3k tok/s.
    let rec = ceilings(&hw, &m, &measurement(CacheState::Cold, 32_784, 32_784.0 / 14.3, 151.0));
    let frac = rec.prefill_fraction.unwrap();
    assert!((0.41..0.45).contains(&frac), "{frac}");
    // Attention: 2 x 32 x 32784 x 4096 FLOPs per token = 8.59 GFLOP.
    let attention = prefill_flops_per_token(&m, 0, 32_784) - 2.0 * 7.24e9;
    assert!((attention / 8.594e9 - 1.0).abs() < 0.001, "{attention}");
}

#[test]
fn batch_shares_weight_reads() {
    let (hw, m) = (h200_measured(), llama_8b_shape());
    let one = decode_ceiling_tps(&hw, &m, 1040, 1);
    let eight = decode_ceiling_tps(&hw, &m, 1040, 8);
    // Weights dominate at 1K: 8 streams lose only the KV share, far from 1/8.
    assert!(eight < one && eight > 0.9 * one, "{one} {eight}");
    // Measured on the H200: 766 tok/s aggregate at B = 8 is under 8 x the per-stream ceiling.
    assert!(766.0 < 8.0 * eight);
}

#[test]
fn seed_004_physics_m4_pro_gemma() {
    let (hw, m) = m4_pro_gemma();
    let ceiling = decode_ceiling_tps(&hw, &m, 4096, 1);
    assert!((ceiling - 34.0).abs() < 0.05, "{ceiling}");
    let honest = ceilings(&hw, &m, &measurement(CacheState::Cold, 1024, 4000.0, 33.0));
    assert!((0.96..0.98).contains(&honest.decode_fraction.unwrap()));
    let paper = ceilings(&hw, &m, &measurement(CacheState::Cold, 1024, 4000.0, 77.7));
    assert!(paper.decode_fraction.unwrap() > 2.2, "77.7 tok/s needs 624 GB/s");
}

#[test]
fn moe_decode_uses_active_bytes() {
    let hw = resolve_hardware(Some("m4-pro"), None, None).unwrap().unwrap();
    let ds = model::find_builtin("mlx-community/DeepSeek-Coder-V2-Lite-Instruct-4bit-mlx").unwrap();
    let rec = ceilings(&hw, ds, &measurement(CacheState::Cold, 807, 1090.0, 78.8));
    assert!(rec.decode_fraction.unwrap() < 0.5, "the origin's honest ~80 tok/s must pass: {rec:?}");
    // Against all the weights it would look impossible.
    assert!(78.8 > hw.bandwidth_gbps * 1e9 / ds.weight_bytes);
}

#[test]
fn prefill_counts_only_computed_tokens() {
    let mut warm = measurement(CacheState::Warm, 4096, 120.0, 30.0);
    assert_eq!(computed_prompt_tokens(&warm), None, "warm without evidence: unknown");
    warm.cache_evidence = Some(CacheEvidence {
        source: "timings".into(),
        cached_tokens: Some(4090),
        prompt_evaluated_tokens: Some(6),
        ..Default::default()
    });
    assert_eq!(computed_prompt_tokens(&warm), Some(6));
    let mut cold = measurement(CacheState::Cold, 4096, 120.0, 30.0);
    assert_eq!(computed_prompt_tokens(&cold), Some(4096));
    cold.cached_tokens = Some(4000);
    assert_eq!(computed_prompt_tokens(&cold), Some(96));
}

#[test]
fn hardware_and_model_resolution_errors_are_clear() {
    assert!(resolve_hardware(Some("m9"), None, None).unwrap_err().to_string().contains("m4-pro"));
    assert!(resolve_hardware(None, Some(-1.0), None).unwrap_err().to_string().contains("bandwidth"));
    assert_eq!(resolve_hardware(None, None, Some(9.0)).ok(), Some(None));
    let custom = resolve_hardware(None, Some(273.0), Some(9.0)).unwrap().unwrap();
    assert_eq!((custom.name.as_str(), custom.tflops), ("custom", Some(9.0)));
    let over = resolve_hardware(Some("h200"), Some(4214.0), None).unwrap().unwrap();
    assert_eq!((over.bandwidth_gbps, over.tflops), (4214.0, Some(989.0)));
    assert!(resolve_model(Some("8GB"), None, None).unwrap_err().to_string().contains("parameter count"));
    assert_eq!(resolve_model(None, None, None).ok(), Some(None));
}

/// This crate knows no flags: each error names the quantity it is about (`PhysicsInput`), and the
/// layer that owns the flags (the root crate) names them. Every input a user can get wrong is
/// tried here, read both ways: alone (no `--`), and with the caller's names (each one it is about).
#[test]
fn physics_errors_name_the_quantity_never_a_flag() {
    let missing = std::path::Path::new("/nonexistent/model.gguf");
    let cases = [
        (resolve_hardware(Some("m9"), None, None).unwrap_err(), &["<HW>", "<BW>", "<TF>"][..]),
        (resolve_hardware(None, Some(-1.0), None).unwrap_err(), &["<BW>"]),
        (resolve_hardware(None, None, Some(1e20)).unwrap_err(), &["<TF>"]),
        (resolve_model(Some("8XB"), Some("12B"), None).unwrap_err(), &["<MB>"]),
        (resolve_model(Some("lots"), Some("12B"), None).unwrap_err(), &["<MB>"]),
        (resolve_model(Some("8GB"), Some("12X"), None).unwrap_err(), &["<P>"]),
        (resolve_model(Some("8GB"), Some("many"), None).unwrap_err(), &["<P>"]),
        (resolve_model(Some("0GB"), Some("12B"), None).unwrap_err(), &["<MB>"]),
        (resolve_model(Some("2000TB"), Some("12B"), None).unwrap_err(), &["<MB>"]),
        (resolve_model(Some("8GB"), None, None).unwrap_err(), &["<P>", "<MB>"]),
        (resolve_model(None, Some("12B"), None).unwrap_err(), &["<P>", "<MB>"]),
        (resolve_model(None, None, Some(missing)).unwrap_err(), &["<MF>"]),
        (PhysicsError::NoWeightSize { file: "tiny.gguf".into() }, &["<MF>", "<MB>", "<P>"]),
    ];
    for (e, names) in &cases {
        let message = e.to_string();
        assert!(!message.contains("--"), "a lower crate's message names a flag: {message}");
        let named = e.describe(&|input| match input {
            PhysicsInput::Hardware => "<HW>",
            PhysicsInput::BandwidthGbps => "<BW>",
            PhysicsInput::Tflops => "<TF>",
            PhysicsInput::ModelFile => "<MF>",
            PhysicsInput::ModelBytes => "<MB>",
            PhysicsInput::Params => "<P>",
        });
        for name in *names {
            assert!(named.contains(name), "{named} names {name}");
        }
    }
}

#[test]
fn warm_reload_cost_follows_storage_bandwidth() {
    // Measured on the H200: the 32K slot file is 4.31 GB; at 1.44 GB/s it took 2,994 ms.
    let ms = expected_reload_ms(&llama_8b_shape(), 32_911, 1.44).unwrap();
    assert!((ms / 2994.0 - 1.0).abs() < 0.01, "{ms}");
}
