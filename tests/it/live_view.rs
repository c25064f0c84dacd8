//! The live view in a real terminal: `bench sweep`, `load`, `soak` and `watch` run inside tmux
//! against the scripted server, the test reads the pane as a user sees it and presses `q`. What is
//! asserted is what bench drew and wrote: the rows per cache state and their counts against the
//! run's own measurements.jsonl, run.json `interrupted` and exit 130 after `q`, every finished
//! record kept, `--resume` finishing, and the terminal given back (canonical input and echo on,
//! the alternate screen left). With stderr redirected, the same verbs print plain lines.
//!
//! tmux runs on a socket of each test's own (`tmux -L`), so its server starts with this test's
//! environment and ends with the test. Without tmux these tests skip with a message, unless
//! TTFT_BENCH_REQUIRE_TMUX is set (CI sets it), where a missing tmux fails them.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::scripted::{Behaviour, Scripted};

/// Guards against a hang only; nothing here is timed.
const HANG: Duration = Duration::from_secs(120);

const BENCH: &str = env!("CARGO_BIN_EXE_bench");

/// A tmux server of this test's own, with one 160x50 pane running a command.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// None (the test skips) when tmux is missing and not required.
    fn start(name: &str, dir: &Path, command: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(
                std::env::var_os("TTFT_BENCH_REQUIRE_TMUX").is_none(),
                "TTFT_BENCH_REQUIRE_TMUX is set but tmux is not installed"
            );
            eprintln!("skipped: tmux is not installed (set TTFT_BENCH_REQUIRE_TMUX=1 to require it)");
            return None;
        }
        let socket = format!("ttft-live-{name}-{}", std::process::id());
        // The command's exit code and the terminal's settings after it, then the pane stays up.
        let script = format!(
            "{command}; echo $? > {exit}; stty -a > {stty}; sleep 600",
            exit = dir.join("exit").display(),
            stty = dir.join("stty").display()
        );
        let ok = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "50"])
            .args(["sh", "-c", &script])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session");
        Some(Tmux { socket })
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").args(["-L", &self.socket]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// What the pane shows now.
    fn pane(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn press(&self, key: &str) {
        self.tmux(&["send-keys", key]);
    }

    /// Whether the pane is on the alternate screen.
    fn alternate(&self) -> bool {
        self.tmux(&["display-message", "-p", "#{alternate_on}"]).trim() == "1"
    }

    /// Waits for the pane to show `what`; returns the pane.
    fn wait_for_text(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let pane = self.pane();
            if pane.contains(what) {
                return pane;
            }
            assert!(start.elapsed() < HANG, "the pane never showed {what:?}:\n{pane}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < HANG, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The exit code the pane's command wrote, once it ended.
fn exit_code(dir: &Path) -> i32 {
    let path = dir.join("exit");
    wait_for("the command's end", || std::fs::read_to_string(&path).is_ok_and(|t| t.ends_with('\n')));
    std::fs::read_to_string(&path).unwrap().trim().parse().unwrap()
}

/// The terminal after bench: canonical input and echo back on (stty -a says `icanon`, `echo`).
fn assert_terminal_given_back(tmux: &Tmux, dir: &Path) {
    let stty_path = dir.join("stty");
    wait_for("stty -a", || std::fs::read_to_string(&stty_path).is_ok_and(|t| t.contains("icanon")));
    let stty = std::fs::read_to_string(&stty_path).unwrap();
    let flags: Vec<&str> = stty.split_whitespace().collect();
    assert!(
        flags.contains(&"icanon") && flags.contains(&"echo"),
        "terminal left without icanon/echo: {stty}"
    );
    assert!(!tmux.alternate(), "the alternate screen was left up:\n{}", tmux.pane());
}

fn lines_in(run: &Path) -> usize {
    std::fs::read_to_string(run.join("measurements.jsonl")).map_or(0, |t| t.lines().count())
}

/// Measurement records per (cache state, context) in the run's measurements.jsonl.
fn jsonl_counts(run: &Path) -> BTreeMap<(String, u64), usize> {
    let mut counts = BTreeMap::new();
    for m in common::measurements(run) {
        let key = (m["cache_state"].as_str().unwrap().to_string(), m["context_tokens"].as_u64().unwrap());
        *counts.entry(key).or_default() += 1;
    }
    counts
}

/// The sweep table's rows in `text` (the last table shown): (state, context) -> its records column.
fn sweep_rows(text: &str) -> BTreeMap<(String, u64), usize> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .rposition(|l| l.starts_with("state ") && l.contains("confirmed") && l.contains("TTFT p50 ms"))
        .unwrap_or_else(|| panic!("no matrix table in:\n{text}"));
    let columns: Vec<&str> = lines[header].split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    let records_at = columns.iter().position(|c| *c == "records").unwrap();
    let mut rows = BTreeMap::new();
    for line in &lines[header + 1..] {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let Some(state) = cells.first().filter(|s| ["cold", "warm", "hot"].contains(s)) else { break };
        rows.insert((state.to_string(), cells[1].parse().unwrap()), cells[records_at].parse().unwrap());
    }
    rows
}

fn sweep_args(url: &str, out: &Path, runs: &str) -> String {
    format!(
        "{BENCH} sweep --server {url} --out {} --run-id run --contexts 256,512 --cache-states cold,hot \
         --runs {runs} --output-tokens 16 --thermal off",
        out.display()
    )
}

/// A slow first token keeps a cell in flight; tokens 5 ms apart arrive one by one.
fn server() -> Scripted {
    Scripted::start(Behaviour { first_token_ms: 120, token_ms: 5, ..Default::default() })
}

#[test]
fn a_sweep_in_a_terminal_shows_the_matrix_per_cache_state_and_q_stops_it_as_ctrl_c_does() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let Some(tmux) = Tmux::start("sweep", dir.path(), &sweep_args(&server.url, dir.path(), "10")) else {
        return;
    };
    wait_for("four records", || lines_in(&run) >= 4);
    let pane = tmux.wait_for_text("TTFT p50 ms");
    assert!(tmux.alternate(), "the view draws on the alternate screen");
    // Where the run is: the cell running, the share of the plan with its forecast.
    assert!(pane.contains("now: cell "), "{pane}");
    assert!(pane.contains("% · elapsed") && pane.contains("forecast"), "{pane}");
    let shown = sweep_rows(&pane);
    let written = jsonl_counts(&run);
    assert!(shown.keys().any(|(s, _)| s == "cold") && shown.keys().any(|(s, _)| s == "hot"), "{pane}");
    for (key, n) in &shown {
        // Records land on disk before the view is told: it never shows more than is written.
        assert!(written.get(key).is_some_and(|w| w >= n), "{key:?}: shown {n}, written {written:?}\n{pane}");
    }

    tmux.press("q");
    assert_eq!(exit_code(dir.path()), 130, "{}", tmux.pane());
    assert_terminal_given_back(&tmux, dir.path());
    let pane = tmux.pane();
    assert!(pane.contains(&format!("finish with: bench sweep --resume {}", run.display())), "{pane}");
    assert_eq!(common::run_json(&run)["status"], "interrupted");
    // The view's last numbers, printed on the normal screen, are the run's own records.
    let written = jsonl_counts(&run);
    assert_eq!(sweep_rows(&pane), written, "{pane}");
    let kept: usize = written.values().sum();
    assert!((4..40).contains(&kept), "stopped midway with every finished record: {kept}");

    let resumed = common::bench(&["sweep", "--resume", run.to_str().unwrap(), "--quiet"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", common::stderr(&resumed));
    assert_eq!(common::run_json(&run)["status"], "complete");
    assert_eq!(common::measurements(&run).len(), 40, "resume measured the rest, once");
}

/// The load table's (cache state) rows in `text`: state -> its answered count (`due/answered`).
fn load_rows(text: &str) -> BTreeMap<String, usize> {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .rposition(|l| l.starts_with("step ") && l.contains("due/answered"))
        .unwrap_or_else(|| panic!("no load table in:\n{text}"));
    let mut rows = BTreeMap::new();
    for line in &lines[header + 1..] {
        let cells: Vec<&str> = line.split_whitespace().collect();
        match cells.first() {
            Some(&"rate") => continue,
            Some(s) if ["cold", "warm", "hot"].contains(s) => {
                let answered = cells[1].split('/').nth(1).unwrap().parse().unwrap();
                rows.insert(s.to_string(), answered);
            }
            _ => break,
        }
    }
    rows
}

#[test]
fn a_load_in_a_terminal_shows_its_rate_per_cache_state_as_it_runs_and_q_stops_it() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let command = format!(
        "{BENCH} load --server {} --out {} --run-id run --contexts 256 --rates 4 --duration 60s \
         --mix cold=0.5,hot=0.5 --output-tokens 16 --thermal off",
        server.url,
        dir.path().display()
    );
    let Some(tmux) = Tmux::start("load", dir.path(), &command) else { return };
    wait_for("six records", || lines_in(&run) >= 6);
    let first = tmux.wait_for_text("due/answered");
    assert!(first.contains("rate 4/s (run 1)"), "{first}");
    let elapsed = |pane: &str| -> f64 {
        let at = pane.find("/60 s").unwrap_or_else(|| panic!("no elapsed of the step:\n{pane}"));
        let start = pane[..at].rfind(' ').unwrap() + 1;
        pane[start..at].parse().unwrap()
    };
    // A progress that moves while the step runs (the bar used to sit at 0% for the whole step).
    let before = elapsed(&first);
    std::thread::sleep(Duration::from_millis(2500));
    let second = tmux.pane();
    assert!(elapsed(&second) > before, "the step's elapsed did not move:\n{first}\n---\n{second}");
    let rows = load_rows(&second);
    assert!(rows.contains_key("cold") && rows.contains_key("hot"), "{second}");

    tmux.press("q");
    assert_eq!(exit_code(dir.path()), 130, "{}", tmux.pane());
    assert_terminal_given_back(&tmux, dir.path());
    let meta = common::run_json(&run);
    assert_eq!(meta["status"], "interrupted");
    let stopped = meta["load"]["rates"][0]["stopped"].as_str().unwrap_or_default();
    assert!(stopped.starts_with("interrupted by a signal"), "{meta:#}");
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    for m in common::measurements(&run) {
        *written.entry(m["cache_state"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let pane = tmux.pane();
    assert_eq!(load_rows(&pane), written, "the view's last numbers are the run's records:\n{pane}");
}

#[test]
fn a_soak_in_a_terminal_counts_iterations_crashes_and_mismatches_and_q_stops_it() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let command = format!(
        "{BENCH} soak --server {} --out {} --run-id run --contexts 256 --concurrency 2 --iterations 500 \
         --output-tokens 16",
        server.url,
        dir.path().display()
    );
    let Some(tmux) = Tmux::start("soak", dir.path(), &command) else { return };
    wait_for("three iterations", || lines_in(&run) >= 9);
    let pane = tmux.wait_for_text("crash-free so far");
    assert!(pane.contains(" of 500"), "{pane}");
    assert!(pane.contains("mismatches (answers unlike the serial reference): 0"), "{pane}");

    tmux.press("q");
    assert_eq!(exit_code(dir.path()), 130, "{}", tmux.pane());
    assert_terminal_given_back(&tmux, dir.path());
    assert_eq!(common::run_json(&run)["status"], "interrupted");
    let soaked = common::measurements(&run).iter().filter(|m| m["scenario"] == "soak").count();
    let pane = tmux.pane();
    assert!(pane.contains(&format!("requests: {soaked}, passed {soaked}, failed 0")), "{soaked}:\n{pane}");
}

#[test]
fn watch_follows_a_sweep_written_elsewhere_in_a_terminal_and_ends_with_it() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = out.join("run");
    let args = sweep_args(&server.url, &out, "6");
    let mut sweep = Command::new("sh")
        .args(["-c", &format!("exec {args} --quiet")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the run's first record", || lines_in(&run) >= 1);
    let Some(tmux) = Tmux::start("watch", dir.path(), &format!("{BENCH} watch {}", run.display())) else {
        let _ = sweep.kill();
        let _ = sweep.wait();
        return;
    };
    let pane = tmux.wait_for_text("TTFT p50 ms");
    assert!(pane.contains(&format!("== {}", run.display())), "{pane}");
    assert_eq!(sweep.wait().unwrap().code(), Some(0));
    // It ends by itself once the run has, and says how.
    assert_eq!(exit_code(dir.path()), 0, "{}", tmux.pane());
    assert_terminal_given_back(&tmux, dir.path());
    let pane = tmux.pane();
    let written = jsonl_counts(&run);
    let total: usize = written.values().sum();
    assert!(pane.contains(&format!("{}: complete; {total} records", run.display())), "{pane}");
    assert_eq!(sweep_rows(&pane), written, "{pane}");
}

#[test]
fn with_stderr_redirected_sweep_and_watch_print_plain_lines() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let out =
        common::short_sweep(&server.url, dir.path(), &["--run-id", "run", "--cache-states", "cold,hot"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains('\u{1b}'), "no terminal control sequence in plain output: {err:?}");
    assert!(err.contains("[1/2] ctx 256 cold streaming b1 run 1 ..."), "{err}");
    let run: PathBuf = dir.path().join("run");
    let watched = common::bench(&["watch", run.to_str().unwrap()]);
    let said = common::stderr(&watched);
    assert_eq!(watched.status.code(), Some(0), "{said}");
    assert!(!said.contains('\u{1b}'), "{said:?}");
    let records = common::records(&run).len();
    assert!(said.contains(&format!("+{records} records ({records} so far, 0 failed)")), "{said}");
    assert!(said.contains(&format!("{}: complete", run.display())), "{said}");
}

#[test]
fn watch_refuses_a_directory_that_is_not_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::bench(&["watch", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = common::stderr(&out);
    assert!(err.contains("not a run directory") && err.contains("run.json"), "{err}");
}
