//! Record round-trips and the derived rates (decode, prefill, output sample).
use crate::common;
use ttft_model::record::*;

fn sample() -> Measurement {
    Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        cell: CellKey {
            dataset_row: None,
            model: "m".into(),
            scenario: Scenario::Cold,
            cache_state: CacheState::Cold,
            mode: Mode::NonStreaming,
            context_tokens: 1024,
            batch_size: 1,
            run: 2,
        },
        ttft_ms: None,
        e2e_ms: Some(812.5),
        token_offsets_ms: vec![1.0, 2.5],
        input_tokens: Some(1024),
        quality_flags: vec![QualityFlag { flag: "x".into(), reason: "y".into(), fails_gate: false }],
        error: Some(ErrorInfo::new(ErrorKind::Timeout, "slow")),
        ..Default::default()
    }
}

#[test]
fn record_round_trips_through_json_with_flat_cell_fields() {
    let rec = Record::Measurement(Box::new(sample()));
    let line = serde_json::to_string(&rec).unwrap();
    let value: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(value["record_type"], "measurement");
    assert_eq!(value["mode"], "non-streaming");
    assert_eq!(value["context_tokens"], 1024);
    assert!(value["ttft_ms"].is_null(), "non-streaming TTFT must be null, not absent or 0");
    assert_eq!(value["error"]["kind"], "timeout");
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back, rec);
}

#[test]
fn decode_rate_excludes_the_first_token() {
    // 65 tokens, first at 100 ms, last at 1100 ms: 64 intervals in one second.
    // Rates are divisions: equal to the literal up to rounding, however the formula is arranged.
    common::assert_close(decode_tps(Some(65), Some(100.0), Some(1100.0)).unwrap(), 64.0, "decode tok/s");
    assert_eq!(decode_tps(Some(1), Some(100.0), Some(1100.0)), None);
    assert_eq!(decode_tps(Some(65), Some(100.0), Some(100.0)), None);
    assert_eq!(decode_tps(None, Some(100.0), Some(1100.0)), None);
    assert_eq!(decode_tps(Some(65), None, Some(1100.0)), None);
}

#[test]
fn prefill_rate_is_input_over_ttft() {
    common::assert_close(prefill_tps(Some(4096), Some(2048.0)).unwrap(), 2000.0, "prefill tok/s");
    assert_eq!(prefill_tps(Some(0), Some(2048.0)), None);
    assert_eq!(prefill_tps(Some(10), Some(0.0)), None);
}

#[test]
fn output_sample_cuts_on_characters() {
    let long = "é".repeat(600);
    assert_eq!(output_sample(&long).chars().count(), OUTPUT_SAMPLE_CHARS);
}
