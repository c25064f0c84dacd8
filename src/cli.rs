//! Command-line surface (clap derive). Values stay raw strings here; `config` validates them so
//! that every error can name the flag or scenario key it came from.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "bench",
    version,
    about = "Measure LLM inference servers: TTFT and decode across cache states, with integrity checks",
    long_about = "Measure LLM inference servers the way a careful reviewer would.\n\n\
        bench sweep   run a matrix (contexts x cache states x modes x batch sizes x runs) against a server\n\
        bench verify  flag physically impossible or suspicious numbers in result files\n\
        bench merge   build one canonical result file from partial runs and re-runs\n\
        bench report  statistics, tables, CSV and SVG plots\n\n\
        Exit codes: 0 success; 1 findings (verify errors, failed measurements, incomplete merge);\n\
        2 bad input (flags, files); 3 server unreachable before anything was measured;\n\
        4 results could not be written; 130 interrupted (everything measured so far is kept)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a measurement matrix against a running server; records are written as they happen.
    Sweep(Box<SweepArgs>),
    /// Check result files for impossible or suspicious numbers.
    Verify(crate::verify::VerifyArgs),
    /// Combine result files into one canonical file.
    Merge(crate::merge::MergeArgs),
    /// Statistics, tables, CSV and plots from result files.
    Report(crate::report::ReportArgs),
}

#[derive(Debug, Args, Default, Clone)]
#[command(after_help = "Examples:\n  \
    bench sweep --server http://127.0.0.1:8080 --contexts 1024..32768 --modes streaming,non-streaming --runs 3\n  \
    bench sweep --scenario scenarios/quick.toml --server http://127.0.0.1:8080\n  \
    bench sweep --resume results/20261122-101500-cold\n\n\
    Flags override the values of --scenario. Records land in <out>/<run-id>/measurements.jsonl.")]
pub struct SweepArgs {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long, env = "TTFT_BENCH_SERVER")]
    pub server: Option<String>,
    /// Model name sent in requests (default: the first model the server lists).
    #[arg(long)]
    pub model: Option<String>,
    /// API dialect: openai (/v1/chat/completions) or anthropic (/v1/messages). Default: openai.
    #[arg(long)]
    pub api: Option<String>,
    /// Server preset (openai, llama.cpp, vllm, sglang, agent-memory) or a preset TOML file. Default: openai.
    #[arg(long)]
    pub preset: Option<String>,
    /// Scenario file (TOML) giving any of these settings; flags override it.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Context sizes in tokens: 1024..32768 (doubling), 1k,4k,32k, or both mixed. Default: 1024..4096.
    #[arg(long)]
    pub contexts: Option<String>,
    /// streaming, non-streaming, or both (comma-separated). Default: streaming.
    #[arg(long)]
    pub modes: Option<String>,
    /// cold, warm, hot (comma-separated). Default: cold.
    #[arg(long)]
    pub cache_states: Option<String>,
    /// Concurrent batch sizes (comma-separated), e.g. 1,2,4. Default: 1.
    #[arg(long)]
    pub batch_sizes: Option<String>,
    /// Largest context measured with batch sizes above 1 (e.g. 16k).
    #[arg(long)]
    pub concurrent_max_context: Option<String>,
    /// Repetitions of every cell. Default: 3.
    #[arg(long)]
    pub runs: Option<u32>,
    /// max_tokens of every measured request. Default: 64.
    #[arg(long)]
    pub output_tokens: Option<u32>,
    /// Give up on one request after this long (e.g. 300s). Default: 600s.
    #[arg(long)]
    pub request_timeout: Option<String>,
    /// Name of an environment variable holding the API key (the key itself is never written out).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// PEM file of a private CA, trusted for https in addition to the platform's roots (and SSL_CERT_FILE).
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Do not verify the server's TLS certificate. Never silent: warned at start and recorded in run.json.
    #[arg(long)]
    pub insecure: bool,
    /// Seed of the prompt text generator (same seed, same prose; nonces stay unique). Default: 20260208.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory that receives <run-id>/ (default: results).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Name of the run directory (default: a UTC timestamp).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Finish an interrupted run: skip cells already measured with quality_ok, re-run the rest.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,

    /// Also run the staggered pair (batched and sequential).
    #[arg(long)]
    pub staggered: bool,
    /// Delay of user B after user A in the batched staggered run. Default: 2s.
    #[arg(long)]
    pub stagger_delay: Option<String>,
    /// Context of the staggered prompts (tokens, e.g. 4096 or 4k). Default: 4096.
    #[arg(long)]
    pub stagger_context: Option<String>,
    /// Repetitions of the staggered pair. Default: 3.
    #[arg(long)]
    pub stagger_runs: Option<u32>,

    /// Thermal gate: probe (wait for a TPS probe to recover), fixed:30s, or off. Default: probe.
    #[arg(long)]
    pub thermal: Option<String>,
    /// Probe must reach (1 - tolerance) x baseline before the next measurement. Default: 0.20.
    #[arg(long)]
    pub tolerance: Option<f64>,
    /// Wait at least this long after every measurement (probe policy). Default: 10s.
    #[arg(long)]
    pub min_cooldown: Option<String>,
    /// Never wait longer than this for recovery. Default: 240s.
    #[arg(long)]
    pub max_cooldown: Option<String>,

    #[command(flatten)]
    pub physics: PhysicsArgs,
}

/// What the physical ceilings are computed from (shared by `sweep` and `verify`).
#[derive(Debug, Args, Default, Clone)]
pub struct PhysicsArgs {
    /// Hardware profile (m4-pro, m4-max-40c, m3-ultra, h100-sxm, h200, rtx-4090, mi300x, ...).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Memory bandwidth in GB/s (instead of, or overriding, --hardware).
    #[arg(long)]
    pub bandwidth_gbps: Option<f64>,
    /// Dense fp16 compute in TFLOP/s (instead of, or overriding, --hardware).
    #[arg(long)]
    pub tflops: Option<f64>,
    /// Weight bytes read per decoded token (active bytes for mixture-of-experts), e.g. 8.03GB.
    #[arg(long)]
    pub model_bytes: Option<String>,
    /// Parameters in one token's matmuls (active for MoE), e.g. 12B, 840M.
    #[arg(long)]
    pub params: Option<String>,
    /// GGUF file or HF config.json to read the model shape from (flags override it).
    #[arg(long)]
    pub model_file: Option<PathBuf>,
}
