//! `--expect`: the cells a scenario file defines, compared with what a merge holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub(crate) use crate::config::Expectation;
use ttft_model::record::CellKey;
use ttft_results::results::batch::{self, Shape};
use ttft_results::results::slotted::Slotted;

/// Reads a scenario file's matrix the way `bench sweep` would, without a server.
pub fn from_scenario(path: &Path) -> Result<Expectation, crate::config::ConfigError> {
    crate::config::expectation(path)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelCompleteness {
    pub model: String,
    pub expected: usize,
    pub measured: usize,
    pub quality_ok: usize,
    pub staggered_expected: usize,
    pub staggered_measured: usize,
    pub staggered_ok: usize,
    pub missing: Vec<CellKey>,
    /// Present, but no record of the cell passed.
    pub failed: Vec<CellKey>,
    /// Batch cells holding only a partial batch (a sweep killed mid-append), with what it lacks:
    /// not measured, whatever its members say.
    pub partial: Vec<(CellKey, String)>,
    /// Cells in the records that the matrix does not define.
    pub extra: usize,
}

impl ModelCompleteness {
    pub(crate) fn is_complete(&self) -> bool {
        self.missing.is_empty() && self.failed.is_empty() && self.partial.is_empty()
    }

    pub(crate) fn status(&self) -> &'static str {
        if !self.missing.is_empty() || !self.partial.is_empty() {
            "Incomplete"
        } else if !self.failed.is_empty() {
            "Failed cells"
        } else {
            "Complete"
        }
    }
}

/// What the records say about one cell.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CellState {
    Ok,
    Failed,
    /// Only partial batches; what the best of them lacks.
    Partial(String),
}

/// The state of every cell among `records`. A cell is ok when all of its records pass; a batch
/// cell is judged by its batches as units: ok with a complete passing batch, failed with only
/// complete failing ones, partial with nothing but partial batches.
fn cell_states<T: Slotted>(records: &[T]) -> BTreeMap<&CellKey, CellState> {
    let mut states: BTreeMap<&CellKey, CellState> = BTreeMap::new();
    for r in records.iter().filter(|r| !r.in_batch()) {
        let state = states.entry(r.cell()).or_insert(CellState::Ok);
        if !r.is_good() {
            *state = CellState::Failed;
        }
    }
    let rank = |s: &CellState| match s {
        CellState::Ok => 2,
        CellState::Failed => 1,
        CellState::Partial(_) => 0,
    };
    for b in batch::batch_records(records) {
        let cell = b[0].cell();
        let shape = Shape::of(&b);
        let state = match (shape.is_complete(), b.iter().all(|r| r.is_good())) {
            (true, true) => CellState::Ok,
            (true, false) => CellState::Failed,
            (false, _) => CellState::Partial(format!("partial batch: {}", shape.gaps().join(", "))),
        };
        let slot = states.entry(cell).or_insert_with(|| state.clone());
        if rank(&state) > rank(slot) {
            *slot = state;
        }
    }
    states
}

/// Per model (the scenario's, or every model in the records), measured vs expected cells. A cell is
/// measured when any record has its key (a batch cell: when it holds a complete batch); it is ok
/// when all of its records pass.
pub fn completeness<T: Slotted>(exp: &Expectation, records: &[T]) -> Vec<ModelCompleteness> {
    let present = cell_states(records);
    let models: BTreeSet<String> = match &exp.model {
        Some(m) => BTreeSet::from([m.clone()]),
        None => records.iter().map(|r| r.cell().model.clone()).collect(),
    };
    let mut out = Vec::new();
    for model in models {
        let cells = exp.matrix.cells(&model);
        let expected: BTreeSet<&CellKey> = cells.iter().collect();
        let mut c = ModelCompleteness { model: model.clone(), ..Default::default() };
        for cell in &cells {
            let stag = cell.scenario.is_staggered();
            *(if stag { &mut c.staggered_expected } else { &mut c.expected }) += 1;
            match present.get(cell) {
                None => c.missing.push(cell.clone()),
                Some(CellState::Partial(why)) => c.partial.push((cell.clone(), why.clone())),
                Some(state) => {
                    *(if stag { &mut c.staggered_measured } else { &mut c.measured }) += 1;
                    if *state == CellState::Ok {
                        *(if stag { &mut c.staggered_ok } else { &mut c.quality_ok }) += 1;
                    } else {
                        c.failed.push(cell.clone());
                    }
                }
            }
        }
        c.extra = present.keys().filter(|k| k.model == model && !expected.contains(*k)).count();
        out.push(c);
    }
    out
}

/// When the inputs are shards of one sharded sweep (their run.json says so), the shard that should
/// have produced the missing cells, named so its run can be found or finished.
pub(crate) fn missing_shards(
    exp: &Expectation,
    rows: &[ModelCompleteness],
    run_meta: &[&serde_json::Value],
) -> String {
    let (count, present) = match crate::shard::shards_in(run_meta) {
        Ok(Some(found)) => found,
        Ok(None) => return String::new(),
        Err(why) => return format!("\nshards not named: {why}\n"),
    };
    let mut s = String::new();
    for row in rows {
        let mut missing = row.missing.clone();
        missing.extend(row.partial.iter().map(|(cell, _)| cell.clone()));
        if !missing.is_empty() {
            s.push_str(&crate::shard::describe_missing(&exp.matrix, count, &present, &missing));
        }
    }
    if s.is_empty() { s } else { format!("\n{s}") }
}

/// "m cold/cold streaming 2048 b1 run 2".
pub(crate) fn cell_label(c: &CellKey) -> String {
    format!("{} run {}", c.merge_label(), c.run)
}

/// The completeness table (markdown, as the origin's crash report had it) and the missing and
/// failed cells.
pub(crate) fn render(rows: &[ModelCompleteness]) -> String {
    let mut t = crate::output::table(
        crate::output::TableStyle::Markdown,
        &["Model", "Total", "Quality OK", "Staggered", "Status"],
        1,
    );
    for c in rows {
        t.add_row(vec![
            c.model.clone(),
            format!("{}/{}", c.measured, c.expected),
            format!("{}/{}", c.quality_ok, c.expected),
            format!("{}/{}", c.staggered_measured, c.staggered_expected),
            c.status().to_string(),
        ]);
    }
    let mut s = crate::output::table_text(t);
    for c in rows {
        if c.extra > 0 {
            s.push_str(&format!("\n{}: {} cells outside the expected matrix\n", c.model, c.extra));
        }
        for (what, cells) in [("missing", &c.missing), ("failed (no passing record)", &c.failed)] {
            if !cells.is_empty() {
                s.push_str(&format!("\n{what} ({}):\n", cells.len()));
                for cell in cells {
                    s.push_str(&format!("  {}\n", cell_label(cell)));
                }
            }
        }
        if !c.partial.is_empty() {
            s.push_str(&format!("\nnot measured whole ({}):\n", c.partial.len()));
            for (cell, why) in &c.partial {
                s.push_str(&format!("  {} ({why})\n", cell_label(cell)));
            }
        }
    }
    s
}
