//! `bench verify` end to end on the fixtures of tests/fixtures/verify (see verify_fixtures.rs for
//! their numbers): each seed anomaly raises exactly its rule, clean data raises nothing, and the
//! exit codes are 0 / 1 / 2.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

use crate::common;

const M4_PRO_GEMMA: [&str; 6] = ["--hardware", "m4-pro", "--model-bytes", "8.03GB", "--params", "12B"];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verify").join(name)
}

/// Runs `bench verify --format json ARGS`; returns (exit code, report).
fn verify_json(inputs: &[&Path], flags: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .args(inputs)
        .args(flags)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), report)
}

/// (severity, rule) of every finding.
fn found(report: &Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["severity"].as_str().unwrap().to_string(), f["rule"].as_str().unwrap().to_string()))
        .collect()
}

fn only(report: &Value, severity: &str, rule: &str) -> Value {
    assert_eq!(found(report), vec![(severity.to_string(), rule.to_string())], "{report:#}");
    report["findings"][0].clone()
}

#[test]
fn clean_sweep_raises_nothing_with_or_without_physics() {
    let (code, report) = verify_json(&[&fixture("clean_m4_pro.jsonl")], &M4_PRO_GEMMA);
    assert_eq!((code, found(&report)), (0, vec![]), "{report:#}");
    assert_eq!(report["summary"]["records"], 18);
    let keys: Vec<&String> = report.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["findings", "inputs", "notes", "physics", "summary", "verify_schema"],
        "stable JSON shape"
    );
    assert_eq!(report["verify_schema"], 1);
    assert_eq!(report["summary"]["exit_code"], 0);
    assert_eq!(report["physics"][0]["hardware"]["bandwidth_gbps"], 273.0);

    let (code, report) = verify_json(&[&fixture("clean_m4_pro.jsonl")], &[]);
    assert_eq!((code, found(&report)), (0, vec![]));
    let notes = report["notes"].to_string();
    assert!(notes.contains("no hardware known") && notes.contains("skipped"), "{notes}");
}

#[test]
fn decode_77_7_on_an_m4_pro_is_impossible_and_33_passes() {
    let (code, report) = verify_json(&[&fixture("decode_77_7.jsonl")], &M4_PRO_GEMMA);
    let f = only(&report, "error", "decode_above_ceiling");
    assert_eq!(code, 1);
    assert_eq!(f["value"], 77.7);
    assert!((f["limit"].as_f64().unwrap() - 34.0).abs() < 0.05, "{f}");
    assert_eq!(f["cell"]["context_tokens"], 1024);
    assert_eq!(f["cell"]["run"], 2);
    assert!(f["message"].as_str().unwrap().contains("needs 624 GB/s"), "{f}");
}

/// The finding of `rule` at `severity`, where the only other finding is the warning that the
/// row failed bench's own quality gate (which the same numbers made bench write).
fn with_gate_failed(report: &Value, severity: &str, rule: &str) -> Value {
    let expected =
        vec![(severity.to_string(), rule.to_string()), ("warning".into(), "quality_gate_failed".into())];
    assert_eq!(found(report), expected, "{report:#}");
    report["findings"][0].clone()
}

#[test]
fn max_tokens_253_of_64() {
    let (code, report) = verify_json(&[&fixture("max_tokens_253.jsonl")], &M4_PRO_GEMMA);
    let f = with_gate_failed(&report, "error", "max_tokens_exceeded");
    assert_eq!(code, 1);
    common::assert_close(f["value"].as_f64().unwrap(), 253.0, "max_tokens_exceeded value");
    common::assert_close(f["limit"].as_f64().unwrap(), 64.0, "max_tokens_exceeded limit");
}

#[test]
fn input_tokens_0_in_streaming_is_missing_usage() {
    let (code, report) = verify_json(&[&fixture("input_tokens_0.jsonl")], &M4_PRO_GEMMA);
    let f = with_gate_failed(&report, "error", "usage_missing");
    assert_eq!(code, 1);
    assert!(f["message"].as_str().unwrap().starts_with("input_tokens 0"), "{f}");
}

#[test]
fn warm_0_98x_cold_is_a_broken_cache() {
    let (code, report) = verify_json(&[&fixture("warm_0_98.jsonl")], &M4_PRO_GEMMA);
    let f = only(&report, "error", "warm_not_faster");
    assert_eq!(code, 1);
    assert!((f["value"].as_f64().unwrap() - 0.98).abs() < 0.005, "{f}");
    assert_eq!(f["cell"]["cache_state"], "warm");
    assert_eq!(f["cell"]["context_tokens"], 4096);
    // Same verdict without any physics: the plain speed-up rule.
    let (code, report) = verify_json(&[&fixture("warm_0_98.jsonl")], &[]);
    only(&report, "error", "warm_not_faster");
    assert_eq!(code, 1);
}

#[test]
fn the_paper_run_stands_out_among_five_normal_runs() {
    let (code, report) = verify_json(&[&fixture("paper_run_outlier.jsonl")], &[]);
    let f = only(&report, "warning", "run_outlier");
    assert_eq!(code, 0, "a warning alone passes");
    assert_eq!(f["run_id"], "20260204T1959-paper");
    assert!(f["message"].as_str().unwrap().contains("6 of 6 cells"), "{f}");

    let (code, _) = verify_json(&[&fixture("paper_run_outlier.jsonl")], &["--strict"]);
    assert_eq!(code, 1, "--strict makes warnings fail");

    // With the M4 Pro's physics the same run is also impossible, cell by cell.
    let (code, report) = verify_json(&[&fixture("paper_run_outlier.jsonl")], &M4_PRO_GEMMA);
    assert_eq!(code, 1);
    let rules = found(&report);
    assert_eq!(rules.iter().filter(|(_, r)| r == "decode_above_ceiling").count(), 3);
    assert_eq!(rules.iter().filter(|(_, r)| r == "prefill_above_ceiling").count(), 3);
    assert_eq!(rules.len(), 7, "{rules:?}");
    for f in report["findings"].as_array().unwrap() {
        assert_eq!(f["run_id"], "20260204T1959-paper", "only the paper run is flagged: {f}");
    }
}

#[test]
fn runs_are_compared_across_files_given_together() {
    let dir = tempfile::tempdir().unwrap();
    // Each run of the fixture in a run directory of its own, as its sweep would leave it.
    let records = common::runs::records_of(&fixture("paper_run_outlier.jsonl"));
    let files: Vec<PathBuf> = records
        .chunks(3)
        .enumerate()
        .map(|(i, chunk)| common::runs::write(dir.path(), &format!("run{i}"), chunk))
        .collect();
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (_, report) = verify_json(&paths, &[]);
    let f = only(&report, "warning", "run_outlier");
    assert!(f["file"].as_str().unwrap().contains("run2"), "{f}");
    // One file alone has no siblings to be compared with.
    let (_, report) = verify_json(&paths[..1], &[]);
    assert_eq!(found(&report), vec![]);
}

#[test]
fn warm_slower_than_cold_on_an_h200_is_explained_by_storage_physics() {
    let h200 = ["--bandwidth-gbps", "4214", "--tflops", "770"];
    let config = fixture("config.json");
    let mut flags = h200.to_vec();
    flags.extend(["--model-file", config.to_str().unwrap()]);
    let (code, report) = verify_json(&[&fixture("h200_warm_slower_than_cold.jsonl")], &flags);
    assert_eq!(code, 0, "{report:#}");
    let rules = found(&report);
    assert_eq!(rules, vec![("info".into(), "warm_slower_explained".into()); 2], "{report:#}");
    assert_eq!(report["physics"][0]["models"][0]["kv_bytes_per_token"], 131072.0);
    // With a fast disk the reload should have won; but every warm record's evidence shows the
    // restored slot served the prompt, so the cache did its work: the restore is what is slow.
    flags.extend(["--storage-gbps", "50"]);
    let (code, report) = verify_json(&[&fixture("h200_warm_slower_than_cold.jsonl")], &flags);
    assert_eq!(code, 0, "{report:#}");
    assert!(found(&report).contains(&("info".into(), "warm_slower_explained".into())), "{report:#}");
    let text = report["findings"].to_string();
    assert!(text.contains("evidence shows the cache served") && text.contains("slower than that"), "{text}");
    assert!(!text.contains("the cache did nothing"), "{text}");
    // Without the KV size the physics cannot price the reload; the evidence still speaks.
    let mut plain = h200.to_vec();
    plain.extend(["--model-bytes", "14.48GB", "--params", "7.24B"]);
    let (code, report) = verify_json(&[&fixture("h200_warm_slower_than_cold.jsonl")], &plain);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(found(&report), vec![("info".into(), "warm_slower_explained".into()); 2]);
}

/// A run directory as a sweep on a host with `cpu_brand` given `flags` leaves it, holding the
/// records of the fixture `jsonl` (`common::runs`). Returns (its temp parent, the run).
fn run_dir(jsonl: &str, cpu_brand: &str, flags: &[&str]) -> (tempfile::TempDir, PathBuf) {
    use common::runs;
    let dir = tempfile::tempdir().unwrap();
    let records = runs::records_of(&fixture(jsonl));
    let mut flags = flags.to_vec();
    flags.extend(["--model", records[0].cell().model.as_str()]);
    let host = ttft_bench::meta::HostFacts { cpu_brand: cpu_brand.into(), ..Default::default() };
    let meta = ttft_bench::meta::RunMeta { host, ..runs::meta("r", &flags) };
    let run = runs::write_with(dir.path(), "r", &meta, &records);
    (dir, run)
}

#[test]
fn physics_falls_back_to_run_json_and_the_builtin_model_table() {
    let (_dir, run) = run_dir("decode_77_7.jsonl", "Apple M4 Pro", &["--hardware", "m4-pro"]);
    let (code, report) = verify_json(&[&run], &[]);
    only(&report, "error", "decode_above_ceiling");
    assert_eq!(code, 1);
    assert_eq!(report["physics"][0]["models"][0]["source"], "builtin");
}

#[test]
fn hardware_other_than_the_hosts_is_a_warning() {
    let (_dir, run) = run_dir("clean_m4_pro.jsonl", "Apple M4 Max", &["--hardware", "m4-max-40c"]);
    let (code, report) = verify_json(&[&run], &M4_PRO_GEMMA);
    let f = only(&report, "warning", "hardware_mismatch");
    assert_eq!(code, 0);
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("m4-pro") && msg.contains("m4-max-40c"), "{msg}");
}

#[test]
fn without_hardware_the_note_suggests_the_hosts_profile() {
    let (_dir, run) = run_dir("clean_m4_pro.jsonl", "Apple M4 Pro", &[]);
    let (_, report) = verify_json(&[&run], &[]);
    assert!(report["notes"].to_string().contains("try --hardware m4-pro"), "{report:#}");
}

#[test]
fn unusable_input_exits_2_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    let good = std::fs::read_to_string(fixture("clean_m4_pro.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    std::fs::write(&path, format!("{first}\n{{not json\n")).unwrap();
    Command::cargo_bin("bench")
        .unwrap()
        .args(["verify", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("bad.jsonl:2:"));
    Command::cargo_bin("bench").unwrap().args(["verify", "/nonexistent/x.jsonl"]).assert().code(2);
    Command::cargo_bin("bench")
        .unwrap()
        .args(["verify", fixture("clean_m4_pro.jsonl").to_str().unwrap(), "--hardware", "m9-ultra"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("m4-pro"));
}

#[test]
fn text_output_is_one_line_per_finding_and_a_summary() {
    let out = Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .arg(fixture("decode_77_7.jsonl"))
        .args(M4_PRO_GEMMA)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("ERROR   decode_above_ceiling"), "{text}");
    assert!(lines[0].contains("gemma-3-12b-it-4bit ctx 1024 cold streaming b1 run 2 of "), "{text}");
    assert!(lines[1].starts_with("summary: 1 error(s)"), "{text}");
}

/// The clean sweep with one record changed by `edit` (matched by cache state, context and run).
fn edited_clean(state: &str, context: u64, run: u64, edit: impl Fn(&mut Value)) -> tempfile::NamedTempFile {
    let text = std::fs::read_to_string(fixture("clean_m4_pro.jsonl")).unwrap();
    let mut out = String::new();
    let mut hit = false;
    for line in text.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if v["cache_state"] == state && v["context_tokens"] == context && v["run"] == run {
            edit(&mut v);
            hit = true;
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    assert!(hit, "no such record");
    let file = tempfile::Builder::new().suffix(".jsonl").tempfile().unwrap();
    std::fs::write(file.path(), out).unwrap();
    file
}

type Edit = Box<dyn Fn(&mut Value)>;

/// An edit of a clean record, the rule it must raise, and whether the edit also leaves a verdict
/// the record stores (`quality_ok`, `cache_state_confirmed`) contradicting its numbers.
type Case = (&'static str, &'static str, bool, Edit);

#[test]
fn each_record_rule_fires_alone() {
    let cases: Vec<Case> = vec![
        ("error", "ttft_after_e2e", true, Box::new(|v| v["ttft_ms"] = 99_999.0.into())),
        (
            "error",
            "cache_state_unconfirmed",
            true,
            Box::new(|v| {
                // The stored verdict is left as the sweep wrote it; only the evidence changes.
                v["cache_evidence"]["cached_tokens"] = 4000.into();
                v["cache_evidence"]["prompt_evaluated_tokens"] = 96.into();
                v["cached_tokens"] = 4000.into();
                // 96 computed tokens in 15.4 s is slow: only the evidence rules should fire.
            }),
        ),
        (
            "warning",
            "input_tokens_off_nominal",
            false,
            Box::new(|v| {
                // A mis-sized prompt: the server counted and computed 2936 tokens.
                v["input_tokens"] = 2936.into();
                v["cache_evidence"]["prompt_evaluated_tokens"] = 2936.into();
            }),
        ),
        (
            "warning",
            "thermal_not_recovered",
            false,
            Box::new(|v| {
                v["thermal"]["recovered"] = false.into();
                v["thermal"]["cooldown_s"] = 240.0.into();
            }),
        ),
        (
            "warning",
            "measurement_failed",
            false,
            Box::new(|v| {
                v["error"] = serde_json::json!({"kind": "connect", "message": "refused", "http_status": null})
            }),
        ),
    ];
    for (severity, rule, disagrees, edit) in cases {
        let file = edited_clean("cold", 4096, 2, edit);
        let (code, report) = verify_json(&[file.path()], &M4_PRO_GEMMA);
        let mut expected = vec![(severity.to_string(), rule.to_string())];
        if disagrees {
            expected.push(("error".into(), "stored_verdict_disagrees".into()));
        }
        expected.sort_by_key(|(s, _)| if s == "error" { 0 } else { 1 });
        assert_eq!(found(&report), expected, "{rule}: {report:#}");
        assert_eq!(code, if severity == "error" || disagrees { 1 } else { 0 }, "{rule}");
    }
}

/// The clean fixture with hot at 1K slowed to 900 ms; `evidence` adds prompt tokens computed
/// (hot, warm) to every hot/warm record of that context.
fn slow_hot(evidence: Option<(u64, u64)>) -> tempfile::NamedTempFile {
    let text = std::fs::read_to_string(fixture("clean_m4_pro.jsonl")).unwrap();
    let edited: String = text
        .lines()
        .map(|line| {
            let mut v: Value = serde_json::from_str(line).unwrap();
            if v["context_tokens"] == 1024 {
                if v["cache_state"] == "hot" {
                    v["ttft_ms"] = 900.0.into();
                }
                if let Some((hot, warm)) = evidence {
                    let n = match v["cache_state"].as_str() {
                        Some("hot") => Some(hot),
                        Some("warm") => Some(warm),
                        _ => None,
                    };
                    if let Some(n) = n {
                        v["cache_evidence"] = serde_json::json!({"source": "timings", "cached_tokens": 1024 - n, "prompt_evaluated_tokens": n});
                    }
                }
            }
            v.to_string() + "\n"
        })
        .collect();
    let file = tempfile::Builder::new().suffix(".jsonl").tempfile().unwrap();
    std::fs::write(file.path(), edited).unwrap();
    file
}

#[test]
fn hot_slower_than_warm_warns() {
    let file = slow_hot(None);
    let (code, report) = verify_json(&[file.path()], &M4_PRO_GEMMA);
    let f = only(&report, "warning", "hot_slower_than_warm");
    assert_eq!(code, 0);
    common::assert_close(f["value"].as_f64().unwrap(), 900.0, "hot_slower_than_warm value");
    assert_eq!(f["cell"]["cache_state"], "hot");
    // Same numbers, but hot had to compute the new turn (18 tokens vs warm's 1): explained.
    let file = slow_hot(Some((18, 1)));
    let (_, report) = verify_json(&[file.path()], &M4_PRO_GEMMA);
    only(&report, "info", "hot_slower_explained");
    // Evidence that hot computed no more than warm keeps the warning.
    let file = slow_hot(Some((1, 1)));
    let (_, report) = verify_json(&[file.path()], &M4_PRO_GEMMA);
    only(&report, "warning", "hot_slower_than_warm");
}

/// The sorted keys of a JSON object.
fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().cloned().collect()
}

#[test]
fn json_shape_is_pinned_at_every_level() {
    let (_, report) = verify_json(&[&fixture("decode_77_7.jsonl")], &M4_PRO_GEMMA);
    assert_eq!(keys(&report), ["findings", "inputs", "notes", "physics", "summary", "verify_schema"]);
    assert_eq!(report["verify_schema"], 1);
    assert_eq!(keys(&report["inputs"][0]), ["kind", "path", "records"]);
    assert_eq!(report["inputs"][0]["kind"], "jsonl");
    assert_eq!(keys(&report["physics"][0]), ["hardware", "models", "path"]);
    assert_eq!(keys(&report["physics"][0]["hardware"]), ["bandwidth_gbps", "name", "tflops"]);
    let f = &report["findings"][0];
    assert_eq!(keys(f), ["cell", "file", "limit", "message", "rule", "run_id", "severity", "unit", "value"]);
    assert_eq!(
        keys(&f["cell"]),
        ["batch_size", "cache_state", "context_tokens", "mode", "model", "run", "scenario"]
    );
    assert_eq!(
        (f["severity"].as_str(), f["rule"].as_str(), f["unit"].as_str()),
        (Some("error"), Some("decode_above_ceiling"), Some("tok/s"))
    );
    assert_eq!(keys(&report["summary"]), ["errors", "exit_code", "infos", "records", "warnings"]);
    assert_eq!(report["summary"]["exit_code"], 1);
    // Keys come out sorted, as they always have (scripts diff these documents).
    let out = Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .arg(fixture("decode_77_7.jsonl"))
        .args(M4_PRO_GEMMA)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("{\n  \"findings\": ["), "{text}");
}

#[test]
fn list_rules_prints_every_rule_with_its_severity() {
    let out = Command::cargo_bin("bench").unwrap().args(["verify", "--list-rules"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for rule in ttft_bench::verify::RULES {
        let line = text.lines().find(|l| l.split_whitespace().nth(1) == Some(rule.name));
        let line = line.unwrap_or_else(|| panic!("{} missing:\n{text}", rule.name));
        assert!(line.trim_start().starts_with(&rule.severity.label().to_lowercase()), "{line}");
    }
    assert!(text.starts_with("record rules"), "{text}");
}

#[test]
fn a_batch_far_from_its_siblings_is_a_run_outlier_naming_file_and_run() {
    // The origin's published Gemma file: batch-2 warm 1K at 798.6 ms beside 1837.6 and 1920.9.
    let (code, report) = verify_json(&[&fixture("batch_outlier.jsonl")], &[]);
    let f = only(&report, "warning", "run_outlier");
    assert_eq!(code, 0);
    assert_eq!(f["run_id"], "colm_full_gemma_merged");
    assert_eq!(f["cell"]["run"], 2);
    assert_eq!(f["cell"]["batch_size"], 2);
    assert_eq!(f["value"], 798.6);
    assert!(f["file"].as_str().unwrap().ends_with("batch_outlier.jsonl"), "{f}");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("avg_ttft_ms 798.6") && msg.contains("batch_outlier.jsonl"), "{msg}");
    // Two siblings estimate no spread: 0.42x of their median counts, its system tok/s 1.38x theirs
    // (31.4 beside 23.2 and 22.2) does not.
    assert!(msg.contains("2 others give no estimate of a spread"), "{msg}");
    assert!(!msg.contains("also system_tps"), "{msg}");
}

#[test]
fn a_partial_batch_is_an_error_naming_cell_run_file_and_gaps() {
    let (code, report) = verify_json(&[&fixture("batch_partial.jsonl")], &[]);
    let f = only(&report, "error", "batch_incomplete");
    assert_eq!(code, 1);
    assert_eq!((f["run_id"].as_str(), f["cell"]["run"].as_u64()), (Some("20260209T2341Z"), Some(2)));
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("batch_partial.jsonl")
            && msg.contains("group record missing")
            && msg.contains("1 of 2 member requests"),
        "{msg}"
    );
}

#[test]
fn a_batched_staggered_pair_that_never_overlapped_warns_and_its_sequential_twin_does_not() {
    // Recorded by the runner (overlapped: false), and derived from the times for older files.
    for name in ["staggered_not_overlapped.jsonl", "staggered_not_overlapped_old.jsonl"] {
        let (code, report) = verify_json(&[&fixture(name)], &[]);
        assert_eq!(code, 0, "{name}");
        let rules = found(&report);
        assert_eq!(
            rules,
            vec![("warning".into(), "staggered_not_overlapped".into()); 3],
            "{name}: {report:#}"
        );
        for f in report["findings"].as_array().unwrap() {
            assert_eq!(f["cell"]["scenario"], "staggered_batched");
            common::assert_close(f["value"].as_f64().unwrap(), 2000.0, "B's arrival");
            common::assert_close(f["limit"].as_f64().unwrap(), 500.0, "A's E2E");
        }
    }
}

/// Fails when a reader that went away turns findings into exit 0: under `set -o pipefail`,
/// `bench verify RUN | head -0` would then pass a run with errors in CI.
#[test]
fn a_closed_stdout_keeps_the_verdict_without_a_panic() {
    for (args, input, want) in [
        (vec!["verify"], "decode_77_7.jsonl", 1),
        (vec!["verify", "--format", "json"], "decode_77_7.jsonl", 1),
        (vec!["verify"], "clean_m4_pro.jsonl", 0),
        (vec!["verify", "--format", "json"], "clean_m4_pro.jsonl", 0),
        (vec!["report"], "decode_77_7.jsonl", 0),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // the reader is gone before bench writes a byte: `bench verify | head -0`
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
            .args(&args)
            .arg(fixture(input))
            .args(M4_PRO_GEMMA.iter().filter(|_| args[0] == "verify"))
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?} {input}: {stderr}");
        assert_eq!(out.status.code(), Some(want), "{args:?} {input}: {stderr}");
    }
}

#[test]
fn absurd_flag_values_exit_2_naming_the_flag() {
    let input = fixture("clean_m4_pro.jsonl");
    for (flag, value) in [
        ("--min-warm-speedup", "NaN"),
        ("--min-warm-speedup", "1e300"),
        ("--min-warm-speedup", "-1"),
        ("--storage-gbps", "inf"),
        ("--storage-gbps", "1e30"),
        ("--storage-gbps", "0"),
        ("--bandwidth-gbps", "1e308"),
        ("--bandwidth-gbps", "NaN"),
        ("--tflops", "1e20"),
        ("--tflops", "-5"),
        ("--model-bytes", "1e400GB"),
        ("--model-bytes", "infGB"),
        ("--params", "1e300"),
        ("--params", "NaN"),
    ] {
        let mut cmd = Command::cargo_bin("bench").unwrap();
        cmd.arg("verify").arg(&input).arg(format!("{flag}={value}"));
        if flag == "--model-bytes" {
            cmd.args(["--params", "12B"]);
        }
        if flag == "--params" {
            cmd.args(["--model-bytes", "8GB"]);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag) && !stderr.contains("panicked"), "{flag} {value}: {stderr}");
    }
}

/// Fails when a physics error reaches the user without the flags it is about: the physics crate
/// names quantities only, and bench's exit map names the flags (`--hardware`, and the two that
/// stand in for a profile; `--params` and the `--model-bytes` it lacks).
#[test]
fn an_unknown_profile_or_half_a_model_exits_2_naming_the_flags() {
    let input = fixture("clean_m4_pro.jsonl");
    for (args, wanted) in [
        (
            &["--hardware", "m9"][..],
            &["--hardware \"m9\" is not a known profile", "m4-pro", "--bandwidth-gbps", "--tflops"][..],
        ),
        (&["--params", "12B"], &["--params was given without --model-bytes"]),
        (&["--model-bytes", "8GB"], &["--model-bytes was given without --params"]),
    ] {
        let out = Command::cargo_bin("bench").unwrap().arg("verify").arg(&input).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for want in wanted {
            assert!(stderr.contains(want), "{args:?}: {want:?} missing from {stderr}");
        }
    }
}

#[test]
fn an_input_without_records_exits_2_unless_allowed() {
    let parent = tempfile::tempdir().unwrap();
    // A run that measured nothing, as its sweep left it.
    let dir = common::runs::write(parent.path(), "empty", &[]);
    Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .arg(&dir)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(format!("no records in {}", dir.display())));
    // With records elsewhere, the empty input is still named.
    Command::cargo_bin("bench")
        .unwrap()
        .arg("verify")
        .arg(fixture("clean_m4_pro.jsonl"))
        .arg(&dir)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no records in"));
    let (code, report) = verify_json(&[&dir], &["--allow-empty"]);
    assert_eq!((code, report["summary"]["records"].as_u64()), (0, Some(0)));
}

/// The HTML report runs verify's rules at verify's own defaults: on every fixture its summary
/// counts what `bench verify` (no flags) counts, so a default changed on one side, or a report that
/// cannot form verify's settings, shows here.
#[test]
fn the_html_reports_findings_are_verifys_at_its_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let mut judged = 0;
    for name in
        ["warm_0_98.jsonl", "h200_warm_slower_than_cold.jsonl", "max_tokens_253.jsonl", "clean_m4_pro.jsonl"]
    {
        let input = fixture(name);
        let (_, report) = verify_json(&[&input], &[]);
        let s = &report["summary"];
        let page = dir.path().join(format!("{name}.html"));
        let out = Command::cargo_bin("bench")
            .unwrap()
            .args(["report", "--format", "html", "-o"])
            .args([&page, &input])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let html = std::fs::read_to_string(&page).unwrap();
        let says = format!(
            "<span class=\"count error\">{} error(s)</span>, <span class=\"count warning\">{} warning(s)</span>, \
             <span class=\"count info\">{} info</span>",
            s["errors"], s["warnings"], s["infos"]
        );
        assert!(html.contains(&says), "{name}: verify says {s}; the page's summary differs");
        judged += s["errors"].as_u64().unwrap() + s["warnings"].as_u64().unwrap();
    }
    assert!(judged >= 2, "the fixtures raise findings for the page to count ({judged})");
}

/// One cell, one label: the cell verify names in a finding is named the same way in compare's table
/// (`CellKey`'s label, the model said apart), so a reader can find one in the other.
#[test]
fn verify_and_compare_name_a_cell_with_one_label() {
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = (dir.path().join("base.jsonl"), dir.path().join("cand.jsonl"));
    std::fs::copy(fixture("warm_0_98.jsonl"), &base).unwrap();
    std::fs::copy(fixture("warm_0_98.jsonl"), &cand).unwrap();
    let out = Command::cargo_bin("bench").unwrap().arg("verify").arg(&base).output().unwrap();
    let verify = String::from_utf8_lossy(&out.stdout).to_string();
    let finding =
        verify.lines().find(|l| l.contains("warm_not_faster")).unwrap_or_else(|| panic!("{verify}"));
    let out = Command::cargo_bin("bench")
        .unwrap()
        .arg("compare")
        .args([&base, &cand])
        .args(["--format", "markdown"])
        .output()
        .unwrap();
    let compare = String::from_utf8_lossy(&out.stdout).to_string();
    // The cells table (from its "cell" header to the blank line after it): the first column of each
    // cell's first row (the other rows of a cell leave it empty).
    let labels: Vec<&str> = compare
        .lines()
        .skip_while(|l| !l.starts_with("| cell "))
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.strip_prefix('|').and_then(|r| r.split('|').next()))
        .map(str::trim)
        .filter(|c| !c.is_empty() && *c != "cell" && !c.starts_with('-'))
        .collect();
    // Whole: verify places a cell-level finding as "MODEL LABEL in FILE".
    let named: Vec<&&str> = labels.iter().filter(|l| finding.contains(&format!(" {l} in "))).collect();
    assert_eq!(named.len(), 1, "compare's labels {labels:?}, one of them in verify's finding: {finding}");
    assert!(named[0].contains("4096") && named[0].contains("warm"), "{named:?}: {finding}");
}
