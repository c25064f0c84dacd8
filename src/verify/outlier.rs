//! `run_outlier`: a run that sits far outside its siblings is not a faster machine; it is a
//! different machine, a cache, or a bug (the origin's "paper" run: cold 4K TTFT 3,894 ms among five
//! runs at ~15,400 ms, and 77.7 tok/s decode among runs at ~26).
//!
//! The test cannot be bent by the outlier itself: each value is held against the median and MAD of
//! the OTHER values, z = |x - median| / max(1.4826 x MAD, 10% of median). The 10% floor keeps
//! ordinary run-to-run drift (a reboot, a warmer day: 16,829 ms after a reboot among ~15,400) from
//! being called an outlier when the other runs happen to agree closely; for times, an absolute
//! floor (`ABSOLUTE_FLOOR_MS`) does the same for the few ms a sub-10 ms TTFT moves by itself.
//!
//! - Runs of measurements are compared cell by cell (a run's median per cell), with at least
//!   `MIN_RUNS` runs per cell; a run is flagged when at least two thirds of its testable cells
//!   (and at least two) have z > `Z_LIMIT`: one odd cell is noise, a whole run is not.
//! - Group records (batch avg TTFT, system tok/s, wall) and staggered records (user B's wait from
//!   the wall start) are one number per run already: each record is held against the other runs
//!   of its cell (at least `MIN_SIBLINGS`), and flagged alone, naming its file and run (the origin's
//!   Gemma batch-2 warm 1K record: 798.6 ms beside 1837.6 and 1920.9 ms). A spread needs at least
//!   `MIN_SPREAD_SIBLINGS` others to be estimated: two siblings' MAD is half their distance, so two
//!   runs that happen to agree would make any third look far off (the GPU reference's hot batches
//!   of 4: 26.3 ms beside two runs near 19.3, one member a decode step behind). With fewer others a
//!   record is flagged only when it is also `FEW_SIBLINGS_FACTOR` times off their median.

use std::collections::BTreeMap;

use super::finding::Finding;
use super::judged::Judged;
use super::rule::{Input, RuleId};
use ttft_model::record::{CacheState, CellKey, Mode, Record, Scenario};
use ttft_model::stats;

/// Fewest runs a cell must have before a run of measurements can be judged against the others.
pub(crate) const MIN_RUNS: usize = 4;
/// Fewest other records a group or staggered record is held against.
pub(crate) const MIN_SIBLINGS: usize = 2;
/// Fewest others from which their spread (MAD) is an estimate, as for runs (`MIN_RUNS` - 1).
pub(crate) const MIN_SPREAD_SIBLINGS: usize = MIN_RUNS - 1;
/// Against fewer than `MIN_SPREAD_SIBLINGS` others, how far off their median (this many times, or
/// this share of it) a record must also be: beyond what one server's batches of one cell differ by
/// from run to run (a member a decode step behind another), not a judgement of the spread.
pub(crate) const FEW_SIBLINGS_FACTOR: f64 = 2.0;
pub(crate) const Z_LIMIT: f64 = 3.5;
pub(crate) const RELATIVE_FLOOR: f64 = 0.10;
/// The least spread a time (ms) is held to, however closely the other runs agree: a sub-10 ms TTFT
/// moves by a few ms from scheduling alone (a thread waking, a page fault), so a deviation needs
/// more than `Z_LIMIT` x this many ms to be an outlier. Rates (tok/s) have no absolute floor.
pub(crate) const ABSOLUTE_FLOOR_MS: f64 = 2.0;

/// The absolute floor of `metric`'s spread: `ABSOLUTE_FLOOR_MS` for times, 0 for rates.
pub(crate) fn absolute_floor(metric: &str) -> f64 {
    if unit(metric) == "ms" { ABSOLUTE_FLOOR_MS } else { 0.0 }
}

/// Robust z of `value` against `others`, and the others' median; None without others. The spread
/// is at least `floor` (in the values' unit) and 10% of the median.
pub(crate) fn robust_z(value: f64, others: &[f64], floor: f64) -> Option<(f64, f64)> {
    let med = stats::median(others)?;
    let mad = stats::mad(others).unwrap_or(0.0);
    let scale = (1.4826 * mad).max(RELATIVE_FLOOR * med.abs()).max(floor);
    if scale.is_nan() || scale <= 0.0 {
        return None;
    }
    Some(((value - med).abs() / scale, med))
}

/// `robust_z(values[i], every other value)` for each i, without re-sorting the others for every
/// value (a cell of a 100,000-record file holds hundreds of batches: quadratic work took seconds).
/// The others' median is the sorted values' middle with one position skipped; their deviations
/// from it are one sorted list per distinct median (at most three), again with one position
/// skipped. The numbers are `robust_z`'s to the bit: the same values reach the same formulas.
pub(crate) fn robust_z_each(values: &[f64], floor: f64) -> Vec<Option<(f64, f64)>> {
    let naive = || {
        (0..values.len())
            .map(|i| {
                let others: Vec<f64> =
                    values.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, v)| *v).collect();
                robust_z(values[i], &others, floor)
            })
            .collect()
    };
    let k = values.len();
    if k < 2 || values.iter().any(|v| !v.is_finite()) {
        return naive();
    }
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let sorted: Vec<f64> = order.iter().map(|&i| values[i]).collect();
    let mut position = vec![0; k];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    let medians: Vec<f64> = (0..k).map(|i| median_skipping(&sorted, Some(position[i]))).collect();
    let mut distinct: Vec<u64> = medians.iter().map(|m| m.to_bits()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut out = vec![None; k];
    for bits in distinct {
        let med = f64::from_bits(bits);
        let mut deviations: Vec<f64> =
            values.iter().map(|x| (x - med).abs()).filter(|d| d.is_finite()).collect();
        deviations.sort_by(f64::total_cmp);
        for i in (0..k).filter(|&i| medians[i].to_bits() == bits) {
            let own = (values[i] - med).abs();
            let skip = own.is_finite().then(|| deviations.partition_point(|d| d.total_cmp(&own).is_lt()));
            let left = deviations.len() - usize::from(skip.is_some());
            let mad = if left == 0 { 0.0 } else { median_skipping(&deviations, skip) };
            let scale = (1.4826 * mad).max(RELATIVE_FLOOR * med.abs()).max(floor);
            if scale.is_nan() || scale <= 0.0 {
                continue;
            }
            out[i] = Some(((values[i] - med).abs() / scale, med));
        }
    }
    out
}

/// The type-7 median of sorted `v` with the value at position `skip` left out (`v` keeps at least
/// one other value).
fn median_skipping(v: &[f64], skip: Option<usize>) -> f64 {
    let len = v.len() - usize::from(skip.is_some());
    let at = |r: usize| match skip {
        Some(s) if r >= s => v[r + 1],
        _ => v[r],
    };
    let h = (len - 1) as f64 * 0.5;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(len - 1);
    stats::quantile_sorted(&[at(lo), at(hi)], h - lo as f64).unwrap_or(f64::NAN)
}

pub(crate) fn run_outlier(inputs: &[Input], out: &mut Vec<Finding>) {
    measurement_runs(inputs, out);
    single_records(inputs, out);
}

/// A run: its input file and run id.
type RunKey<'a> = (&'a str, &'a str);

/// A cell without its repetition, borrowed from a record: its fields in `CellKey`'s order, so it
/// sorts as `CellKey { run: 0, .. }` does (a million records are not a million model names copied).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct RunsOfCell<'a> {
    model: &'a str,
    scenario: Scenario,
    cache_state: CacheState,
    mode: Mode,
    context_tokens: u32,
    dataset_row: Option<u32>,
    batch_size: u32,
}

impl<'a> RunsOfCell<'a> {
    fn of(c: &'a CellKey) -> RunsOfCell<'a> {
        let CellKey { model, scenario, cache_state, mode, context_tokens, dataset_row, batch_size, run: _ } =
            c;
        RunsOfCell {
            model,
            scenario: *scenario,
            cache_state: *cache_state,
            mode: *mode,
            context_tokens: *context_tokens,
            dataset_row: *dataset_row,
            batch_size: *batch_size,
        }
    }

    fn key(&self) -> CellKey {
        CellKey {
            model: self.model.to_string(),
            scenario: self.scenario,
            cache_state: self.cache_state,
            mode: self.mode,
            context_tokens: self.context_tokens,
            dataset_row: self.dataset_row,
            batch_size: self.batch_size,
            run: 0,
        }
    }
}

struct Hit {
    cell: CellKey,
    metric: &'static str,
    value: f64,
    median: f64,
    z: f64,
    others: usize,
}

fn unit(metric: &str) -> &'static str {
    match metric {
        "decode_tps" | "system_tps" => "tok/s",
        _ => "ms",
    }
}

/// Run -> values of one cell and metric.
type ValuesByRun<'a> = BTreeMap<RunKey<'a>, Vec<f64>>;

/// (cell without repetition, metric) -> run -> values, of every good measurement.
fn measurement_cells<'a>(inputs: &'a [Input]) -> BTreeMap<(RunsOfCell<'a>, &'static str), ValuesByRun<'a>> {
    let mut cells: BTreeMap<(RunsOfCell<'a>, &'static str), ValuesByRun<'a>> = BTreeMap::new();
    for input in inputs {
        for m in input.records.iter().filter_map(Judged::measured) {
            if m.failed {
                continue;
            }
            let run = (input.file.as_str(), m.run_id());
            for (metric, value) in [("ttft_ms", m.ttft_ms()), ("decode_tps", m.decode_tps())] {
                if let Some(v) = value.filter(|v| v.is_finite() && *v >= 0.0) {
                    let key = (RunsOfCell::of(&m.cell), metric);
                    cells.entry(key).or_default().entry(run).or_default().push(v);
                }
            }
        }
    }
    cells
}

fn measurement_runs(inputs: &[Input], out: &mut Vec<Finding>) {
    let mut tested: BTreeMap<RunKey, usize> = BTreeMap::new();
    let mut hits: BTreeMap<RunKey, Vec<Hit>> = BTreeMap::new();
    for ((cell, metric), runs) in measurement_cells(inputs) {
        if runs.len() < MIN_RUNS {
            continue;
        }
        let medians: Vec<(RunKey, f64)> =
            runs.iter().filter_map(|(r, v)| stats::median(v).map(|m| (*r, m))).collect();
        let values: Vec<f64> = medians.iter().map(|(_, v)| *v).collect();
        for ((run, value), z) in medians.iter().zip(robust_z_each(&values, absolute_floor(metric))) {
            *tested.entry(*run).or_default() += 1;
            let Some((z, median)) = z else { continue };
            if z > Z_LIMIT {
                let others = values.len() - 1;
                let hit = Hit { cell: cell.key(), metric, value: *value, median, z, others };
                hits.entry(*run).or_default().push(hit);
            }
        }
    }
    for (run, run_hits) in hits {
        let n_tested = tested.get(&run).copied().unwrap_or(0);
        if run_hits.len() < 2 || 3 * run_hits.len() < 2 * n_tested {
            continue;
        }
        let Some(worst) = run_hits.iter().max_by(|a, b| a.z.total_cmp(&b.z)) else { continue };
        let message = format!(
            "{} of {n_tested} cells far outside the other {} runs (robust z > {Z_LIMIT}); worst: {} {} {:.1} vs median {:.1} ({:.2}x, z {:.1}). A different machine, a cache or a bug, not a faster server",
            run_hits.len(),
            worst.others,
            worst.cell,
            worst.metric,
            worst.value,
            worst.median,
            worst.value / worst.median,
            worst.z
        );
        let mut f = Finding::new(RuleId::RunOutlier, run.0, message).numbers(
            worst.value,
            worst.median,
            unit(worst.metric),
        );
        f.run_id = Some(run.1.to_string());
        out.push(f);
    }
}

/// One group or staggered record: its file, run id and cell (with its run number).
type RecordKey = (String, String, CellKey);

/// (cell without repetition, metric) -> every good record's value.
fn record_cells(inputs: &[Input]) -> BTreeMap<(CellKey, &'static str), Vec<(RecordKey, f64)>> {
    let mut cells: BTreeMap<(CellKey, &'static str), Vec<(RecordKey, f64)>> = BTreeMap::new();
    for input in inputs {
        for rec in input.records.iter().filter_map(Judged::other).filter(|r| r.is_good()) {
            let metrics: Vec<(&'static str, Option<f64>)> = match rec {
                Record::Group(g) => vec![
                    ("avg_ttft_ms", g.avg_ttft_ms),
                    ("system_tps", g.system_tps),
                    ("wall_ms", Some(g.wall_ms)),
                ],
                Record::Staggered(s) => {
                    vec![("user_b_ttft_from_wall_start_ms", s.user_b_ttft_from_wall_start_ms)]
                }
                Record::Measurement(_) => continue,
            };
            let key = CellKey { run: 0, ..rec.cell().clone() };
            let id: RecordKey = (input.file.clone(), rec.run_id().to_string(), rec.cell().clone());
            for (metric, value) in metrics {
                if let Some(v) = value.filter(|v| v.is_finite() && *v > 0.0) {
                    cells.entry((key.clone(), metric)).or_default().push((id.clone(), v));
                }
            }
        }
    }
    cells
}

/// Whether `value` is at least `FEW_SIBLINGS_FACTOR` times above or below `median`.
fn far_off(value: f64, median: f64) -> bool {
    value >= FEW_SIBLINGS_FACTOR * median || value * FEW_SIBLINGS_FACTOR <= median
}

fn single_records(inputs: &[Input], out: &mut Vec<Finding>) {
    let mut hits: BTreeMap<RecordKey, Vec<Hit>> = BTreeMap::new();
    for ((cell, metric), values) in record_cells(inputs) {
        if values.len() < MIN_SIBLINGS + 1 {
            continue;
        }
        let numbers: Vec<f64> = values.iter().map(|(_, v)| *v).collect();
        for ((id, value), z) in values.iter().zip(robust_z_each(&numbers, absolute_floor(metric))) {
            let Some((z, median)) = z else { continue };
            let others = values.len() - 1;
            if z > Z_LIMIT && (others >= MIN_SPREAD_SIBLINGS || far_off(*value, median)) {
                let hit = Hit { cell: cell.clone(), metric, value: *value, median, z, others };
                hits.entry(id.clone()).or_default().push(hit);
            }
        }
    }
    for ((file, run_id, cell), record_hits) in hits {
        let Some(worst) = record_hits.iter().max_by(|a, b| a.z.total_cmp(&b.z)) else { continue };
        let also: Vec<&str> =
            record_hits.iter().filter(|h| h.metric != worst.metric).map(|h| h.metric).collect();
        let what = if cell.scenario == Scenario::Concurrent { "batch" } else { "staggered pair" };
        let few = if worst.others < MIN_SPREAD_SIBLINGS {
            format!(
                "; {} others give no estimate of a spread, so it counts only at {FEW_SIBLINGS_FACTOR}x off",
                worst.others
            )
        } else {
            String::new()
        };
        let message = format!(
            "{what} {} {:.1} in {file} vs median {:.1} of the other {} records of this cell ({:.2}x, robust z {:.1} > {Z_LIMIT}{few}){}. A different machine, a cache or a bug, not a faster server",
            worst.metric,
            worst.value,
            worst.median,
            worst.others,
            worst.value / worst.median,
            worst.z,
            if also.is_empty() { String::new() } else { format!("; also {}", also.join(", ")) },
        );
        let f = Finding::new(RuleId::RunOutlier, &file, message).at(&run_id, &cell);
        out.push(f.numbers(worst.value, worst.median, unit(worst.metric)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{CacheState, GroupRecord, Measurement, Scenario};

    fn runs(ttfts: &[f64]) -> Vec<Record> {
        let mut out = Vec::new();
        for (i, t) in ttfts.iter().enumerate() {
            for (ctx, scale) in [(1024, 0.25), (4096, 1.0)] {
                let mut m =
                    Measurement { run_id: format!("r{i}"), ttft_ms: Some(t * scale), ..Default::default() };
                m.cell.cache_state = CacheState::Cold;
                m.cell.context_tokens = ctx;
                out.push(Record::Measurement(Box::new(m)));
            }
        }
        out
    }

    fn judged(records: Vec<Record>) -> Vec<Judged> {
        records.into_iter().map(|r| super::super::records::kept(r, false, Vec::new())).collect()
    }

    fn flagged(records: Vec<Record>) -> Vec<String> {
        let records = judged(records);
        let mut out = Vec::new();
        run_outlier(&[Input { file: "f".into(), records: &records }], &mut out);
        out.into_iter().filter_map(|f| f.run_id).collect()
    }

    #[test]
    fn the_paper_run_is_flagged_and_the_post_reboot_run_is_not() {
        let flagged = flagged(runs(&[16016.0, 15269.0, 3894.0, 15407.0, 15394.0, 16829.0]));
        assert_eq!(flagged, vec!["r2".to_string()], "the post-reboot 16,829 ms run is drift, not an outlier");
    }

    #[test]
    fn too_few_runs_or_ordinary_spread_flag_nothing() {
        assert!(flagged(runs(&[16016.0, 3894.0, 15407.0])).is_empty(), "three runs cannot outvote one");
        assert!(
            flagged(runs(&[15000.0, 15000.0, 15000.0, 16400.0])).is_empty(),
            "9% off identical runs is drift"
        );
        assert_eq!(flagged(runs(&[15000.0, 15000.0, 15000.0, 30000.0])), vec!["r3".to_string()]);
    }

    fn groups(avg_ttft: &[f64]) -> Vec<Record> {
        avg_ttft
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut g = GroupRecord {
                    run_id: "origin".into(),
                    avg_ttft_ms: Some(*t),
                    wall_ms: 5000.0,
                    system_tps: Some(23.0),
                    requests_ok: 2,
                    ..Default::default()
                };
                g.cell.scenario = Scenario::Concurrent;
                g.cell.batch_size = 2;
                g.cell.run = i as u32 + 1;
                Record::Group(Box::new(g))
            })
            .collect()
    }

    #[test]
    fn a_batch_far_from_its_two_siblings_is_flagged_alone() {
        let records = judged(groups(&[1837.6, 798.6, 1920.9]));
        let mut out = Vec::new();
        run_outlier(&[Input { file: "gemma.json".into(), records: &records }], &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].cell.as_ref().map(|c| c.run), Some(2));
        assert_eq!(out[0].run_id.as_deref(), Some("origin"));
        assert!(
            out[0].message.contains("avg_ttft_ms 798.6") && out[0].message.contains("gemma.json"),
            "{}",
            out[0].message
        );
        // Ordinary spread among three runs is not an outlier; two runs have no verdict.
        assert!(flagged(groups(&[1837.6, 1500.0, 1920.9])).is_empty());
        assert!(flagged(groups(&[1837.6, 798.6])).is_empty());
    }

    #[test]
    fn two_siblings_judge_no_spread_and_flag_only_a_twofold_gap() {
        // The GPU reference's hot batch of 4 (26.3 ms beside two runs near 19.3; here 27.0, z 3.9 by the
        // 10% floor alone) is one member a decode step behind, not another machine.
        assert!(flagged(groups(&[19.1, 27.0, 19.5])).is_empty());
        assert_eq!(flagged(groups(&[19.1, 40.0, 19.5])).len(), 1, "twice the others' median");
        // With three siblings the spread is estimated and the same gap is judged by it.
        assert_eq!(flagged(groups(&[19.1, 27.0, 19.5, 19.3])).len(), 1);
    }

    #[test]
    fn robust_z_each_is_robust_z_against_the_others_to_the_bit() {
        let mut rng = stats::Rng::new(5);
        for case in 0..400 {
            let k = 1 + rng.below(30);
            let floor = [0.0, ABSOLUTE_FLOOR_MS][case % 2];
            let values: Vec<f64> = (0..k)
                .map(|_| match case % 6 {
                    0 => rng.below(4) as f64,
                    1 => 100.0 + rng.below(3) as f64 * 0.5,
                    2 => rng.unit() * 1e4,
                    3 => {
                        if rng.below(4) == 0 {
                            1e308
                        } else {
                            rng.unit()
                        }
                    }
                    4 => [0.0, -0.0, 1.0, 2.0][rng.below(4)],
                    // Deviations that overflow (dropped as not finite, as `stats` drops them).
                    _ => [f64::MAX, -f64::MAX, 1.0, 1.7e308][rng.below(4)],
                })
                .collect();
            let naive: Vec<Option<(u64, u64)>> = (0..k)
                .map(|i| {
                    let others: Vec<f64> =
                        values.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, v)| *v).collect();
                    robust_z(values[i], &others, floor).map(|(z, m)| (z.to_bits(), m.to_bits()))
                })
                .collect();
            let fast: Vec<Option<(u64, u64)>> = robust_z_each(&values, floor)
                .into_iter()
                .map(|r| r.map(|(z, m)| (z.to_bits(), m.to_bits())))
                .collect();
            assert_eq!(fast, naive, "{values:?}");
        }
    }

    #[test]
    fn robust_z_ignores_the_value_itself() {
        let (z, med) = robust_z(798.6, &[1837.6, 1920.9], ABSOLUTE_FLOOR_MS).unwrap_or((0.0, 0.0));
        assert!((med - 1879.25).abs() < 1e-9);
        // MAD 41.65 x 1.4826 = 61.8 < 10% of the median (187.9): the floor is the scale.
        assert!((z - (1879.25 - 798.6) / 187.925).abs() < 1e-9, "{z}");
        assert_eq!(robust_z(1.0, &[], 0.0), None);
        assert_eq!(robust_z(1.0, &[0.0, 0.0], 0.0), None, "no scale, no verdict");
    }

    #[test]
    fn a_few_ms_on_a_sub_10_ms_ttft_is_jitter_not_an_outlier() {
        // Sub-10 ms TTFTs that agree to a tenth of a ms: a run 4 ms slower in every cell is a
        // thread waking late, not another machine (`--strict` must not fail such a run).
        assert!(flagged(runs(&[6.0, 6.1, 6.0, 6.1, 10.0])).is_empty());
        // A time far past the floor still is one.
        assert_eq!(flagged(runs(&[6.0, 6.1, 6.0, 6.1, 60.0])), vec!["r4".to_string()]);
        // Rates have no absolute floor: the relative one alone holds them.
        assert_eq!(absolute_floor("decode_tps"), 0.0);
        assert_eq!(absolute_floor("ttft_ms"), ABSOLUTE_FLOOR_MS);
    }
}
