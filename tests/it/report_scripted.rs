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
    let server = Scripted::start(Behaviour { first_token_ms: 30, token_ms: 2, ..Default::default() });
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

#[test]
fn the_ttft_plot_has_ticks_at_the_swept_sizes_and_names_the_table_s_statistic() {
    let (dir, run) = sweep();
    let plots = dir.path().join("plots");
    let out = bench(&["report", run.to_str().unwrap(), "--plot", plots.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ttft = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("ttft-"))
        .unwrap();
    let svg = std::fs::read_to_string(ttft).unwrap();
    let texts = svg_texts(&svg);
    assert!(texts.iter().any(|t| t == "512") && texts.iter().any(|t| t == "1K"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.ends_with(".0")), "no '1000.0' ticks: {texts:?}");
    assert!(texts.iter().any(|t| t.starts_with("TTFT ms: p50")), "the axis names the statistic: {texts:?}");
    assert!(texts.iter().any(|t| t == "cold p50") && texts.iter().any(|t| t == "cold p99"), "{texts:?}");
    // The y axis has more than one tick, even over a narrow range.
    let numbers = texts.iter().filter(|t| t.parse::<f64>().is_ok()).count();
    assert!(numbers >= 4, "{texts:?}");
}
