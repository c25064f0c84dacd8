//! Command-line surface (clap derive), and the one place every sweep setting is declared.
//!
//! A sweep setting is a field of `ConnectionArgs` or `MeasureArgs` (or the nested thermal/physics
//! groups). The same structs are filled by clap (flags) and by serde (scenario files: keys are the
//! flag names with underscores), so adding a setting means adding one field here and reading it in
//! `config::validate`. Values are typed here (`spec`), so clap names a bad flag itself and a bad
//! scenario key is named with its file. The split between the two groups is the resume policy:
//! `ConnectionArgs` may change on `--resume` (they say how to reach the server, not what is
//! measured); `MeasureArgs` are fixed for the life of a run and refused on `--resume`.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::record::{CacheState, Mode};
use crate::spec::{Api, ThermalChoice};
use crate::spec::{Contexts, Count, List, Span, Tokens};

mod load_values;
pub use load_values::{Levels, LoadSpecError, MAX_RATE_PER_S, MAX_USERS, Mix, Rate, Rates, Slo};

/// Bounds of the matrix flags: large enough for any real sweep, small enough that a typo
/// (`--runs 4000000000`) is an error instead of a plan that never ends.
pub const MAX_RUNS: u32 = 10_000;
pub const MAX_BATCH: u32 = 4_096;
pub const MAX_OUTPUT_TOKENS: u32 = 1_048_576;
/// Turns of a hot conversation: an agent's session runs to dozens, a typo to millions.
pub const MAX_TURNS: u32 = 256;
/// Rows sampled from a dataset (`--dataset-limit`).
pub const MAX_DATASET_ROWS: u32 = 1_000_000;

#[derive(Debug, Args, Default, Clone)]
#[command(after_help = "Examples:\n  \
    bench sweep --server http://127.0.0.1:8080 --contexts 1024..32768 --modes streaming,non-streaming --runs 3\n  \
    bench sweep --scenario scenarios/quick.toml --server http://127.0.0.1:8080\n  \
    bench sweep --resume results/20261122T101500Z-cold --server http://127.0.0.1:8081\n\n\
    Flags override the values of --scenario (keys are the flag names with underscores).\n\
    Records land in <out>/<run-id>/measurements.jsonl, fsync'd as each cell finishes.")]
pub struct SweepArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Scenario file (TOML) giving any setting above; flags override it.
    #[arg(long, help_heading = "Run")]
    pub scenario: Option<PathBuf>,
    /// Directory that receives <run-id>/ [default: results].
    #[arg(long, help_heading = "Run")]
    pub out: Option<PathBuf>,
    /// Name of the run directory (default: a UTC timestamp and the cache states).
    #[arg(long, help_heading = "Run")]
    pub run_id: Option<String>,
    /// Finish an interrupted run: skip cells already measured and good, re-run the rest. Only the
    /// connection settings may be given with it (the plan comes from the run's run.json).
    #[arg(long, value_name = "RUN_DIR", help_heading = "Run")]
    pub resume: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short, help_heading = "Run")]
    pub quiet: bool,
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
    Without either, the cells are listed without a forecast.")]
pub struct PlanArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Scenario file (TOML) giving any setting; flags override it.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Take the rates from an earlier run (a run directory or any result file) instead of measuring.
    #[arg(long, value_name = "RUN")]
    pub from: Option<PathBuf>,
    /// table (one line per cell, then the total) or json.
    #[arg(long, value_enum, default_value = "table")]
    pub format: PlanFormat,
}

#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    bench soak --server http://127.0.0.1:8080 --concurrency 8 --iterations 50\n  \
    bench soak --server-cmd \"llama-server -m m.gguf --port {port} --parallel 8\" --concurrency 8 --duration 10m\n\n\
    Each client has its own prompt; a serial pass first records each prompt's greedy output\n\
    (temperature 0), and every concurrent output is compared with it. Records land in\n\
    <out>/<run-id>/measurements.jsonl (scenario soak, run = iteration), crashes in run.json.\n\
    Exit codes: 0 every request passed, no crash, no mismatch; 1 findings; 3 the server is gone.")]
pub struct SoakArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Clients sending at once; every iteration releases one request from each.
    #[arg(long, default_value = "8")]
    pub concurrency: Count<MAX_BATCH>,
    /// Iterations (at most; --duration may end the soak sooner).
    #[arg(long, default_value = "50")]
    pub iterations: Count<MAX_RUNS>,
    /// Stop starting iterations after this long (more than 0).
    #[arg(long)]
    pub duration: Option<Span>,
    /// Prompt sizes; client i uses the (i mod n)-th [default: 1024].
    #[arg(long)]
    pub contexts: Option<Contexts>,
    /// max_tokens of every request [default: 64].
    #[arg(long)]
    pub output_tokens: Option<Count<MAX_OUTPUT_TOKENS>>,
    /// streaming or non-streaming [default: streaming].
    #[arg(long, default_value = "streaming")]
    pub mode: Mode,
    /// Model name sent in requests [default: the first model the server lists].
    #[arg(long)]
    pub model: Option<String>,
    /// openai or anthropic [default: openai].
    #[arg(long)]
    pub api: Option<Api>,
    /// Server preset or preset TOML file [default: openai].
    #[arg(long)]
    pub preset: Option<String>,
    /// Directory that receives <run-id>/ [default: results].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Name of the run directory (default: a UTC timestamp and "soak").
    #[arg(long)]
    pub run_id: Option<String>,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Table,
    Json,
}

/// How to reach the server. These may change on `--resume` (a restarted server on another port,
/// a longer timeout); each change is recorded in run.json's `resumed_at`.
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectionArgs {
    /// Base URL of the server: http://127.0.0.1:8080 or https://host (credentials in the URL are
    /// never written out). An OpenAI SDK base URL ending in /v1 is accepted: the /v1 is dropped
    /// (bench adds the API's paths), with a note.
    #[arg(long, env = "TTFT_BENCH_SERVER", help_heading = "Connection (may change on --resume)")]
    pub server: Option<String>,
    /// Name of an environment variable holding the API key (the key itself is never written out).
    #[arg(long, value_name = "VAR", help_heading = "Connection (may change on --resume)")]
    pub api_key_env: Option<String>,
    /// Give up on any one call (a measured request, a preset action, a tokenizer call) after this
    /// long [default: 600s].
    #[arg(long, help_heading = "Connection (may change on --resume)")]
    pub request_timeout: Option<Span>,
    /// Start the server yourself, instead of --server: a shell command with {port} where bench puts
    /// a free port (e.g. "llama-server -m m.gguf --port {port}"). Bench waits for /health, watches
    /// the process, records a crash (signal, exit code, stderr tail) and restarts it.
    #[arg(long, value_name = "COMMAND", help_heading = "Connection (may change on --resume)")]
    pub server_cmd: Option<String>,
    /// How long a --server-cmd server may take to answer /health (or /v1/models) before bench
    /// stops it and exits 3, printing its last stderr lines [default: 300s; loading a large model
    /// from a cold disk takes minutes].
    #[arg(long, value_name = "SPAN", help_heading = "Connection (may change on --resume)")]
    pub server_start_timeout: Option<Span>,
    /// Restarts of a crashed --server-cmd server before the run stops (exit 3, records kept)
    /// [default: 3].
    #[arg(long, help_heading = "Connection (may change on --resume)")]
    pub max_restarts: Option<u32>,
    /// PEM file of a private CA, trusted for https in addition to the platform's roots (and
    /// SSL_CERT_FILE); or the server's own self-signed certificate, trusted for that server
    /// alone (pinned: the same bytes, its name and validity still checked).
    #[arg(long, value_name = "FILE", help_heading = "Connection (may change on --resume)")]
    pub ca_cert: Option<PathBuf>,
    /// Do not verify the server's TLS certificate. Never silent: warned at start, recorded in
    /// run.json (config.insecure) and printed by verify.
    #[arg(long, help_heading = "Connection (may change on --resume)")]
    pub insecure: bool,
    /// An HTTP header sent with every request, 'Name: value' (repeat the flag for more). Values of
    /// credential headers (Authorization, Cookie, and names with key, token, secret, password or
    /// auth) are never written out: run.json shows them masked, and --resume needs them again.
    #[arg(
        long = "header",
        value_name = "'NAME: VALUE'",
        help_heading = "Connection (may change on --resume)"
    )]
    pub header: Option<Vec<String>>,
}

/// What is measured. Fixed for the life of a run: refused with `--resume`.
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MeasureArgs {
    /// Model name sent in requests [default: the first model the server lists].
    #[arg(long, help_heading = "Server")]
    pub model: Option<String>,
    /// API dialect: openai (/v1/chat/completions), anthropic (/v1/messages) or openai-completions
    /// (/v1/completions: the conversation as one prompt string) [default: openai].
    #[arg(long, help_heading = "Server")]
    pub api: Option<Api>,
    /// Server preset (openai, llama.cpp, vllm, sglang, agent-memory) or a preset TOML file
    /// [default: openai].
    #[arg(long, help_heading = "Server")]
    pub preset: Option<String>,
    /// The server's slot save directory, when the server runs on this host (llama-server's
    /// --slot-save-path; found by itself in --server-cmd). Warm then drops each saved session from
    /// the OS page cache before its restore, so the restore reads the disk (records say
    /// page_cache: evicted); without it, page_cache: unknown (the restore may read memory, about
    /// 2x faster on an H200).
    #[arg(long, value_name = "DIR", help_heading = "Server")]
    pub slot_dir: Option<PathBuf>,

    /// Context sizes in tokens: 1024..32768 (doubling), 1k,4k,32k, or both mixed; at least 64
    /// (the prompt's fixed parts) [default: 1024..4096].
    #[arg(long, help_heading = "Matrix")]
    pub contexts: Option<Contexts>,
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
    pub runs: Option<crate::spec::Runs<MAX_RUNS>>,
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
    /// max_tokens of every measured request [default: 64].
    #[arg(long, help_heading = "Matrix")]
    pub output_tokens: Option<Count<MAX_OUTPUT_TOKENS>>,
    /// Seed of the prompt text generator (same seed, same prose; nonces stay unique) [default: 20260208].
    #[arg(long, help_heading = "Matrix")]
    pub seed: Option<u64>,
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
    pub stagger_delay: Option<crate::spec::StaggerDelay>,
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
    pub extra_body: Option<crate::spec::JsonObject>,
    /// Sampling temperature of every request [default: 0, greedy].
    #[arg(long, value_parser = crate::spec::finite, help_heading = "Request")]
    #[serde(deserialize_with = "crate::spec::finite_option")]
    pub temperature: Option<f64>,
    /// Discarded requests before the thermal baseline and the first cell (the first requests
    /// after a server starts are slower) [default: 1].
    #[arg(long, value_name = "N", help_heading = "Request")]
    pub warmup: Option<u32>,
    /// Measure the prompts of a file instead of generated ones: ShareGPT JSON (`conversations` of
    /// `from`/`value`), JSONL of {"prompt": ...} or {"messages": [...]}, or text (one prompt a
    /// line). Replaces --contexts: each row is measured at its own length (its token count is the
    /// record's context_tokens, its row the record's dataset_row); cold still opens with a unique
    /// nonce; hot replays the row's own later user turns.
    #[arg(long, value_name = "FILE", help_heading = "Workload")]
    pub dataset: Option<PathBuf>,
    /// Measure N rows of --dataset, drawn with --seed (the same seed, the same rows) [default: every row].
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub dataset_limit: Option<Count<MAX_DATASET_ROWS>>,
    /// Turns of a hot conversation: hot measures turn N on the cache turns 1 to N-1 built; every
    /// earlier turn's TTFT is kept in the record's `turns` (at least 2) [default: 3].
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub turns: Option<Count<MAX_TURNS>>,
    /// Pause between a hot conversation's turns (a user reading and typing, an agent running a
    /// tool), e.g. 2s; each pause is recorded as measured (`think_ms`) [default: 0s].
    #[arg(long, value_name = "DURATION", help_heading = "Workload")]
    pub think_time: Option<Span>,

    #[command(flatten)]
    #[serde(flatten)]
    pub thermal: ThermalArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub physics: PhysicsArgs,
}

/// The thermal gate between measurements.
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThermalArgs {
    /// probe (wait for a TPS probe to recover), fixed:30s, or off [default: probe]. The sweep
    /// prints at its start what the gate is expected to cost; on a datacenter GPU with steady
    /// clocks, --thermal off skips it.
    #[arg(long, help_heading = "Thermal gate")]
    pub thermal: Option<ThermalChoice>,
    /// The probe must reach (1 - tolerance) x baseline before the next measurement [default: 0.20].
    #[arg(long, value_parser = crate::spec::finite, help_heading = "Thermal gate")]
    #[serde(deserialize_with = "crate::spec::finite_option")]
    pub tolerance: Option<f64>,
    /// Wait at least this long after every measurement (probe policy) [default: 0s: the probe
    /// decides; scenarios/paper.toml keeps the origin's 10s].
    #[arg(long, help_heading = "Thermal gate")]
    pub min_cooldown: Option<Span>,
    /// Never wait longer than this for recovery [default: 240s].
    #[arg(long, help_heading = "Thermal gate")]
    pub max_cooldown: Option<Span>,
}

/// What the physical ceilings are computed from (shared by `sweep` and `verify`).
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PhysicsArgs {
    /// Hardware profile (m4-pro, m4-max-40c, m3-ultra, h100-sxm, h200, rtx-4090, mi300x, ...).
    #[arg(long, help_heading = "Physics")]
    pub hardware: Option<String>,
    /// Memory bandwidth in GB/s (instead of, or overriding, --hardware).
    #[arg(long, value_parser = crate::spec::finite, help_heading = "Physics")]
    #[serde(deserialize_with = "crate::spec::finite_option")]
    pub bandwidth_gbps: Option<f64>,
    /// Dense fp16 compute in TFLOP/s (instead of, or overriding, --hardware).
    #[arg(long, value_parser = crate::spec::finite, help_heading = "Physics")]
    #[serde(deserialize_with = "crate::spec::finite_option")]
    pub tflops: Option<f64>,
    /// Weight bytes read per decoded token (active bytes for mixture-of-experts), e.g. 8.03GB.
    #[arg(long, help_heading = "Physics")]
    pub model_bytes: Option<String>,
    /// Parameters in one token's matmuls (active for MoE), e.g. 12B, 840M.
    #[arg(long, help_heading = "Physics")]
    pub params: Option<String>,
    /// GGUF file or HF config.json to read the model shape from (flags override it).
    #[arg(long, help_heading = "Physics")]
    pub model_file: Option<PathBuf>,
}
