//! report reads records located, keeping of each its digest and the values its statistics read
//! (`sampled`), and each cell's token offsets back from its records' texts: every cell's
//! statistics must be the ones whole records give, duplicates and ties among inputs included.

use std::path::{Path, PathBuf};

use super::*;
use ttft_results::results::sources::{Detail, load_with};

fn report<T: Sampled + FromRecord>(inputs: &[PathBuf], detail: Detail) -> serde_json::Value {
    let sources: Vec<Source<T>> = inputs.iter().map(|p| load_with(p, detail).unwrap()).collect();
    let combined = combine::combine(sources).unwrap();
    serde_json::to_value(located_cells(&combined.records, &combined.texts).unwrap()).unwrap()
}

#[test]
fn located_records_give_the_statistics_whole_records_give() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let verify = root.join("tests/fixtures/verify");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&verify)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    fixtures.sort();
    let origin = ["small_first.json", "small_rerun.json"].map(|f| root.join("tests/fixtures/origin").join(f));
    let reuse = root.join("results/reference/reuse-ab-h100");
    let (fresh, reused) = (reuse.join("off-fresh"), reuse.join("off-reuse"));
    let mut cases: Vec<Vec<PathBuf>> = fixtures.iter().map(|f| vec![f.clone()]).collect();
    cases.push(fixtures.clone());
    cases.push(origin.to_vec());
    // The same run twice (every slot two identical candidates), and two runs of one matrix (every
    // slot decided between different records).
    cases.push(vec![reused.clone(), reused.clone()]);
    cases.push(vec![fresh, reused]);
    cases.push(vec![root.join("results/reference/gpu-reference.json")]);
    let mut itl = 0;
    for inputs in cases {
        let whole = report::<Record>(&inputs, Detail::Full);
        assert_eq!(report::<Record>(&inputs, Detail::Located), whole, "{inputs:?}");
        // What `bench report` keeps: a digest and values of each located record.
        assert_eq!(report::<ReportRecord>(&inputs, Detail::Located), whole, "{inputs:?}");
        itl += whole.as_array().unwrap().iter().map(|c| c["itl_ms"]["n"].as_u64().unwrap_or(0)).sum::<u64>();
    }
    assert!(itl > 1000, "the inputs carry token offsets ({itl} gaps)");
}
