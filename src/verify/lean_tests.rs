//! verify reads lean records (`Record::lean`: no raw samples or server payloads) and keeps of each
//! what its rules read (`judged`, made as each is read): every rule must find exactly what it
//! finds on the full records, on every fixture and flag set.

use std::path::{Path, PathBuf};

use clap::Parser;

use super::*;
use ttft_model::record::Record;
use ttft_results::results::sources::{Detail, load_with};

#[derive(Parser)]
struct Verb {
    #[command(flatten)]
    args: VerifyArgs,
}

/// verify's report of `inputs` read to `detail`: judged as read where `as_read` (verify's own way),
/// else judged from the records read; audited against `claimed`, each side held as read to
/// `detail`.
fn report(
    inputs: &[PathBuf],
    claimed: &[PathBuf],
    flags: &[&str],
    detail: Detail,
    as_read: bool,
) -> serde_json::Value {
    let argv = ["verify"]
        .iter()
        .chain(flags)
        .map(|s| s.to_string())
        .chain(inputs.iter().map(|p| p.display().to_string()));
    let verb = Verb::try_parse_from(argv).unwrap();
    let settings = VerifySettings::from_args(&verb.args).unwrap();
    let mut claims = Claims::default();
    for p in claimed {
        claims.add(load_with(p, detail).unwrap());
    }
    let mut audited = Vec::new();
    let mut judged: Vec<Source<Judged>> = Vec::new();
    for p in inputs {
        let published: Source<Held> = load_with(p, detail).unwrap();
        if !claimed.is_empty() {
            audit(&published, &claims, &mut audited).unwrap();
        }
        judged.push(if as_read {
            load_with(p, detail).unwrap()
        } else {
            let read: Source<Record> = load_with(p, detail).unwrap();
            let judge_as = if read.texts.is_some() { Detail::Located } else { Detail::Full };
            Source {
                records: read.records.into_iter().map(|r| table::judge(r, judge_as)).collect(),
                path: read.path,
                kind: read.kind,
                run_meta: read.run_meta,
                texts: read.texts,
                conflicts: read.conflicts,
            }
        });
    }
    serde_json::to_value(verify_sources(&settings, &judged, &claims, audited)).unwrap()
}

#[test]
fn lean_and_judged_records_give_the_same_report() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let verify = root.join("tests/fixtures/verify");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&verify)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "jsonl") || p.ends_with("origin_gemma_batch_outlier.json")
        })
        .collect();
    fixtures.sort();
    let origin = ["small_first.json", "small_rerun.json"].map(|f| root.join("tests/fixtures/origin").join(f));
    let m4 = ["--hardware", "m4-pro", "--model-bytes", "8.03GB", "--params", "12B"];
    let h200 =
        ["--bandwidth-gbps", "4214", "--tflops", "770", "--model-bytes", "14.48GB", "--params", "7.24B"];
    let mut cases: Vec<(Vec<PathBuf>, Vec<PathBuf>, Vec<&str>)> = Vec::new();
    for f in &fixtures {
        for flags in [&[][..], &m4[..], &h200[..]] {
            cases.push((vec![f.clone()], vec![], flags.to_vec()));
        }
    }
    cases.push((fixtures.clone(), vec![], m4.to_vec()));
    cases.push((origin.to_vec(), vec![], vec![]));
    cases.push((vec![origin[1].clone()], vec![origin[0].clone()], vec![]));
    cases.push((vec![root.join("fuzz/corpus/results_document/canonical")], vec![], vec![]));
    let mut findings = 0;
    for (inputs, claimed, flags) in cases {
        let full = report(&inputs, &claimed, &flags, Detail::Full, false);
        assert_eq!(report(&inputs, &claimed, &flags, Detail::Lean, false), full, "{inputs:?} {flags:?}");
        let located = report(&inputs, &claimed, &flags, Detail::Located, claimed.is_empty());
        assert_eq!(located, full, "judged as read: {inputs:?} {flags:?}");
        findings += full["findings"].as_array().map_or(0, Vec::len);
    }
    assert!(findings > 20, "the fixtures exercise the rules ({findings} findings)");
}
