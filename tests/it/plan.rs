//! `bench plan`: the cells of a plan in the sweep's order, and a forecast from calibration or from
//! an earlier run; and the sweep's own forecast beside its measured time.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, run_dir, stderr};
use serde_json::Value;

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn a_plan_without_a_server_lists_the_cells_in_sweep_order() {
    let paper = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/paper.toml");
    let out = bench(&["plan", "--scenario", paper]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("204 cells (no forecast: give --server to calibrate, or --from RUN)\n"), "{text}");
    let out = bench(&["plan", "--scenario", paper, "--format", "json"]);
    let plan = json(&out);
    assert_eq!(plan["total_cells"], 204);
    assert!(plan["forecast_s"].is_null());
    assert_eq!(plan["cells"][0]["label"], "ctx 1024 cold streaming b1 run 1");
    assert_eq!(plan["cells"][203]["cell"]["scenario"], "staggered_sequential");
}

#[test]
fn a_forecast_comes_from_calibration_or_an_earlier_run_and_the_sweep_records_its_own() {
    let server = Scripted::start(Behaviour { first_token_ms: 40, token_ms: 2, ..Default::default() });
    let flags = ["--contexts", "256,512", "--runs", "2", "--output-tokens", "24", "--thermal", "off"];
    let mut args = vec!["plan", "--server", &server.url, "--format", "json"];
    args.extend_from_slice(&flags);
    let out = bench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = json(&out);
    assert_eq!(plan["total_cells"], 4);
    let forecast = plan["forecast_s"].as_f64().unwrap();
    let sum: f64 = plan["cells"].as_array().unwrap().iter().map(|c| c["forecast_s"].as_f64().unwrap()).sum();
    assert!((forecast - sum).abs() < 1e-9 && forecast > 0.0, "{plan}");
    let c = plan["cells"].as_array().unwrap();
    assert!(c[2]["forecast_s"].as_f64() > c[0]["forecast_s"].as_f64(), "512 tokens cost more than 256");
    assert!(plan["rates"]["source"].as_str().unwrap().starts_with("calibrated"));

    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap()];
    args.extend_from_slice(&flags);
    let out = bench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("(forecast "), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["forecast"]["cells"], 4);
    assert!(meta["forecast"]["eta_s"].as_f64().unwrap() > 0.0);

    let out =
        bench(&["plan", "--from", run.to_str().unwrap(), "--format", "json", "--contexts", "256,512,1024"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = json(&out);
    assert_eq!(plan["total_cells"], 9);
    assert!(plan["rates"]["source"].as_str().unwrap().starts_with("from "));
    assert_eq!(plan["cells"][0]["cell"]["model"], "scripted-model", "the earlier run's model");
}

#[test]
fn a_plan_from_a_run_without_good_cold_records_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.jsonl");
    std::fs::write(&path, "").unwrap();
    let out = bench(&["plan", "--from", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A hot conversation of N turns with a think time costs N-1 pauses and N-2 unmeasured turns: the
/// forecast counts both (it once counted 3 turns and no pause: 2 s forecast for a 2m 50s sweep).
/// From an earlier run's records the rates are fixed, so the pauses are exactly the difference.
#[test]
fn the_forecast_counts_every_turn_and_think_time_pause_of_a_hot_conversation() {
    let server = Scripted::start(Behaviour { first_token_ms: 40, token_ms: 2, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--contexts", "256", "--runs", "1", "--output-tokens", "24", "--thermal", "off"];
    let mut args = vec!["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap(), "--quiet"];
    args.extend_from_slice(&flags);
    assert!(bench(&args).status.success());
    let run = run_dir(dir.path());
    let forecast = |extra: &[&str]| {
        let mut args =
            vec!["plan", "--from", run.to_str().unwrap(), "--format", "json", "--cache-states", "hot"];
        args.extend_from_slice(&flags);
        args.extend_from_slice(extra);
        let out = bench(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        json(&out)["forecast_s"].as_f64().unwrap()
    };
    let (three, six) = (forecast(&[]), forecast(&["--turns", "6"]));
    assert!(six > three, "three more unmeasured turns cost something: {three} vs {six}");
    let paused = forecast(&["--turns", "6", "--think-time", "2s"]);
    common::assert_close(paused - six, 5.0 * 2.0, "five pauses of 2 s before turns 2 to 6");
}

/// `bench plan --dataset`: without a server a row's length is unknown (`ctx ?`, never a made-up
/// 0); with one the rows are counted as the sweep counts them, each shown at its length.
#[test]
fn a_dataset_plan_shows_each_rows_length_when_a_server_counts_it() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datasets/sharegpt.json");
    let out = bench(&["plan", "--dataset", file.to_str().unwrap(), "--runs", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("ctx ? row 1 ") && !text.contains("ctx 0 "), "{text}");
    let server = Scripted::start(Behaviour::default());
    let out = bench(&[
        "plan",
        "--server",
        &server.url,
        "--dataset",
        file.to_str().unwrap(),
        "--runs",
        "1",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = json(&out);
    let cells = plan["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 3, "{plan}");
    for c in cells {
        assert!(c["cell"]["context_tokens"].as_u64().unwrap() > 0, "{c}");
        assert!(!c["label"].as_str().unwrap().contains("ctx ?"), "{c}");
    }
}
