//! `--runs auto`: each cell is repeated until the 95% interval of its median TTFT is within
//! `--target-ci` of the median (at least `--min-runs`, at most `--max-runs`), and run.json says
//! how many runs each cell took and the interval it reached.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

fn sweep(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "sweep",
        "--server",
        url,
        "--out",
        out.to_str().unwrap(),
        "--contexts",
        "256",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
        "--runs",
        "auto",
    ];
    args.extend_from_slice(extra);
    bench(&args)
}

fn run_json(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

#[test]
fn a_cell_stops_once_its_median_is_known_to_the_target_and_run_json_says_how_far_it_got() {
    let server = Scripted::start(Behaviour { first_token_ms: 100, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--target-ci", "50%", "--max-runs", "12"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta = run_json(&run);
    assert_eq!(meta["config"]["runs_auto"]["target_ci"], 0.5, "{}", meta["config"]);
    assert_eq!(meta["config"]["runs_auto"]["max_runs"], 12);
    let cells = meta["runs_auto"].as_array().unwrap_or_else(|| panic!("{meta}"));
    assert_eq!(cells.len(), 1, "{cells:?}");
    let c = &cells[0];
    // The point's label: the cell's own, at every run (its text unchanged since --runs auto began).
    assert_eq!(c["cell"], "ctx 256 cold streaming b1 all runs", "{c}");
    let runs = c["runs"].as_u64().unwrap();
    assert_eq!(runs as usize, measurements(&run).len(), "{c}");
    assert_eq!(c["within_target"], true, "a steady 100 ms prefill is known to 50%: {c}");
    assert!((6..12).contains(&runs), "stopped early, after the 6 values a 95% interval needs: {c}");
    assert!(c["ci_level"].as_f64().unwrap() >= 0.95, "{c}");
    assert!(c["ci_half_width_share"].as_f64().unwrap() <= 0.5, "{c}");
    assert_eq!(c["metric"], "ttft_ms");
}

#[test]
fn a_target_no_cell_can_meet_runs_to_the_maximum_and_says_so() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 2, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server.url, dir.path(), &["--target-ci", "0.00001%", "--max-runs", "7"]);
    // A target missed is a finding, said on stderr (with --quiet too) naming the cell.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--runs auto: 1 of 1 cells did not reach") && err.contains("--max-runs 7"), "{err}");
    let run = run_dir(dir.path());
    let c = &run_json(&run)["runs_auto"][0];
    assert_eq!(c["runs"], 7, "{c}");
    assert_eq!(c["within_target"], false, "{c}");
    assert_eq!(measurements(&run).len(), 7);
}

#[test]
fn target_ci_without_runs_auto_or_out_of_range_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().to_str().unwrap();
    let server = "http://127.0.0.1:9";
    for (args, flag) in [
        (vec!["sweep", "--server", server, "--out", o, "--runs", "3", "--target-ci", "5%"], "--target-ci"),
        (
            vec!["sweep", "--server", server, "--out", o, "--runs", "auto", "--target-ci", "150%"],
            "--target-ci",
        ),
        (
            vec![
                "sweep",
                "--server",
                server,
                "--out",
                o,
                "--runs",
                "auto",
                "--min-runs",
                "9",
                "--max-runs",
                "8",
            ],
            "--max-runs",
        ),
    ] {
        let out = bench(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(flag), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing created");
}
