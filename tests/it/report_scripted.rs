//! `bench report` on a run bench made against the scripted server: the medians, intervals, p90/p99,
//! ITL and TPOT it prints are checked against the run's own records, worked out here by sorting
//! (not by the report's code), and the plots are checked for what a reader needs (ticks at the
//! swept sizes, the statistic named, the same median as the table).

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

/// A 512 / 1K sweep of 3 runs each (streaming, cold), so each cell has n = 3.
fn sweep() -> (tempfile::TempDir, std::path::PathBuf) {
    let server = Scripted::start(Behaviour { first_token_ms: 30, token_ms: 5, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--contexts",
        "512,1k",
        "--modes",
        "streaming",
        "--runs",
        "3",
        "--output-tokens",
        "16",
        "--thermal",
        "off",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    (dir, run)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn the_report_of_a_scripted_sweep_gives_medians_intervals_tails_itl_and_tpot_of_its_records() {
    let (_dir, run) = sweep();
    let ms = measurements(&run);
    let out = bench(&["report", "--format", "json", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{report}");
    for cell in cells {
        let mine: Vec<&Value> = ms.iter().filter(|m| m["context_tokens"] == cell["context_tokens"]).collect();
        assert_eq!(mine.len(), 3);
        // TTFT: three values; the median is the middle one and its interval min..max (75%).
        let ttft = sorted(mine.iter().map(|m| f(&m["ttft_ms"])).collect());
        let t = &cell["ttft_ms"];
        // Observed values, so equal to the records' up to a float's last bits (the report's JSON
        // text read back); a wrong rank would be another record's value, milliseconds away.
        common::assert_close(f(&t["median"]), ttft[1], "TTFT median");
        common::assert_close(f(&t["median_ci_lo"]), ttft[0], "TTFT median interval low");
        common::assert_close(f(&t["median_ci_hi"]), ttft[2], "TTFT median interval high");
        assert_eq!(f(&t["median_ci_level"]), 0.75);
        // Bounds with a float's rounding (1e-9 ms) to spare: a tail interpolated onto the slowest
        // value comes back from the report's JSON text equal to it or one bit beside it.
        let e = 1e-9;
        assert!(
            ttft[1] - e <= f(&t["p90"]) && f(&t["p90"]) <= f(&t["p99"]) + e && f(&t["p99"]) <= ttft[2] + e,
            "{t}"
        );
        // ITL: every gap between consecutive token offsets, pooled (3 x 15 = 45 gaps).
        let gaps = sorted(
            mine.iter()
                .flat_map(|m| {
                    let o: Vec<f64> = m["token_offsets_ms"].as_array().unwrap().iter().map(f).collect();
                    o.windows(2).map(|w| w[1] - w[0]).collect::<Vec<f64>>()
                })
                .collect(),
        );
        assert_eq!(gaps.len(), 45);
        let itl = &cell["itl_ms"];
        assert_eq!(itl["n"], 45);
        // Gaps are subtractions done here and in the report, and the median goes through JSON text.
        common::assert_close(f(&itl["median"]), gaps[22], "ITL median: the middle of 45 gaps");
        // p99 lies between the 44th and 45th smallest gap (0-based h = 44 * 0.99 = 43.56).
        assert!(gaps[43] - e <= f(&itl["p99"]) && f(&itl["p99"]) <= gaps[44] + e, "{itl}");
        assert!(f(&itl["median_ci_lo"]) <= gaps[22] + e && gaps[22] - e <= f(&itl["median_ci_hi"]));
        let observed = |v: f64| gaps.iter().any(|g| (g - v).abs() < 1e-9);
        assert!(observed(f(&itl["median_ci_lo"])) && observed(f(&itl["median_ci_hi"])), "{itl} {gaps:?}");
        // TPOT: (e2e - ttft) / (output tokens - 1) per record; the median is the middle one.
        let tpot = sorted(
            mine.iter()
                .map(|m| (f(&m["e2e_ms"]) - f(&m["ttft_ms"])) / (f(&m["output_tokens"]) - 1.0))
                .collect(),
        );
        assert!((f(&cell["tpot_ms"]["median"]) - tpot[1]).abs() < 1e-9, "{} vs {tpot:?}", cell["tpot_ms"]);
    }
    // Every other format carries the same statistics.
    let out = bench(&["report", "--format", "csv", run.to_str().unwrap()]);
    let csv = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("{name}"))];
    let first = &cells[0];
    assert_eq!(col("ttft_median_ci_level"), "0.750000");
    assert_eq!(col("itl_n"), "45");
    for (column, value) in [
        ("ttft_median_ci_lo_ms", &first["ttft_ms"]["median_ci_lo"]),
        ("ttft_p99_ms", &first["ttft_ms"]["p99"]),
        ("itl_p99_ms", &first["itl_ms"]["p99"]),
        ("tpot_median_ms", &first["tpot_ms"]["median"]),
    ] {
        assert_eq!(col(column), format!("{:.3}", f(value)), "{column}");
    }
    let out = bench(&["report", "--format", "markdown", run.to_str().unwrap()]);
    let md = String::from_utf8(out.stdout).unwrap();
    for column in ["TTFT ms p50 (CI) |", "TTFT p90/p99 |", "ITL ms p50/p99 |", "TPOT ms p50 |"] {
        assert!(md.contains(column), "{column}: {md}");
    }
    assert!(md.contains(" 75%) |"), "{md}");
}

/// The text of every `<text>` element of an SVG.
fn svg_texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            n.descendants()
                .filter(|d| d.is_text())
                .filter_map(|d| d.text())
                .collect::<String>()
                .trim()
                .to_string()
        })
        .collect()
}

/// `bench report RUN --plot DIR/plots`, and the TTFT plot it wrote.
fn ttft_plot(dir: &std::path::Path, run: &std::path::Path) -> String {
    let plots = dir.join("plots");
    let out = bench(&["report", run.to_str().unwrap(), "--plot", plots.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ttft = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("ttft-"))
        .unwrap();
    std::fs::read_to_string(ttft).unwrap()
}

#[test]
fn the_ttft_plot_has_ticks_at_the_swept_sizes_and_names_the_table_s_statistic() {
    let (dir, run) = sweep();
    let svg = ttft_plot(dir.path(), &run);
    let texts = svg_texts(&svg);
    assert!(texts.iter().any(|t| t == "512") && texts.iter().any(|t| t == "1K"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.ends_with(".0")), "no '1000.0' ticks: {texts:?}");
    assert!(texts.iter().any(|t| t.starts_with("TTFT ms: p50")), "the axis names the statistic: {texts:?}");
    assert!(texts.iter().any(|t| t == "cold p50") && texts.iter().any(|t| t == "cold p99"), "{texts:?}");
    // The y axis has more than one tick, even over a narrow range.
    let numbers = texts.iter().filter(|t| t.parse::<f64>().is_ok()).count();
    assert!(numbers >= 4, "{texts:?}");
}

/// The y value (ms) each pixel row of a plot stands for, read from its y-axis tick labels (right-
/// aligned numbers left of the axis): log or linear, whichever the ticks follow.
fn y_scale(doc: &roxmltree::Document) -> impl Fn(f64) -> f64 {
    let mut ticks: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
        .filter_map(|n| {
            let value: f64 = n.text()?.trim().parse().ok()?;
            Some((n.attribute("y")?.parse().ok()?, value))
        })
        .collect();
    ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(ticks.len() >= 3, "y ticks: {ticks:?}");
    let ((y0, v0), (y1, v1), (y2, v2)) = (ticks[0], ticks[1], ticks[ticks.len() - 1]);
    let log = |v: f64| v.ln();
    let linear_miss = (v0 + (v1 - v0) * (y2 - y0) / (y1 - y0) - v2).abs() / v2;
    let log_miss = (log(v0) + (log(v1) - log(v0)) * (y2 - y0) / (y1 - y0) - log(v2)).abs() / log(v2).abs();
    let is_log = log_miss < linear_miss;
    move |y: f64| {
        if is_log {
            (log(v0) + (log(v1) - log(v0)) * (y - y0) / (y1 - y0)).exp()
        } else {
            v0 + (v1 - v0) * (y - y0) / (y1 - y0)
        }
    }
}

/// The plotted p50 is the median: with one record of each cell 10x slower than the other two,
/// the mean is 4x the median, and the p50 line (the thick one starting at the first swept size)
/// must sit at the median of each context's records, within a pixel's rounding.
#[test]
fn the_ttft_plot_draws_the_median_not_the_mean() {
    let (dir, run) = sweep();
    let path = run.join("measurements.jsonl");
    let mut seen = std::collections::BTreeSet::new();
    let edited: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| {
            let mut m: Value = serde_json::from_str(line).unwrap();
            if m["record_type"] == "measurement" && seen.insert(m["context_tokens"].as_u64()) {
                m["ttft_ms"] = (m["ttft_ms"].as_f64().unwrap() * 10.0).into();
            }
            m.to_string()
        })
        .collect();
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    let mut medians = Vec::new();
    for context in [512, 1024] {
        let ttfts = sorted(
            measurements(&run)
                .iter()
                .filter(|m| m["context_tokens"] == context)
                .map(|m| m["ttft_ms"].as_f64().unwrap())
                .collect(),
        );
        assert_eq!(ttfts.len(), 3);
        let mean = ttfts.iter().sum::<f64>() / 3.0;
        assert!(mean > 2.0 * ttfts[1], "the mean differs: {ttfts:?}");
        medians.push(ttfts[1]);
    }
    let svg = ttft_plot(dir.path(), &run);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let value_at = y_scale(&doc);
    let first_size_x = doc
        .descendants()
        .find(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some("512"))
        .and_then(|n| n.attribute("x"))
        .unwrap()
        .to_string();
    let line: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
        .filter_map(|n| n.attribute("points"))
        .filter(|p| p.starts_with(&format!("{first_size_x},")))
        .map(|p| {
            p.split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .next()
        .unwrap_or_else(|| panic!("no p50 line from x={first_size_x}: {svg}"));
    assert_eq!(line.len(), 2, "{line:?}");
    for ((_, y), median) in line.iter().zip(&medians) {
        let drawn = value_at(*y);
        assert!((drawn / median - 1.0).abs() < 0.05, "p50 drawn at {drawn:.1} ms, the median is {median:.1}");
    }
}
