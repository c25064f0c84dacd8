//! The load's board: per rate or concurrency level and cache state, the numbers so far, computed
//! by the summary's own code (`summary::run_summary`) from the records written so far, so the
//! view and the final table never disagree on a definition: elapsed of the step, arrivals due by
//! now and requests answered, TTFT p50/p99, the p99 send lag and whether the rate is still
//! honestly offered, and goodput so far.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::summary::{self, RunKey};
use crate::cli::Slo;
use crate::live::{self, Board, Event, Sheet, Step, Table};
use ttft_model::record::{CacheState, Measurement, Record, Scenario};

pub(crate) struct LoadBoard {
    slo: Slo,
    states: Vec<CacheState>,
    steps: Vec<Step>,
    /// Each step's records, without what no statistic of the board reads (the output sample,
    /// the server's payloads): an hour of load is held on the view's thread.
    records: BTreeMap<u32, Vec<Measurement>>,
    /// Each step's summary and the records and step it was computed from: a redraw computes
    /// again only the steps that gained records (a finished step never does), so the view's
    /// work does not grow with the hour of load already shown.
    summaries: RefCell<BTreeMap<u32, (usize, RunKey, summary::RateSummary)>>,
}

impl LoadBoard {
    pub(crate) fn new(slo: Slo, states: Vec<CacheState>) -> LoadBoard {
        LoadBoard { slo, states, steps: Vec::new(), records: BTreeMap::new(), summaries: RefCell::default() }
    }

    /// The summary of `step` over its records so far, computed again only when it gained some
    /// (or the step was announced again otherwise).
    fn summary(&self, step: &Step, records: &[Measurement]) -> summary::RateSummary {
        let key = RunKey {
            run: step.run,
            rate_per_s: step.rate_per_s,
            concurrency: step.concurrency,
            warmup_ms: step.warmup_s * 1000.0,
        };
        let mut cache = self.summaries.borrow_mut();
        if let Some((n, k, s)) = cache.get(&step.run)
            && (*n, *k) == (records.len(), key)
        {
            return s.clone();
        }
        let s = summary::run_summary(records, &key, &self.states, &self.slo);
        cache.insert(step.run, (records.len(), key, s.clone()));
        s
    }

    /// The step of run `run`: as announced, or (a watched run) a bare one from its records.
    fn steps(&self) -> Vec<Step> {
        let mut steps = self.steps.clone();
        for run in self.records.keys() {
            if !steps.iter().any(|s| s.run == *run) {
                steps.push(Step { run: *run, label: format!("run {run}"), ..Default::default() });
            }
        }
        steps.sort_by_key(|s| s.run);
        steps
    }
}

impl Board for LoadBoard {
    fn apply(&mut self, event: &Event) {
        match event {
            Event::Step(step) => {
                self.steps.retain(|s| s.run != step.run);
                self.steps.push(step.clone());
            }
            Event::Record(r) => {
                if let Record::Measurement(m) = r.as_ref()
                    && m.cell.scenario == Scenario::Load
                {
                    let mut kept = (**m).clone();
                    kept.output_sample = String::new();
                    (kept.server_timings, kept.server_stats, kept.server_metrics) = (None, None, None);
                    self.records.entry(m.cell.run).or_default().push(kept);
                }
            }
            _ => {}
        }
    }

    fn sheet(&self) -> Sheet {
        let mut table = Table::new(&[
            "step",
            "state",
            "elapsed",
            "due/answered",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "send lag p99 ms",
            "honest",
            "goodput",
        ]);
        let empty = Vec::new();
        for step in self.steps() {
            let records = self.records.get(&step.run).unwrap_or(&empty);
            let s = self.summary(&step, records);
            let elapsed_s = step.began.map(|b| b.elapsed().as_secs_f64());
            let elapsed = match elapsed_s {
                Some(e) if e < step.duration_s => format!("{e:.0}/{:.0} s", step.duration_s),
                Some(_) => "done".to_string(),
                None => "-".to_string(),
            };
            let honest = match (step.concurrency, s.send_lag_ms.p99) {
                (Some(_), _) => "closed loop".to_string(),
                (None, None) => "-".to_string(),
                (None, Some(_)) if s.honestly_offered => "yes".to_string(),
                (None, Some(p)) => format!("NO: {p:.2} > {:.2}", s.honest_lag_limit_ms),
            };
            // The step's row first ("all"), then its cache states.
            let mut states = s.states.clone();
            states.rotate_right(1);
            for st in &states {
                let due = match (step.concurrency, elapsed_s) {
                    // A closed loop has no schedule: its users send as their answers come.
                    (Some(_), _) => "-".to_string(),
                    (None, Some(e)) => step
                        .arrivals
                        .iter()
                        .filter(|a| a.at_ms <= e * 1000.0 && st.state.is_none_or(|x| a.state == x))
                        .count()
                        .to_string(),
                    (None, None) => "-".to_string(),
                };
                let whole = st.state.is_none();
                table.rows.push(vec![
                    if whole { step.label.clone() } else { String::new() },
                    st.state.map_or("all".to_string(), |x| x.to_string()),
                    if whole { elapsed.clone() } else { String::new() },
                    format!("{due}/{}", st.requests),
                    live::ms(st.ttft_ms.p50),
                    live::p99(st.ttft_ms.p99, st.ttft_ms.n),
                    if whole { live::p99(s.send_lag_ms.p99, s.send_lag_ms.n) } else { String::new() },
                    if whole { honest.clone() } else { String::new() },
                    st.goodput.map_or("-".into(), |g| format!("{:.0}%", g * 100.0)),
                ]);
            }
        }
        let lines = vec![format!(
            "SLO: TTFT <= {} ms from the scheduled send, mean ITL <= {} ms; goodput = requests meeting it / requests so far",
            self.slo.ttft_ms, self.slo.itl_ms
        )];
        Sheet { lines, table: Some(table) }
    }
}
