//! Other tools' result files: vLLM `bench serve`, AIPerf and GuideLLM, and the origin's own
//! streaming_benchmark.py (origin-streaming.json, written by it against agent-memory on this machine
//! class: docs/agent-memory.md). The other fixtures under
//! tests/fixtures/import/ were written by the real tools against a real llama-server
//! (scripts/gen_import_fixtures.sh regenerates them; its header names the versions). Each loads,
//! verify/report/merge accept it, our numbers agree with the tool's own aggregates, and an edited
//! copy with an impossible decode rate fails verify's physics ceiling.

use std::path::{Path, PathBuf};

use crate::common;

use serde_json::{Value, json};
use ttft_model::record::{Measurement, Record};
use ttft_results::results::sources::{self, SourceKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import").join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn measurements(path: &Path) -> Vec<Measurement> {
    let src = sources::load(path).unwrap_or_else(|e| panic!("{e}"));
    src.records
        .into_iter()
        .map(|r| match r {
            Record::Measurement(m) => *m,
            other => panic!("not a measurement: {other:?}"),
        })
        .collect()
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.into_iter().collect();
    v.iter().sum::<f64>() / v.len() as f64
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

const MODEL: &str = "/root/.cache/ttft-bench/models/tiny.gguf";

/// The fixtures, with the kind each loads as and how many records it holds.
const FIXTURES: [(&str, &str, usize); 5] = [
    ("vllm_detailed.json", "vllm", 4),
    ("vllm_aggregate.json", "vllm", 1),
    ("aiperf/profile_export.jsonl", "aiperf", 4),
    ("aiperf/profile_export_aiperf.json", "aiperf", 1),
    ("guidellm_benchmarks.json", "guidellm", 4),
];

#[test]
fn every_fixture_loads_as_its_tool_with_what_it_cannot_know() {
    for (name, kind, n) in FIXTURES {
        let src = sources::load(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(matches!(src.kind, SourceKind::Imported(_)), "{name}");
        assert_eq!((src.kind.as_str(), src.records.len()), (kind, n), "{name}");
        for r in &src.records {
            assert_eq!(r.cell().model, MODEL, "{name}");
            let reason =
                ttft_results::results::import::imported_reason(r).unwrap_or_else(|| panic!("{name}"));
            assert!(
                reason.contains("cache state unknown") && reason.contains("hardware unknown"),
                "{reason}"
            );
        }
    }
}

#[test]
fn the_format_is_told_by_content_not_by_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join("results.txt");
    std::fs::copy(fixture("vllm_detailed.json"), &renamed).unwrap();
    assert_eq!(sources::load(&renamed).unwrap().kind.as_str(), "vllm");
    let renamed = dir.path().join("run.json");
    std::fs::copy(fixture("aiperf/profile_export.jsonl"), &renamed).unwrap();
    let src = sources::load(&renamed).unwrap();
    assert_eq!((src.kind.as_str(), src.records.len()), ("aiperf", 4));
    assert!(src.records[0].cell().model.starts_with("unknown"), "no aggregate file beside it: no model");
}

#[test]
fn vllm_per_request_numbers_give_its_own_aggregates() {
    let doc = read_json(&fixture("vllm_detailed.json"));
    let ms = measurements(&fixture("vllm_detailed.json"));
    let ttfts: Vec<f64> = ms.iter().map(|m| m.ttft_ms.unwrap()).collect();
    assert!(close(mean(ttfts.iter().copied()), doc["mean_ttft_ms"].as_f64().unwrap()));
    let mut sorted = ttfts.clone();
    sorted.sort_by(f64::total_cmp);
    assert!(close((sorted[1] + sorted[2]) / 2.0, doc["median_ttft_ms"].as_f64().unwrap()));
    // vLLM's TPOT is (latency - ttft) / (output - 1): the inverse of our decode rate.
    let tpot = mean(ms.iter().map(|m| 1000.0 / m.decode_tps.unwrap()));
    assert!(close(tpot, doc["mean_tpot_ms"].as_f64().unwrap()), "{tpot}");
    let out: u64 = ms.iter().map(|m| m.output_tokens.unwrap()).sum();
    assert_eq!(out, doc["total_output_tokens"].as_u64().unwrap());
    let input: u64 = ms.iter().map(|m| m.input_tokens.unwrap()).sum();
    assert_eq!(input, doc["total_input_tokens"].as_u64().unwrap());
    // Token offsets: the first token, then one per inter-token latency.
    for (m, itls) in ms.iter().zip(doc["itls"].as_array().unwrap()) {
        assert_eq!(m.token_offsets_ms.len(), 1 + itls.as_array().unwrap().len());
    }
    // One cell (the run's median prompt), one run per request.
    let runs: Vec<u32> = ms.iter().map(|m| m.cell.run).collect();
    assert_eq!(runs, [1, 2, 3, 4]);
    assert!(ms.iter().all(|m| m.cell.context_tokens == ms[0].cell.context_tokens));
}

#[test]
fn vllm_aggregates_only_become_the_mean_request() {
    let doc = read_json(&fixture("vllm_aggregate.json"));
    let ms = measurements(&fixture("vllm_aggregate.json"));
    assert_eq!(ms.len(), 1);
    assert!(close(ms[0].ttft_ms.unwrap(), doc["mean_ttft_ms"].as_f64().unwrap()));
    assert!(close(ms[0].decode_tps.unwrap(), 1000.0 / doc["mean_tpot_ms"].as_f64().unwrap()));
    let reason = &ms[0].quality_flags[0].reason;
    assert!(reason.contains("aggregates only") && reason.contains("mean of 4 requests"), "{reason}");
}

#[test]
fn aiperf_records_give_its_own_aggregates() {
    let agg = read_json(&fixture("aiperf/profile_export_aiperf.json"));
    let avg = |k: &str| agg[k]["avg"].as_f64().unwrap();
    let ms = measurements(&fixture("aiperf/profile_export.jsonl"));
    assert!(close(mean(ms.iter().map(|m| m.ttft_ms.unwrap())), avg("time_to_first_token")));
    assert!(close(mean(ms.iter().map(|m| m.e2e_ms.unwrap())), avg("request_latency")));
    // The server's usage, and the tool's own count kept as what it expected.
    assert!(close(mean(ms.iter().map(|m| m.input_tokens.unwrap() as f64)), avg("usage_prompt_tokens")));
    assert!(close(
        mean(ms.iter().map(|m| m.expected_input_tokens.unwrap() as f64)),
        avg("input_sequence_length")
    ));
    let cached: u64 = ms.iter().map(|m| m.cached_tokens.unwrap()).sum();
    assert!(close(cached as f64, agg["total_usage_prompt_cache_read_tokens"]["avg"].as_f64().unwrap()));
    assert!(ms[0].quality_flags[0].reason.contains("at concurrency 2"), "{:?}", ms[0].quality_flags);
    let one = measurements(&fixture("aiperf/profile_export_aiperf.json"));
    assert_eq!(
        (one[0].ttft_ms, one[0].decode_tps),
        (Some(avg("time_to_first_token")), Some(avg("output_token_throughput_per_user")))
    );
}

#[test]
fn guidellm_requests_give_its_own_aggregates() {
    let doc = read_json(&fixture("guidellm_benchmarks.json"));
    let b = &doc["benchmarks"][0];
    let ms = measurements(&fixture("guidellm_benchmarks.json"));
    let metric = |k: &str| b["metrics"][k]["successful"]["mean"].as_f64().unwrap();
    assert!(close(mean(ms.iter().map(|m| m.ttft_ms.unwrap())), metric("time_to_first_token_ms")));
    assert!(close(mean(ms.iter().map(|m| m.e2e_ms.unwrap() / 1000.0)), metric("request_latency")));
    // GuideLLM's per-request ITL is (last token - first token) / (output - 1); ours runs to the
    // end of the response, a fraction of a millisecond later: the two agree within 0.1%.
    for (m, r) in ms.iter().zip(b["requests"]["successful"].as_array().unwrap()) {
        let itl = r["inter_token_latency_ms"].as_f64().unwrap();
        assert!((1000.0 / m.decode_tps.unwrap() - itl).abs() < 1e-3 * itl, "{itl}");
    }
}

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = common::bench(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn verify_report_and_merge_accept_every_fixture() {
    let dir = tempfile::tempdir().unwrap();
    for (name, kind, n) in FIXTURES {
        let path = fixture(name);
        let path = path.to_str().unwrap();
        let (code, out, err) = bench(&["verify", path, "--format", "json"]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        let report: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["inputs"][0]["kind"], kind);
        let infos: Vec<&Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "imported_unknowns")
            .collect();
        assert_eq!(infos.len(), 1, "{name}: {report:#}");
        assert_eq!(infos[0]["severity"], "info");
        assert!(infos[0]["message"].as_str().unwrap().starts_with(&format!("{n} record(s) imported from")));

        let (code, out, err) = bench(&["report", path, "--format", "csv"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains(MODEL), "{out}");
        assert!(err.contains("note:") && err.contains("cache state unknown"), "{err}");

        let merged = dir.path().join(format!("{kind}-{n}.json"));
        let (code, _, err) = bench(&["merge", path, "-o", merged.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
        let canonical = sources::load(&merged).unwrap();
        assert_eq!((canonical.kind, canonical.records.len()), (SourceKind::Canonical, n), "{name}");
    }
}

/// An edited copy of a fixture (in `dir`, under the fixture's own name).
fn edited(dir: &Path, name: &str, edit: impl Fn(&mut Value)) -> PathBuf {
    let mut doc = read_json(&fixture(name));
    edit(&mut doc);
    let path = dir.join(Path::new(name).file_name().unwrap());
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    path
}

fn decode_errors(path: &Path) -> Vec<Value> {
    let args = ["verify", path.to_str().unwrap(), "--format", "json", "--hardware", "h200"];
    let (code, out, err) = bench(&[&args[..], &["--model-bytes", "8GB", "--params", "8B"]].concat());
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let found: Vec<Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "decode_above_ceiling" && f["severity"] == "error")
        .cloned()
        .collect();
    assert_eq!(code, if found.is_empty() { 0 } else { 1 }, "{report:#}");
    found
}

#[test]
fn an_impossible_decode_rate_in_someone_elses_file_is_a_physics_error() {
    let dir = tempfile::tempdir().unwrap();
    // As published: a tiny model on a CPU is far below an 8B model's H200 ceiling.
    for (name, _, _) in FIXTURES.iter().filter(|f| !f.0.ends_with(".jsonl")) {
        assert_eq!(decode_errors(&fixture(name)), Vec::<Value>::new(), "{name}");
    }
    // vLLM: every request finished 1 ms after its first token (15 tokens in 1 ms).
    let vllm = edited(dir.path(), "vllm_detailed.json", |d| {
        let ttfts: Vec<f64> = d["ttfts"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        d["latencies"] = json!(ttfts.iter().map(|t| t + 0.001).collect::<Vec<f64>>());
    });
    let found = decode_errors(&vllm);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0]["value"].as_f64().unwrap() > found[0]["limit"].as_f64().unwrap());
    // Aggregates only: a TPOT of 0.1 ms claims 10,000 tok/s.
    let vllm = edited(dir.path(), "vllm_aggregate.json", |d| d["mean_tpot_ms"] = json!(0.1));
    assert_eq!(decode_errors(&vllm).len(), 1);
    let aiperf = edited(dir.path(), "aiperf/profile_export_aiperf.json", |d| {
        d["output_token_throughput_per_user"]["avg"] = json!(9000.0);
    });
    assert_eq!(decode_errors(&aiperf).len(), 1);
    let guidellm = edited(dir.path(), "guidellm_benchmarks.json", |d| {
        for r in d["benchmarks"][0]["requests"]["successful"].as_array_mut().unwrap() {
            r["request_latency"] = json!(r["time_to_first_token_ms"].as_f64().unwrap() / 1000.0 + 0.001);
        }
    });
    assert_eq!(decode_errors(&guidellm).len(), 4);
}

/// Request i of a vLLM result is entry i of each per-request array: arrays of different lengths
/// cannot be paired up and were silently cut to the shortest. Refused naming the file and the
/// arrays, by every verb that reads inputs.
#[test]
fn vllm_arrays_of_different_lengths_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let cut = edited(dir.path(), "vllm_detailed.json", |d| {
        d["ttfts"].as_array_mut().unwrap().pop();
    });
    let path = cut.to_str().unwrap();
    let merged = dir.path().join("m.json");
    for args in
        [vec!["verify", path], vec!["report", path], vec!["merge", path, "-o", merged.to_str().unwrap()]]
    {
        let (code, _, err) = bench(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(&format!("{path}:1: per-request arrays differ in length")), "{err}");
        assert!(err.contains("ttfts 3") && err.contains("latencies 4"), "{err}");
    }
    assert!(!merged.exists());
    // An aggregates-only result keeps some arrays (latencies, queue_times), equally long: accepted.
    let (code, _, err) = bench(&["verify", fixture("vllm_aggregate.json").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}

/// A token count no request can have (1e30, 2^64, negative, fractional) is refused naming the file
/// and the field, not saturated to 2^64 - 1 or read as unknown.
#[test]
fn absurd_token_counts_in_imports_are_refused_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("vllm_detailed.json")).unwrap();
    let doc = read_json(&fixture("vllm_detailed.json"));
    let compact = serde_json::to_string(&doc).unwrap();
    let first_input = doc["input_lens"][0].to_string();
    assert!(!text.is_empty());
    let cases = [
        ("input_lens", "1e30", "input_lens[0]"),
        ("input_lens", "18446744073709551616", "input_lens[0]"),
        ("input_lens", "4294967296", "input_lens[0]"),
        ("input_lens", "-3", "input_lens[0]"),
        ("output_lens", "1e30", "output_lens[0]"),
    ];
    for (field, value, named) in cases {
        let first =
            if field == "input_lens" { first_input.clone() } else { doc["output_lens"][0].to_string() };
        let edited = compact.replacen(&format!("\"{field}\":[{first}"), &format!("\"{field}\":[{value}"), 1);
        assert_ne!(edited, compact, "{field}");
        let path = dir.path().join("vllm.json");
        std::fs::write(&path, edited).unwrap();
        let (code, _, err) = bench(&["verify", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{field}={value}: {err}");
        assert!(err.contains(&format!("{}:1: {named}: ", path.display())), "{field}={value}: {err}");
    }
    // Aggregates: a total of 2^64 tokens.
    let agg =
        edited(dir.path(), "vllm_aggregate.json", |d| d["total_output_tokens"] = serde_json::json!(1e30));
    let (code, _, err) = bench(&["verify", agg.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("total_output_tokens"), "{err}");
    // GuideLLM: a request's output_tokens of 1e30.
    let guide = edited(dir.path(), "guidellm_benchmarks.json", |d| {
        d["benchmarks"][0]["requests"]["successful"][0]["output_tokens"] = serde_json::json!(1e30);
    });
    let (code, _, err) = bench(&["verify", guide.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("guidellm_benchmarks.json") && err.contains("output tokens"), "{err}");
}

/// The origin's own `streaming_benchmark.py` output, as it wrote it against agent-memory on the CI
/// machine class (docs/agent-memory.md): its cache states and modes kept as it claims them, its
/// "batch 2" rows read as the single requests it sent, and verify's findings on it.
#[test]
fn the_origins_streaming_benchmark_output_is_read_and_judged() {
    let path = fixture("origin-streaming.json");
    let src = sources::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(src.kind.as_str(), "origin_streaming");
    let ms = measurements(&path);
    assert_eq!(ms.len(), 72, "2 contexts x 2 modes x 3 states x 2 batch labels x 3 runs");
    assert!(ms.iter().all(|m| m.cell.batch_size == 1 && m.cache_state_confirmed.is_none()));
    for state in ["cold", "warm", "hot"] {
        assert_eq!(ms.iter().filter(|m| m.cell.cache_state.as_str() == state).count(), 24, "{state}");
    }
    // Non-streaming rows: the file's "TTFT" is its E2E; ours is null.
    assert!(ms.iter().filter(|m| m.cell.mode.as_str() == "non-streaming").all(|m| m.ttft_ms.is_none()));
    let (code, out, err) = bench(&["verify", "--format", "json", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let rules =
        |rule: &str| report["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == rule).count();
    // Its 4-characters-per-token prompts: 294 tokens for "256", 568 for "512".
    assert_eq!(rules("input_tokens_off_nominal"), 72, "{report:#}");
    assert_eq!(rules("warm_not_faster"), 1, "{report:#}");
    assert_eq!(report["summary"]["errors"], 1, "{report:#}");
    // Merged into a canonical file, every row is kept.
    let dir = tempfile::tempdir().unwrap();
    let merged = dir.path().join("origin.json");
    let (code, _, err) = bench(&["merge", path.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "{err}");
    let canonical = sources::load(&merged).unwrap();
    assert_eq!((canonical.kind, canonical.records.len()), (SourceKind::Canonical, 72));
}
