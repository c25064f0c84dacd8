//! `bench report`: statistics on known vectors, the CSV snapshot, the table width, JSON, SVG plots.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use ttft_bench::report::{self, COLUMNS};
use ttft_model::record::{
    CacheState, CellKey, GroupRecord, Measurement, Mode, PhysicsRecord, Record, SCHEMA_VERSION, Scenario,
    StaggeredRecord,
};

use crate::common;

fn key(scenario: Scenario, cache_state: CacheState, mode: Mode, batch_size: u32, run: u32) -> CellKey {
    CellKey {
        dataset_row: None,
        model: "m".into(),
        scenario,
        cache_state,
        mode,
        context_tokens: 1024,
        batch_size,
        run,
    }
}

fn m(cell: CellKey, index: u32, ttft: Option<f64>, e2e: f64, ok: bool) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r".into(),
        cell,
        request_index: index,
        started_at: "2026-01-01T00:00:00Z".into(),
        ttft_ms: ttft,
        e2e_ms: Some(e2e),
        output_tokens: Some(65),
        quality_ok: ok,
        ..Default::default()
    }))
}

/// A small, hand-checkable data set: see the expected values in the tests below.
fn records() -> Vec<Record> {
    use CacheState::*;
    use Mode::*;
    let mut v = Vec::new();
    // cold streaming: TTFT 100/200/300; decode 64 tokens over 1.0, 1.1, 0.8 s = 64, 58.18, 80 tok/s.
    // Token offsets: gaps 10, 20 / 30 / 40, 50 ms (ITL pools them: 10..50).
    let offsets: [&[f64]; 3] = [&[100.0, 110.0, 130.0], &[200.0, 230.0], &[300.0, 340.0, 390.0]];
    for ((run, ttft, e2e), offsets) in
        [(1, 100.0, 1100.0), (2, 200.0, 1300.0), (3, 300.0, 1100.0)].into_iter().zip(offsets)
    {
        let mut r = m(key(Scenario::Cold, Cold, Streaming, 1, run), 0, Some(ttft), e2e, true);
        if let Record::Measurement(x) = &mut r {
            x.physics = Some(PhysicsRecord { decode_ceiling_tps: Some(100.0), ..Default::default() });
            x.token_offsets_ms = offsets.to_vec();
        }
        v.push(r);
    }
    // A failed fourth run: counted, never used.
    v.push(m(key(Scenario::Cold, Cold, Streaming, 1, 4), 0, Some(9999.0), 99999.0, false));
    // warm streaming: TTFT 10/20/30 -> 10x cold's median 200; cache evidence 2 confirmed, 1 not.
    for (run, ttft, confirmed) in [(1, 10.0, true), (2, 20.0, true), (3, 30.0, false)] {
        let mut r = m(key(Scenario::Warm, Warm, Streaming, 1, run), 0, Some(ttft), ttft + 1000.0, true);
        if let Record::Measurement(x) = &mut r {
            x.cache_state_confirmed = Some(confirmed);
        }
        v.push(r);
    }
    // cold non-streaming: no TTFT, E2E 900/1000.
    v.push(m(key(Scenario::Cold, Cold, NonStreaming, 1, 1), 0, None, 900.0, true));
    v.push(m(key(Scenario::Cold, Cold, NonStreaming, 1, 2), 0, None, 1000.0, true));
    // one concurrent batch of 2 with its group record.
    let batch = key(Scenario::Concurrent, Cold, Streaming, 2, 1);
    for (index, ttft) in [(0, 400.0), (1, 500.0)] {
        let mut r = m(batch.clone(), index, Some(ttft), ttft + 1000.0, true);
        if let Record::Measurement(x) = &mut r {
            x.group_id = Some("g".into());
        }
        v.push(r);
    }
    v.push(Record::Group(Box::new(GroupRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "r".into(),
        cell: batch,
        group_id: "g".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        wall_ms: 1500.0,
        system_tps: Some(86.67),
        requests_ok: 2,
        ..Default::default()
    })));
    // staggered: B waits 2500/2600 ms batched, 4000 ms sequential.
    for (scenario, run, wait) in [
        (Scenario::StaggeredBatched, 1, 2500.0),
        (Scenario::StaggeredBatched, 2, 2600.0),
        (Scenario::StaggeredSequential, 1, 4000.0),
    ] {
        v.push(Record::Staggered(Box::new(StaggeredRecord {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            cell: CellKey { batch_size: 2, context_tokens: 4096, ..key(scenario, Cold, Streaming, 2, run) },
            started_at: "2026-01-01T00:00:00Z".into(),
            user_b_ttft_from_wall_start_ms: Some(wait),
            quality_ok: true,
            ..Default::default()
        })));
    }
    v
}

/// A run directory of `records()` as a sweep leaves it.
fn run_dir(dir: &Path) -> PathBuf {
    common::runs::write(dir, "run", &records())
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-6)
}

#[test]
fn statistics_of_known_vectors() {
    let cells = report::cells(&records());
    let find = |scenario: Scenario, mode: Mode| {
        cells.iter().find(|c| c.id.scenario == scenario && c.id.mode == mode).unwrap()
    };
    let cold = find(Scenario::Cold, Mode::Streaming);
    assert_eq!(
        (cold.records, cold.quality_ok, cold.ttft_ms.n),
        (4, 3, 3),
        "the failed run is counted, not used"
    );
    assert!(
        close(cold.ttft_ms.median, 200.0) && close(cold.ttft_ms.mean, 200.0) && close(cold.ttft_ms.sd, 100.0)
    );
    assert!(close(cold.ttft_ms.p5, 110.0) && close(cold.ttft_ms.p95, 290.0));
    // p90 and p99 of 100, 200, 300: 90% and 99% of the way from the first to the last.
    assert!(close(cold.ttft_ms.p90, 280.0) && close(cold.ttft_ms.p99, 298.0), "{:?}", cold.ttft_ms);
    // The interval is of the median, between observed values: with 3, min..max, which holds the
    // true median unless all 3 fall on one side of it (2 * 1/8): 75%.
    assert!(close(cold.ttft_ms.median_ci_lo, 100.0) && close(cold.ttft_ms.median_ci_hi, 300.0));
    assert!(close(cold.ttft_ms.median_ci_level, 0.75));
    // ITL: the gaps 10, 20, 30, 40, 50 pooled; p99 is 96% of the way from 40 to 50.
    assert_eq!(cold.itl_ms.n, 5);
    assert!(close(cold.itl_ms.median, 30.0) && close(cold.itl_ms.p99, 49.6), "{:?}", cold.itl_ms);
    // TPOT: 1000/64, 1100/64, 800/64 ms.
    assert_eq!(cold.tpot_ms.n, 3);
    assert!(
        close(cold.tpot_ms.median, 15.625) && close(cold.tpot_ms.median_ci_lo, 12.5),
        "{:?}",
        cold.tpot_ms
    );
    assert!(close(cold.tpot_ms.median_ci_hi, 17.1875));
    assert!(close(cold.decode_tps.median, 64.0) && close(cold.decode_tps.p95, 78.4), "{:?}", cold.decode_tps);
    assert!(close(cold.decode_ceiling_tps, 100.0));
    let warm = find(Scenario::Warm, Mode::Streaming);
    assert_eq!((warm.cache_confirmed, warm.cache_unconfirmed), (2, 1));
    let speed = warm.ttft_speedup_vs_cold.clone().unwrap();
    assert!(close(speed.ratio, 10.0));
    let (lo, hi) = (speed.ci95_lo.unwrap(), speed.ci95_hi.unwrap());
    assert!(lo <= 10.0 && hi >= 10.0 && lo >= 100.0 / 30.0 && hi <= 300.0 / 10.0, "{speed:?}");
    let ns = find(Scenario::Cold, Mode::NonStreaming);
    assert_eq!(ns.ttft_ms.n, 0, "non-streaming has no TTFT");
    assert!(close(ns.e2e_ms.median, 950.0));
    let batch = find(Scenario::Concurrent, Mode::Streaming);
    assert_eq!((batch.records, batch.ttft_ms.n), (2, 2), "both requests of the batch are samples");
    assert!(close(batch.ttft_ms.median, 450.0) && close(batch.system_tps.median, 86.67));
    assert_eq!((batch.ttft_ms.median_ci_lo, batch.ttft_ms.median_ci_hi), (None, None), "n = 2: no interval");
    let batched = find(Scenario::StaggeredBatched, Mode::Streaming);
    assert!(close(batched.user_b_wait_ms.median, 2550.0));
}

#[test]
fn csv_matches_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path());
    let out =
        Command::cargo_bin("bench").unwrap().args(["report", "--format", "csv"]).arg(&run).assert().code(0);
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let snapshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/merge/report-small.csv");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snapshot, &text).unwrap();
    }
    assert_eq!(text, std::fs::read_to_string(&snapshot).unwrap());
    assert_eq!(text.lines().next().unwrap(), COLUMNS.join(","));
}

#[test]
fn columns_are_documented() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report-columns.md"))
        .unwrap();
    for column in COLUMNS {
        assert!(doc.contains(&format!("`{column}`")), "docs/report-columns.md lacks {column}");
    }
}

#[test]
fn table_fits_100_columns_and_json_parses() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path());
    let out = Command::cargo_bin("bench").unwrap().arg("report").arg(&run).assert().code(0);
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("10.0"), "speed-up shown: {text}");
    // The median with the interval of the median (its coverage where below 95%), never a mean's
    // interval reaching below zero; none for n = 2.
    assert!(text.contains("200 (100..300 75%)"), "{text}");
    assert!(text.contains("450 (n<3)"), "{text}");
    assert!(text.contains("280/298"), "TTFT p90/p99: {text}");
    assert!(text.contains("30.0/49.6"), "ITL p50/p99: {text}");
    assert!(text.contains("15.6"), "TPOT p50: {text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "too wide ({}): {line}", line.chars().count());
    }
    let out =
        Command::cargo_bin("bench").unwrap().args(["report", "--format", "json"]).arg(&run).assert().code(0);
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert!(v["ci_method"].as_str().unwrap().starts_with("distribution-free interval of the median"), "{v}");
    let cold = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["scenario"] == "cold" && c["mode"] == "streaming" && c["batch_size"] == 1)
        .unwrap();
    assert_eq!(cold["ttft_ms"]["median_ci_level"], 0.75, "{cold}");
    common::assert_close(cold["itl_ms"]["median"].as_f64().unwrap(), 30.0, "ITL median");
    common::assert_close(cold["tpot_ms"]["median"].as_f64().unwrap(), 15.625, "TPOT median");
    assert_eq!(v["cells"].as_array().unwrap().len(), 6);
    let out = Command::cargo_bin("bench")
        .unwrap()
        .args(["report", "--format", "markdown"])
        .arg(&run)
        .assert()
        .code(0);
    assert!(String::from_utf8_lossy(&out.get_output().stdout).contains("| ctx |"));
}

#[test]
fn every_plot_is_written_as_svg() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path());
    let plots = dir.path().join("plots");
    Command::cargo_bin("bench").unwrap().arg("report").arg(&run).arg("--plot").arg(&plots).assert().code(0);
    for name in ["ttft-m.svg", "decode-m.svg", "staggered-m.svg"] {
        let text = std::fs::read_to_string(plots.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
    }
    let decode = std::fs::read_to_string(plots.join("decode-m.svg")).unwrap();
    assert!(decode.contains("physical ceiling"), "the ceiling is drawn when records carry it");
}

#[test]
fn bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("e.jsonl");
    std::fs::write(&empty, "").unwrap();
    Command::cargo_bin("bench").unwrap().arg("report").arg(&empty).assert().code(2);
}

/// Runs `bench ARGS`; fails the test (instead of hanging it) if bench has not finished within a
/// minute. A hang guard, not a speed assertion: a healthy run takes well under a second.
fn bench_bounded(args: &[&std::ffi::OsStr]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bench {args:?} hung (killed after 60 s)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A run directory of `records` as a sweep leaves it.
fn write_records(dir: &Path, records: &[Record]) -> PathBuf {
    common::runs::write(dir, "run", records)
}

fn staggered(run: u32, wait: f64) -> Record {
    Record::Staggered(Box::new(StaggeredRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "r".into(),
        cell: CellKey {
            context_tokens: 4096,
            ..key(Scenario::StaggeredBatched, CacheState::Cold, Mode::Streaming, 2, run)
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        user_b_ttft_from_wall_start_ms: Some(wait),
        quality_ok: true,
        ..Default::default()
    }))
}

#[test]
fn plots_of_extreme_values_finish_and_parse() {
    // Three records suffice: an interval that overflows to infinity hung the staggered plot.
    let cases: Vec<(&str, Vec<f64>)> = vec![
        ("huge", vec![f64::MAX, f64::MAX, f64::MAX]),
        ("overflowing spread", vec![1e200, 2e200, 3e200]),
        ("negative and huge", vec![-f64::MAX, f64::MAX, 5.0]),
        ("tiny", vec![1e-300, 2e-300, 3e-300]),
        ("zeros", vec![0.0, 0.0, 0.0]),
        ("one value", vec![7.0]),
    ];
    for (name, values) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut records: Vec<Record> =
            values.iter().enumerate().map(|(i, v)| staggered(i as u32 + 1, *v)).collect();
        for (i, v) in values.iter().enumerate() {
            let run = i as u32 + 1;
            records.push(m(
                key(Scenario::Cold, CacheState::Cold, Mode::Streaming, 1, run),
                0,
                Some(*v),
                v.abs() * 2.0 + 1.0,
                true,
            ));
        }
        let run = write_records(dir.path(), &records);
        let plots = dir.path().join("plots");
        let out = bench_bounded(&["report".as_ref(), run.as_os_str(), "--plot".as_ref(), plots.as_os_str()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(
            table.lines().all(|l| l.chars().count() <= 100),
            "{name}: the table stays 100 wide:\n{table}"
        );
        assert!(table.lines().count() < 40, "{name}: no 300-digit numbers wrapped over many lines:\n{table}");
        for entry in std::fs::read_dir(&plots).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{name}: {}: {e}", path.display()));
        }
    }
}

#[test]
fn negative_and_non_finite_times_never_enter_statistics() {
    let mut records = Vec::new();
    for (run, ttft, e2e) in [(1, 100.0, 1100.0), (2, -50.0, 1000.0), (3, 300.0, -1.0), (4, 200.0, 1300.0)] {
        records.push(m(
            key(Scenario::Cold, CacheState::Cold, Mode::Streaming, 1, run),
            0,
            Some(ttft),
            e2e,
            true,
        ));
    }
    records.push(staggered(1, -5.0));
    records.push(staggered(2, 2500.0));
    let cells = report::cells(&records);
    let cold = cells.iter().find(|c| c.id.scenario == Scenario::Cold).unwrap();
    assert_eq!(cold.ttft_ms.n, 3, "the negative TTFT is left out: {:?}", cold.ttft_ms);
    assert_eq!(cold.ttft_ms.median, Some(200.0));
    assert_eq!(cold.e2e_ms.n, 3, "the negative E2E is left out");
    assert_eq!(cold.decode_tps.n, 2, "no decode rate from a negative time: {:?}", cold.decode_tps);
    let b = cells.iter().find(|c| c.id.scenario == Scenario::StaggeredBatched).unwrap();
    assert_eq!((b.user_b_wait_ms.n, b.user_b_wait_ms.median), (1, Some(2500.0)));
}

#[test]
fn report_of_an_input_without_records_exits_2_unless_allowed() {
    let parent = tempfile::tempdir().unwrap();
    // A run that measured nothing, as its sweep left it.
    let dir = common::runs::write(parent.path(), "empty", &[]);
    Command::cargo_bin("bench")
        .unwrap()
        .arg("report")
        .arg(&dir)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(format!("no records in {}", dir.display())));
    Command::cargo_bin("bench").unwrap().arg("report").arg(&dir).arg("--allow-empty").assert().code(0);
}

#[test]
fn partial_batches_are_left_out_of_statistics_and_counted_on_stderr() {
    let mut records = records();
    // A second batch of the concurrent cell, killed after its first member: no group record.
    let mut partial =
        m(key(Scenario::Concurrent, CacheState::Cold, Mode::Streaming, 2, 2), 0, Some(9000.0), 9900.0, true);
    if let Record::Measurement(x) = &mut partial {
        x.group_id = Some("g2".into());
    }
    records.push(partial);
    let cells = report::cells(&records);
    let batch = cells.iter().find(|c| c.id.scenario == Scenario::Concurrent).unwrap();
    assert_eq!(
        (batch.records, batch.quality_ok, batch.ttft_ms.n),
        (3, 2, 2),
        "the partial member is counted, not used"
    );
    assert_eq!(batch.ttft_ms.median, Some(450.0));
    let dir = tempfile::tempdir().unwrap();
    let run = write_records(dir.path(), &records);
    let out = Command::cargo_bin("bench").unwrap().arg("report").arg(&run).assert().code(0);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.contains("1 partial batch"), "{stderr}");
}

/// report keeps a digest of each record read located and its values (`report::sampled`), and a
/// record it cannot locate whole: a canonical file pretty-printed (each record over many lines)
/// is read whole, and must give the statistics its one-line twin gives, ITL from each record's own
/// token offsets included.
#[test]
fn records_held_whole_give_the_statistics_located_ones_give() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path());
    let canonical = dir.path().join("c.json");
    Command::cargo_bin("bench").unwrap().arg("merge").arg(&run).arg("-o").arg(&canonical).assert().code(0);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&canonical).unwrap()).unwrap();
    let pretty = dir.path().join("pretty.json");
    std::fs::write(&pretty, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let json = |input: &Path| {
        let out = Command::cargo_bin("bench")
            .unwrap()
            .args(["report", "--format", "json"])
            .arg(input)
            .assert()
            .code(0);
        serde_json::from_slice::<serde_json::Value>(&out.get_output().stdout).unwrap()
    };
    let (located, whole) = (json(&run), json(&pretty));
    assert_eq!(whole, located);
    let itl: u64 =
        whole["cells"].as_array().unwrap().iter().map(|c| c["itl_ms"]["n"].as_u64().unwrap_or(0)).sum();
    assert!(itl > 0, "the records' token offsets enter ITL: {whole}");
}

/// A run's cells' records lie a sweep apart in its file, so report gathers their gaps in one pass
/// and sets them aside in an unnamed file of the temp directory, which leaves nothing behind. Where
/// the temp directory cannot hold that file, the gaps are read back cell by cell: the same report,
/// the one the records give held whole.
#[test]
fn a_runs_report_is_the_same_where_the_temp_directory_cannot_hold_its_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let records = common::ingest_records::records(7000);
    let run = common::ingest_records::write_run_dir(dir.path(), &records);
    let temp = dir.path().join("temp");
    std::fs::create_dir(&temp).unwrap();
    let report_in = |tmpdir: &Path| {
        let out = Command::cargo_bin("bench")
            .unwrap()
            .env("TMPDIR", tmpdir)
            .args(["report", "--format", "json"])
            .arg(&run)
            .assert()
            .code(0);
        serde_json::from_slice::<serde_json::Value>(&out.get_output().stdout).unwrap()
    };
    let set_aside = report_in(&temp);
    assert_eq!(std::fs::read_dir(&temp).unwrap().count(), 0, "nothing left in the temp directory");
    let cell_by_cell = report_in(&dir.path().join("no-such-directory"));
    assert_eq!(set_aside, cell_by_cell);
    assert_eq!(set_aside["cells"], serde_json::to_value(report::cells(&records)).unwrap());
    let gaps: u64 =
        set_aside["cells"].as_array().unwrap().iter().map(|c| c["itl_ms"]["n"].as_u64().unwrap()).sum();
    assert!(gaps > 250_000, "{gaps} gaps");
}
