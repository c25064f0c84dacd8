//! `bench compare`: exact verdicts on constructed records (no timing), failure categories from
//! records carrying each error kind, the regression gate, the JSON shape, bad input, the origin's
//! real pair, and two real sweeps against the scripted server compared end to end.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use ttft_model::record::{
    CacheState, CellKey, ErrorInfo, ErrorKind, GroupRecord, Measurement, Mode, QualityFlag, Record,
    SCHEMA_VERSION, Scenario,
};

fn key(model: &str, ctx: u32, state: CacheState, mode: Mode, run: u32) -> CellKey {
    CellKey {
        dataset_row: None,
        model: model.into(),
        scenario: Scenario::of(state, 1),
        cache_state: state,
        mode,
        context_tokens: ctx,
        batch_size: 1,
        run,
    }
}

/// A passing request; decode = 64 tokens over (e2e - ttft).
fn m(cell: CellKey, ttft: Option<f64>, e2e: f64) -> Measurement {
    Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        started_at: format!("2026-01-01T00:00:{:02}Z", cell.run),
        cell,
        ttft_ms: ttft,
        e2e_ms: Some(e2e),
        output_tokens: Some(65),
        max_tokens: 65,
        quality_ok: true,
        ..Default::default()
    }
}

/// One streaming cell at `ctx`, one run per TTFT, decode 64 tok/s (e2e = ttft + 1 s).
fn streaming(model: &str, ctx: u32, ttfts: &[f64]) -> Vec<Record> {
    ttfts
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let cell = key(model, ctx, CacheState::Cold, Mode::Streaming, i as u32 + 1);
            Record::Measurement(Box::new(m(cell, Some(t), t + 1000.0)))
        })
        .collect()
}

fn non_streaming(model: &str, ctx: u32, e2es: &[f64]) -> Vec<Record> {
    e2es.iter()
        .enumerate()
        .map(|(i, &e)| {
            let cell = key(model, ctx, CacheState::Cold, Mode::NonStreaming, i as u32 + 1);
            Record::Measurement(Box::new(m(cell, None, e)))
        })
        .collect()
}

/// A run directory of `records` as a sweep leaves it.
fn write(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    common::runs::write(dir, name, records)
}

fn bench(args: &[&str], inputs: &[&Path]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("bench").unwrap().arg("compare").args(inputs).args(args).output().unwrap()
}

/// `bench compare INPUTS --format json ARGS` -> (exit code, document).
fn compare_json(inputs: &[&Path], args: &[&str]) -> (i32, Value) {
    let out = bench(&[args, &["--format", "json"]].concat(), inputs);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), common::stderr(&out))
    });
    (out.status.code().unwrap_or(-1), doc)
}

/// The compared cell at `ctx` and `mode` of the first candidate.
fn cell(doc: &Value, ctx: u64, mode: &str) -> Value {
    doc["candidates"][0]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cell"]["context_tokens"] == ctx && c["cell"]["mode"] == mode)
        .unwrap_or_else(|| panic!("no cell {ctx} {mode}: {doc:#}"))
        .clone()
}

fn metric(cell: &Value, name: &str) -> Value {
    cell["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == name).unwrap().clone()
}

/// base: 1K 100 ms x5; 2K 90-110 ms; 4K 100 ms x5; 1K non-streaming E2E 1000 ms x3.
/// cand: 1K 80 ms x5 (faster); 2K 85-115 ms (overlapping); 4K 120 ms x5 (slower); E2E 500 ms.
fn pair(dir: &Path) -> (PathBuf, PathBuf) {
    let mut base = streaming("m", 1024, &[100.0; 5]);
    base.extend(streaming("m", 2048, &[90.0, 100.0, 110.0, 95.0, 105.0]));
    base.extend(streaming("m", 4096, &[100.0; 5]));
    base.extend(non_streaming("m", 1024, &[1000.0; 3]));
    let mut cand = streaming("m", 1024, &[80.0; 5]);
    cand.extend(streaming("m", 2048, &[85.0, 105.0, 115.0, 100.0, 98.0]));
    cand.extend(streaming("m", 4096, &[120.0; 5]));
    cand.extend(non_streaming("m", 1024, &[500.0; 3]));
    (write(dir, "base", &base), write(dir, "cand", &cand))
}

#[test]
fn verdicts_are_exact_on_chosen_ttfts() {
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = pair(dir.path());
    let (code, doc) = compare_json(&[&base, &cand], &[]);
    assert_eq!(code, 0, "{doc:#}");
    let faster = cell(&doc, 1024, "streaming");
    assert_eq!((faster["primary"].as_str(), faster["verdict"].as_str()), (Some("ttft_ms"), Some("faster")));
    let ttft = metric(&faster, "ttft_ms");
    // Ratios and medians computed from the records: equal up to rounding, not bit for bit.
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    for key in ["ratio", "ci95_lo", "ci95_hi"] {
        common::assert_close(num(&ttft[key]), 0.8, &format!("ttft {key}"));
    }
    assert_eq!(ttft["base"]["n"].as_u64(), Some(5));
    common::assert_close(num(&ttft["base"]["median"]), 100.0, "base median");
    assert_eq!(ttft["better"], "lower");
    // Decode is 64 tok/s on both sides: an interval of exactly [1, 1] includes 1.
    let decode = metric(&faster, "decode_tps");
    common::assert_close(num(&decode["ratio"]), 1.0, "decode ratio");
    assert_eq!(decode["verdict"], "no_difference");
    assert_eq!(decode["better"], "higher");
    assert_eq!(cell(&doc, 2048, "streaming")["verdict"], "no_difference");
    let slower = cell(&doc, 4096, "streaming");
    assert_eq!(
        (slower["verdict"].as_str(), metric(&slower, "ttft_ms")["ratio"].as_f64()),
        (Some("slower"), Some(1.2))
    );
    // Non-streaming: no TTFT, so E2E decides (and is the only metric).
    let ns = cell(&doc, 1024, "non-streaming");
    assert_eq!((ns["primary"].as_str(), ns["verdict"].as_str()), (Some("e2e_ms"), Some("faster")));
    assert_eq!(ns["metrics"].as_array().unwrap().len(), 1, "{ns:#}");
    let wins = &doc["candidates"][0]["wins"];
    assert_eq!(wins, &json!({"cells": 4, "faster": 2, "slower": 1, "no_difference": 1, "insufficient": 0}));
    assert_eq!(doc["candidates"][0]["wins_by_metric"]["decode_tps"]["no_difference"], 3);
    assert_eq!(doc["candidates"][0]["matched_by"], "cell");

    let out = bench(&[], &[&base, &cand]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("cand beats base in 2 of 4 cells, loses 1, 1 no difference (by TTFT ms, E2E ms)"),
        "{text}"
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "too wide ({}): {line}", line.chars().count());
    }
    let out = bench(&["--format", "markdown"], &[&base, &cand]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("| cell ") && text.contains("### cand vs base"), "{text}");
}

#[test]
fn higher_decode_is_faster_and_one_run_is_too_few() {
    let dir = tempfile::tempdir().unwrap();
    // Same TTFT; the candidate decodes 64 tokens in 0.5 s instead of 1 s.
    let base = streaming("m", 1024, &[100.0; 3]);
    let cand: Vec<Record> = (1..=3)
        .map(|run| {
            Record::Measurement(Box::new(m(
                key("m", 1024, CacheState::Cold, Mode::Streaming, run),
                Some(100.0),
                600.0,
            )))
        })
        .collect();
    let mut cand = cand;
    cand.extend(streaming("m", 2048, &[50.0]));
    let mut base = base;
    base.extend(streaming("m", 2048, &[100.0]));
    let (b, c) = (write(dir.path(), "b", &base), write(dir.path(), "c", &cand));
    let (_, doc) = compare_json(&[&b, &c], &[]);
    let one = cell(&doc, 1024, "streaming");
    assert_eq!(one["verdict"], "no_difference");
    let decode = metric(&one, "decode_tps");
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    common::assert_close(num(&decode["ratio"]), 2.0, "decode ratio");
    assert_eq!(decode["verdict"], "faster");
    let few = cell(&doc, 2048, "streaming");
    assert_eq!(few["verdict"], "insufficient", "1 run each: no interval, no verdict");
    common::assert_close(num(&metric(&few, "ttft_ms")["ratio"]), 0.5, "ttft ratio");
    assert_eq!(doc["candidates"][0]["wins"]["insufficient"], 1);
}

#[test]
fn builds_naming_their_model_differently_are_matched_without_the_model_and_it_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let b = write(dir.path(), "b", &streaming("/models/build-a.gguf", 1024, &[100.0; 3]));
    let c = write(dir.path(), "c", &streaming("/models/build-b.gguf", 1024, &[50.0; 3]));
    let (code, doc) = compare_json(&[&b, &c], &[]);
    assert_eq!(code, 0);
    assert_eq!(doc["candidates"][0]["matched_by"], "cell_without_model");
    let one = cell(&doc, 1024, "streaming");
    assert_eq!(
        (one["cell"]["model"].as_str(), one["candidate_model"].as_str()),
        (Some("/models/build-a.gguf"), Some("/models/build-b.gguf"))
    );
    assert_eq!(one["verdict"], "faster");
    assert!(doc["notes"][0].as_str().unwrap().contains("matched by everything but the model"), "{doc:#}");
    // Two models on one side: no guessing which pairs with which; nothing in common is exit 2.
    let mut two = streaming("x", 1024, &[100.0; 3]);
    two.extend(streaming("y", 1024, &[100.0; 3]));
    let t = write(dir.path(), "two", &two);
    let out = bench(&[], &[&t, &c]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("nothing to compare"), "{}", common::stderr(&out));
    let (code, doc) = compare_json(&[&t, &c], &["--allow-empty"]);
    assert_eq!((code, doc["candidates"][0]["wins"]["cells"].as_u64()), (0, Some(0)));
}

/// Fails when a reader that went away turns a regression into exit 0: `bench compare ... | head
/// -0` under `set -o pipefail` would pass the gate.
#[test]
fn a_closed_stdout_keeps_the_regression_gates_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = pair(dir.path());
    for (threshold, format, want) in [("10", "table", 1), ("10", "json", 1), ("25", "table", 0)] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_bench"))
            .arg("compare")
            .args([&base, &cand])
            .args(["--fail-on-regression", threshold, "--format", format])
            .stdout(writer)
            .output()
            .unwrap();
        let err = common::stderr(&out);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out.status.code(), Some(want), "{threshold} {format}: {err}");
    }
}

#[test]
fn regression_gate_exits_1_only_when_the_interval_is_wholly_beyond_the_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = pair(dir.path());
    // 4K is 1.2x slower with an interval of [1.2, 1.2]; the overlapping 2K cell never gates.
    let (code, doc) = compare_json(&[&base, &cand], &["--fail-on-regression", "10"]);
    assert_eq!(code, 1, "{doc:#}");
    let regs = doc["candidates"][0]["regressions"].as_array().unwrap();
    assert_eq!(regs.len(), 1, "{regs:?}");
    assert_eq!(
        (regs[0]["metric"].as_str(), regs[0]["cell"]["context_tokens"].as_u64()),
        (Some("ttft_ms"), Some(4096))
    );
    assert_eq!(doc["summary"], json!({"fail_on_regression_pct": 10.0, "regressions": 1, "exit_code": 1}));
    assert_eq!(compare_json(&[&base, &cand], &["--fail-on-regression", "25"]).0, 0);
    assert_eq!(compare_json(&[&base, &cand], &[]).0, 0, "no gate without the flag");
    // Two candidates: the gate holds for any of them.
    assert_eq!(compare_json(&[&base, &base, &cand], &["--fail-on-regression", "0"]).0, 1);
    let out = bench(&["--fail-on-regression", "5"], &[&base, &cand]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SLOWER >5%"));
    for bad in ["100", "-1", "NaN"] {
        let out = bench(&[&format!("--fail-on-regression={bad}")], &[&base, &cand]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(common::stderr(&out).contains("--fail-on-regression"), "{}", common::stderr(&out));
    }
}

fn failed(mut x: Measurement, kind: ErrorKind, status: Option<u16>) -> Record {
    x.quality_ok = false;
    x.ttft_ms = None;
    x.error = Some(ErrorInfo { kind, message: format!("{kind:?}"), http_status: status });
    Record::Measurement(Box::new(x))
}

fn flagged(mut x: Measurement, flag: &str) -> Record {
    x.quality_ok = false;
    x.quality_flags = vec![QualityFlag {
        flag: serde_json::from_value(json!(flag)).unwrap(),
        reason: flag.into(),
        fails_gate: true,
    }];
    Record::Measurement(Box::new(x))
}

/// One record per failure kind, in send order within run r1 (cells 1K-13K, run 1 each), after a
/// first good record; a connect error in run r0 before the server ever answered.
fn failing_records() -> Vec<Record> {
    let at = |ctx: u32, second: u32| {
        let mut x = m(key("m", ctx * 1024, CacheState::Cold, Mode::Streaming, 1), Some(100.0), 1100.0);
        x.started_at = format!("2026-01-01T00:00:{second:02}Z");
        x
    };
    let mut never_up = at(13, 0);
    never_up.run_id = "r0".into();
    let mut v = vec![
        Record::Measurement(Box::new(at(1, 1))),
        failed(at(2, 2), ErrorKind::Timeout, None),
        failed(at(3, 3), ErrorKind::HttpStatus, Some(503)),
        failed(at(4, 4), ErrorKind::HttpStatus, Some(429)),
        failed(at(5, 5), ErrorKind::Unsupported, None),
        flagged(at(6, 6), "empty_output"),
        flagged(at(7, 7), "cache_state_unconfirmed"),
        failed(at(8, 8), ErrorKind::StreamTruncated, None),
        failed(at(9, 9), ErrorKind::HttpStatus, Some(404)),
        failed(at(10, 10), ErrorKind::Connect, None),
        failed(at(11, 11), ErrorKind::Connect, None),
        failed(never_up, ErrorKind::Connect, None),
    ];
    // A batch of 2 with one member and no group record (a sweep killed mid-batch).
    let mut member = at(12, 12);
    member.cell.batch_size = 2;
    member.cell.scenario = Scenario::Concurrent;
    member.group_id = Some("g".into());
    v.push(Record::Measurement(Box::new(member)));
    // A second run of the 1K cell that failed: the cell is failed but still usable.
    let mut again = at(1, 14);
    again.cell.run = 2;
    v.push(failed(again, ErrorKind::Timeout, None));
    v
}

#[test]
fn every_failure_category_is_counted_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "failing", &failing_records());
    let good = write(dir.path(), "good", &streaming("m", 1024, &[100.0; 3]));
    let dead = write(
        dir.path(),
        "dead",
        &[failed(
            m(key("m", 1024, CacheState::Cold, Mode::Streaming, 1), None, 0.0),
            ErrorKind::Timeout,
            None,
        )],
    );
    let (code, doc) = compare_json(&[&f, &good, &dead], &[]);
    assert_eq!(code, 0, "{doc:#}");
    let fail = &doc["failures"][0];
    assert_eq!(fail["role"], "base");
    assert_eq!(
        fail["reasons"],
        json!({"server_crash": 2, "timeout": 2, "http_5xx": 1, "rate_limited": 1, "quality_gate": 1,
               "cache_state_unconfirmed": 1, "unsupported": 1, "incomplete_batch": 1,
               "missing_from_matrix": 0, "other_error": 3}),
        "{fail:#}"
    );
    assert_eq!(fail["other_errors"], json!({"connect": 1, "http_status": 1, "stream_truncated": 1}));
    assert_eq!(fail["failed_records"], 12);
    // 13 cells: 1K failed but usable (run 1 passed); 2K..11K, 13K and the partial batch unusable.
    assert_eq!((fail["status"].as_str(), fail["cells"].as_u64()), (Some("partial"), Some(13)));
    assert_eq!(
        (fail["cells_ok"].as_u64(), fail["cells_failed"].as_u64(), fail["cells_unusable"].as_u64()),
        (Some(0), Some(1), Some(12))
    );
    assert_eq!(fail["cells_missing"], Value::Null, "no --expect");
    assert_eq!(
        (doc["failures"][1]["status"].as_str(), doc["failures"][1]["role"].as_str()),
        (Some("complete"), Some("candidate"))
    );
    assert_eq!(doc["failures"][2]["status"], "unusable");
    let text = String::from_utf8(bench(&[], &[&f, &good]).stdout).unwrap();
    assert!(text.contains("server crash 2, timeout 2, HTTP 5xx 1, rate limited 1"), "{text}");
}

/// A connect error is a crash when a request of its run sent earlier reached the server, however
/// the input orders them: here every failure's cell sorts before the answered one's.
#[test]
fn a_connect_error_is_a_crash_when_an_earlier_request_of_its_run_was_answered() {
    let at = |run_id: &str, ctx: u32, second: u32| {
        let mut x = m(key("m", ctx * 1024, CacheState::Cold, Mode::Streaming, 1), Some(100.0), 1100.0);
        (x.run_id, x.started_at) = (run_id.into(), format!("2026-01-01T00:00:{second:02}Z"));
        x
    };
    let records = vec![
        // r1: answered at second 1 (cell 8K), then refused at second 2 (cell 1K): a crash.
        failed(at("r1", 1, 2), ErrorKind::Connect, None),
        Record::Measurement(Box::new(at("r1", 8, 1))),
        // r2: refused at second 1 (cell 2K), answered only after, at second 3: never up before it.
        failed(at("r2", 2, 1), ErrorKind::Connect, None),
        Record::Measurement(Box::new(at("r2", 9, 3))),
    ];
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "crash", &records);
    let good = write(dir.path(), "good", &streaming("m", 1024, &[100.0; 3]));
    let (code, doc) = compare_json(&[&f, &good], &[]);
    assert_eq!(code, 0, "{doc:#}");
    let fail = &doc["failures"][0];
    assert_eq!(
        (fail["reasons"]["server_crash"].as_u64(), fail["reasons"]["other_error"].as_u64()),
        (Some(1), Some(1)),
        "{fail:#}"
    );
    assert_eq!(fail["other_errors"], json!({"connect": 1}), "{fail:#}");
}

#[test]
fn cells_missing_from_the_expected_matrix() {
    let dir = tempfile::tempdir().unwrap();
    // The scenario: 1K and 2K, streaming, cold, 3 runs. The run holds 1K x 3 and 2K x 1.
    let scenario = dir.path().join("expect.toml");
    std::fs::write(
        &scenario,
        "contexts = \"1024,2048\"\nmodes = \"streaming\"\ncache_states = \"cold\"\nruns = 3\n",
    )
    .unwrap();
    let mut records = streaming("m", 1024, &[100.0; 3]);
    records.extend(streaming("m", 2048, &[100.0]));
    let run = write(dir.path(), "run", &records);
    let other = write(dir.path(), "other", &streaming("m", 1024, &[100.0; 3]));
    let (code, doc) = compare_json(&[&run, &other], &["--expect", scenario.to_str().unwrap()]);
    assert_eq!(code, 0, "{doc:#}");
    let base = &doc["failures"][0];
    assert_eq!(
        (base["reasons"]["missing_from_matrix"].as_u64(), base["cells_missing"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(base["status"], "partial");
    let cand = &doc["failures"][1];
    assert_eq!(
        (cand["reasons"]["missing_from_matrix"].as_u64(), cand["cells_missing"].as_u64()),
        (Some(3), Some(1))
    );
    let out = bench(&["--expect", "/nonexistent.toml"], &[&run, &other]);
    assert_eq!(out.status.code(), Some(2));
}

/// The sorted keys of a JSON object.
fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().cloned().collect()
}

#[test]
fn json_shape_is_pinned_at_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = pair(dir.path());
    let (_, doc) = compare_json(&[&base, &cand], &["--fail-on-regression", "10"]);
    assert_eq!(
        keys(&doc),
        ["base", "candidates", "compare_schema", "failures", "method", "notes", "summary"]
    );
    assert_eq!(doc["compare_schema"], 1);
    assert_eq!(doc["method"], "ratio of medians, 95% percentile bootstrap (2000 resamples, seed 2026)");
    assert_eq!(keys(&doc["base"]), ["kind", "models", "path", "records"]);
    let c = &doc["candidates"][0];
    assert_eq!(
        keys(c),
        [
            "cells",
            "kind",
            "matched_by",
            "models",
            "only_in_base",
            "only_in_candidate",
            "path",
            "records",
            "regressions",
            "wins",
            "wins_by_metric"
        ]
    );
    assert_eq!(keys(&c["cells"][0]), ["candidate_model", "cell", "metrics", "primary", "verdict"]);
    assert_eq!(
        keys(&c["cells"][0]["cell"]),
        ["batch_size", "cache_state", "context_tokens", "mode", "model", "scenario"]
    );
    assert_eq!(
        keys(&c["cells"][0]["metrics"][0]),
        ["base", "better", "candidate", "ci95_hi", "ci95_lo", "metric", "ratio", "verdict"]
    );
    assert_eq!(keys(&c["cells"][0]["metrics"][0]["base"]), ["median", "n"]);
    assert_eq!(keys(&c["wins"]), ["cells", "faster", "insufficient", "no_difference", "slower"]);
    assert_eq!(keys(&c["wins_by_metric"]), ["decode_tps", "e2e_ms", "ttft_ms"]);
    assert_eq!(keys(&c["regressions"][0]), ["cell", "ci95_hi", "ci95_lo", "metric", "ratio"]);
    assert_eq!(
        keys(&doc["failures"][0]),
        [
            "cells",
            "cells_failed",
            "cells_missing",
            "cells_ok",
            "cells_unusable",
            "failed_records",
            "other_errors",
            "path",
            "reasons",
            "role",
            "server_crash_events",
            "status"
        ]
    );
    assert_eq!(keys(&doc["summary"]), ["exit_code", "fail_on_regression_pct", "regressions"]);
    let text = String::from_utf8(bench(&["--format", "json"], &[&base, &cand]).stdout).unwrap();
    assert!(text.starts_with("{\n  \"base\": {"), "keys come out sorted: {text}");
}

#[test]
fn bad_input_exits_2_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (base, cand) = pair(dir.path());
    let broken = dir.path().join("broken.jsonl");
    let first =
        std::fs::read_to_string(cand.join("measurements.jsonl")).unwrap().lines().next().unwrap().to_string();
    std::fs::write(&broken, format!("{first}\n{{\"record_type\": \"measurement\", \"oops\n{first}\n"))
        .unwrap();
    let out = bench(&[], &[&base, &broken]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("broken.jsonl:2"), "{}", common::stderr(&out));
    let empty = write(dir.path(), "empty", &[]);
    let out = bench(&[], &[&base, &empty]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("no records"), "{}", common::stderr(&out));
    assert_eq!(bench(&["--allow-empty"], &[&base, &empty]).status.code(), Some(0));
    assert_eq!(bench(&[], &[&base]).status.code(), Some(2), "a candidate is required");
}

#[test]
fn the_origins_rerun_against_its_first_run() {
    let (first, rerun) = (
        common::origin::real("colm_full_gemma_20260208_152120.json"),
        common::origin::real("colm_full_gemma_20260209_154125.json"),
    );
    let expect = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/merge/paper-expect.toml");
    let (code, doc) = compare_json(&[&first, &rerun], &["--expect", expect.to_str().unwrap()]);
    assert_eq!(code, 0, "{doc:#}");
    // The re-run holds exactly the 5 batch cells whose first run failed the quality gate (empty
    // output, 15 records): nothing usable to compare against, said as such.
    let c = &doc["candidates"][0];
    assert_eq!(
        c["wins"],
        json!({"cells": 5, "faster": 0, "slower": 0, "no_difference": 0, "insufficient": 5})
    );
    assert!(
        c["cells"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["primary"] == "system_tps" && x["metrics"][0]["base"]["n"] == 0)
    );
    let (first, rerun) = (&doc["failures"][0], &doc["failures"][1]);
    assert_eq!((first["status"].as_str(), first["cells_unusable"].as_u64()), (Some("partial"), Some(5)));
    assert_eq!(
        (first["reasons"]["quality_gate"].as_u64(), first["reasons"]["missing_from_matrix"].as_u64()),
        (Some(15), Some(0))
    );
    assert_eq!(rerun["status"], "partial", "the re-run alone misses most of the matrix");
    assert_eq!(rerun["cells_missing"], 63);
}

#[test]
fn two_sweeps_against_the_scripted_server_compared_end_to_end() {
    use common::scripted::{Behaviour, Scripted};
    let dir = tempfile::tempdir().unwrap();
    let sweep = |first_token_ms: u64, name: &str| {
        let server = Scripted::start(Behaviour { first_token_ms, token_ms: 1, ..Default::default() });
        let out = common::bench(&[
            "sweep",
            "--server",
            &server.url,
            "--out",
            dir.path().to_str().unwrap(),
            "--run-id",
            name,
            "--contexts",
            "256",
            "--modes",
            "streaming",
            "--runs",
            "3",
            "--output-tokens",
            "16",
            "--thermal",
            "off",
        ]);
        assert!(out.status.success(), "{}", common::stderr(&out));
        dir.path().join(name)
    };
    // 20 ms vs 400 ms of scripted prefill: every candidate run is far beyond every base run.
    let (base, slow) = (sweep(20, "base"), sweep(400, "slow"));
    let (code, doc) = compare_json(&[&base, &slow], &["--fail-on-regression", "50"]);
    assert_eq!(code, 1, "{doc:#}");
    let c = cell(&doc, 256, "streaming");
    assert_eq!(
        (c["verdict"].as_str(), metric(&c, "ttft_ms")["base"]["n"].as_u64()),
        (Some("slower"), Some(3))
    );
    assert_eq!(doc["failures"][0]["status"], "complete");
    assert_eq!(doc["candidates"][0]["regressions"][0]["metric"], "ttft_ms");
    // The other way round, the slow build is the base: the fast one wins and nothing gates.
    let (code, doc) = compare_json(&[&slow, &base], &["--fail-on-regression", "50"]);
    assert_eq!((code, doc["candidates"][0]["wins"]["faster"].as_u64()), (0, Some(1)), "{doc:#}");
}

#[test]
fn group_records_alone_do_not_count_as_failures() {
    // A complete, passing batch of 2: members and group record; nothing fails.
    let mut v = Vec::new();
    let mut batch = key("m", 1024, CacheState::Cold, Mode::Streaming, 1);
    batch.batch_size = 2;
    batch.scenario = Scenario::Concurrent;
    for i in 0..2 {
        let mut x = m(batch.clone(), Some(100.0), 1100.0);
        x.request_index = i;
        x.group_id = Some("g".into());
        v.push(Record::Measurement(Box::new(x)));
    }
    v.push(Record::Group(Box::new(GroupRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        cell: batch,
        group_id: "g".into(),
        started_at: "2026-01-01T00:00:01Z".into(),
        wall_ms: 1100.0,
        system_tps: Some(116.0),
        requests_ok: 2,
        ..Default::default()
    })));
    let dir = tempfile::tempdir().unwrap();
    let b = write(dir.path(), "b", &v);
    let (_, doc) = compare_json(&[&b, &b], &[]);
    assert_eq!(
        (doc["failures"][0]["status"].as_str(), doc["failures"][0]["failed_records"].as_u64()),
        (Some("complete"), Some(0))
    );
    let c = cell(&doc, 1024, "streaming");
    let names: Vec<&str> =
        c["metrics"].as_array().unwrap().iter().map(|m| m["metric"].as_str().unwrap()).collect();
    assert_eq!(names, ["ttft_ms", "system_tps", "decode_tps"]);
}

/// Fails when compare looks for crash keys bench never writes: a sweep whose own server
/// (`--server-cmd`) was killed mid-sweep records the crash in its run.json `server_crashes`, and
/// compare must report it.
#[test]
fn a_server_killed_mid_sweep_is_reported_by_compare() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let bin = env!("CARGO_BIN_EXE_bench-scripted-server");
    // `exec` keeps the pid the shell wrote, so exactly that server is killed.
    let cmd = format!(
        "sh -c 'echo $$ > {}; exec {bin} --port {{port}} --first-token-ms 50 --token-ms 2'",
        pidfile.display()
    );
    let out_dir = dir.path().to_str().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["sweep", "--server-cmd", &cmd, "--contexts", "256", "--modes", "streaming"])
        .args(["--cache-states", "cold", "--runs", "60", "--output-tokens", "16", "--thermal", "off"])
        .args(["--quiet", "--run-id", "crashed", "--out", out_dir])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = dir.path().join("crashed");
    let lines = || std::fs::read_to_string(run.join("measurements.jsonl")).map_or(0, |t| t.lines().count());
    let start = Instant::now();
    while lines() < 2 {
        assert!(start.elapsed() < Duration::from_secs(120), "the sweep did not measure");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: libc::pid_t = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) on the server process this test's sweep started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let swept = child.wait_with_output().unwrap();
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let crashes = meta["server_crashes"].as_array().unwrap();
    assert_eq!(crashes.len(), 1, "{}", common::stderr(&swept));
    assert_eq!(crashes[0]["signal"], 9);

    let (_, doc) = compare_json(&[&run, &run], &[]);
    assert_eq!(doc["failures"][0]["server_crash_events"], 1, "{doc:#}");
    let table = String::from_utf8(bench(&[], &[&run, &run]).stdout).unwrap();
    assert!(table.contains("server crashes 1 (run.json)"), "{table}");
}
