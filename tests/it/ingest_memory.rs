//! The reading verbs hold what they read, not whole records: report keeps each record lean with
//! its token offsets (ITL is read from them), compare keeps it lean, so a run's output samples
//! and server payloads never sit in memory however many records there are (a million records of
//! a long soak are gigabytes of them). Peak memory is the child's own, measured through a small
//! parent (`peak_mb`); the statistics are checked against the records bench itself wrote.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use ttft_model::record::{CellKey, ErrorInfo, ErrorKind, Measurement, Record, SCHEMA_VERSION};

use crate::common::{assert_close, runs};

/// Records in the run, and the output sample each carries: 1,500 x 40 KB = 60 MB of text the
/// statistics never read.
const RECORDS: usize = 1500;
const SAMPLE_BYTES: usize = 40_000;
/// Above what a debug `bench` needs for 1,500 lean records (about 20 MB), below what holding the
/// samples takes (60 MB and more).
const PEAK_LIMIT_MB: f64 = 45.0;

fn record(run: u32) -> Record {
    let ttft = 800.0 + f64::from(run % 97);
    // Gaps that differ by record and by token, so the pooled ITL has a real distribution.
    let mut at = ttft;
    let offsets: Vec<f64> = (0..32)
        .map(|k| {
            at += 20.0 + f64::from((run + k) % 7) + f64::from(k) / 64.0;
            at
        })
        .collect();
    let e2e = at;
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "soak".into(),
        cell: CellKey { model: "m".into(), context_tokens: 1024, batch_size: 1, run, ..Default::default() },
        started_at: runs::STARTED_AT.into(),
        ttft_ms: Some(ttft),
        e2e_ms: Some(e2e),
        token_offsets_ms: offsets,
        input_tokens: Some(1024),
        output_tokens: Some(32),
        max_tokens: 32,
        output_sample: "w".repeat(SAMPLE_BYTES),
        quality_ok: true,
        ..Default::default()
    }))
}

/// Runs `bench ARGS`, stdout into `out`; its exit code and its peak resident memory (MB). The
/// child is started by a small Python parent that reads its children's rusage: Linux carries a
/// process's high-water mark across exec, so a child started straight from this test process
/// would count the test's own memory.
fn peak_mb(args: &[&str], out: &Path) -> (i32, f64) {
    let script = "import resource, subprocess, sys\n\
                  with open(sys.argv[1], 'wb') as out:\n\
                  \x20   code = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.DEVNULL).returncode\n\
                  print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let done = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(out)
        .arg(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .output()
        .expect("python3 runs bench");
    let said = String::from_utf8_lossy(&done.stdout).to_string();
    let mut words = said.split_whitespace();
    let code = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("python3 said {said:?}"));
    let kb: f64 =
        words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("python3 said {said:?}"));
    (code, kb / 1024.0)
}

#[test]
fn report_and_compare_hold_lean_records_not_their_samples_and_itl_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = (1..=RECORDS as u32).map(record).collect();
    let run = runs::write(dir.path(), "soak", &records);
    let run_s = run.to_string_lossy().to_string();
    let written = std::fs::metadata(run.join("measurements.jsonl")).unwrap().len() as f64 / 1e6;
    assert!(written > 60.0, "the run holds {written:.0} MB of records");

    let report = dir.path().join("report.json");
    let (code, peak) = peak_mb(&["report", &run_s, "--format", "json"], &report);
    assert_eq!(code, 0, "report exits 0");
    assert!(peak < PEAK_LIMIT_MB, "report of {written:.0} MB of records peaked at {peak:.0} MB");
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let cell = &report["cells"][0];
    assert_eq!(cell["records"], RECORDS, "{cell}");

    // ITL as the records bench wrote give it: every gap between consecutive offsets, pooled.
    let mut gaps = Vec::new();
    for r in runs::records_of(&run.join("measurements.jsonl")) {
        if let Record::Measurement(m) = r {
            gaps.extend(m.token_offsets_ms.windows(2).map(|w| w[1] - w[0]));
        }
    }
    let itl = ttft_model::stats::summarize(&gaps);
    assert_eq!(cell["itl_ms"]["n"], itl.n, "{}", cell["itl_ms"]);
    for (field, want) in [("median", itl.median), ("p99", itl.p99), ("mean", itl.mean)] {
        let got =
            cell["itl_ms"][field].as_f64().unwrap_or_else(|| panic!("itl_ms.{field}: {}", cell["itl_ms"]));
        assert_close(got, want.unwrap(), &format!("itl_ms.{field}"));
    }

    let compared = dir.path().join("compare.json");
    let (code, peak) = peak_mb(&["compare", &run_s, &run_s, "--format", "json"], &compared);
    assert_eq!(code, 0, "compare exits 0");
    // Two inputs of 60 MB each: whole, they alone would be 120 MB.
    assert!(peak < PEAK_LIMIT_MB, "compare of two {written:.0} MB inputs peaked at {peak:.0} MB");
    let compared: Value = serde_json::from_slice(&std::fs::read(&compared).unwrap()).unwrap();
    let cells = compared["candidates"][0]["cells"].as_array().cloned().unwrap_or_default();
    assert_eq!(cells.len(), 1, "{compared}");
    let ttft = cells[0]["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "ttft_ms").cloned();
    assert_eq!(ttft.as_ref().map(|m| m["base"]["n"].clone()), Some(RECORDS.into()), "{ttft:?}");
}

/// Records of which every second failed with a long error page (a proxy's 502 HTML): the message
/// is kept in the lean form every verb reads (verify and compare's failures read it), 60 MB of
/// them an input.
const ERROR_PAGE_BYTES: usize = 80_000;

fn failed_or_good(run: u32) -> Record {
    let mut r = record(run);
    if let Record::Measurement(m) = &mut r {
        m.output_sample = String::new();
        if run.is_multiple_of(2) {
            m.error = Some(ErrorInfo {
                kind: ErrorKind::HttpStatus,
                message: format!("502 from the gateway: {}", "p".repeat(ERROR_PAGE_BYTES)),
                http_status: Some(502),
            });
            m.quality_ok = false;
        }
    }
    r
}

/// Fails when compare holds its inputs together: each is summarised (cells, failures) and let go
/// before the next is read, so comparing two runs of a long soak needs one run's memory, not two.
#[test]
fn compare_holds_one_input_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = (1..=RECORDS as u32).map(failed_or_good).collect();
    let base = runs::write(&dir.path().join("base"), "soak", &records).to_string_lossy().to_string();
    let cand = runs::write(&dir.path().join("cand"), "soak", &records).to_string_lossy().to_string();
    let kept_mb = (RECORDS / 2 * ERROR_PAGE_BYTES) as f64 / 1e6;
    let compared = dir.path().join("compare.json");
    let (code, peak) = peak_mb(&["compare", &base, &cand, "--format", "json"], &compared);
    assert_eq!(code, 0, "compare exits 0");
    // One input's error pages and a debug bench's own (about 20 MB) fit; two inputs' do not.
    assert!(
        peak < 20.0 + 1.5 * kept_mb,
        "compare of two inputs of {kept_mb:.0} MB of kept text each peaked at {peak:.0} MB"
    );
    let compared: Value = serde_json::from_slice(&std::fs::read(&compared).unwrap()).unwrap();
    for failures in compared["failures"].as_array().unwrap() {
        assert_eq!(failures["failed_records"], RECORDS / 2, "{failures}");
    }
    let cells = compared["candidates"][0]["cells"].as_array().cloned().unwrap_or_default();
    let ttft = cells[0]["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "ttft_ms").cloned();
    assert_eq!(ttft.as_ref().map(|m| m["base"]["n"].clone()), Some((RECORDS / 2).into()), "{ttft:?}");
}

/// 100,000 records of the ingest benchmark's shape (2.9 KB a line, 285 MB): what each reading verb
/// may hold for them is 200 MB (the scale goal: 500 MB a million). Each verb keeps a compact form
/// of each record, not the record: merge a digest, report and compare the digest with the values
/// their statistics and failures read, verify what its rules read (the rules that need nothing
/// but the record run as it is read). They are held to 100, 120, 130 and 100 MB (a debug build:
/// about 60-80, 65, 85 and 65, some 40 of it the binary, its threads and buffers; holding the
/// lean records they were about 155, 155, 165 and 145). `verify --sources` holds both sides as
/// hashes for its audit, then reads its input as verify does: held to verify's 100 (about 80;
/// holding the published records lean for the audit, it was about 220). What each verb wrote is
/// checked, so a verb that stopped early cannot pass on a low peak.
#[test]
fn reading_verbs_hold_100_000_records_in_200_mb() {
    const RECORDS: usize = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let records = crate::common::ingest_records::records(RECORDS);
    let written = records.len();
    let run = crate::common::ingest_records::write_run_dir(dir.path(), &records);
    // Every record the generator makes passes: each measurement's every gap enters ITL, and a
    // report's cells count measurements and staggered records.
    let (mut counted, mut gaps) = (0, 0);
    for r in &records {
        assert!(r.is_good());
        match r {
            Record::Measurement(m) => gaps += m.token_offsets_ms.len().saturating_sub(1),
            Record::Staggered(_) => {}
            Record::Group(_) => continue,
        }
        counted += 1;
    }
    drop(records);
    let run_s = run.to_str().unwrap();
    let canonical = dir.path().join("canonical.json");
    let canonical_s = canonical.to_str().unwrap();
    let out = dir.path().join("out");

    let (code, peak) = peak_mb(&["merge", run_s, "-o", canonical_s], &out);
    assert_eq!(code, 0, "merge");
    assert!(peak < 100.0, "merge of {written} records peaked at {peak:.0} MB: does it hold the records?");
    let merged: Value = serde_json::from_slice(&std::fs::read(&canonical).unwrap()).unwrap();
    assert_eq!(merged["records"].as_array().map(Vec::len), Some(written), "merge kept every record");
    drop(merged);
    // Its canonical file merged again (read by the scanning threads): the same records, byte for
    // byte, within the same memory.
    let again = dir.path().join("again.json");
    let (code, peak) = peak_mb(&["merge", canonical_s, "-o", again.to_str().unwrap()], &out);
    assert_eq!(code, 0, "merge of the canonical file");
    assert!(peak < 100.0, "merge of {written} canonical records peaked at {peak:.0} MB");
    let records_of = |path: &Path| {
        let text = std::fs::read(path).unwrap();
        let at = text.windows(12).position(|w| w == b"\"records\": [").expect("a records array");
        text[at..].to_vec()
    };
    assert!(records_of(&again) == records_of(&canonical), "merging a canonical file changed its records");

    let (code, peak) = peak_mb(&["verify", canonical_s, "--sources", run_s, "--format", "json"], &out);
    assert_eq!(code, 0, "verify --sources");
    assert!(peak < 100.0, "verify --sources of {written} records against themselves peaked at {peak:.0} MB");
    let audited: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(audited["sources"][0]["records"].as_u64(), Some(written as u64), "{}", audited["sources"]);
    let traced = audited["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| !f["rule"].as_str().unwrap().starts_with("provenance"));
    assert!(traced, "every published record traces to its source: {}", audited["findings"]);

    let (code, verify_peak) = peak_mb(&["verify", run_s, "--format", "json"], &out);
    assert_eq!(code, 0, "verify");
    assert!(
        verify_peak < 100.0,
        "verify of {written} records peaked at {verify_peak:.0} MB: does it hold the records?"
    );
    let findings: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let summary = &findings["summary"];
    assert_eq!(summary["records"].as_u64(), Some(written as u64), "verify read every record: {summary}");
    assert_eq!(summary["errors"], 0, "{summary}");

    // report keeps a digest of each record and the values its statistics read, and reads each
    // cell's token offsets back from the records' texts, one cell at a time: held for every
    // record, the offsets alone would be 51 MB here, the lean records 75 more.
    let (code, peak) = peak_mb(&["report", run_s, "--format", "json"], &out);
    assert_eq!(code, 0, "report");
    assert!(
        peak < 120.0,
        "report of {written} records peaked at {peak:.0} MB: does it hold the records, or every record's token offsets?"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let cells = report["cells"].as_array().unwrap();
    let sum =
        |field: &dyn Fn(&Value) -> &Value| cells.iter().map(|c| field(c).as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum(&|c| &c["records"]), counted, "report counted every record");
    assert_eq!(sum(&|c| &c["itl_ms"]["n"]), gaps as u64, "report pooled every inter-token gap");
    let ttft_samples = sum(&|c| &c["ttft_ms"]["n"]);

    let (code, peak) = peak_mb(&["compare", run_s, run_s, "--format", "json"], &out);
    assert_eq!(code, 0, "compare");
    assert!(
        peak < 130.0,
        "compare of {written} records against themselves peaked at {peak:.0} MB: does it hold the records?"
    );
    let compared: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let cells = compared["candidates"][0]["cells"].as_array().unwrap();
    let ttft_n = |side: &str| -> u64 {
        let metric =
            |c: &Value| c["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "ttft_ms").cloned();
        cells.iter().filter_map(metric).map(|m| m[side]["n"].as_u64().unwrap()).sum()
    };
    assert_eq!(
        (ttft_n("base"), ttft_n("candidate")),
        (ttft_samples, ttft_samples),
        "compare read every TTFT"
    );
}
