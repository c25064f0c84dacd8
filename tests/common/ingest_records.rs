//! Realistic records at scale, for the ingest benchmark (`benches/ingest.rs`) and the memory test
//! of the reading verbs (`tests/it/ingest_memory.rs`): llama.cpp-shaped measurements of 64 token
//! offsets at full f64 precision, a ~250-character output sample, llama.cpp's `timings` object,
//! thermal probes and cache evidence, as a llama.cpp sweep writes them (about 2.9 KB a line). One
//! in ten cells is a concurrent batch of 4 (members + group record) and a few are staggered
//! pairs, so batches and every record type take part.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::json;
use ttft_model::record::{
    CacheEvidence, CacheState, CellKey, GroupRecord, Measurement, Mode, PhysicsRecord, Record,
    SCHEMA_VERSION, Scenario, StaggeredRecord, ThermalRecord,
};
use ttft_model::stats::Rng;

const DECODE_CEILING_TPS: f64 = 90.0;
const PREFILL_CEILING_TPS: f64 = 9000.0;

const WORDS: [&str; 12] =
    ["cache", "keeps", "keys", "and", "values", "of", "earlier", "tokens", "so", "the", "model", "reads"];

fn sample(rng: &mut Rng) -> String {
    let mut s = String::new();
    while s.len() < 250 {
        s.push_str(WORDS[(rng.next_u64() % WORDS.len() as u64) as usize]);
        s.push(' ');
    }
    s
}

/// One llama.cpp-shaped measurement of `cell` (request `index`, of batch `group` if any).
pub fn measurement(
    rng: &mut Rng,
    run_id: &str,
    cell: CellKey,
    index: u32,
    group: Option<String>,
) -> Measurement {
    let ctx = f64::from(cell.context_tokens);
    let ttft = ctx / 2000.0 * 1000.0 * (0.9 + 0.2 * rng.unit());
    let mut t = ttft;
    let offsets: Vec<f64> = (0..64)
        .map(|_| {
            let at = t;
            t += 20.0 + 5.0 * rng.unit();
            at
        })
        .collect();
    let e2e = t;
    let input = u64::from(cell.context_tokens);
    let cached = if cell.cache_state == CacheState::Cold { 0 } else { input - 16 };
    Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.into(),
        request_index: index,
        group_id: group,
        started_at: format!(
            "2026-02-05T21:{:02}:{:02}.{:03}Z",
            rng.next_u64() % 60,
            rng.next_u64() % 60,
            rng.next_u64() % 1000
        ),
        nonce: format!("{:012}", rng.next_u64() % 1_000_000_000_000),
        send_lag_ms: Some(rng.unit() * 0.3),
        first_byte_ms: Some(ttft * 0.98),
        first_event_ms: Some(ttft * 0.99),
        ttft_ms: Some(ttft),
        e2e_ms: Some(e2e),
        token_offsets_ms: offsets,
        input_tokens: Some(input),
        output_tokens: Some(64),
        cached_tokens: Some(cached),
        expected_input_tokens: Some(input),
        delta_count: 64,
        decode_tps: ttft_model::record::decode_tps(Some(64), Some(ttft), Some(e2e)),
        prefill_tps: ttft_model::record::prefill_tps(Some(input), Some(ttft)),
        max_tokens: 64,
        finish_reason: Some("length".into()),
        output_sample: sample(rng),
        cache_evidence: Some(CacheEvidence {
            source: "timings".into(),
            cached_tokens: Some(cached),
            prompt_evaluated_tokens: Some(input - cached),
            ..Default::default()
        }),
        cache_state_confirmed: Some(true),
        server_timings: Some(Box::new(json!({
            "prompt_n": input - cached, "prompt_ms": ttft * 0.95, "prompt_per_token_ms": ttft / ctx,
            "prompt_per_second": ctx / ttft * 1000.0, "predicted_n": 64, "predicted_ms": e2e - ttft,
            "predicted_per_token_ms": (e2e - ttft) / 64.0, "predicted_per_second": 64000.0 / (e2e - ttft),
            "cache_n": cached
        }))),
        quality_ok: true,
        thermal: Some(ThermalRecord {
            policy: ttft_model::record::PolicyKind::Probe,
            baseline_tps: Some(45.0 + rng.unit()),
            probe_tps: vec![44.0 + rng.unit(), 44.5 + rng.unit()],
            cooldown_s: 10.0 + rng.unit(),
            recovered: true,
            before: None,
            after: None,
        }),
        // Fractions of the stored ceilings as the sweep computes them (`verify` recomputes them:
        // made-up fractions would turn every record into a finding, and the run into a
        // benchmark of printing them).
        physics: Some(PhysicsRecord {
            decode_ceiling_tps: Some(DECODE_CEILING_TPS),
            decode_fraction: ttft_model::record::decode_tps(Some(64), Some(ttft), Some(e2e))
                .map(|d| d / DECODE_CEILING_TPS),
            prefill_ceiling_tps: Some(PREFILL_CEILING_TPS),
            prefill_fraction: Some((input - cached) as f64 / (ttft / 1000.0) / PREFILL_CEILING_TPS),
        }),
        cell,
        ..Default::default()
    }
}

/// `n` records of one run (a little more when the last batch overshoots).
pub fn records(n: usize) -> Vec<Record> {
    let mut rng = Rng::new(20_260_208);
    let run_id = "20260205T213000Z-ingest";
    let contexts = [1024, 2048, 4096, 8192, 16384, 32768];
    let mut out = Vec::with_capacity(n + 8);
    let mut run: u32 = 0;
    while out.len() < n {
        run += 1;
        for (i, &context_tokens) in contexts.iter().enumerate() {
            for cache_state in [CacheState::Cold, CacheState::Warm, CacheState::Hot] {
                for mode in [Mode::Streaming, Mode::NonStreaming] {
                    let batch_size = if (run as usize + i).is_multiple_of(10) { 4 } else { 1 };
                    let cell = CellKey {
                        dataset_row: None,
                        model: "bench/ingest-8b".into(),
                        scenario: Scenario::of(cache_state, batch_size),
                        cache_state,
                        mode,
                        context_tokens,
                        batch_size,
                        run,
                    };
                    if batch_size == 1 {
                        out.push(Record::Measurement(Box::new(measurement(&mut rng, run_id, cell, 0, None))));
                        continue;
                    }
                    let group_id = format!("{run_id}:{run}:{i}:{}:{}", cache_state.as_str(), mode.as_str());
                    for index in 0..batch_size {
                        let m = measurement(&mut rng, run_id, cell.clone(), index, Some(group_id.clone()));
                        out.push(Record::Measurement(Box::new(m)));
                    }
                    out.push(Record::Group(Box::new(GroupRecord {
                        schema_version: SCHEMA_VERSION,
                        run_id: run_id.into(),
                        cell,
                        group_id,
                        started_at: "2026-02-05T21:30:00.000Z".into(),
                        wall_ms: 5000.0 + rng.unit(),
                        system_tps: Some(40.0 + rng.unit()),
                        per_request_tps: Some(10.0 + rng.unit()),
                        avg_ttft_ms: Some(900.0 + rng.unit()),
                        avg_e2e_ms: Some(4900.0 + rng.unit()),
                        total_output_tokens: 256,
                        requests_ok: batch_size,
                        requests_failed: 0,
                        error: None,
                        server_metrics: None,
                    })));
                }
            }
        }
        if run.is_multiple_of(50) {
            for scenario in [Scenario::StaggeredBatched, Scenario::StaggeredSequential] {
                out.push(Record::Staggered(Box::new(StaggeredRecord {
                    schema_version: SCHEMA_VERSION,
                    run_id: run_id.into(),
                    cell: CellKey {
                        model: "bench/ingest-8b".into(),
                        scenario,
                        context_tokens: 4096,
                        batch_size: 2,
                        run: run / 50,
                        ..Default::default()
                    },
                    started_at: "2026-02-05T21:30:00.000Z".into(),
                    user_a_ttft_ms: Some(2000.0 + rng.unit()),
                    user_a_e2e_ms: Some(3500.0 + rng.unit()),
                    user_b_ttft_ms: Some(2100.0 + rng.unit()),
                    user_b_e2e_ms: Some(3600.0 + rng.unit()),
                    user_a_token_offsets_ms: (0..64)
                        .map(|k| 2000.0 + f64::from(k) * 23.3 + rng.unit())
                        .collect(),
                    user_b_token_offsets_ms: (0..64)
                        .map(|k| 2100.0 + f64::from(k) * 23.3 + rng.unit())
                        .collect(),
                    quality_ok: true,
                    ..Default::default()
                })));
            }
        }
    }
    out
}

/// `records` as a run directory's `measurements.jsonl`, one line each as bench writes them; the
/// directory (`dir/run`).
pub fn write_run_dir(dir: &Path, records: &[Record]) -> PathBuf {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).expect("create the run dir");
    let file = std::fs::File::create(run.join("measurements.jsonl")).expect("create measurements.jsonl");
    let mut w = BufWriter::new(file);
    for r in records {
        serde_json::to_writer(&mut w, r).expect("serialize a record");
        w.write_all(b"\n").expect("write a record");
    }
    w.flush().expect("flush measurements.jsonl");
    run
}
