//! Import of the origin benchmark's result JSON: hand-made fixtures, then the real published files.

use std::path::{Path, PathBuf};

use crate::common;

use assert_cmd::Command;
use common::origin::real;
use ttft_bench::merge::{self, expect};
use ttft_model::record::{Mode, Record, SCHEMA_VERSION, Scenario};
use ttft_results::results::sources::{self, SourceKind};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn paper_expect() -> PathBuf {
    fixture("merge/paper-expect.toml")
}

fn count(records: &[Record], kind: &str) -> usize {
    records.iter().filter(|r| r.record_type() == kind).count()
}

#[test]
fn small_origin_file_maps_onto_our_records() {
    let src = sources::load(&fixture("origin/small_first.json")).unwrap();
    assert_eq!(src.kind, SourceKind::Origin);
    assert_eq!(src.run_meta.len(), 1);
    assert_eq!(src.run_meta[0].raw["metadata"]["config"]["throttle_tps_tolerance"], 0.05);
    // 2 batch-1 rows -> 2 measurements; 1 batch row -> measurement + group; 2 staggered.
    assert_eq!((count(&src.records, "measurement"), count(&src.records, "group")), (3, 1));
    assert_eq!(count(&src.records, "staggered"), 2);
    for r in &src.records {
        assert_eq!(r.schema_version(), SCHEMA_VERSION);
        assert_eq!(r.run_id(), "small_first");
        assert_eq!(r.cell().model, "tiny-model");
    }
    let ms: Vec<_> = src
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Measurement(m) => Some(m),
            _ => None,
        })
        .collect();
    let streaming = ms.iter().find(|m| m.cell.mode == Mode::Streaming && m.cell.batch_size == 1).unwrap();
    assert_eq!(streaming.cell.run, 1, "p0 -> run 1");
    assert_eq!(streaming.ttft_ms, Some(1000.0));
    assert_eq!(streaming.started_at, "2026-02-08T23:22:21.730087Z");
    assert_eq!(streaming.expected_input_tokens, Some(1024));
    // Our definition: (64 - 1) tokens over 1.26 s = 50.0 tok/s; the origin's 50.8 is kept aside.
    assert!((streaming.decode_tps.unwrap() - 50.0).abs() < 1e-9);
    assert_eq!(streaming.server_timings.as_ref().unwrap()["origin"]["decode_tps"], 50.8);
    assert_eq!(streaming.thermal.as_ref().unwrap().cooldown_s, 12.0);

    let non_streaming = ms.iter().find(|m| m.cell.mode == Mode::NonStreaming).unwrap();
    assert_eq!(non_streaming.cell.run, 2, "p1 -> run 2");
    assert_eq!(non_streaming.ttft_ms, None, "origin's 0.0 is not a TTFT");
    assert_eq!(non_streaming.decode_tps, None);
    assert!(
        non_streaming.quality_flags.iter().any(|f| f.flag == "origin_ttft_not_measured" && !f.fails_gate)
    );
    assert!(!non_streaming.thermal.as_ref().unwrap().recovered, "250.5 s is past the 240 s cap");

    let batch = ms.iter().find(|m| m.cell.batch_size == 2).unwrap();
    assert_eq!(batch.cell.scenario, Scenario::Concurrent);
    assert!(!batch.quality_ok);
    assert!(batch.quality_flags.iter().any(|f| f.flag == "empty_output" && f.fails_gate));
    let group =
        src.records.iter().find_map(|r| if let Record::Group(g) = r { Some(g) } else { None }).unwrap();
    assert_eq!((group.wall_ms, group.requests_failed), (5000.0, 2));
    assert_eq!(group.per_request_tps, None, "origin's per_request_tps is system/2, not a decode mean");

    let st: Vec<_> = src
        .records
        .iter()
        .filter_map(|r| if let Record::Staggered(s) = r { Some(s) } else { None })
        .collect();
    let seq = st.iter().find(|s| s.cell.scenario == Scenario::StaggeredSequential).unwrap();
    assert_eq!(seq.user_b_arrival_ms, Some(3050.0));
    assert_eq!(seq.user_b_ttft_from_wall_start_ms, Some(4150.0), "delay + B's TTFT when wait is absent");
    assert_eq!((seq.cell.context_tokens, seq.cell.run, seq.total_wall_ms), (4096, 1, Some(6150.0)));
    let batched = st.iter().find(|s| s.cell.scenario == Scenario::StaggeredBatched).unwrap();
    assert_eq!(batched.user_b_ttft_from_wall_start_ms, Some(4510.0), "user_b_wait_ms when present");
}

#[test]
fn rerun_replaces_the_failed_batch_and_tolerances_conflict() {
    let sources =
        sources::load_all(&[fixture("origin/small_rerun.json"), fixture("origin/small_first.json")]).unwrap();
    let doc = merge::build(sources).unwrap().doc;
    let groups: Vec<_> =
        doc.records.iter().filter_map(|r| if let Record::Group(g) = r { Some(g) } else { None }).collect();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].run_id, "small_rerun");
    let batch_measurements =
        doc.records.iter().filter(|r| r.record_type() == "measurement" && r.cell().batch_size == 2);
    assert!(batch_measurements.clone().all(|r| r.run_id() == "small_rerun" && r.is_good()));
    assert_eq!(doc.provenance.replaced.len(), 1);
    assert_eq!(doc.provenance.replaced[0].beat, 1);
    let tol = doc.conflicts.iter().find(|c| c.setting == "thermal_tolerance").unwrap();
    let values: Vec<&str> = tol.values.iter().map(|v| v.value.as_str()).collect();
    assert_eq!(values, ["0.05", "0.2"]);
}

#[test]
fn real_gemma_first_run_plus_rerun() {
    let (first, rerun, published) = (
        real("colm_full_gemma_20260208_152120.json"),
        real("colm_full_gemma_20260209_154125.json"),
        real("colm_full_gemma_merged.json"),
    );
    let sources = sources::load_all(&[first.clone(), rerun.clone()]).unwrap();
    assert_eq!(sources[0].records.len(), 198 + 90 + 6, "198 rows (90 of them batches) + 6 staggered");
    assert_eq!(sources[1].records.len(), 14 + 14);
    let doc = merge::build(sources).unwrap().doc;
    assert_eq!(count(&doc.records, "measurement"), 198);
    assert_eq!(count(&doc.records, "staggered"), 6);
    assert_eq!(count(&doc.records, "group"), 90);
    let staggered_wait: Vec<f64> = doc
        .records
        .iter()
        .filter_map(|r| if let Record::Staggered(s) = r { s.user_b_ttft_from_wall_start_ms } else { None })
        .collect();
    assert_eq!(staggered_wait.len(), 6, "the first run lacks user_b_wait_ms; derived from delay + TTFT");

    // The two runs were taken with different thermal tolerances: the merged file must say so.
    let tol = doc.conflicts.iter().find(|c| c.setting == "thermal_tolerance").unwrap();
    let values: Vec<&str> = tol.values.iter().map(|v| v.value.as_str()).collect();
    assert_eq!(values, ["0.05", "0.2"]);

    let exp = expect::from_scenario(&paper_expect()).unwrap();
    let rows = expect::completeness(&exp, &doc.records);
    assert_eq!(rows.len(), 1);
    let c = &rows[0];
    assert_eq!((c.measured, c.expected, c.staggered_measured, c.staggered_expected), (198, 198, 6, 6));
    assert!(c.missing.is_empty(), "{:?}", c.missing);
    // The re-run file repeats 14 of the 15 failed batch cells: b2/warm/streaming/1K pass 2 is still
    // the failed record. The published merged file has a passing one from a run not published.
    assert_eq!(c.quality_ok, 197);
    assert_eq!(c.failed.len(), 1);
    let f = &c.failed[0];
    assert_eq!(
        (f.scenario, f.mode, f.context_tokens, f.run),
        (Scenario::Concurrent, Mode::Streaming, 1024, 2)
    );

    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("gemma.json");
    let assert = Command::cargo_bin("bench")
        .unwrap()
        .args(["merge", first.to_str().unwrap(), rerun.to_str().unwrap(), "-o"])
        .arg(&path)
        .arg("--expect")
        .arg(paper_expect())
        // The first run and the rerun were measured at other thermal tolerances.
        .arg("--allow-conflicts")
        .assert()
        .code(1);
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).to_string();
    let table = common::table::find(&stdout, "Model");
    assert_eq!(table.rows.len(), 1, "{stdout}");
    assert_eq!(table.rows[0][1..], ["198/198", "197/198", "6/6", "Failed cells"], "{stdout}");
    assert!(path.exists(), "an incomplete merge still writes its file");

    let all = Command::cargo_bin("bench")
        .unwrap()
        .args(["merge", first.to_str().unwrap(), rerun.to_str().unwrap(), published.to_str().unwrap(), "-o"])
        .arg(&path)
        .arg("--expect")
        .arg(paper_expect())
        // The first run and the rerun were measured at other thermal tolerances.
        .arg("--allow-conflicts")
        .assert()
        .code(0);
    let stdout = String::from_utf8_lossy(&all.get_output().stdout).to_string();
    let table = common::table::find(&stdout, "Model");
    assert_eq!(table.rows[0][1..], ["198/198", "198/198", "6/6", "Complete"], "{stdout}");
    let stderr = String::from_utf8_lossy(&all.get_output().stderr).to_string();
    assert!(stderr.contains("conflict: thermal_tolerance"), "{stderr}");
}

#[test]
fn real_deepseek_runs_are_incomplete_without_the_unpublished_third_file() {
    let (first, rerun) =
        (real("colm_full_deepseek_20260208_152120.json"), real("colm_full_deepseek_20260209_155053.json"));
    let doc = merge::build(sources::load_all(&[first, rerun]).unwrap()).unwrap().doc;
    let exp = expect::from_scenario(&paper_expect()).unwrap();
    let c = &expect::completeness(&exp, &doc.records)[0];
    assert_eq!((c.measured, c.missing.len(), c.staggered_measured), (163, 35, 6));
    assert!(c.missing.iter().all(|m| m.batch_size == 2));
    // The early-EOS failure (hot/streaming/2K pass 2) was replaced by its re-run.
    assert_eq!(doc.provenance.replaced.len(), 1);
    assert!(doc.provenance.replaced[0].slot.contains("hot streaming 2048 b1 r2"));
}
