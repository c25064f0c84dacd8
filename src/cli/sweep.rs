//! The sweep's arguments (`sweep`, `plan`) and the settings of what is measured (`MeasureArgs`),
//! which load and soak build theirs from.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{
    ConnectionArgs, MAX_BATCH, MAX_RUNS, OutputArgs, PhysicsArgs, SizeArgs, TargetArgs, ThermalArgs,
    WorkloadArgs,
};
use ttft_model::record::{CacheState, Mode};
use ttft_model::spec::{Count, List, Tokens};

#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    bench sweep --server http://127.0.0.1:8080 --contexts 1024..32768 --modes streaming,non-streaming --runs 3\n  \
    bench sweep --scenario scenarios/quick.toml --server http://127.0.0.1:8080\n  \
    bench sweep --resume results/20261122T101500Z-cold --server http://127.0.0.1:8081\n\n\
    Flags override the values of --scenario (keys are the flag names with underscores).\n\
    Records land in <out>/<run-id>/measurements.jsonl, fsync'd as each cell finishes.\n\n\
    Guide: docs/sweep.md (in the ttft-bench repository)")]
/// No `Default`: a verb that runs the sweep's machinery builds its arguments with `new_run`, which
/// names every field.
pub struct SweepArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Scenario file (TOML) giving any setting above; flags override it.
    #[arg(long, help_heading = "Run")]
    pub scenario: Option<PathBuf>,
    #[command(flatten, next_help_heading = "Run")]
    pub output: OutputArgs,
    /// Finish an interrupted run: skip cells already measured and good, re-run the rest. Only the
    /// connection settings may be given with it (the plan comes from the run's run.json).
    #[arg(long, value_name = "RUN_DIR", help_heading = "Run")]
    pub resume: Option<PathBuf>,
    /// Measure one slice of the matrix: K/N (1 <= K <= N), or `auto` from a Kubernetes Indexed
    /// Job (JOB_COMPLETION_INDEX) or a Slurm job array (SLURM_ARRAY_TASK_ID, _COUNT). The run
    /// directory gets `-shardKofN`; `bench merge --expect` of the N runs checks the whole matrix.
    #[arg(long, value_name = "K/N|auto", help_heading = "Run")]
    pub shard: Option<String>,
    /// N for `--shard auto` where the scheduler does not say it (a Kubernetes Indexed Job: its
    /// spec.completions) [env: TTFT_BENCH_SHARD_COUNT].
    #[arg(long, value_name = "N", help_heading = "Run")]
    pub shard_count: Option<u32>,
    /// Also write every measured request's exact body (the bytes sent, never a header) to
    /// <run-id>/request-bodies.jsonl, one line per record with its cell, nonce, length and CRC-32,
    /// so another client can replay them (scripts/parity.py). A body that carries a secret is
    /// withheld. Fixed for the run: a resumed run keeps its own setting (the flag is refused with
    /// --resume).
    #[arg(long, help_heading = "Run")]
    pub request_bodies: bool,
}

#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    bench plan --scenario scenarios/paper.toml --server http://127.0.0.1:8080\n  \
    bench plan --scenario scenarios/paper.toml --from results/20261122T101500Z-cold\n\n\
    With --server, two short cold requests measure the prefill and decode rates (and the preset's actions\n\
    are tried once, as a sweep would). With --from, the rates come from an earlier run's records.\n\
    Without either, the cells are listed without a forecast.\n\n\
    Guide: docs/sweep.md#bench-plan (in the ttft-bench repository)")]
pub struct PlanArgs {
    /// Scenario file (TOML) giving any setting; flags override it.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Take the rates from an earlier run (a run directory or any result file) instead of measuring.
    #[arg(long, value_name = "RUN")]
    pub from: Option<PathBuf>,
    /// table (one line per cell, then the total) or json.
    #[arg(long, value_enum, default_value = "table")]
    pub format: PlanFormat,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Table,
    Json,
}

/// What is measured. Fixed for the life of a run: refused with `--resume`.
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MeasureArgs {
    #[command(flatten, next_help_heading = "Server")]
    #[serde(flatten)]
    pub target: TargetArgs,
    /// The server's slot save directory, when the server runs on this host (llama-server's
    /// --slot-save-path; found by itself in --server-cmd). Warm then drops each saved session from
    /// the OS page cache before its restore, so the restore reads the disk (records say
    /// page_cache: evicted); without it, page_cache: unknown (the restore may read memory, about
    /// 2x faster on an H200).
    #[arg(long, value_name = "DIR", help_heading = "Server")]
    pub slot_dir: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Matrix")]
    #[serde(flatten)]
    pub sizes: SizeArgs,
    /// streaming, non-streaming, or both, comma-separated [default: streaming].
    #[arg(long, help_heading = "Matrix")]
    pub modes: Option<List<Mode>>,
    /// cold, warm, hot, comma-separated [default: cold].
    #[arg(long, help_heading = "Matrix")]
    pub cache_states: Option<List<CacheState>>,
    /// Concurrent batch sizes, comma-separated, e.g. 1,2,4 [default: 1].
    #[arg(long, help_heading = "Matrix")]
    pub batch_sizes: Option<List<Count<MAX_BATCH>>>,
    /// Largest context measured with batch sizes above 1 (e.g. 16k) [default: no limit].
    #[arg(long, help_heading = "Matrix")]
    pub concurrent_max_context: Option<Tokens>,
    /// Repetitions of every cell, or auto: repeat each cell until the 95% interval of its median
    /// TTFT (E2E where it has no TTFT) is within --target-ci of the median, at least --min-runs
    /// and at most --max-runs times [default: 3].
    #[arg(long, value_name = "N|auto", help_heading = "Matrix")]
    pub runs: Option<ttft_model::spec::Runs<MAX_RUNS>>,
    /// With --runs auto: how close the interval's ends must be to the median, e.g. 5% or 0.05
    /// [default: 5%].
    #[arg(long, value_name = "PCT", help_heading = "Matrix")]
    pub target_ci: Option<String>,
    /// With --runs auto: runs of every cell before the interval is looked at [default: 5; the
    /// distribution-free 95% interval of a median needs 6 values].
    #[arg(long, help_heading = "Matrix")]
    pub min_runs: Option<Count<MAX_RUNS>>,
    /// With --runs auto: the most runs of a cell [default: 30].
    #[arg(long, help_heading = "Matrix")]
    pub max_runs: Option<Count<MAX_RUNS>>,
    /// One session serves cold, warm and hot of each (context, mode, run), in turn: turn 1 is
    /// measured cold, then evicted and reloaded for warm, then extended for hot, so the prompt is
    /// prefilled once instead of three times. Every state is still proven by the server's cache
    /// evidence; records share a `lifecycle_id`. Batches keep one session per request. On by
    /// default (the same numbers as fresh sessions on the real servers measured:
    /// docs/reuse-primes.md); `--reuse-primes false` measures each state on a fresh session.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", help_heading = "Matrix")]
    pub reuse_primes: Option<bool>,

    /// Also run the staggered pair (user B arrives while user A runs, and the sequential twin).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", help_heading = "Staggered pair")]
    pub staggered: Option<bool>,
    /// Delay of user B after user A in the batched staggered run: a duration (2s) or a share of
    /// A's own duration measured by a calibration request (50%), so the pair overlaps on any
    /// hardware [default: 50%].
    #[arg(long, help_heading = "Staggered pair")]
    pub stagger_delay: Option<ttft_model::spec::StaggerDelay>,
    /// Context of the staggered prompts (tokens, e.g. 4096 or 4k) [default: 4096].
    #[arg(long, help_heading = "Staggered pair")]
    pub stagger_context: Option<Tokens>,
    /// Repetitions of the staggered pair [default: 3].
    #[arg(long, help_heading = "Staggered pair")]
    pub stagger_runs: Option<Count<MAX_RUNS>>,

    /// A JSON object merged into every request body, e.g. '{"ignore_eos": true, "top_k": 1}'
    /// (recorded in run.json). Keys bench sets itself are refused: model, messages, prompt,
    /// stream, stream_options, max_tokens, max_completion_tokens, temperature, n (use the flags).
    #[arg(long, value_name = "JSON", help_heading = "Request")]
    pub extra_body: Option<ttft_model::spec::JsonObject>,
    /// Sampling temperature of every request [default: 0, greedy].
    #[arg(long, value_parser = ttft_model::spec::finite, help_heading = "Request")]
    #[serde(deserialize_with = "ttft_model::spec::finite_option")]
    pub temperature: Option<f64>,
    /// Discarded requests before the thermal baseline and the first cell (the first requests
    /// after a server starts are slower): a count; a duration is refused (bench load's
    /// --warmup-duration is one) [default: 1].
    #[arg(long, value_name = "N", value_parser = super::load_values::warmup_count, help_heading = "Request")]
    pub warmup: Option<u32>,
    #[command(flatten, next_help_heading = "Workload")]
    #[serde(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub thermal: ThermalArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub physics: PhysicsArgs,
}

impl SweepArgs {
    /// A new run of the sweep's machinery for a verb that builds its settings from the groups (plan,
    /// load, soak): never resumed, never sharded, no request bodies. Every field is named (no
    /// `..Default::default()`), so a setting added to the sweep is a compile error here until it is
    /// decided for those verbs too.
    pub(crate) fn new_run(
        connection: ConnectionArgs,
        measure: MeasureArgs,
        scenario: Option<PathBuf>,
        output: OutputArgs,
    ) -> SweepArgs {
        SweepArgs {
            connection,
            measure,
            scenario,
            output,
            resume: None,
            shard: None,
            shard_count: None,
            request_bodies: false,
        }
    }
}

impl MeasureArgs {
    /// What load and soak measure: the groups they share with the sweep, and the modes and cache
    /// states they choose (None: the sweep's default). Every setting only the sweep has is named
    /// here and left unset, so a new setting cannot silently be missed by load or soak: adding it
    /// to `MeasureArgs` fails to compile until this decides it (or it joins a group they flatten).
    pub(crate) fn driven(
        target: TargetArgs,
        sizes: SizeArgs,
        workload: WorkloadArgs,
        thermal: ThermalArgs,
        modes: Option<List<Mode>>,
        cache_states: Option<List<CacheState>>,
    ) -> MeasureArgs {
        MeasureArgs {
            target,
            sizes,
            workload,
            thermal,
            modes,
            cache_states,
            slot_dir: None,
            batch_sizes: None,
            concurrent_max_context: None,
            runs: None,
            target_ci: None,
            min_runs: None,
            max_runs: None,
            reuse_primes: None,
            staggered: None,
            stagger_delay: None,
            stagger_context: None,
            stagger_runs: None,
            extra_body: None,
            temperature: None,
            warmup: None,
            physics: PhysicsArgs::default(),
        }
    }
}
