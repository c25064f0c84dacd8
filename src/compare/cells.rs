//! One candidate against the base, cell by cell: ratio of medians (candidate / base) with its
//! bootstrap interval, per metric, and a verdict that calls a difference only when the interval
//! excludes 1.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::{CellId, CellSamples};
use ttft_model::record::Scenario;
use ttft_model::stats::{self, Ratio};

/// What is compared. Times: lower is better; rates: higher is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Metric {
    TtftMs,
    /// Compared only where a cell has no TTFT (non-streaming).
    E2eMs,
    /// Staggered pairs: user B's first token from user A's send.
    UserBWaitMs,
    /// Concurrent cells: the batches' system tok/s (the only number origin imports keep).
    SystemTps,
    DecodeTps,
}

impl Metric {
    /// In the order a cell's primary (deciding) metric is chosen.
    pub(crate) const ALL: [Metric; 5] =
        [Metric::TtftMs, Metric::E2eMs, Metric::UserBWaitMs, Metric::SystemTps, Metric::DecodeTps];

    /// A short label for tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Metric::TtftMs => "TTFT ms",
            Metric::E2eMs => "E2E ms",
            Metric::UserBWaitMs => "B wait ms",
            Metric::SystemTps => "sys tok/s",
            Metric::DecodeTps => "tok/s",
        }
    }

    pub(crate) fn lower_is_better(self) -> bool {
        matches!(self, Metric::TtftMs | Metric::E2eMs | Metric::UserBWaitMs)
    }

    /// `s` as compare holds a base while the candidate is read: each metric's samples, to their
    /// length, and its counts; what no metric reads (TPOT, the physics' ceilings and floors, where
    /// the inter-token gaps are) let go.
    pub(crate) fn keep_compared(s: CellSamples) -> CellSamples {
        let mut kept = CellSamples {
            tpot: Vec::new(),
            itl_records: Vec::new(),
            ceiling: Vec::new(),
            ttft_floor: Vec::new(),
            ..s
        };
        for samples in
            [&mut kept.ttft, &mut kept.e2e, &mut kept.b_wait, &mut kept.system_tps, &mut kept.decode]
        {
            samples.shrink_to_fit();
        }
        kept
    }

    fn samples(self, s: &CellSamples) -> &[f64] {
        match self {
            Metric::TtftMs => &s.ttft,
            Metric::E2eMs => &s.e2e,
            Metric::UserBWaitMs => &s.b_wait,
            Metric::SystemTps => &s.system_tps,
            Metric::DecodeTps => &s.decode,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// The interval excludes 1 on the better side.
    Faster,
    /// The interval excludes 1 on the worse side.
    Slower,
    /// The interval includes 1.
    NoDifference,
    /// No interval: fewer than `stats::RATIO_CI_MIN_N` usable samples on a side (or a median of 0).
    Insufficient,
}

impl Verdict {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoDifference => "no difference",
            Verdict::Insufficient => "too few samples",
        }
    }
}

/// Usable samples of one side and their median.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Side {
    pub n: usize,
    pub median: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct MetricComparison {
    pub metric: Metric,
    /// "lower" or "higher": which direction is faster.
    pub better: &'static str,
    pub base: Side,
    pub candidate: Side,
    /// median(candidate) / median(base).
    pub ratio: Option<f64>,
    pub ci95_lo: Option<f64>,
    pub ci95_hi: Option<f64>,
    pub verdict: Verdict,
}

impl MetricComparison {
    /// Significantly slower by more than `pct` percent: the whole interval beyond
    /// 1 + pct/100 (times) or below 1 - pct/100 (rates).
    pub(crate) fn regressed(&self, pct: f64) -> bool {
        let f = pct / 100.0;
        match (self.ci95_lo, self.ci95_hi) {
            (Some(lo), Some(_)) if self.metric.lower_is_better() => lo > 1.0 + f,
            (Some(_), Some(hi)) => hi < 1.0 - f,
            _ => false,
        }
    }
}

pub(crate) fn compare_metric(metric: Metric, base: &[f64], candidate: &[f64]) -> MetricComparison {
    let Ratio { ratio, ci95_lo, ci95_hi } = stats::ratio_of_medians(candidate, base);
    let side = |v: &[f64]| Side { n: stats::Samples::new(v.iter().copied()).len(), median: stats::median(v) };
    let verdict = match (ci95_lo, ci95_hi) {
        (Some(lo), Some(_)) if lo > 1.0 => {
            if metric.lower_is_better() {
                Verdict::Slower
            } else {
                Verdict::Faster
            }
        }
        (Some(_), Some(hi)) if hi < 1.0 => {
            if metric.lower_is_better() {
                Verdict::Faster
            } else {
                Verdict::Slower
            }
        }
        (Some(_), Some(_)) => Verdict::NoDifference,
        _ => Verdict::Insufficient,
    };
    MetricComparison {
        metric,
        better: if metric.lower_is_better() { "lower" } else { "higher" },
        base: side(base),
        candidate: side(candidate),
        ratio,
        ci95_lo,
        ci95_hi,
        verdict,
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct CellComparison {
    /// The base's cell (its model name).
    pub cell: CellId,
    /// The candidate's model name for this cell (differs from `cell.model` when cells were
    /// matched without the model).
    pub candidate_model: String,
    /// The metric that decides the cell's verdict: TTFT, else E2E (non-streaming), else user B's
    /// wait (staggered), else system tok/s (batches without per-request data), else decode.
    pub primary: Metric,
    pub verdict: Verdict,
    pub metrics: Vec<MetricComparison>,
}

/// Verdict counts over cells (or over one metric).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Wins {
    pub cells: usize,
    pub faster: usize,
    pub slower: usize,
    pub no_difference: usize,
    pub insufficient: usize,
}

impl Wins {
    fn add(&mut self, v: Verdict) {
        self.cells += 1;
        match v {
            Verdict::Faster => self.faster += 1,
            Verdict::Slower => self.slower += 1,
            Verdict::NoDifference => self.no_difference += 1,
            Verdict::Insufficient => self.insufficient += 1,
        }
    }
}

/// How cells of the two inputs were paired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MatchedBy {
    /// Model, scenario, cache state, mode, context and batch size.
    Cell,
    /// Everything but the model: each input holds one model and the names differ (two builds).
    CellWithoutModel,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Comparison {
    pub matched_by: MatchedBy,
    pub cells: Vec<CellComparison>,
    pub only_in_base: Vec<CellId>,
    pub only_in_candidate: Vec<CellId>,
    /// Over each cell's primary metric.
    pub wins: Wins,
    pub wins_by_metric: BTreeMap<Metric, Wins>,
}

fn models(cells: &BTreeMap<CellId, CellSamples>) -> Vec<&str> {
    let mut m: Vec<&str> = cells.keys().map(|c| c.model.as_str()).collect();
    m.dedup();
    m
}

/// Pairs the cells of `base` and `candidate` (runs pooled) and compares every metric either side
/// measured.
pub(crate) fn compare(
    base: &BTreeMap<CellId, CellSamples>,
    candidate: &BTreeMap<CellId, CellSamples>,
) -> Comparison {
    let (bm, cm) = (models(base), models(candidate));
    let matched_by = if bm.len() == 1 && cm.len() == 1 && bm != cm {
        MatchedBy::CellWithoutModel
    } else {
        MatchedBy::Cell
    };
    let key = |id: &CellId| match matched_by {
        MatchedBy::Cell => id.clone(),
        MatchedBy::CellWithoutModel => CellId { model: String::new(), ..id.clone() },
    };
    let cand: BTreeMap<CellId, (&CellId, &CellSamples)> =
        candidate.iter().map(|(id, s)| (key(id), (id, s))).collect();
    let base_keys: BTreeMap<CellId, &CellId> = base.keys().map(|id| (key(id), id)).collect();
    let mut out = Comparison {
        matched_by,
        cells: Vec::new(),
        only_in_base: Vec::new(),
        only_in_candidate: cand
            .iter()
            .filter(|(k, _)| !base_keys.contains_key(*k))
            .map(|(_, (id, _))| (*id).clone())
            .collect(),
        wins: Wins::default(),
        wins_by_metric: BTreeMap::new(),
    };
    for (id, b) in base {
        let Some((cand_id, c)) = cand.get(&key(id)) else {
            out.only_in_base.push(id.clone());
            continue;
        };
        let cell = compare_cell(id, cand_id, b, c);
        out.wins.add(cell.verdict);
        for m in &cell.metrics {
            out.wins_by_metric.entry(m.metric).or_default().add(m.verdict);
        }
        out.cells.push(cell);
    }
    out
}

fn compare_cell(id: &CellId, cand_id: &CellId, b: &CellSamples, c: &CellSamples) -> CellComparison {
    let any = |m: Metric| !m.samples(b).is_empty() || !m.samples(c).is_empty();
    let wanted = |m: Metric| match m {
        // E2E only stands in where no TTFT was measured (non-streaming).
        Metric::E2eMs => !any(Metric::TtftMs) && !id.scenario.is_staggered(),
        Metric::SystemTps => id.scenario == Scenario::Concurrent,
        Metric::UserBWaitMs => id.scenario.is_staggered(),
        Metric::TtftMs | Metric::DecodeTps => !id.scenario.is_staggered(),
    };
    let metrics: Vec<MetricComparison> = Metric::ALL
        .iter()
        .filter(|&&m| wanted(m) && any(m))
        .map(|&m| compare_metric(m, m.samples(b), m.samples(c)))
        .collect();
    // A cell neither side measured anything usable in still has a row: its primary metric with
    // no samples (too few samples), so failed cells are visible rather than dropped.
    let primary = metrics.first().map_or_else(|| default_primary(id), |m| m.metric);
    let (verdict, metrics) = if metrics.is_empty() {
        let empty = compare_metric(primary, &[], &[]);
        (empty.verdict, vec![empty])
    } else {
        (metrics[0].verdict, metrics)
    };
    CellComparison { cell: id.clone(), candidate_model: cand_id.model.clone(), primary, verdict, metrics }
}

fn default_primary(id: &CellId) -> Metric {
    match id.scenario {
        Scenario::StaggeredBatched | Scenario::StaggeredSequential => Metric::UserBWaitMs,
        _ if id.mode == ttft_model::record::Mode::NonStreaming => Metric::E2eMs,
        _ => Metric::TtftMs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_base_keeps_is_every_sample_a_metric_compares() {
        let full = || CellSamples {
            records: 4,
            quality_ok: 3,
            ttft: vec![1.0, 2.0],
            e2e: vec![3.0],
            decode: vec![4.0, 5.0],
            tpot: vec![6.0],
            itl_records: vec![0, 1],
            ceiling: vec![7.0],
            ttft_floor: vec![8.0],
            system_tps: vec![9.0],
            b_wait: vec![10.0],
            ..CellSamples::default()
        };
        let kept = Metric::keep_compared(full());
        let all = full();
        for m in Metric::ALL {
            assert_eq!(m.samples(&kept), m.samples(&all), "{m:?}");
        }
        assert_eq!((kept.records, kept.quality_ok), (4, 3), "its counts, which failures read");
        assert!(kept.tpot.is_empty() && kept.itl_records.is_empty(), "what no metric reads is let go");
    }

    #[test]
    fn verdicts_follow_the_interval_and_the_direction() {
        let v = |m, b: &[f64], c: &[f64]| compare_metric(m, b, c).verdict;
        let base = [100.0; 5];
        assert_eq!(v(Metric::TtftMs, &base, &[80.0; 5]), Verdict::Faster);
        assert_eq!(v(Metric::TtftMs, &base, &[120.0; 5]), Verdict::Slower);
        assert_eq!(v(Metric::DecodeTps, &base, &[120.0; 5]), Verdict::Faster);
        assert_eq!(v(Metric::DecodeTps, &base, &[80.0; 5]), Verdict::Slower);
        assert_eq!(v(Metric::TtftMs, &[90.0, 100.0, 110.0], &[85.0, 105.0, 115.0]), Verdict::NoDifference);
        assert_eq!(v(Metric::TtftMs, &base, &[80.0]), Verdict::Insufficient);
        assert_eq!(v(Metric::TtftMs, &[], &[80.0; 3]), Verdict::Insufficient);
    }

    #[test]
    fn regression_needs_the_whole_interval_beyond_the_threshold() {
        let c = compare_metric(Metric::TtftMs, &[100.0; 4], &[120.0; 4]);
        assert!(c.regressed(10.0) && c.regressed(0.0) && !c.regressed(25.0));
        let c = compare_metric(Metric::DecodeTps, &[100.0; 4], &[80.0; 4]);
        assert!(c.regressed(10.0) && !c.regressed(30.0));
        let c = compare_metric(Metric::TtftMs, &[100.0; 4], &[80.0; 4]);
        assert!(!c.regressed(0.0), "faster is never a regression");
    }
}
