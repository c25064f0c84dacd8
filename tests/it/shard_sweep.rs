//! Sharded sweeps against the scripted server: N shards measure every cell of the unsharded
//! matrix exactly once, run.json records the shard, `--resume` finishes the shard it started,
//! `bench merge --expect` is complete only with every shard and names the one that is missing,
//! and every bad `--shard` exits 2 before anything is measured.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::scripted::{Behaviour, Scripted};
use common::{bench, records, stderr};
use serde_json::Value;

/// 2 contexts x cold/warm/hot x batch 1 and 2 x 2 runs + one staggered pair: 13 units, 26 cells.
const SCENARIO: &str = r#"
preset = "llama.cpp"
contexts = "256,512"
cache_states = "cold,warm,hot"
batch_sizes = "1,2"
runs = 2
output_tokens = 24
thermal = "off"
staggered = true
stagger_context = 256
stagger_runs = 1
stagger_delay = "50ms"
"#;

fn scenario(dir: &Path) -> PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, SCENARIO).unwrap();
    path
}

fn sweep(url: &str, scenario: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "sweep",
        "--server",
        url,
        "--scenario",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    bench(&args)
}

/// A record's cell: (scenario, cache state, mode, context, batch size, run).
type Cell = (String, String, String, u64, u64, u64);

fn cell(r: &Value) -> Cell {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    let n = |k: &str| r[k].as_u64().unwrap_or_default();
    (s("scenario"), s("cache_state"), s("mode"), n("context_tokens"), n("batch_size"), n("run"))
}

/// The cells of a run, in the order they were first recorded.
fn cells(run: &Path) -> Vec<Cell> {
    let mut seen = Vec::new();
    for r in records(run) {
        let c = cell(&r);
        if !seen.contains(&c) {
            seen.push(c);
        }
    }
    seen
}

fn run_json(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap()
}

fn merge(inputs: &[&Path], expect: &Path, out: &Path) -> std::process::Output {
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    args.extend(["-o", out.to_str().unwrap(), "--expect", expect.to_str().unwrap()]);
    bench(&args)
}

#[test]
fn four_shards_partition_the_matrix_and_merge_to_complete() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let whole = dir.path().join("whole");
    let out = sweep(&server.url, &scenario, &whole, &["--run-id", "whole"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let unsharded = cells(&whole.join("whole"));
    assert_eq!(unsharded.len(), 26);

    let shards = dir.path().join("shards");
    let mut union: Vec<Cell> = Vec::new();
    for k in 1..=4 {
        let flag = format!("{k}/4");
        let out = sweep(&server.url, &scenario, &shards, &["--shard", &flag, "--run-id", "job"]);
        assert!(out.status.success(), "shard {flag}: {}", stderr(&out));
        let run = shards.join(format!("job-shard{k}of4"));
        let mine = cells(&run);
        assert!(!mine.is_empty(), "shard {flag} measured nothing");
        // The shard's cells come in the unsharded order.
        let positions: Vec<usize> =
            mine.iter().map(|c| unsharded.iter().position(|u| u == c).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "shard {flag}: {positions:?}");
        let shard = &run_json(&run)["config"]["shard"];
        assert_eq!((shard["index"].as_u64(), shard["count"].as_u64()), (Some(k), Some(4)), "{shard}");
        assert_eq!(shard["origin"], format!("--shard {k}/4"));
        assert_eq!(shard["cells"].as_u64(), Some(mine.len() as u64));
        union.extend(mine);
    }
    // Every cell exactly once, and the union is the unsharded matrix.
    let distinct: BTreeSet<&Cell> = union.iter().collect();
    assert_eq!(distinct.len(), union.len(), "a cell was measured by two shards");
    assert_eq!(distinct, unsharded.iter().collect::<BTreeSet<_>>());

    let runs: Vec<PathBuf> = (1..=4).map(|k| shards.join(format!("job-shard{k}of4"))).collect();
    let all: Vec<&Path> = runs.iter().map(PathBuf::as_path).collect();
    let merged = merge(&all, &scenario, &dir.path().join("merged.json"));
    assert_eq!(merged.status.code(), Some(0), "{}", stderr(&merged));
    let table = String::from_utf8_lossy(&merged.stdout);
    assert!(table.contains("Complete") && !table.contains("missing shard"), "{table}");

    // Shard 3 never ran: incomplete, and named.
    let three: Vec<&Path> = all.iter().copied().filter(|p| !p.ends_with("job-shard3of4")).collect();
    let merged = merge(&three, &scenario, &dir.path().join("partial.json"));
    assert_eq!(merged.status.code(), Some(1), "{}", stderr(&merged));
    let table = String::from_utf8_lossy(&merged.stdout);
    let expected = cells(&runs[2]).len();
    assert!(table.contains(&format!("missing shard 3/4: {expected} cells")), "{table}");
    assert!(table.contains("-shard3of4") && !table.contains("missing shard 1/4"), "{table}");
}

#[test]
fn auto_reads_the_indexed_job_and_resume_finishes_the_same_shard() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let explicit = dir.path().join("explicit");
    let out = sweep(&server.url, &scenario, &explicit, &["--shard", "2/3", "--run-id", "r"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = cells(&explicit.join("r-shard2of3"));

    let auto = dir.path().join("auto");
    let out = assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .env("JOB_COMPLETION_INDEX", "1")
        .env("TTFT_BENCH_SHARD_COUNT", "3")
        .args(["sweep", "--server", &server.url, "--scenario", scenario.to_str().unwrap()])
        .args(["--out", auto.to_str().unwrap(), "--run-id", "r", "--quiet", "--shard", "auto"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let run = auto.join("r-shard2of3");
    assert_eq!(cells(&run), expected);
    assert_eq!(
        run_json(&run)["config"]["shard"]["origin"],
        "JOB_COMPLETION_INDEX=1, TTFT_BENCH_SHARD_COUNT=3"
    );

    // Lose the last cell (a pod killed mid-shard), then resume with no shard flag: only that
    // cell is measured again, none of another shard's.
    let last = expected.last().unwrap().clone();
    let path = run.join("measurements.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| cell(&serde_json::from_str(l).unwrap()) != last)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept.concat()).unwrap();
    let out = bench(&["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url, "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let after = cells(&run);
    assert_eq!(after.iter().collect::<BTreeSet<_>>(), expected.iter().collect::<BTreeSet<_>>());
    assert_eq!(after.last(), Some(&last));
    assert_eq!(run_json(&run)["config"]["shard"]["index"], 2);
    // A resume cannot move to another shard.
    let out = bench(&["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url, "--shard", "1/3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--shard cannot be combined with --resume"), "{}", stderr(&out));
}

/// Flags, environment, and what the error must say.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn bad_shards_exit_2_before_anything_is_measured() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let cases: [Case; 5] = [
        (&["--shard", "5/4"], &[], "1 <= K <= N"),
        (&["--shard", "1/0"], &[], "1 <= K <= N"),
        (&["--shard", "auto"], &[], "neither JOB_COMPLETION_INDEX"),
        (&["--shard", "auto"], &[("JOB_COMPLETION_INDEX", "0")], "--shard-count"),
        // 9 units (a point's cold, warm and hot are one lifecycle, on by default) cannot fill 10.
        (&["--shard", "1/10"], &[], "at most 9"),
    ];
    for (flags, vars, says) in cases {
        let mut cmd = assert_cmd::Command::cargo_bin("bench").unwrap();
        for var in ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "TTFT_BENCH_SHARD_COUNT"] {
            cmd.env_remove(var);
        }
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd
            .args(["sweep", "--server", &server.url, "--scenario", scenario.to_str().unwrap()])
            .args(["--out", dir.path().join("out").to_str().unwrap(), "--quiet"])
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?} {vars:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{flags:?}: {}", stderr(&out));
    }
    assert!(!dir.path().join("out").exists(), "nothing may be written for a bad shard");
    assert_eq!(server.measured_requests(), 0);
}
