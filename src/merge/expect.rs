//! `--expect`: the cells a scenario file defines, compared with what a merge holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub use crate::config::Expectation;
use crate::record::{CellKey, Record, Scenario};

/// Reads a scenario file's matrix the way `bench sweep` would, without a server.
pub fn from_scenario(path: &Path) -> Result<Expectation, String> {
    crate::config::expectation(path).map_err(|e| e.to_string())
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
    /// Cells in the records that the matrix does not define.
    pub extra: usize,
}

impl ModelCompleteness {
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty() && self.failed.is_empty()
    }

    pub fn status(&self) -> &'static str {
        if !self.missing.is_empty() {
            "Incomplete"
        } else if !self.failed.is_empty() {
            "Failed cells"
        } else {
            "Complete"
        }
    }
}

fn is_staggered(cell: &CellKey) -> bool {
    matches!(cell.scenario, Scenario::StaggeredBatched | Scenario::StaggeredSequential)
}

/// Per model (the scenario's, or every model in the records), measured vs expected cells. A cell is
/// measured when any record has its key; it is ok when all of its records pass.
pub fn completeness(exp: &Expectation, records: &[Record]) -> Vec<ModelCompleteness> {
    let mut present: BTreeMap<&CellKey, bool> = BTreeMap::new();
    for r in records {
        let ok = present.entry(r.cell()).or_insert(true);
        *ok &= r.is_good();
    }
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
            let stag = is_staggered(cell);
            *(if stag { &mut c.staggered_expected } else { &mut c.expected }) += 1;
            match present.get(cell) {
                None => c.missing.push(cell.clone()),
                Some(ok) => {
                    *(if stag { &mut c.staggered_measured } else { &mut c.measured }) += 1;
                    if *ok {
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

pub fn cell_label(c: &CellKey) -> String {
    format!(
        "{} {}/{} {} {} b{} run {}",
        c.model,
        c.scenario.as_str(),
        c.cache_state.as_str(),
        c.mode.as_str(),
        c.context_tokens,
        c.batch_size,
        c.run
    )
}

/// The completeness table (markdown, as the origin's crash report had it) and the missing and
/// failed cells.
pub fn render(rows: &[ModelCompleteness]) -> String {
    let mut s = String::from("| Model | Total | Quality OK | Staggered | Status |\n");
    s.push_str("|-------|-------|-----------|-----------|--------|\n");
    for c in rows {
        s.push_str(&format!(
            "| {} | {}/{} | {}/{} | {}/{} | {} |\n",
            c.model,
            c.measured,
            c.expected,
            c.quality_ok,
            c.expected,
            c.staggered_measured,
            c.staggered_expected,
            c.status()
        ));
    }
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
    }
    s
}
