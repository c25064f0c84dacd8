//! The soak's board: iterations done of those planned, whether the server stayed up (crashes of
//! the server bench started) and whether it stayed correct (answers that differ from the serial
//! reference), then the last iterations one per row.

use std::collections::BTreeMap;

use super::{Board, Event, Sheet, Table, ms};
use ttft_model::record::{QualityCode, Record, Scenario};
use ttft_model::stats::Samples;

/// Iterations shown as rows (the latest).
const ROWS: usize = 12;

#[derive(Default)]
struct Iteration {
    requests: usize,
    passed: usize,
    mismatched: usize,
    ttft_ms: Vec<f64>,
}

pub(crate) struct SoakBoard {
    planned: u32,
    crashes: u32,
    iterations: BTreeMap<u32, Iteration>,
}

impl SoakBoard {
    pub(crate) fn new(planned: u32) -> SoakBoard {
        SoakBoard { planned, crashes: 0, iterations: BTreeMap::new() }
    }
}

impl Board for SoakBoard {
    fn apply(&mut self, event: &Event) {
        match event {
            Event::Crashes(n) => self.crashes = *n,
            Event::Record(r) => {
                let Record::Measurement(m) = r.as_ref() else { return };
                if m.cell.scenario != Scenario::Soak {
                    return;
                }
                let it = self.iterations.entry(m.cell.run).or_default();
                it.requests += 1;
                let good = r.is_good();
                it.passed += usize::from(good);
                it.mismatched +=
                    usize::from(m.quality_flags.iter().any(|f| f.flag == QualityCode::OutputMismatch));
                if good {
                    it.ttft_ms.extend(m.ttft_ms);
                }
            }
            _ => {}
        }
    }

    fn sheet(&self) -> Sheet {
        let requests: usize = self.iterations.values().map(|i| i.requests).sum();
        let passed: usize = self.iterations.values().map(|i| i.passed).sum();
        let mismatches: usize = self.iterations.values().map(|i| i.mismatched).sum();
        let lines = vec![
            format!("iterations: {} of {}", self.iterations.len(), self.planned),
            format!("requests: {requests}, passed {passed}, failed {}", requests - passed),
            match self.crashes {
                0 => "crash-free so far".to_string(),
                n => format!("server crashes so far: {n}"),
            },
            format!("mismatches (answers unlike the serial reference): {mismatches}"),
        ];
        let mut table = Table::new(&["iteration", "requests", "passed", "mismatched", "TTFT p50 ms"]);
        let skip = self.iterations.len().saturating_sub(ROWS);
        for (n, it) in self.iterations.iter().skip(skip) {
            table.rows.push(vec![
                n.to_string(),
                it.requests.to_string(),
                it.passed.to_string(),
                it.mismatched.to_string(),
                ms(Samples::new(it.ttft_ms.iter().copied()).median()),
            ]);
        }
        Sheet { lines, table: Some(table) }
    }
}
