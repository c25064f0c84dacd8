//! What verify reports: one finding per rule hit, in a stable JSON shape.

use serde::Serialize;

use super::rule::{RuleId, Severity};
use ttft_model::record::CellKey;

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
    pub(crate) fn new(rule: RuleId, file: &str, message: String) -> Finding {
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

    pub(crate) fn at(mut self, run_id: &str, cell: &CellKey) -> Finding {
        self.run_id = Some(run_id.to_string());
        self.cell = Some(cell.clone());
        self
    }

    /// A finding about a whole cell of one input (every run): no single run id.
    pub(crate) fn in_cell(mut self, cell: &CellKey) -> Finding {
        self.run_id = None;
        self.cell = Some(cell.clone());
        self
    }

    pub(crate) fn numbers(mut self, value: f64, limit: f64, unit: &'static str) -> Finding {
        self.value = Some(value);
        self.limit = Some(limit);
        self.unit = Some(unit);
        self
    }

    /// One readable line: severity, rule, where (the cell in `CellKey`'s one label), why.
    pub(crate) fn line(&self) -> String {
        let place = match &self.cell {
            Some(c) => match &self.run_id {
                Some(r) => format!("{c} of {r}"),
                None => format!("{c} in {}", self.file),
            },
            None => self.run_id.as_deref().map_or_else(|| self.file.clone(), |r| format!("run {r}")),
        };
        format!("{:<7} {:<24} {place}: {}", self.severity.label(), self.rule.as_str(), self.message)
    }
}
