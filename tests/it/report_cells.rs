//! What the reading verbs call one cell, through the binary: two rows of a dataset at one length
//! are two cells in merge, report, compare and verify; each level of a `bench load` run is a row
//! of its own in every report format, its warm-up left out, and compare pairs levels; a p90/p99
//! of few values shows its n and a speed-up over two values has no interval; an AIPerf output
//! directory is read by the file inside; sweeps started together get their own run directories.

use crate::common;

use std::path::{Path, PathBuf};

use common::scripted::{Behaviour, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn json_out(out: &std::process::Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

fn sweep(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = common::quiet_sweep_args(url, out);
    args.extend(["--preset", "llama.cpp", "--output-tokens", "8"]);
    args.extend_from_slice(extra);
    bench(&args)
}

/// Two prompts of one length, two runs each: four records of two cells, which only the row tells
/// apart. Merge kept two of them (the fast cell key had no row), report showed one cell of two.
#[test]
fn two_rows_of_one_length_stay_two_cells_in_merge_report_compare_and_verify() {
    let server =
        Scripted::start(Behaviour { tokenizer: true, first_token_ms: 5, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("prompts.txt");
    std::fs::write(&dataset, "Tell me about rivers now\nTell me about oceans now\n").unwrap();
    let out_dir = dir.path().join("out");
    let out = sweep(
        &server.url,
        &out_dir,
        &["--dataset", dataset.to_str().unwrap(), "--cache-states", "cold", "--runs", "2"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(&out_dir);
    let ms = measurements(&run);
    let rows: Vec<u64> = ms.iter().map(|m| m["dataset_row"].as_u64().unwrap()).collect();
    assert_eq!(rows.len(), 4, "{ms:?}");
    assert!(rows.contains(&1) && rows.contains(&2), "{rows:?}");
    // The case itself: both rows at one length, so nothing but the row separates their cells.
    assert!(ms.iter().all(|m| m["context_tokens"] == ms[0]["context_tokens"]), "{ms:?}");

    // merge keeps all four: nothing is a duplicate.
    let merged = dir.path().join("merged.json");
    let out = bench(&["merge", run.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("merged 4 records") && stderr(&out).contains("(0 duplicates"),
        "{}",
        stderr(&out)
    );
    let canonical: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let kept = canonical["records"].as_array().unwrap();
    assert_eq!(kept.iter().filter(|r| r["record_type"] == "measurement").count(), 4);

    // report: two cells of two records, each naming its row, in JSON and in the table.
    for input in [&run, &merged] {
        let report = json_out(&bench(&["report", input.to_str().unwrap(), "--format", "json"]));
        let cells = report["cells"].as_array().unwrap();
        let found: Vec<(u64, u64)> = cells
            .iter()
            .map(|c| (c["dataset_row"].as_u64().unwrap(), c["records"].as_u64().unwrap()))
            .collect();
        assert_eq!(found, [(1, 2), (2, 2)], "{}: {report}", input.display());
    }
    let table = stdout(&bench(&["report", merged.to_str().unwrap()]));
    let context = ms[0]["context_tokens"].as_u64().unwrap();
    for row in [1, 2] {
        assert!(table.contains(&format!("{context} row {row}")), "{table}");
    }

    // compare pairs row with row: against a candidate holding row 1 only, row 1 is compared with
    // row 1 and row 2 has no partner (pooled keys paired both rows with row 1).
    let only_row_1 = dir.path().join("row1.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(run.join("measurements.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["dataset_row"] == 1)
        .map(str::to_string)
        .collect();
    std::fs::write(&only_row_1, kept.join("\n") + "\n").unwrap();
    let out = bench(&["compare", run.to_str().unwrap(), only_row_1.to_str().unwrap(), "--format", "json"]);
    let compared = json_out(&out);
    let candidate = &compared["candidates"][0];
    let paired: Vec<u64> = candidate["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cell"]["dataset_row"].as_u64().unwrap())
        .collect();
    assert_eq!(paired, [1], "{compared}");
    assert_eq!(candidate["cells"][0]["metrics"][0]["candidate"]["n"], 2, "{compared}");
    let alone: Vec<u64> = candidate["only_in_base"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["dataset_row"].as_u64().unwrap())
        .collect();
    assert_eq!(alone, [2], "{compared}");
    let text = stdout(&bench(&["compare", run.to_str().unwrap(), merged.to_str().unwrap()]));
    assert!(
        text.contains(&format!("{context} row 1 cold")) && text.contains(&format!("{context} row 2 cold")),
        "{text}"
    );

    // verify names the row of a record it finds fault with (its quality gate edited to failed).
    let edited = dir.path().join("edited.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(run.join("measurements.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).unwrap();
            if r["dataset_row"] == 2 && r["run"] == 1 {
                r["quality_ok"] = false.into();
            }
            r.to_string()
        })
        .collect();
    std::fs::write(&edited, lines.join("\n") + "\n").unwrap();
    let out = bench(&["verify", edited.to_str().unwrap()]);
    let said = stdout(&out);
    let finding =
        said.lines().find(|l| l.contains("quality_gate_failed")).unwrap_or_else(|| panic!("{said}"));
    assert!(finding.contains(&format!("ctx {context} row 2 cold streaming b1 run 1 of ")), "{finding}");
}

fn load(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "load",
        "--server",
        url,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--output-tokens",
        "8",
    ];
    args.extend_from_slice(extra);
    bench(&args)
}

/// A closed loop of 1 and 2 users: its report had one cell of every level and the warm-ups
/// pooled. Each level is a row of its own, warm-up left out, in every format; compare pairs levels.
#[test]
fn each_load_level_is_its_own_row_in_every_report_format_without_its_warm_up() {
    let server = Scripted::start(Behaviour { first_token_ms: 5, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = load(
        &server.url,
        &out_dir,
        &["--concurrency", "1,2", "--duration", "1500ms", "--warmup-duration", "300ms"],
    );
    // Exit 1 where a request failed its gates (a starved machine can hold a stream back): the
    // report counts such records, and samples only the others.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(&out_dir);
    let ms = measurements(&run);
    let level = |users: u64, warmup: bool| {
        ms.iter()
            .filter(move |m| m["concurrency"] == users && m["warmup"].as_bool().unwrap_or(false) == warmup)
    };
    let count = |users: u64, warmup: bool| level(users, warmup).count();
    let good =
        |users: u64| level(users, false).filter(|m| m["quality_ok"] == true && m["error"].is_null()).count();
    for users in [1, 2] {
        assert!(count(users, true) > 0 && count(users, false) > 0, "level {users}: {ms:?}");
    }

    let report = json_out(&bench(&["report", run.to_str().unwrap(), "--format", "json"]));
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{report}");
    for (cell, users) in cells.iter().zip([1u64, 2]) {
        assert_eq!(cell["concurrency"], users, "{cell}");
        assert_eq!(cell["records"], count(users, false), "{cell}");
        assert_eq!(cell["warmup_records"], count(users, true), "{cell}");
        assert_eq!(cell["quality_ok"], good(users), "{cell}");
        assert_eq!(cell["ttft_ms"]["n"], good(users), "only the steady state is sampled: {cell}");
    }
    let out = bench(&["report", run.to_str().unwrap(), "--format", "csv"]);
    let csv = stdout(&out);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    for (row, users) in rows.iter().zip([1usize, 2]) {
        assert_eq!(row[at("concurrency")], users.to_string(), "{csv}");
        assert_eq!(row[at("records")], count(users as u64, false).to_string(), "{csv}");
    }
    for format in ["table", "markdown"] {
        let text = stdout(&bench(&["report", run.to_str().unwrap(), "--format", format]));
        assert!(text.contains("256 at 1 user ") && text.contains("256 at 2 users"), "{format}: {text}");
    }
    let page = dir.path().join("report.html");
    let out = bench(&["report", run.to_str().unwrap(), "--format", "html", "-o", page.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    for users in [1, 2] {
        assert_eq!(html.matches(&format!("data-concurrency=\"{users}\"")).count(), 1, "level {users}");
    }
    assert!(html.contains(&format!(">{}/{}<", good(2), count(2, false))), "level 2's ok/n");

    // compare pairs level with level: against a candidate holding level 2 only, level 2 is
    // compared with level 2 and level 1 has no partner.
    let only_2 = dir.path().join("level2.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(run.join("measurements.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).unwrap()["concurrency"] == 2)
        .map(str::to_string)
        .collect();
    std::fs::write(&only_2, kept.join("\n") + "\n").unwrap();
    let compared =
        json_out(&bench(&["compare", run.to_str().unwrap(), only_2.to_str().unwrap(), "--format", "json"]));
    let candidate = &compared["candidates"][0];
    let paired: Vec<u64> = candidate["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cell"]["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(paired, [2], "{compared}");
    assert_eq!(candidate["cells"][0]["metrics"][0]["candidate"]["n"], good(2), "{compared}");
    let alone: Vec<u64> = candidate["only_in_base"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(alone, [1], "{compared}");
}

/// Two runs of cold and hot: a p99 of two values is their maximum, and a ratio of medians of two
/// values has no interval worth printing. The table said "7.86/7.95" and "7.56 (5.85..8.50)".
#[test]
fn tails_of_few_values_show_their_n_and_a_speedup_of_two_runs_has_no_interval() {
    let server =
        Scripted::start(Behaviour { tokenizer: true, first_token_ms: 5, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out =
        sweep(&server.url, dir.path(), &["--contexts", "256", "--cache-states", "cold,hot", "--runs", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let report = json_out(&bench(&["report", run.to_str().unwrap(), "--format", "json"]));
    let hot = report["cells"].as_array().unwrap().iter().find(|c| c["cache_state"] == "hot").unwrap().clone();
    let speedup = &hot["ttft_speedup_vs_cold"];
    assert!(speedup["ratio"].as_f64().is_some(), "{hot}");
    assert!(speedup["ci95_lo"].is_null() && speedup["ci95_hi"].is_null(), "no interval at n=2: {hot}");
    for format in ["table", "markdown"] {
        let text = stdout(&bench(&["report", run.to_str().unwrap(), "--format", format]));
        let hot_row = text.lines().find(|l| l.contains(" hot ")).unwrap_or_else(|| panic!("{text}"));
        assert!(hot_row.contains(" (n<3)"), "{format}: the speed-up says why it has no interval: {hot_row}");
        assert!(!hot_row.contains(".."), "{format}: no interval at n=2: {hot_row}");
        // The p90/p99 of two values, and the ITL p99 of 14 gaps, say their n.
        assert!(text.contains("(n=2)"), "{format}: {text}");
        assert!(text.contains("(n=14)"), "{format}: {text}");
    }
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import").join(path)
}

/// AIPerf writes a directory (`artifacts/<run>/`); giving it whole was refused as "not a run
/// directory". report, verify and merge read it by the records file inside, as that file alone.
#[test]
fn an_aiperf_output_directory_is_read_by_the_file_inside() {
    let dir = tempfile::tempdir().unwrap();
    let aiperf = dir.path().join("artifacts-run");
    std::fs::create_dir(&aiperf).unwrap();
    for name in ["profile_export.jsonl", "profile_export_aiperf.json"] {
        std::fs::copy(fixture(&format!("aiperf/{name}")), aiperf.join(name)).unwrap();
    }
    let as_dir = json_out(&bench(&["report", aiperf.to_str().unwrap(), "--format", "json"]));
    let records = aiperf.join("profile_export.jsonl");
    let as_file = json_out(&bench(&["report", records.to_str().unwrap(), "--format", "json"]));
    assert_eq!(as_dir["cells"], as_file["cells"]);
    assert_eq!(as_dir["cells"][0]["records"], 4, "{as_dir}");
    let out = bench(&["verify", aiperf.to_str().unwrap()]);
    assert!(stdout(&out).contains("in 4 record(s)"), "{}{}", stdout(&out), stderr(&out));
    let merged = dir.path().join("merged.json");
    let out = bench(&["merge", aiperf.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("merged 4 records"), "{}", stderr(&out));
    // Only the aggregate there: it is read (one record for the mean request).
    std::fs::remove_file(&records).unwrap();
    let one = json_out(&bench(&["report", aiperf.to_str().unwrap(), "--format", "json"]));
    assert_eq!(one["cells"][0]["records"], 1, "{one}");
    // A directory of neither kind names what it looked for.
    std::fs::remove_file(aiperf.join("profile_export_aiperf.json")).unwrap();
    let out = bench(&["report", aiperf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("profile_export.jsonl"), "{}", stderr(&out));
}

/// Sweeps started together in one output directory (a script's loop, a cluster's tasks): the
/// default run id had one-second resolution, and all but one were refused as existing runs.
#[test]
fn sweeps_started_in_the_same_second_each_get_their_own_run_directory() {
    // A server each, so that no sweep's cache actions touch another's requests.
    let servers: Vec<Scripted> = (0..4)
        .map(|_| Scripted::start(Behaviour { first_token_ms: 5, token_ms: 5, ..Default::default() }))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<std::process::Child> = servers
        .iter()
        .map(|server| {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("bench"))
                .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap(), "--quiet"])
                .args(["--thermal", "off", "--contexts", "256", "--cache-states", "cold", "--runs", "1"])
                .args(["--output-tokens", "8", "--warmup", "0"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut said = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        said.push(stdout(&out).trim().to_string());
    }
    let dirs: std::collections::BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), 4, "{dirs:?}");
    for name in &dirs {
        // The documented shape: UTC timestamp, what ran, 4 hex digits.
        let (head, suffix) = name.rsplit_once('-').unwrap();
        assert!(head.ends_with("Z-cold") && suffix.len() == 4, "{name}");
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        assert!(said.iter().any(|s| s.ends_with(name.as_str())), "each sweep printed its own: {said:?}");
    }
}
