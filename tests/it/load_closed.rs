//! `bench load --concurrency`: the closed loop end to end against the scripted server, whose
//! serving slots make the knee known (a level with more users than slots queues), and the load
//! plots read back as SVG: tick labels that do not run into each other, the statistics named.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use common::scripted::{Behaviour, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn load(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args =
        vec!["load", "--server", url, "--out", out.to_str().unwrap(), "--quiet", "--thermal", "off"];
    args.extend_from_slice(&["--contexts", "256"]);
    args.extend_from_slice(extra);
    bench(&args)
}

/// A text element of an SVG plot: its string, where it is anchored and its font size.
#[derive(Debug)]
pub struct Label {
    pub text: String,
    pub x: f64,
    pub y: f64,
    pub size: f64,
    pub anchor: String,
}

/// Every text element of the SVG, parsed as XML.
pub fn labels(svg_path: &Path) -> Vec<Label> {
    let svg = std::fs::read_to_string(svg_path).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let num =
        |n: &roxmltree::Node, a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| Label {
            text: n.text().unwrap_or_default().trim().to_string(),
            x: num(&n, "x"),
            y: num(&n, "y"),
            size: num(&n, "font-size"),
            anchor: n.attribute("text-anchor").unwrap_or("start").to_string(),
        })
        .collect()
}

/// The x-axis tick labels: the numbers on the lowest row of numeric labels, left to right.
pub fn x_ticks(all: &[Label]) -> Vec<&Label> {
    let numeric: Vec<&Label> = all.iter().filter(|l| l.text.parse::<f64>().is_ok()).collect();
    let bottom = numeric.iter().map(|l| l.y).fold(f64::MIN, f64::max);
    let mut row: Vec<&Label> = numeric.into_iter().filter(|l| (l.y - bottom).abs() < 0.5).collect();
    row.sort_by(|a, b| a.x.total_cmp(&b.x));
    row
}

/// Asserts no two labels of a row overlap, each taken as wide as its characters at 0.6 em (wider
/// than sans-serif digits are).
pub fn assert_apart(row: &[&Label]) {
    let span = |l: &Label| {
        let w = l.text.chars().count() as f64 * l.size * 0.6;
        match l.anchor.as_str() {
            "middle" => (l.x - w / 2.0, l.x + w / 2.0),
            "end" => (l.x - w, l.x),
            _ => (l.x, l.x + w),
        }
    };
    for pair in row.windows(2) {
        let (a, b) = (span(pair[0]), span(pair[1]));
        assert!(a.1 < b.0, "tick labels {:?} and {:?} overlap: {:?} {:?}", pair[0].text, pair[1].text, a, b);
    }
}

/// Two serving slots, 60 ms to the first token and 24 tokens 12 ms apart: a request holds a slot
/// for about 340 ms. One or two users are served at once (TTFT about 60 ms); four users queue for
/// the two slots, each waiting about half a request (TTFT about 230 ms), so with a TTFT SLO of
/// 140 ms the knee is 2 users. The SLO sits about 80 ms from either side (at 5 ms a token the
/// four users' TTFT was 150 ms, on the SLO, and the knee was the machine's luck), and the ITL
/// limit (500 ms) far above the 12 ms the script sends: a loaded machine's stalls only lengthen
/// times, so they cannot pass 4 users, and within those margins they do not fail 2.
#[test]
fn a_closed_loop_sends_each_user_s_next_request_when_its_last_ended_and_finds_the_knee() {
    let server = Scripted::start(Behaviour {
        first_token_ms: 60,
        token_ms: 12,
        max_concurrent: Some(2),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = load(
        &server.url,
        dir.path(),
        &[
            "--preset",
            "openai",
            "--concurrency",
            "1,2,4",
            "--duration",
            "2s",
            "--warmup-duration",
            "300ms",
            "--output-tokens",
            "24",
            "--slo",
            "ttft=140ms,itl=500ms",
        ],
    );
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let plan = json(&run.join("run.json"))["load"].clone();
    assert_eq!(plan["warmup_s"], 0.3, "{plan}");
    let levels: Vec<u64> =
        plan["rates"].as_array().unwrap().iter().map(|r| r["concurrency"].as_u64().unwrap()).collect();
    assert_eq!(levels, [1, 2, 4]);
    let ms = measurements(&run);
    let mut by_user: HashMap<(u64, u64), Vec<&Value>> = HashMap::new();
    for m in &ms {
        assert_eq!(m["scenario"], "load");
        assert!(m["error"].is_null(), "{}", m["error"]);
        assert_eq!(m["cache_state_confirmed"], true, "{}", m["cache_evidence"]);
        let level = m["concurrency"].as_u64().unwrap();
        assert_eq!(level, levels[m["run"].as_u64().unwrap() as usize - 1], "{m}");
        let user = m["user_id"].as_u64().unwrap();
        assert!(user < level, "{m}");
        let sent = m["actual_send_ms"].as_f64().unwrap();
        // The flag is decided on the clock's own instants, the record keeps microseconds: within
        // a microsecond of the boundary the rounded send time cannot tell the side.
        if (sent - 300.0).abs() > 0.001 {
            assert_eq!(m["warmup"] == true, sent < 300.0, "warm-up is the first 300 ms: {m}");
        }
        by_user.entry((level, user)).or_default().push(m);
    }
    for level in levels {
        for user in 0..level {
            let mut mine = by_user.remove(&(level, user)).unwrap_or_default();
            assert!(mine.len() >= 2, "user {user} of {level} sent {}", mine.len());
            mine.sort_by(|a, b| {
                a["actual_send_ms"].as_f64().unwrap().total_cmp(&b["actual_send_ms"].as_f64().unwrap())
            });
            for pair in mine.windows(2) {
                let ended = pair[0]["actual_send_ms"].as_f64().unwrap() + pair[0]["e2e_ms"].as_f64().unwrap();
                assert!(
                    pair[1]["actual_send_ms"].as_f64().unwrap() >= ended,
                    "a user sends its next request only after its last one ended: {} then {}",
                    pair[0],
                    pair[1]
                );
            }
        }
    }
    let summary = json(&run.join("load-summary.json"));
    let rates = summary["rates"].as_array().unwrap();
    for (r, users) in rates.iter().zip([1, 2, 4]) {
        assert_eq!(r["concurrency"], users);
        let all = r["states"].as_array().unwrap().last().unwrap();
        assert!(all["output_tps"].as_f64().unwrap() > 0.0, "{all}");
        assert!(all["achieved_rate_per_s"].as_f64().unwrap() > 0.0, "{all}");
        let steady = ms.iter().filter(|m| m["concurrency"] == users && m["warmup"] != true).count();
        assert_eq!(all["requests"], steady, "the statistics are of the steady state");
        assert!(r["warmup_requests"].as_u64().unwrap() >= users, "every user's first request is warm-up");
    }
    let knee = summary["knees"].as_array().unwrap().iter().find(|k| k["state"].is_null()).unwrap().clone();
    assert_eq!(knee["concurrency"], 2, "two slots: 4 users queue past the SLO; {summary}");
    let table = stderr(&out);
    let levels = common::table::find(&table, "Users");
    assert_eq!(levels.header[..3], ["Users", "State", "Requests"], "{table}");
    assert!(levels.row_with(&["4 users", "all"]).is_some(), "{table}");
    assert!(table.contains("all 2 users"), "{table}");
    assert!(!run.join("load-ttft-p99.svg").exists(), "no rate was offered");
    let texts = labels(&run.join("load-throughput-latency.svg"));
    for level in ["1 user", "2 users", "4 users"] {
        assert_eq!(texts.iter().filter(|l| l.text == level).count(), 1, "{level}: {texts:?}");
    }
    assert!(texts.iter().any(|l| l.text.contains("output tokens/s")), "{texts:?}");
    assert!(texts.iter().any(|l| l.text.contains("p50") && l.text.contains("p99")), "{texts:?}");
    let row = x_ticks(&texts);
    assert!(row.len() >= 3, "{row:?}");
    assert_apart(&row);
}

/// The rate plot once ran labels of neighbouring rates together ("9.010.0") and showed one
/// statistic without naming it beside the table; now the ticks are the offered rates, apart, and
/// the axis names p50 and p99, the table's columns.
#[test]
fn the_rate_plot_shows_p50_and_p99_named_as_in_the_table_with_ticks_apart() {
    let server = Scripted::start(Behaviour { first_token_ms: 10, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = load(
        &server.url,
        dir.path(),
        &["--rates", "1,2,3,4,5,6,7,8,9,10", "--duration", "1s", "--output-tokens", "8"],
    );
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let table = stderr(&out);
    let header = common::table::find(&table, "Rate /s").header;
    assert!(header.iter().any(|h| h == "TTFT p50") && header.iter().any(|h| h == "TTFT p99"), "{table}");
    let texts = labels(&run.join("load-ttft-p99.svg"));
    let axis = texts.iter().find(|l| l.text.starts_with("TTFT ms")).unwrap_or_else(|| panic!("{texts:?}"));
    assert!(axis.text.contains("p50") && axis.text.contains("p99"), "{}", axis.text);
    for legend in ["cold p50", "cold p99"] {
        assert!(texts.iter().any(|l| l.text == legend), "{legend}: {texts:?}");
    }
    let row = x_ticks(&texts);
    let offered: Vec<f64> = (1..=10).map(f64::from).collect();
    for l in &row {
        assert!(offered.contains(&l.text.parse::<f64>().unwrap()), "{} is not an offered rate", l.text);
    }
    assert!(row.len() >= 5, "{row:?}");
    assert_apart(&row);
}

/// A level of 0 users, the same level twice, a warm-up as long as the level, a warm-up for an open
/// loop (whose rates start with their pipeline full), or levels beside rates: refused before
/// anything is created (exit 2), naming the flag.
#[test]
fn closed_loop_flags_are_refused_up_front_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let url = "http://127.0.0.1:1";
    for (extra, says) in [
        (&["--concurrency", "0,4"][..], "--concurrency"),
        (&["--concurrency", "4,4"][..], "listed twice"),
        (&["--concurrency", "1,4", "--duration", "2s", "--warmup-duration", "2s"][..], "--warmup-duration"),
        (&["--rates", "1,2", "--warmup-duration", "1s"][..], "--warmup-duration"),
        (&["--concurrency", "1,4", "--rates", "1,2"][..], "--rates"),
        (&["--rates", "auto", "--search-steps", "0"][..], "--search-steps"),
    ] {
        let out = load(url, dir.path(), extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{extra:?}: {}", stderr(&out));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no run directory");
}

/// A server that answers every measured request with an error at once: each user stops after
/// three failures in a row, its failed records kept, instead of asking thousands of times a second
/// for the rest of the level.
#[test]
fn a_user_whose_requests_keep_failing_stops_after_three_in_a_row() {
    use common::scripted::Fault;
    let server = Scripted::start(Behaviour { fault: Fault::Status(500, "overloaded"), ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out =
        load(&server.url, dir.path(), &["--concurrency", "2", "--duration", "3s", "--output-tokens", "24"]);
    assert_eq!(out.status.code(), Some(1), "failed measurements are a finding: {}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    for user in 0..2 {
        let mine: Vec<&Value> = ms.iter().filter(|m| m["user_id"] == user).collect();
        assert_eq!(mine.len(), 3, "user {user}: {}", mine.len());
        assert!(mine.iter().all(|m| m["error"]["http_status"] == 500), "{mine:?}");
    }
}

/// `--warmup` means one thing, a count of discarded requests (`bench sweep`); `bench load`'s
/// warm-up, a duration, is `--warmup-duration`. The old spelling `bench load --warmup 10s` is
/// refused up front naming the new one (scripts written for it fail loudly, never measure something
/// else), a bare number for the duration names its unit, and a sweep's `--warmup 10s` names the
/// load's flag; nothing is created.
#[test]
fn warmup_is_a_count_and_the_loads_duration_has_its_own_name() {
    let dir = tempfile::tempdir().unwrap();
    let url = "http://127.0.0.1:1";
    let closed = ["--concurrency", "1,4", "--duration", "20s"];
    for (given, says) in [
        (&["--warmup", "10s"][..], &["--warmup", "--warmup-duration 10s", "counts discarded requests"][..]),
        (&["--warmup", "2"][..], &["--warmup-duration 2s"][..]),
        (&["--warmup-duration", "2"][..], &["--warmup-duration", "no unit", "--warmup-duration 2s"][..]),
    ] {
        let flags: Vec<&str> = closed.iter().chain(given).copied().collect();
        let out = load(url, dir.path(), &flags);
        assert_eq!(out.status.code(), Some(2), "{given:?}: {}", stderr(&out));
        for s in says {
            assert!(stderr(&out).contains(s), "{given:?} must say {s:?}: {}", stderr(&out));
        }
    }
    let out = bench(&["sweep", "--server", url, "--out", dir.path().to_str().unwrap(), "--warmup", "10s"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    for says in ["--warmup", "is a duration", "counts discarded requests", "--warmup-duration 10s"] {
        assert!(stderr(&out).contains(says), "{says:?}: {}", stderr(&out));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no run directory");
}
