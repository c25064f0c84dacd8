//! What verify reports: one finding per rule hit, in a stable JSON shape.

use serde::Serialize;

use super::rule::{RuleId, Severity};
use crate::record::CellKey;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub rule: RuleId,
    /// The input the finding comes from.
    pub file: String,
    pub run_id: Option<String>,
    /// The cell (null for findings about a whole run or file).
    pub cell: Option<CellKey>,
    /// The measured number and the limit it was held against, in `unit`.
    pub value: Option<f64>,
    pub limit: Option<f64>,
    pub unit: Option<&'static str>,
    /// Why, with the numbers.
    pub message: String,
}

impl Finding {
    /// A finding of `rule`, at the rule's severity (`rule::rule_ids!`).
    pub fn new(rule: RuleId, file: &str, message: String) -> Finding {
        Finding {
            severity: rule.severity(),
            rule,
            file: file.to_string(),
            run_id: None,
            cell: None,
            value: None,
            limit: None,
            unit: None,
            message,
        }
    }

    pub fn at(mut self, run_id: &str, cell: &CellKey) -> Finding {
        self.run_id = Some(run_id.to_string());
        self.cell = Some(cell.clone());
        self
    }

    /// A finding about a whole cell of one input (every run): no single run id.
    pub fn in_cell(mut self, cell: &CellKey) -> Finding {
        self.run_id = None;
        self.cell = Some(cell.clone());
        self
    }

    pub fn numbers(mut self, value: f64, limit: f64, unit: &'static str) -> Finding {
        self.value = Some(value);
        self.limit = Some(limit);
        self.unit = Some(unit);
        self
    }

    /// One readable line: severity, rule, where, why.
    pub fn line(&self) -> String {
        let place = match &self.cell {
            Some(c) => match &self.run_id {
                Some(r) => format!("{} run {r}", cell_label(c)),
                None => format!("{} in {}", cell_label(c), self.file),
            },
            None => self.run_id.as_deref().map_or_else(|| self.file.clone(), |r| format!("run {r}")),
        };
        format!("{:<7} {:<24} {place}: {}", self.severity.label(), self.rule.as_str(), self.message)
    }
}

/// "gemma-3-12b-it-4bit cold/streaming 4096 tok b1 #2" (the model's last path part only; run 0,
/// used by findings about a whole cell, reads "all runs"); a dataset row's cell names its row
/// ("300 tok row 2"): two rows of one length are two cells.
pub fn cell_label(c: &CellKey) -> String {
    let model = c.model.rsplit('/').next().unwrap_or(&c.model);
    let scenario = match c.scenario.as_str() {
        s if s == c.cache_state.as_str() => s.to_string(),
        s => format!("{s}:{}", c.cache_state.as_str()),
    };
    let run = if c.run == 0 { "all runs".to_string() } else { format!("#{}", c.run) };
    let row = c.dataset_row.map_or_else(String::new, |r| format!(" row {r}"));
    format!("{model} {scenario}/{} {} tok{row} b{} {run}", c.mode.as_str(), c.context_tokens, c.batch_size)
}
