//! The flag groups the verbs share, each flag declared once. A driving verb flattens the groups it
//! takes (`#[command(flatten)]`); the flattening site names the help heading, so one group reads
//! as "Server" in one verb's help and as plain options in another's, while its flags, ids and
//! parsing stay one. A verb whose flag means something narrower (load's single context) says so
//! with its own help text (`mut_arg`), never with a second declaration.
//!
//! The groups inside `MeasureArgs` are also read by serde from scenario files (`#[serde(flatten)]`:
//! keys stay the flag names with underscores, as if the fields were `MeasureArgs`' own).

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{MAX_DATASET_ROWS, MAX_OUTPUT_TOKENS, MAX_TURNS};
use ttft_model::spec::{Api, Contexts, Count, Span, ThermalChoice};

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

/// Which server dialect and model every request speaks to (sweep, plan, load, soak).
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TargetArgs {
    /// Model name sent in requests [default: the first model the server lists].
    #[arg(long)]
    pub model: Option<String>,
    /// API dialect: openai (/v1/chat/completions), anthropic (/v1/messages) or openai-completions
    /// (/v1/completions: the conversation as one prompt string) [default: openai].
    #[arg(long)]
    pub api: Option<Api>,
    /// Server preset (llama.cpp, vllm, sglang, agent-memory, openai) or a preset TOML file
    /// [default: auto: the server is detected from what it answers (llama.cpp /props, vLLM and
    /// SGLang /metrics and info endpoints, agent-memory /v1/agents/stats, the hosted APIs by host)
    /// and its preset used, said on stderr and in run.json; `--preset openai` forces the plain one].
    #[arg(long)]
    pub preset: Option<String>,
}

/// The size of every request: its prompt (`--contexts`) and its output (`--output-tokens`). Each
/// verb applies its own default where it builds its settings (a sweep's list, load's one context).
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SizeArgs {
    /// Context sizes in tokens: 1024..32768 (doubling), 1k,4k,32k, or both mixed; at least 64
    /// (the prompt's fixed parts) [default: 1024..4096].
    #[arg(long)]
    pub contexts: Option<Contexts>,
    /// max_tokens of every measured request [default: 64].
    #[arg(long)]
    pub output_tokens: Option<Count<MAX_OUTPUT_TOKENS>>,
}

/// Where prompts come from and how a hot conversation unfolds (sweep, plan, load).
#[derive(Debug, Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadArgs {
    /// Seed of the prompt text generator (same seed, same prose; nonces stay unique) [default: 20260208].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Measure the prompts of a file instead of generated ones: ShareGPT JSON (`conversations` of
    /// `from`/`value`), JSONL of {"prompt": ...} or {"messages": [...]}, or text (one prompt a
    /// line). Replaces --contexts: each row is measured at its own length (its token count is the
    /// record's context_tokens, its row the record's dataset_row); cold still opens with a unique
    /// nonce; hot replays the row's own later user turns.
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// Measure N rows of --dataset, drawn with --seed (the same seed, the same rows) [default: every row].
    #[arg(long, value_name = "N")]
    pub dataset_limit: Option<Count<MAX_DATASET_ROWS>>,
    /// Refuse a --dataset file at its first row that holds no conversation (exit 2, naming
    /// file:line) instead of skipping such rows (counted and named on stderr and in run.json).
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dataset_strict: bool,
    /// Each --dataset row asks for its own reply length as max_tokens: its `output_length`,
    /// `output_tokens`, `output_tokens_count` or `max_tokens` field, else the server's count of
    /// its reply to turn 1 (ShareGPT's first answer); rows with neither use --output-tokens.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dataset_output_tokens: bool,
    /// Turns of a hot conversation: hot measures turn N on the cache turns 1 to N-1 built; every
    /// earlier turn's TTFT is kept in the record's `turns` (at least 2) [default: 3].
    #[arg(long, value_name = "N")]
    pub turns: Option<Count<MAX_TURNS>>,
    /// Pause between a hot conversation's turns (a user reading and typing, an agent running a
    /// tool), e.g. 2s; each pause is recorded as measured (`think_ms`) [default: 0s].
    #[arg(long, value_name = "DURATION")]
    pub think_time: Option<Span>,
}

/// Where a run is written and how loudly (sweep, load, soak). Not a scenario-file setting: where a
/// run lands is the caller's, not the scenario's.
#[derive(Debug, Args, Default, Clone, PartialEq)]
pub struct OutputArgs {
    /// Directory that receives <run-id>/ [default: results].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Name of the run directory (default: a UTC timestamp, the cache states and 4 random hex
    /// digits, `20261122T031500Z-cold-hot-7f3a`, so sweeps started in the same second never share one).
    #[arg(long)]
    pub run_id: Option<String>,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
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
    #[arg(long, value_parser = ttft_model::spec::finite, help_heading = "Thermal gate")]
    #[serde(deserialize_with = "ttft_model::spec::finite_option")]
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
    #[arg(long, value_parser = ttft_model::spec::finite, help_heading = "Physics")]
    #[serde(deserialize_with = "ttft_model::spec::finite_option")]
    pub bandwidth_gbps: Option<f64>,
    /// Dense fp16 compute in TFLOP/s (instead of, or overriding, --hardware).
    #[arg(long, value_parser = ttft_model::spec::finite, help_heading = "Physics")]
    #[serde(deserialize_with = "ttft_model::spec::finite_option")]
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
