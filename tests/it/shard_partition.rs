//! `--shard`: the partition of the matrix (every cell in exactly one shard, the unsharded order
//! kept, balanced by cost), and reading K/N from flags, Kubernetes and Slurm (pure functions; the
//! sweeps themselves are in shard_sweep.rs).

use std::collections::{BTreeMap, BTreeSet};

use ttft_bench::shard::{self, ShardError, ShardSpec};
use ttft_model::record::{CacheState, CellKey, Mode};
use ttft_results::plan::Matrix;

fn paper() -> Matrix {
    Matrix {
        contexts: vec![1024, 2048, 4096, 8192, 16384, 32768],
        modes: vec![Mode::Streaming, Mode::NonStreaming],
        cache_states: vec![CacheState::Cold, CacheState::Warm, CacheState::Hot],
        batch_sizes: vec![1, 2],
        runs: 3,
        concurrent_max_context: Some(16384),
        staggered: Some((4096, 3)),
        reuse_primes: false,
        dataset_rows: vec![],
    }
}

fn spec(index: u32, count: u32) -> ShardSpec {
    ShardSpec { index, count, origin: format!("--shard {index}/{count}") }
}

fn shard_cells(m: &Matrix, index: u32, count: u32) -> Vec<CellKey> {
    let plan = shard::plan(m, &spec(index, count)).unwrap();
    shard::cells(m, "m", Some(&plan))
}

#[test]
fn every_cell_is_in_exactly_one_shard_in_the_unsharded_order() {
    let m = paper();
    let all = m.cells("m");
    for count in [1, 2, 3, 4, 7, 16] {
        let mut seen: BTreeMap<&CellKey, u32> = BTreeMap::new();
        for k in 1..=count {
            let mine = shard_cells(&m, k, count);
            assert!(!mine.is_empty(), "shard {k}/{count} is empty");
            // A subsequence of the unsharded order.
            let positions: Vec<usize> =
                mine.iter().map(|c| all.iter().position(|a| a == c).unwrap()).collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "shard {k}/{count} out of order");
            for c in &mine {
                let cell = all.iter().find(|a| *a == c).unwrap();
                assert!(seen.insert(cell, k).is_none(), "{c:?} in two shards of {count}");
            }
            let plan = shard::plan(&m, &spec(k, count)).unwrap();
            assert_eq!(plan.cells, mine.len());
        }
        assert_eq!(seen.len(), all.len(), "{count} shards must cover all {} cells", all.len());
    }
}

#[test]
fn with_reuse_primes_a_lifecycles_cache_states_share_a_shard() {
    let m = Matrix { reuse_primes: true, ..paper() };
    for count in [2, 3, 4, 7] {
        let mut shard_of: BTreeMap<(u32, Mode, u32), BTreeSet<u32>> = BTreeMap::new();
        let mut total = 0;
        for k in 1..=count {
            let plan = shard::plan(&m, &spec(k, count)).unwrap();
            assert_eq!(plan.rule, shard::RULE_LIFECYCLES);
            let mine = shard::cells(&m, "m", Some(&plan));
            total += mine.len();
            for c in mine.iter().filter(|c| c.batch_size == 1) {
                shard_of.entry((c.context_tokens, c.mode, c.run)).or_default().insert(k);
            }
        }
        assert_eq!(total, m.cell_count());
        assert!(shard_of.values().all(|s| s.len() == 1), "{count}: {shard_of:?}");
    }
}

#[test]
fn the_runs_of_a_point_and_the_staggered_pairs_stay_together() {
    let m = paper();
    for k in 1..=4 {
        let mine = shard_cells(&m, k, 4);
        let runs: BTreeMap<_, usize> = mine.iter().fold(BTreeMap::new(), |mut acc, c| {
            *acc.entry((c.scenario, c.cache_state, c.mode, c.context_tokens, c.batch_size)).or_default() += 1;
            acc
        });
        // Every point (each staggered scenario too) has all 3 of its runs in this shard.
        for (point, n) in runs {
            assert_eq!(n, 3, "{point:?} split across shards");
        }
    }
}

#[test]
fn shards_are_balanced_by_cost_not_by_count() {
    let m = paper();
    let shares: Vec<f64> = (1..=4).map(|k| shard::plan(&m, &spec(k, 4)).unwrap().cost_share).collect();
    assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{shares:?}");
    // Longest-first greedy on 73 units: every shard within 5% of a quarter.
    for s in &shares {
        assert!((s - 0.25).abs() < 0.05 * 0.25, "unbalanced: {shares:?}");
    }
    // Cell counts differ (32K cells are heavy): a count-based split would not balance.
    let counts: BTreeSet<usize> = (1..=4).map(|k| shard_cells(&m, k, 4).len()).collect();
    assert!(counts.len() > 1, "{counts:?}");
    let cost_of =
        |c: u32| shard::cell_cost(&m.cells("m").into_iter().find(|x| x.context_tokens == c).unwrap());
    assert!(cost_of(32768) > 4.0 * cost_of(1024));
}

#[test]
fn the_partition_does_not_depend_on_the_model_name() {
    let m = paper();
    let plan = shard::plan(&m, &spec(2, 3)).unwrap();
    let a: Vec<(u32, u32)> =
        shard::cells(&m, "a", Some(&plan)).iter().map(|c| (c.context_tokens, c.run)).collect();
    let b: Vec<(u32, u32)> =
        shard::cells(&m, "other-model", Some(&plan)).iter().map(|c| (c.context_tokens, c.run)).collect();
    assert_eq!(a, b);
}

#[test]
fn more_shards_than_units_is_refused() {
    let m = Matrix {
        contexts: vec![256],
        modes: vec![Mode::Streaming],
        cache_states: vec![CacheState::Cold],
        batch_sizes: vec![1],
        runs: 3,
        concurrent_max_context: None,
        staggered: None,
        reuse_primes: false,
        dataset_rows: vec![],
    };
    let err = shard::plan(&m, &spec(2, 2)).unwrap_err();
    assert!(matches!(err, ShardError::TooMany { units: 1, count: 2, .. }), "{err}");
    assert!(err.to_string().contains("--shard 2/2") && err.to_string().contains("at most 1"), "{err}");
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k: &str| map.get(k).cloned()
}

fn resolved(shard: Option<&str>, count: Option<u32>, vars: &[(&str, &str)]) -> Result<(u32, u32), String> {
    let e = env(vars);
    shard::resolve(shard, count, &e)
        .map(|s| s.map_or((0, 0), |s| (s.index, s.count)))
        .map_err(|e| e.to_string())
}

#[test]
fn explicit_k_of_n_and_its_errors() {
    assert_eq!(resolved(None, None, &[]), Ok((0, 0)));
    assert_eq!(resolved(Some("3/4"), None, &[]), Ok((3, 4)));
    assert_eq!(resolved(Some("1/1"), None, &[]), Ok((1, 1)));
    for bad in ["5/4", "0/4", "1/0", "0/0", "4", "a/b", "-1/4", ""] {
        let err = resolved(Some(bad), None, &[]).unwrap_err();
        assert!(err.contains("--shard") && err.contains("1 <= K <= N"), "{bad}: {err}");
    }
    assert!(resolved(Some("1/4"), Some(3), &[]).unwrap_err().contains("--shard-count says 3"));
    assert!(resolved(None, Some(4), &[]).unwrap_err().contains("only read with --shard auto"));
}

#[test]
fn kubernetes_indexed_job_is_zero_based_and_needs_the_count() {
    assert_eq!(resolved(Some("auto"), Some(4), &[("JOB_COMPLETION_INDEX", "0")]), Ok((1, 4)));
    assert_eq!(resolved(Some("auto"), Some(4), &[("JOB_COMPLETION_INDEX", "3")]), Ok((4, 4)));
    let from_env = [("JOB_COMPLETION_INDEX", "2"), ("TTFT_BENCH_SHARD_COUNT", "4")];
    assert_eq!(resolved(Some("auto"), None, &from_env), Ok((3, 4)));
    // The flag wins over the environment variable.
    assert_eq!(resolved(Some("auto"), Some(5), &from_env), Ok((3, 5)));
    let err = resolved(Some("auto"), None, &[("JOB_COMPLETION_INDEX", "1")]).unwrap_err();
    assert!(err.contains("--shard-count") && err.contains("TTFT_BENCH_SHARD_COUNT"), "{err}");
    let err = resolved(Some("auto"), Some(4), &[("JOB_COMPLETION_INDEX", "4")]).unwrap_err();
    assert!(err.contains("JOB_COMPLETION_INDEX=4") && err.contains("out of range"), "{err}");
    let err = resolved(Some("auto"), Some(0), &[("JOB_COMPLETION_INDEX", "0")]).unwrap_err();
    assert!(err.contains("out of range"), "{err}");
    let err = resolved(Some("auto"), Some(4), &[("JOB_COMPLETION_INDEX", "x")]).unwrap_err();
    assert!(err.contains("JOB_COMPLETION_INDEX=\"x\""), "{err}");
}

#[test]
fn slurm_arrays_zero_or_one_based_and_stepped() {
    let zero = [
        ("SLURM_ARRAY_TASK_ID", "0"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_MAX", "3"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
    ];
    assert_eq!(resolved(Some("auto"), None, &zero), Ok((1, 4)));
    let one = [
        ("SLURM_ARRAY_TASK_ID", "4"),
        ("SLURM_ARRAY_TASK_MIN", "1"),
        ("SLURM_ARRAY_TASK_MAX", "4"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
    ];
    assert_eq!(resolved(Some("auto"), None, &one), Ok((4, 4)));
    let stepped = [
        ("SLURM_ARRAY_TASK_ID", "4"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_MAX", "6"),
        ("SLURM_ARRAY_TASK_STEP", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
    ];
    assert_eq!(resolved(Some("auto"), None, &stepped), Ok((3, 4)));
    // A count from the flag where Slurm gives none; a disagreement is refused.
    assert_eq!(resolved(Some("auto"), Some(2), &[("SLURM_ARRAY_TASK_ID", "1")]), Ok((2, 2)));
    let err = resolved(Some("auto"), Some(3), &zero).unwrap_err();
    assert!(err.contains("SLURM_ARRAY_TASK_COUNT=4") && err.contains("--shard-count 3"), "{err}");
    let err = resolved(Some("auto"), None, &[("SLURM_ARRAY_TASK_ID", "1")]).unwrap_err();
    assert!(err.contains("SLURM_ARRAY_TASK_COUNT is not"), "{err}");
    // An array with holes (--array=0,2,7) cannot be a partition.
    let holes = [
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_MAX", "7"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ];
    let err = resolved(Some("auto"), None, &holes).unwrap_err();
    assert!(err.contains("has 8 tasks") && err.contains("SLURM_ARRAY_TASK_COUNT=3"), "{err}");
}

#[test]
fn auto_without_a_scheduler_or_with_two_is_refused() {
    let err = resolved(Some("auto"), Some(4), &[]).unwrap_err();
    assert!(err.contains("JOB_COMPLETION_INDEX") && err.contains("SLURM_ARRAY_TASK_ID"), "{err}");
    let both = [("JOB_COMPLETION_INDEX", "0"), ("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "4")];
    assert!(resolved(Some("auto"), Some(4), &both).unwrap_err().contains("both"));
}

#[test]
fn a_missing_shard_is_named_from_the_cells_it_should_have_made() {
    let m = paper();
    let missing = shard_cells(&m, 3, 4);
    let text = shard::describe_missing(&m, 4, &[1, 2, 4], &missing);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.starts_with(&format!("missing shard 3/4: {} cells", missing.len())), "{text}");
    assert!(text.contains("-shard3of4"), "{text}");
    // Half of shard 2 missing while its run is there: finish it.
    let half: Vec<CellKey> = shard_cells(&m, 2, 4).into_iter().step_by(2).collect();
    let text = shard::describe_missing(&m, 4, &[1, 2, 3, 4], &half);
    assert!(text.starts_with("missing shard 2/4") && text.contains("--resume"), "{text}");
}
