//! report reads records located, keeping of each its digest and the values its statistics read
//! (`sampled`), and each cell's token offsets back from its records' texts, cell by cell or in one
//! pass (`gaps`): every cell's statistics must be the ones whole records give, duplicates and ties
//! among inputs included.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;
use ttft_results::results::sources::{Detail, load_with};

fn report<T: Sampled + FromRecord>(inputs: &[PathBuf], detail: Detail) -> serde_json::Value {
    report_gathered::<T>(inputs, detail, Gather::Chosen).0
}

/// The report of `inputs` read to `detail`, its gaps gathered as `gather` says, and whether they
/// were gathered in one pass.
fn report_gathered<T: Sampled + FromRecord>(
    inputs: &[PathBuf],
    detail: Detail,
    gather: Gather,
) -> (serde_json::Value, bool) {
    let sources: Vec<Source<T>> = inputs.iter().map(|p| load_with(p, detail).unwrap()).collect();
    let combined = combine::combine(sources).unwrap();
    let (records, texts) = (&combined.records, &combined.texts);
    let by_cell = samples(records, texts, &PartialBatches::of(records));
    let itl_cells: Vec<&[usize]> = by_cell.values().map(|s| &s.itl_records[..]).collect();
    let one_pass = Gaps::gather(&itl_cells, records, texts, gather).unwrap().in_one_pass();
    let cells = statistics(&by_cell, records, texts, gather).unwrap();
    (serde_json::to_value(cells).unwrap(), one_pass)
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
    let (mut itl, mut in_one_pass) = (0, 0);
    for inputs in cases {
        let whole = report::<Record>(&inputs, Detail::Full);
        assert_eq!(report::<Record>(&inputs, Detail::Located), whole, "{inputs:?}");
        // What `bench report` keeps: a digest and values of each located record.
        assert_eq!(report::<ReportRecord>(&inputs, Detail::Located), whole, "{inputs:?}");
        // Either way of gathering the gaps, whatever the rule would choose for these inputs.
        for gather in [Gather::CellByCell, Gather::OnePass] {
            let (located, one_pass) = report_gathered::<ReportRecord>(&inputs, Detail::Located, gather);
            assert_eq!(located, whole, "{inputs:?} gathered {gather:?}");
            in_one_pass += usize::from(one_pass);
        }
        itl += whole.as_array().unwrap().iter().map(|c| c["itl_ms"]["n"].as_u64().unwrap_or(0)).sum::<u64>();
    }
    assert!(itl > 1000, "the inputs carry token offsets ({itl} gaps)");
    assert!(in_one_pass >= 3, "gathered in one pass for {in_one_pass} inputs");
}

/// A run's file holds its records in sweep order, a cell's a sweep apart: read back cell by cell,
/// each would be a read of its own, so the gaps are gathered in one pass. The same records held by
/// cell (as a canonical file holds them) are read back cell by cell. Both give the statistics whole
/// records give.
#[test]
fn a_runs_gaps_are_gathered_in_one_pass_and_records_held_by_cell_are_read_back_cell_by_cell() {
    let dir = tempfile::tempdir().unwrap();
    let run = ingest_records::write_run_dir(dir.path(), &ingest_records::records(7000));
    let sources: Vec<Source<Record>> = vec![load_with(&run, Detail::Full).unwrap()];
    let by_cell = dir.path().join("by-cell.jsonl");
    let mut out = io::BufWriter::new(std::fs::File::create(&by_cell).unwrap());
    for r in combine::combine(sources).unwrap().records {
        serde_json::to_writer(&mut out, &r).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.into_inner().unwrap().sync_all().unwrap();
    for (input, one_pass_wanted) in [(run, true), (by_cell, false)] {
        let inputs = [input];
        let whole = report::<Record>(&inputs, Detail::Full);
        let (located, one_pass) = report_gathered::<ReportRecord>(&inputs, Detail::Located, Gather::Chosen);
        assert_eq!(one_pass, one_pass_wanted, "{inputs:?}");
        assert_eq!(located, whole, "{inputs:?}");
        let gaps: u64 = whole.as_array().unwrap().iter().map(|c| c["itl_ms"]["n"].as_u64().unwrap()).sum();
        assert!(gaps > 250_000, "{gaps} gaps");
    }
}
