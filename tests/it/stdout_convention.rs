//! One stdout convention for every verb that writes a run or a file: what people read goes to
//! stderr (a sweep's numbers per cell, a soak's verdict table), and the run directory or output
//! path is alone on its own stdout line, for scripts (`RUN=$(bench sweep ...)`).

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, run_dir, stderr};
use serde_json::Value;

fn stdout_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// A sweep of two contexts, three runs each, into `out`.
fn sweep(server: &Scripted, out: &std::path::Path) -> std::process::Output {
    bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        out.to_str().unwrap(),
        "--contexts",
        "256,512",
        "--runs",
        "3",
        "--output-tokens",
        "24",
        "--thermal",
        "off",
    ])
}

/// The report table's number format (report/table.rs `short`): what the summary line shows.
fn short(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

#[test]
fn a_sweep_ends_with_the_reports_numbers_per_cell_on_stderr_and_its_directory_alone_on_stdout() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server, dir.path());
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    assert_eq!(stdout_lines(&out), vec![run.display().to_string()]);
    let err = stderr(&out);
    let report = bench(&["report", "--format", "json", run.to_str().unwrap()]);
    let cells: Value = serde_json::from_slice(&report.stdout).unwrap();
    let cells = cells["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    for (cell, context) in cells.iter().zip(["256", "512"]) {
        let f = |path: &str| {
            cell.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("{path}: {cell}"))
        };
        let line = err
            .lines()
            .find(|l| l.trim_start().starts_with("cold") && l.split_whitespace().nth(1) == Some(context))
            .unwrap_or_else(|| panic!("no summary line for cold {context}: {err}"));
        for shown in [
            format!("TTFT ms p50/p99 {}/{}", short(f("/ttft_ms/median")), short(f("/ttft_ms/p99"))),
            format!("ITL ms p50/p99 {}/{}", short(f("/itl_ms/median")), short(f("/itl_ms/p99"))),
            format!("decode tok/s {}", short(f("/decode_tps/median"))),
            format!("({}/{} ok)", cell["quality_ok"], cell["records"]),
        ] {
            assert!(line.contains(&shown), "{shown:?} not in {line:?}");
        }
    }
}

/// `bench soak` of 2 iterations of 2 concurrent 256-token requests.
fn soak(server: &Scripted, out: &std::path::Path) -> std::process::Output {
    let out = out.to_str().unwrap();
    bench(&[
        "soak",
        "--server",
        &server.url,
        "--out",
        out,
        "--contexts",
        "256",
        "--output-tokens",
        "24",
        "--concurrency",
        "2",
        "--iterations",
        "2",
    ])
}

#[test]
fn soak_prints_its_table_on_stderr_and_its_run_directory_alone_on_stdout() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = soak(&server, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = run_dir(dir.path());
    assert_eq!(stdout_lines(&out), vec![run.display().to_string()]);
    let soak = common::table::find(&stderr(&out), "Soak");
    assert_eq!(soak.cell("PASS 4/4 (2 iterations x 2)", "Requests passed"), Some("4/4"), "{soak:?}");
    assert!(stderr(&out).contains(&format!("records in {}", run.display())), "{}", stderr(&out));
}

#[test]
fn merge_and_report_to_a_file_print_the_output_path_alone_on_stdout() {
    let server = Scripted::start(Behaviour { first_token_ms: 10, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&server, &dir.path().join("runs"));
    // A record a busy machine flags (exit 1) is still merged and reported.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(&dir.path().join("runs"));
    let merged = dir.path().join("merged.json");
    let out = bench(&["merge", run.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_lines(&out), vec![merged.display().to_string()]);
    let page = dir.path().join("report.md");
    let out =
        bench(&["report", "--format", "markdown", merged.to_str().unwrap(), "-o", page.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_lines(&out), vec![page.display().to_string()]);
    assert!(std::fs::read_to_string(&page).unwrap().contains("TTFT"));
}

/// A soak that fails says why under its table: a server whose output diverges after its serial
/// pass fails requests as output mismatches, and the FAIL line names them with their count.
#[test]
fn a_failed_soak_says_why_under_its_table() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 20,
        token_ms: 1,
        diverge_after: Some(2),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = soak(&server, dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let soak = common::table::find(&err, "Soak");
    let failed = soak.rows.iter().find(|r| r[0].starts_with("FAIL")).unwrap_or_else(|| panic!("{err}"));
    let mismatches: u32 = failed[3].parse().unwrap();
    assert!(mismatches > 0, "{err}");
    assert!(err.contains(&format!("FAIL because: {mismatches} output_mismatch")), "{err}");
    let meta = common::run_json(&run_dir(dir.path()));
    assert_eq!(meta["soak"]["failed_by"]["output_mismatch"], mismatches, "{}", meta["soak"]);
}
