//! Verdicts held to evidence: a warm or hot row is confirmed only by evidence that the cache served
//! its prompt (counters that did not move prove nothing), and `bench verify` recomputes every
//! verdict a record stores from the record's own evidence, so an edited file is caught.

use crate::common;

use std::path::Path;

use common::scripted::{Behaviour, Dialect, Scripted};
use common::{bench, measurements, records, run_dir, stderr};
use serde_json::Value;

fn sweep(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = common::quiet_sweep_args(url, out);
    args.extend(["--contexts", "256", "--output-tokens", "24", "--preset", "llama.cpp"]);
    // One run of cold, warm and hot unless `extra` names its own.
    for (flag, default) in [("--runs", "1"), ("--cache-states", "cold,warm,hot")] {
        if !extra.contains(&flag) {
            args.extend([flag, default]);
        }
    }
    args.extend_from_slice(extra);
    bench(&args)
}

fn verify_json(target: &Path) -> (i32, Value) {
    let out = bench(&["verify", target.to_str().unwrap(), "--format", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), report)
}

fn findings<'a>(report: &'a Value, rule: &str) -> Vec<&'a Value> {
    report["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == rule).collect()
}

fn of_state<'a>(ms: &'a [Value], state: &str) -> Vec<&'a Value> {
    ms.iter().filter(|m| m["cache_state"] == state).collect()
}

#[test]
fn counters_that_did_not_move_confirm_no_warm_or_hot_row_and_the_sweep_exits_1() {
    // The scripted server's bare dialect: its Anthropic endpoint never reaches its llama.cpp
    // counters, and its non-streaming reply says nothing of a cache: the only evidence is /metrics
    // deltas of 0.
    let server = Scripted::start(Behaviour { dialect: Dialect::Bare, ..Behaviour::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--api", "anthropic", "--modes", "non-streaming"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let ms = measurements(&run);
    for state in ["warm", "hot"] {
        let rows = of_state(&ms, state);
        assert!(!rows.is_empty(), "no {state} rows: {ms:#?}");
        for m in rows {
            assert_eq!(m["cache_evidence"]["source"], "metrics", "{m:#}");
            assert_eq!(m["cache_evidence"]["cached_tokens"], 0, "{m:#}");
            assert_eq!(
                m["cache_state_confirmed"], false,
                "evidence that shows nothing confirmed {state}: {m:#}"
            );
            assert_eq!(m["quality_ok"], false, "{m:#}");
            let flag = m["quality_flags"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["flag"] == "cache_state_unconfirmed")
                .unwrap_or_else(|| panic!("no cache_state_unconfirmed flag: {m:#}"));
            assert!(flag["reason"].as_str().unwrap().contains("shows nothing"), "{flag:#}");
        }
    }
    for m in of_state(&ms, "cold") {
        assert_eq!(m["cache_state_confirmed"], Value::Null, "nothing shows cold either: {m:#}");
    }
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    let unconfirmed = findings(&report, "cache_state_unconfirmed");
    assert_eq!(unconfirmed.len(), 2, "{report:#}");
    assert!(findings(&report, "stored_verdict_disagrees").is_empty(), "{report:#}");
}

#[test]
fn evidence_that_the_cache_served_the_prompt_confirms_warm_and_hot() {
    // The same sweep over OpenAI chat: the server's timings show the slot's tokens were served.
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--modes", "non-streaming"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    assert_eq!(ms.len(), 3, "{ms:#?}");
    for m in &ms {
        assert_eq!(m["cache_state_confirmed"], true, "{m:#}");
    }
    let (code, report) = verify_json(&run_dir(dir.path()));
    assert_eq!(code, 0, "{report:#}");
}

/// Rewrites measurements.jsonl with `edit` applied to the record `pick` chooses; returns that
/// record's run id and started_at.
fn edit_record(run: &Path, pick: impl Fn(&Value) -> bool, edit: impl Fn(&mut Value)) -> (String, String) {
    let mut recs = records(run);
    let target = recs.iter_mut().find(|r| pick(r)).expect("a record to edit");
    edit(target);
    let who =
        (target["run_id"].as_str().unwrap().to_string(), target["started_at"].as_str().unwrap().to_string());
    let text: String = recs.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(run.join("measurements.jsonl"), text).unwrap();
    who
}

#[test]
fn verify_recomputes_the_cache_verdict_and_names_an_edited_record() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--modes", "streaming"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let (code, report) = verify_json(&run);
    assert_eq!(code, 0, "the sweep as written verifies: {report:#}");

    // A cold record, confirmed, whose evidence now says the server served most of it from a cache.
    let is_cold = |r: &Value| r["record_type"] == "measurement" && r["cache_state"] == "cold";
    let (run_id, started_at) = edit_record(&run, is_cold, |r| {
        assert_eq!(r["cache_state_confirmed"], true, "{r:#}");
        let input = r["input_tokens"].as_u64().unwrap();
        r["cache_evidence"]["cached_tokens"] = (input - 6).into();
        r["cache_evidence"]["prompt_evaluated_tokens"] = 6.into();
    });
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    let disagree = findings(&report, "stored_verdict_disagrees");
    assert_eq!(disagree.len(), 1, "{report:#}");
    let f = disagree[0];
    assert_eq!(f["severity"], "error");
    assert_eq!(f["run_id"], run_id.as_str());
    assert_eq!(f["cell"]["cache_state"], "cold", "{f:#}");
    let message = f["message"].as_str().unwrap();
    assert!(message.contains(&started_at), "names the record: {message}");
    assert!(message.contains("cache_state_confirmed true but its evidence gives false"), "{message}");
    assert!(message.contains("quality_ok true"), "{message}");
    let unconfirmed = findings(&report, "cache_state_unconfirmed");
    assert_eq!(unconfirmed.len(), 1, "{report:#}");
    assert_eq!(unconfirmed[0]["cell"]["cache_state"], "cold");
}

#[test]
fn verify_recomputes_quality_and_physics_verdicts_of_an_edited_record() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let physics =
        ["--bandwidth-gbps", "1000", "--tflops", "100", "--model-bytes", "0.1GB", "--params", "0.1B"];
    let mut extra = vec!["--modes", "streaming"];
    extra.extend(physics);
    let out = sweep(&server.url, dir.path(), &extra);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = run_dir(dir.path());
    assert_eq!(verify_json(&run).0, 0);

    // Usage removed but quality_ok left true, and a decode rate doubled without its fraction.
    let is_measurement = |r: &Value| r["record_type"] == "measurement";
    let (run_id, _) = edit_record(&run, is_measurement, |r| {
        assert!(r["physics"]["decode_fraction"].is_number(), "{r:#}");
        r["output_tokens"] = Value::Null;
        r["decode_tps"] = (r["decode_tps"].as_f64().unwrap() * 2.0).into();
    });
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    let disagree = findings(&report, "stored_verdict_disagrees");
    assert_eq!(disagree.len(), 1, "{report:#}");
    assert_eq!(disagree[0]["run_id"], run_id.as_str());
    let message = disagree[0]["message"].as_str().unwrap();
    assert!(message.contains("quality_ok true but the gate fails on usage_missing"), "{message}");
    assert!(message.contains("physics.decode_fraction"), "{message}");
}

/// Rewrites measurements.jsonl as `edit` leaves the whole list of records.
fn edit_records(run: &Path, edit: impl FnOnce(&mut Vec<Value>)) {
    let mut recs = records(run);
    edit(&mut recs);
    let text: String = recs.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(run.join("measurements.jsonl"), text).unwrap();
}

fn messages(report: &Value, rule: &str) -> String {
    findings(report, rule).iter().map(|f| format!("{}\n", f["message"].as_str().unwrap())).collect()
}

/// Fails when a record's stored physics fraction above 1 passes because run.json's bandwidth and
/// TFLOPS were multiplied (or its physics deleted), when a stored ceiling that run.json's physics
/// no longer give goes unnamed, or when a stored prefill fraction edited alone is not caught.
#[test]
fn stored_fractions_above_1_survive_an_edited_run_json_and_a_lone_prefill_fraction_edit_is_caught() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    // Ceilings far under what the scripted server does: every record is above both.
    let physics =
        ["--bandwidth-gbps", "0.01", "--tflops", "0.001", "--model-bytes", "0.1GB", "--params", "0.1B"];
    let mut extra = vec!["--modes", "streaming", "--cache-states", "cold"];
    extra.extend(physics);
    let out = sweep(&server.url, dir.path(), &extra);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let cold = records(&run).into_iter().find(|r| r["record_type"] == "measurement").unwrap();
    for fraction in ["decode_fraction", "prefill_fraction"] {
        assert!(cold["physics"][fraction].as_f64().unwrap() > 1.0, "{cold:#}");
    }
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(findings(&report, "decode_above_ceiling").len(), 1, "{report:#}");
    assert_eq!(findings(&report, "prefill_above_ceiling").len(), 1, "{report:#}");
    assert!(findings(&report, "stored_verdict_disagrees").is_empty(), "as written: {report:#}");

    // A stored prefill fraction halved, nothing else: only its own check can see it.
    let original = std::fs::read(run.join("measurements.jsonl")).unwrap();
    edit_records(&run, |recs| {
        let m = recs.iter_mut().find(|r| r["record_type"] == "measurement").unwrap();
        m["physics"]["prefill_fraction"] = (m["physics"]["prefill_fraction"].as_f64().unwrap() / 2.0).into();
    });
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    let disagree = messages(&report, "stored_verdict_disagrees");
    assert!(disagree.contains("physics.prefill_fraction"), "{report:#}");
    assert!(!disagree.contains("physics.decode_fraction"), "{disagree}");
    std::fs::write(run.join("measurements.jsonl"), &original).unwrap();

    // run.json's bandwidth and TFLOPS multiplied: verify's own ceilings now sit far above the
    // records, but each record stored the ceiling it was measured against.
    let run_json = run.join("run.json");
    let written = std::fs::read_to_string(&run_json).unwrap();
    let mut meta: Value = serde_json::from_str(&written).unwrap();
    for key in ["bandwidth_gbps", "tflops"] {
        let v = meta["config"]["physics"][key].as_f64().unwrap();
        meta["config"]["physics"][key] = (v * 1e5).into();
    }
    std::fs::write(&run_json, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "an edited run.json hides nothing: {report:#}");
    for rule in ["decode_above_ceiling", "prefill_above_ceiling"] {
        let text = messages(&report, rule);
        assert!(text.contains("the record stored when it was measured"), "{rule}: {report:#}");
    }
    let disagree = messages(&report, "stored_verdict_disagrees");
    assert!(
        disagree.contains("physics.decode_ceiling_tps") && disagree.contains("physics.prefill_ceiling_tps"),
        "{report:#}"
    );

    // run.json without physics at all: the stored fractions still stand.
    meta["config"]["physics"] = serde_json::json!({});
    meta["physics"] = Value::Null;
    std::fs::write(&run_json, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(findings(&report, "decode_above_ceiling").len(), 1, "{report:#}");
    assert!(messages(&report, "decode_above_ceiling").contains("no physics"), "{report:#}");
}

/// Fails when a warm or hot record whose evidence and verdict were deleted together verifies
/// clean: a row bench measured is confirmed only by evidence, so without any it is unconfirmed.
#[test]
fn a_warm_or_hot_record_without_evidence_or_verdict_is_unconfirmed() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--modes", "streaming"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = run_dir(dir.path());
    assert_eq!(verify_json(&run).0, 0);
    let original = std::fs::read(run.join("measurements.jsonl")).unwrap();
    for state in ["warm", "hot"] {
        std::fs::write(run.join("measurements.jsonl"), &original).unwrap();
        edit_records(&run, |recs| {
            let m = recs.iter_mut().find(|r| r["cache_state"] == state).unwrap();
            assert_eq!(m["cache_state_confirmed"], true, "{m:#}");
            let m = m.as_object_mut().unwrap();
            m.remove("cache_evidence");
            m.remove("cache_state_confirmed");
        });
        let (code, report) = verify_json(&run);
        assert_eq!(code, 1, "{state}: {report:#}");
        let unconfirmed = findings(&report, "cache_state_unconfirmed");
        assert_eq!(unconfirmed.len(), 1, "{state}: {report:#}");
        assert_eq!(unconfirmed[0]["cell"]["cache_state"], state);
        assert!(unconfirmed[0]["message"].as_str().unwrap().contains("no cache evidence"), "{report:#}");
        let disagree = messages(&report, "stored_verdict_disagrees");
        assert!(disagree.contains("cache_state_confirmed null but its evidence gives false"), "{report:#}");
        assert!(disagree.contains("quality_ok true"), "{report:#}");
    }
}

/// Fails when the fastest record copied in as new runs of its cell (the same nonce) verifies
/// clean, in the run or in a merge of it.
#[test]
fn the_fastest_record_copied_as_new_runs_is_a_reused_nonce() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out =
        sweep(&server.url, dir.path(), &["--modes", "streaming", "--cache-states", "cold", "--runs", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let (code, report) = verify_json(&run);
    assert_eq!(code, 0, "{report:#}");
    assert!(findings(&report, "nonce_reused").is_empty(), "{report:#}");
    let mut nonce = String::new();
    edit_records(&run, |recs| {
        let fastest = recs
            .iter()
            .filter(|r| r["record_type"] == "measurement")
            .min_by(|a, b| a["ttft_ms"].as_f64().unwrap().total_cmp(&b["ttft_ms"].as_f64().unwrap()))
            .unwrap()
            .clone();
        nonce = fastest["nonce"].as_str().unwrap().to_string();
        for run_number in [4, 5] {
            let mut copy = fastest.clone();
            copy["run"] = run_number.into();
            recs.push(copy);
        }
    });
    let merged = dir.path().join("merged.json");
    let merge = bench(&["merge", run.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert_eq!(merge.status.code(), Some(0), "{}", stderr(&merge));
    for target in [&run, &merged] {
        let (code, report) = verify_json(target);
        assert_eq!(code, 1, "{report:#}");
        let reused = findings(&report, "nonce_reused");
        assert_eq!(reused.len(), 2, "{report:#}");
        let runs: Vec<u64> = reused.iter().map(|f| f["cell"]["run"].as_u64().unwrap()).collect();
        assert_eq!(runs, [4, 5], "{report:#}");
        assert!(reused[0]["message"].as_str().unwrap().contains(&nonce), "{report:#}");
    }
}

/// Fails when removing a record's `stream_burst` flag (and setting `quality_ok` back to true)
/// verifies clean: verify reads the record's own arrival times again and names it, in the run
/// directory and in a canonical file merged from it.
#[test]
fn a_removed_stream_burst_flag_is_caught_from_the_records_own_arrivals() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 40,
        token_ms: 5,
        fault: common::scripted::Fault::Lumps(4096),
        ..Behaviour::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--runs",
        "2",
        "--output-tokens",
        "128",
        "--preset",
        "llama.cpp",
        "--cache-states",
        "cold",
    ]);
    assert_eq!(out.status.code(), Some(1), "the lumped records fail their gate: {}", stderr(&out));
    let run = run_dir(dir.path());
    let ms = measurements(&run);
    assert!(ms.iter().all(|m| m["quality_flags"].to_string().contains("stream_burst")), "{ms:#?}");
    edit_records(&run, |recs| {
        for r in recs.iter_mut().filter(|r| r["record_type"] == "measurement") {
            r["quality_flags"] = serde_json::json!([]);
            r["quality_ok"] = true.into();
        }
    });
    let (code, report) = verify_json(&run);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(findings(&report, "burst_unflagged").len(), 2, "{report:#}");
    assert!(messages(&report, "burst_unflagged").contains("stream arrived in lumps"), "{report:#}");
    // The same records copied into a canonical file by merge are read again from there.
    let merged = dir.path().join("merged.json");
    let out = bench(&["merge", run.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert!(merged.exists(), "{}", stderr(&out));
    let (code, report) = verify_json(&merged);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(findings(&report, "burst_unflagged").len(), 2, "{report:#}");
    // Pretty-printed, its records are not one line each: read whole, each judged as it is read.
    let pretty = dir.path().join("pretty.json");
    let document: Value = serde_json::from_slice(&std::fs::read(&merged).unwrap()).unwrap();
    std::fs::write(&pretty, serde_json::to_string_pretty(&document).unwrap()).unwrap();
    let (code, report) = verify_json(&pretty);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(findings(&report, "burst_unflagged").len(), 2, "{report:#}");
}
