//! Sharded sweeps: `bench sweep --shard K/N` measures one deterministic slice of the matrix, so an
//! existing scheduler (a Kubernetes Indexed Job, a Slurm job array: deploy/) can run N copies of
//! the sweep and `bench merge` puts them back together (deploy/kubernetes/README.md).
//!
//! The slice is a pure function of the matrix and N, never of the machine, the server or the
//! clock, so every shard computes the same partition on its own and `bench merge --expect` can
//! recompute it to say which shard a missing cell belongs to. The unit of the partition is a
//! matrix point with all its runs (the runs of a cell are taken back to back on one server, as in
//! an unsharded sweep, so a run-to-run spread never mixes machines); a concurrent batch is one cell
//! already; the staggered pairs share one calibration and are one unit. Units are weighed with the
//! cost model of `cost` at fixed nominal rates (the calibrated rates differ per machine, and the
//! partition must not), then dealt longest first, each to the least loaded shard; each shard runs
//! its cells in the unsharded order.

use std::collections::BTreeMap;

use crate::config::Shard;
use crate::cost::{self, ServerRates};
use crate::exit::Failure;
use ttft_model::record::{CacheState, CellKey, Mode};
use ttft_results::plan::Matrix;

/// The partition rule's name, recorded in run.json: a different rule is a different partition.
pub(crate) const RULE: &str = "points-by-nominal-cost-v1";
/// `RULE` under `--reuse-primes`: the cache states of a point's session lifecycles are one unit.
pub const RULE_LIFECYCLES: &str = "points-by-nominal-cost-v1+lifecycles";

/// Where `--shard auto` reads N when the scheduler does not say it (a Kubernetes Indexed Job's
/// pods are not told the Job's `completions`).
pub(crate) const COUNT_ENV: &str = "TTFT_BENCH_SHARD_COUNT";

/// Which slice a sweep measures (1-based index), and where that was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    pub index: u32,
    pub count: u32,
    /// `--shard 2/4`, `JOB_COMPLETION_INDEX=1, TTFT_BENCH_SHARD_COUNT=4`, ...: named in errors and
    /// run.json.
    pub origin: String,
}

/// A shard that cannot be used: exit 2, naming the flag or the environment variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("--shard {0:?}: expected K/N with 1 <= K <= N (e.g. 3/4), or auto")]
    Syntax(String),
    #[error("{0}")]
    Flags(String),
    #[error("--shard auto: {0}")]
    Environment(String),
    #[error(
        "{origin}: the matrix has {units} units to share out ({unit} with all its runs; the staggered \
         pairs together), fewer than {count} shards: use at most {units}"
    )]
    TooMany { origin: String, units: usize, count: u32, unit: &'static str },
}

impl From<ShardError> for Failure {
    fn from(e: ShardError) -> Failure {
        Failure::usage(e.to_string())
    }
}

/// A group of cells that always lands in one shard.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    /// Positions in `Matrix::cells` order.
    pub cells: Vec<usize>,
    pub cost: f64,
}

/// Fixed rates for weighing cells: an 8B-class model on one datacenter GPU, about (46 ms + 64
/// tokens of decode) at 1K and 2.4 s of prefill at 32K. Only the ratios matter.
fn nominal_rates() -> ServerRates {
    ServerRates {
        prefill_s_per_token: 4.0e-5,
        prefill_s_per_token2: 1.0e-9,
        decode_tps: 150.0,
        overhead_s: 0.05,
        probe_s: 0.0,
        source: "nominal".into(),
    }
}

/// What the weights assume each session sends (the partition must not depend on a setting the
/// scenario file can leave out): 64 output tokens, the origin's three-turn conversation, no pause.
const NOMINAL_SESSION: cost::Session = cost::Session { output_tokens: 64, turns: 3, think_s: 0.0 };

/// The nominal seconds of one cell: `cost`'s model (`cost::cell_work_s`) at the nominal rates and
/// session, without cooldowns (the same before every cell).
pub fn cell_cost(cell: &CellKey) -> f64 {
    cost::cell_work_s(cell, &NOMINAL_SESSION, &nominal_rates())
}

/// The matrix's units, in order of their first cell.
pub fn units(matrix: &Matrix) -> Vec<Unit> {
    // The model does not change the partition: any name gives the same cells in the same order.
    let cells = matrix.cells("");
    let mut by_point: BTreeMap<(bool, CacheState, Mode, u32, u32), usize> = BTreeMap::new();
    let mut units: Vec<Unit> = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        let key = if cell.scenario.is_staggered() {
            (true, CacheState::Cold, Mode::Streaming, 0, 0)
        } else if matrix.reuse_primes && ttft_results::plan::lifecycle_key(cell).is_some() {
            // A session lifecycle measures every cache state of its point: one shard has them all.
            (false, CacheState::Cold, cell.mode, cell.context_tokens, cell.batch_size)
        } else {
            (false, cell.cache_state, cell.mode, cell.context_tokens, cell.batch_size)
        };
        let at = *by_point.entry(key).or_insert_with(|| {
            units.push(Unit { cells: Vec::new(), cost: 0.0 });
            units.len() - 1
        });
        units[at].cells.push(i);
        units[at].cost += cell_cost(cell);
    }
    units
}

/// The shard (1-based) of every unit: longest first, each to the least loaded shard (ties to the
/// earlier unit and the lower shard), so the result depends on nothing but the units and `count`.
pub(crate) fn assign(units: &[Unit], count: u32) -> Vec<u32> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| units[b].cost.total_cmp(&units[a].cost).then(a.cmp(&b)));
    let mut load = vec![0.0f64; count.max(1) as usize];
    let mut shard_of = vec![1u32; units.len()];
    for u in order {
        let k = (0..load.len()).min_by(|&i, &j| load[i].total_cmp(&load[j]).then(i.cmp(&j))).unwrap_or(0);
        load[k] += units[u].cost;
        shard_of[u] = k as u32 + 1;
    }
    shard_of
}

/// The shard (1-based) of every cell of `matrix.cells(..)`, by position.
pub(crate) fn shard_of_cells(matrix: &Matrix, count: u32) -> Vec<u32> {
    let units = units(matrix);
    let assigned = assign(&units, count);
    let mut out = vec![1u32; matrix.cell_count()];
    for (unit, shard) in units.iter().zip(assigned) {
        for &i in &unit.cells {
            if let Some(slot) = out.get_mut(i) {
                *slot = shard;
            }
        }
    }
    out
}

/// The run.json record of shard `spec`, after checking the matrix can fill every shard (a shard
/// with nothing to measure would look the same as one that never ran).
pub fn plan(matrix: &Matrix, spec: &ShardSpec) -> Result<Shard, ShardError> {
    let units = units(matrix);
    if spec.count as usize > units.len() {
        return Err(ShardError::TooMany {
            origin: spec.origin.clone(),
            units: units.len(),
            count: spec.count,
            unit: if matrix.reuse_primes {
                "a context, mode and batch size, at batch 1 with all its cache states,"
            } else {
                "a context, cache state, mode and batch size"
            },
        });
    }
    let assigned = assign(&units, spec.count);
    let total: f64 = units.iter().map(|u| u.cost).sum();
    let mine: Vec<&Unit> =
        units.iter().zip(&assigned).filter(|(_, k)| **k == spec.index).map(|(u, _)| u).collect();
    let cost: f64 = mine.iter().map(|u| u.cost).sum();
    Ok(Shard {
        index: spec.index,
        count: spec.count,
        origin: spec.origin.clone(),
        rule: if matrix.reuse_primes { RULE_LIFECYCLES } else { RULE }.to_string(),
        units: mine.len(),
        cells: mine.iter().map(|u| u.cells.len()).sum(),
        cost_share: if total > 0.0 { cost / total } else { 0.0 },
    })
}

/// The cells a sweep measures, in the unsharded order: all of them, or its shard's.
pub fn cells(matrix: &Matrix, model: &str, shard: Option<&Shard>) -> Vec<CellKey> {
    let all = matrix.cells(model);
    let Some(shard) = shard else { return all };
    let of = shard_of_cells(matrix, shard.count);
    all.into_iter().zip(of).filter(|(_, k)| *k == shard.index).map(|(c, _)| c).collect()
}

/// The run directory name of a shard: a name shared by every shard of a job (one `--run-id` in a
/// manifest) still gives each its own directory on a shared volume.
pub fn run_id(base: &str, spec: &ShardSpec) -> String {
    format!("{base}-shard{}of{}", spec.index, spec.count)
}

/// The environment as `resolve` sees it (a closure, so tests need not touch the process's).
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `--shard K/N` or `--shard auto` (with `--shard-count N`) to a shard, or None when unsharded.
pub fn resolve(
    shard: Option<&str>,
    shard_count: Option<u32>,
    env: Env,
) -> Result<Option<ShardSpec>, ShardError> {
    let Some(shard) = shard.map(str::trim) else {
        return match shard_count {
            Some(_) => Err(ShardError::Flags("--shard-count is only read with --shard auto".into())),
            None => Ok(None),
        };
    };
    if shard == "auto" {
        return auto(shard_count, env).map(Some);
    }
    let syntax = || ShardError::Syntax(shard.to_string());
    let (k, n) = shard.split_once('/').ok_or_else(syntax)?;
    let (index, count): (u32, u32) =
        (k.trim().parse().map_err(|_| syntax())?, n.trim().parse().map_err(|_| syntax())?);
    if count == 0 || index == 0 || index > count {
        return Err(syntax());
    }
    if let Some(c) = shard_count.filter(|&c| c != count) {
        return Err(ShardError::Flags(format!(
            "--shard {shard} says {count} shards but --shard-count says {c}"
        )));
    }
    Ok(Some(ShardSpec { index, count, origin: format!("--shard {index}/{count}") }))
}

fn number(env: Env, var: &str) -> Result<Option<u64>, ShardError> {
    match env(var) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ShardError::Environment(format!("{var}={v:?} is not a non-negative integer"))),
    }
}

fn auto(shard_count: Option<u32>, env: Env) -> Result<ShardSpec, ShardError> {
    let k8s = number(env, "JOB_COMPLETION_INDEX")?;
    let slurm = number(env, "SLURM_ARRAY_TASK_ID")?;
    match (k8s, slurm) {
        (Some(_), Some(_)) => Err(ShardError::Environment(
            "both JOB_COMPLETION_INDEX (Kubernetes) and SLURM_ARRAY_TASK_ID (Slurm) are set: give --shard K/N".into(),
        )),
        (None, None) => Err(ShardError::Environment(
            "neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor SLURM_ARRAY_TASK_ID (a Slurm job \
             array) is set: give --shard K/N"
                .into(),
        )),
        (Some(index), None) => kubernetes(index, shard_count, env),
        (None, Some(id)) => slurm_array(id, shard_count, env),
    }
}

/// N from `--shard-count`, else `TTFT_BENCH_SHARD_COUNT`; None when neither says.
fn flag_count(shard_count: Option<u32>, env: Env) -> Result<Option<(u32, String)>, ShardError> {
    if let Some(n) = shard_count {
        return Ok(Some((n, format!("--shard-count {n}"))));
    }
    match number(env, COUNT_ENV)? {
        None => Ok(None),
        Some(n) => {
            let n = u32::try_from(n)
                .map_err(|_| ShardError::Environment(format!("{COUNT_ENV}={n} is too large")))?;
            Ok(Some((n, format!("{COUNT_ENV}={n}"))))
        }
    }
}

/// An Indexed Job's pods see their 0-based JOB_COMPLETION_INDEX; the Job's `completions` is not in
/// their environment, so `--shard-count` or TTFT_BENCH_SHARD_COUNT must say it.
fn kubernetes(index: u64, shard_count: Option<u32>, env: Env) -> Result<ShardSpec, ShardError> {
    let (count, said) = flag_count(shard_count, env)?.ok_or_else(|| {
        ShardError::Environment(format!(
            "JOB_COMPLETION_INDEX={index} is set but not the number of shards: give --shard-count N or \
             {COUNT_ENV}=N (the Job's spec.completions)"
        ))
    })?;
    if count == 0 || index >= u64::from(count) {
        return Err(ShardError::Environment(format!(
            "JOB_COMPLETION_INDEX={index} is out of range for {said} (0-based indices 0..{}): does the Job's \
             spec.completions match?",
            i64::from(count) - 1
        )));
    }
    let k = index as u32 + 1;
    Ok(ShardSpec { index: k, count, origin: format!("JOB_COMPLETION_INDEX={index}, {said}") })
}

/// A Slurm array task: SLURM_ARRAY_TASK_ID counts from SLURM_ARRAY_TASK_MIN (0 or 1, or anything)
/// in steps of SLURM_ARRAY_TASK_STEP; SLURM_ARRAY_TASK_COUNT tasks in all. Only an evenly spaced
/// array (`--array=0-3`, `--array=1-4`, `--array=0-6:2`) maps to shards.
fn slurm_array(id: u64, shard_count: Option<u32>, env: Env) -> Result<ShardSpec, ShardError> {
    let min = number(env, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let step = number(env, "SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
    let count = match (number(env, "SLURM_ARRAY_TASK_COUNT")?, flag_count(shard_count, env)?) {
        (Some(c), Some((flag, said))) if c != u64::from(flag) => {
            return Err(ShardError::Environment(format!(
                "SLURM_ARRAY_TASK_COUNT={c} but {said}: drop one or make them agree"
            )));
        }
        (Some(c), _) => c,
        (None, Some((flag, _))) => u64::from(flag),
        (None, None) => {
            return Err(ShardError::Environment(format!(
                "SLURM_ARRAY_TASK_ID={id} is set but SLURM_ARRAY_TASK_COUNT is not: give --shard-count N or {COUNT_ENV}=N"
            )));
        }
    };
    if id < min || !(id - min).is_multiple_of(step) {
        return Err(ShardError::Environment(format!(
            "SLURM_ARRAY_TASK_ID={id} is not in the array starting at SLURM_ARRAY_TASK_MIN={min} in steps of {step}"
        )));
    }
    let index = (id - min) / step + 1;
    if let Some(max) = number(env, "SLURM_ARRAY_TASK_MAX")? {
        let span = max.saturating_sub(min) / step + 1;
        if span != count {
            return Err(ShardError::Environment(format!(
                "the array {min}-{max} (step {step}) has {span} tasks but SLURM_ARRAY_TASK_COUNT={count}: use an \
                 evenly spaced --array (e.g. --array=0-{})",
                count.saturating_sub(1)
            )));
        }
    }
    let count = u32::try_from(count)
        .map_err(|_| ShardError::Environment(format!("SLURM_ARRAY_TASK_COUNT={count} is too large")))?;
    if count == 0 || index > u64::from(count) {
        return Err(ShardError::Environment(format!(
            "SLURM_ARRAY_TASK_ID={id} is task {index} of an array of {count}"
        )));
    }
    Ok(ShardSpec {
        index: index as u32,
        count,
        origin: format!(
            "SLURM_ARRAY_TASK_ID={id}, SLURM_ARRAY_TASK_MIN={min}, SLURM_ARRAY_TASK_COUNT={count}"
        ),
    })
}

/// Inputs of one merge that come from two shardings: they cannot be one partition.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("the inputs come from shardings of {first} and {second} shards: merge one sharding")]
pub(crate) struct MixedShardings {
    pub first: u32,
    pub second: u32,
}

/// The shards of the runs behind a merge, from their run.json (`config.shard`): the shard count,
/// and the shard indices present. None when no input was sharded.
pub(crate) fn shards_in(run_meta: &[&serde_json::Value]) -> Result<Option<(u32, Vec<u32>)>, MixedShardings> {
    let mut count: Option<u32> = None;
    let mut present = Vec::new();
    for meta in run_meta {
        let shard = &meta["config"]["shard"];
        let (Some(k), Some(n)) = (shard["index"].as_u64(), shard["count"].as_u64()) else { continue };
        let (k, n) = (k as u32, n as u32);
        match count {
            Some(c) if c != n => return Err(MixedShardings { first: c, second: n }),
            _ => count = Some(n),
        }
        present.push(k);
    }
    present.sort_unstable();
    present.dedup();
    Ok(count.map(|c| (c, present)))
}

/// For `bench merge --expect`: which shard should have produced each missing cell, as lines
/// naming the shard, how many of its cells are missing, and whether its run was among the inputs.
pub fn describe_missing(matrix: &Matrix, count: u32, present: &[u32], missing: &[CellKey]) -> String {
    let model = missing.first().map_or("", |c| c.model.as_str());
    let all = matrix.cells(model);
    let of = shard_of_cells(matrix, count);
    let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
    for cell in missing {
        if let Some(k) = all.iter().position(|c| c == cell).and_then(|i| of.get(i)) {
            *per_shard.entry(*k).or_default() += 1;
        }
    }
    let mut s = String::new();
    for (k, n) in per_shard {
        let why = if present.contains(&k) {
            format!("its run is among the inputs but incomplete: {}", crate::exit::RESUME_ADVICE)
        } else {
            format!("no run of it is among the inputs (a run directory ending in -shard{k}of{count})")
        };
        s.push_str(&format!("missing shard {k}/{count}: {n} cells; {why}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shards weigh each cell as the ETA does (`cost::cell_s`: one model, one hot turn), at the
    /// nominal rates, for a nominal sweep without cooldowns.
    #[test]
    fn cells_are_weighed_by_the_etas_own_model() {
        use clap::Parser;
        let argv = ["bench", "sweep", "--server", "http://x", "--thermal", "off", "--output-tokens", "64"]
            .into_iter()
            .chain(["--turns", "3", "--cache-states", "cold,warm,hot", "--batch-sizes", "1,2"]);
        let config = match crate::command::Cli::parse_from(argv).command {
            crate::command::Command::Sweep(a) => crate::config::resolve(&a).unwrap(),
            _ => unreachable!("parsed a sweep"),
        };
        let rates = nominal_rates();
        let cells = config.matrix().cells("m");
        assert!(cells.iter().any(|c| c.cache_state == CacheState::Hot && c.batch_size == 2), "{cells:?}");
        for cell in cells {
            let eta = cost::cell_s(&cell, &config, &rates);
            assert!(
                (cell_cost(&cell) - eta).abs() < 1e-9 * eta,
                "{cell}: shard {} vs eta {eta}",
                cell_cost(&cell)
            );
        }
    }

    #[test]
    fn inputs_of_two_shardings_are_refused_naming_both_counts() {
        let meta = |k: u32, n: u32| serde_json::json!({"config": {"shard": {"index": k, "count": n}}});
        let (a, b, c) = (meta(1, 4), meta(3, 4), meta(2, 8));
        assert_eq!(shards_in(&[&a, &b]), Ok(Some((4, vec![1, 3]))));
        assert_eq!(shards_in(&[&serde_json::json!({})]), Ok(None));
        let mixed = shards_in(&[&a, &c]).unwrap_err();
        assert_eq!(mixed, MixedShardings { first: 4, second: 8 });
        assert_eq!(mixed.to_string(), "the inputs come from shardings of 4 and 8 shards: merge one sharding");
    }
}
