//! Flags over a scenario file over defaults -> one validated `SweepConfig`.
//!
//! The layers are the same typed structs (`cli::ConnectionArgs`, `cli::MeasureArgs`), filled by clap
//! and by serde. They are merged generically (a flag given wins, key by key), and every value
//! remembers where it came from (`Origins`), so a value that is well-formed but not acceptable
//! (a max cooldown below the min, a matrix of a million cells) is reported against the flag or the
//! file key that set it. The resolved config is written into run.json in full, so a result file
//! always says exactly what it was measured with, and `--resume` reads it back from there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::{ConnectionArgs, MeasureArgs, PhysicsArgs, SweepArgs};
use crate::exit::Failure;
use ttft_model::record::{CacheState, Mode};
use ttft_results::plan::Matrix;
pub(crate) mod load;
pub(crate) mod report;
pub(crate) mod scenario_file;
pub(crate) mod verify;
use scenario_file::ScenarioFile;
use ttft_model::spec::{Api, StaggerDelay, ThermalChoice};

pub(crate) const DEFAULT_CONTEXTS: [u32; 3] = [1024, 2048, 4096];
pub(crate) const DEFAULT_RUNS: u32 = 3;
/// `--preset auto`, the default: the preset of the server detected at preflight (`detect`).
pub(crate) const AUTO_PRESET: &str = "auto";
pub(crate) const DEFAULT_OUTPUT_TOKENS: u32 = 64;
pub(crate) const DEFAULT_TIMEOUT_S: f64 = 600.0;
pub(crate) const DEFAULT_SEED: u64 = 20_260_208;
pub(crate) const DEFAULT_MAX_RESTARTS: u32 = 3;
/// How long a `--server-cmd` server may take to answer at start: a large model read from a cold
/// disk onto a GPU takes minutes.
pub(crate) const DEFAULT_SERVER_START_TIMEOUT_S: f64 = 300.0;

fn default_server_start_timeout_s() -> f64 {
    DEFAULT_SERVER_START_TIMEOUT_S
}

fn default_max_restarts() -> u32 {
    DEFAULT_MAX_RESTARTS
}
pub(crate) const DEFAULT_STAGGER_SHARE: f64 = 0.5;
/// The probe policy's minimum wait after a measurement. None by default: the probe itself says
/// when decode speed is back (a fixed 10 s minimum made 98% of an 18-cell CPU sweep waiting).
/// A scenario that reproduces a study keeps that study's minimum (`scenarios/paper.toml`: 10 s).
pub(crate) const DEFAULT_MIN_COOLDOWN_S: f64 = 0.0;
pub(crate) const DEFAULT_MAX_COOLDOWN_S: f64 = 240.0;
pub(crate) const DEFAULT_STAGGER_CONTEXT: u32 = 4096;
/// The smallest prompt a cell can be measured with. The nonce line and the question take about 30
/// tokens on common tokenizers and a chat template up to 30 more, so below this no prompt has room
/// for any text and every cell would fail its sizing: refused with the flag instead.
pub(crate) const MIN_CONTEXT_TOKENS: u32 = 64;
/// More cells than this is a typo, not a plan (the origin's paper matrix is 204).
pub(crate) const MAX_CELLS: usize = 100_000;

/// How the sweep waits between measurements so heat does not leak from one into the next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum ThermalPolicy {
    /// Probe decode speed until it is within tolerance of the baseline.
    Probe {
        tolerance: f64,
        min_cooldown_s: f64,
        max_cooldown_s: f64,
    },
    /// Sleep a fixed time after every measurement.
    Fixed {
        cooldown_s: f64,
    },
    Off,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StaggerConfig {
    /// A fixed delay of B after A, ms; null when the delay is a share of A's duration.
    pub delay_ms: Option<f64>,
    /// B's delay as a share of A's end-to-end time (calibrated before the first pair).
    #[serde(default)]
    pub delay_share_of_a: Option<f64>,
    pub context_tokens: u32,
    pub runs: u32,
}

/// Inputs of the physical ceilings, as given; `physics` turns them into numbers.
pub(crate) type PhysicsInputs = PhysicsArgs;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepConfig {
    /// The server URL as written out: credentials removed (`secrets::redact_url`).
    pub server: String,
    /// The URL bench connects to (credentials included); never serialized.
    #[serde(skip)]
    pub server_url: String,
    /// None until resolved from the server's /v1/models.
    pub model: Option<String>,
    pub api: Api,
    pub preset: String,
    pub scenario_file: Option<PathBuf>,
    pub contexts: Vec<u32>,
    pub modes: Vec<Mode>,
    pub cache_states: Vec<CacheState>,
    pub batch_sizes: Vec<u32>,
    /// Contexts above this are not measured with batch size > 1.
    pub concurrent_max_context: Option<u32>,
    pub runs: u32,
    pub output_tokens: u32,
    pub request_timeout_s: f64,
    /// The variable's NAME; the key is read at start and never stored.
    pub api_key_env: Option<String>,
    /// The command that starts the server (`--server-cmd`), when bench runs it itself. Written
    /// out with its secrets masked (`secrets::redact_command`): a resume passes it again.
    #[serde(default, serialize_with = "redacted_command")]
    pub server_cmd: Option<String>,
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    /// How long a `--server-cmd` server may take to answer at start (`--server-start-timeout`).
    #[serde(default = "default_server_start_timeout_s")]
    pub server_start_timeout_s: f64,
    /// A private CA trusted for https (`--ca-cert`), beside the platform's roots.
    #[serde(default)]
    pub ca_cert: Option<PathBuf>,
    /// Certificate verification off (`--insecure`): recorded so verify can say so.
    #[serde(default)]
    pub insecure: bool,
    pub seed: u64,
    pub out_dir: PathBuf,
    pub staggered: Option<StaggerConfig>,
    pub thermal: ThermalPolicy,
    pub physics: PhysicsInputs,
    /// The slice of the matrix this run measures (`--shard`); absent when it measures all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// `--reuse-primes`: one session lifecycle measures cold, warm and hot of a (context, mode, run).
    #[serde(default)]
    pub reuse_primes: bool,
    /// The server's slot save directory on this host (`--slot-dir`, `--slot-save-path DIR` in
    /// `--server-cmd`, or the preset's `slot_dir`): where a warm session's saved file is found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_dir: Option<PathBuf>,
    /// Warm cells planned: `evicted` when every saved session is dropped from the OS page cache
    /// before its restore (the restore reads the disk), `unknown` when bench cannot reach the
    /// saved file (the restore may read memory). Each warm record says the same for itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache: Option<ttft_model::record::PageCache>,
    /// `--extra-body`: merged into every request body (never one of bench's own keys).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, Value>,
    /// `--temperature` of every request; 0 (greedy) unless given.
    #[serde(default)]
    pub temperature: f64,
    /// `--header` lines (`Name: value`) sent with every request. Written out with credential
    /// values masked (`secrets::redact_header`): a resume passes them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty", serialize_with = "redacted_headers")]
    pub headers: Vec<String>,
    /// `--warmup`: discarded requests before the thermal baseline (runs before the flag had one).
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// `--runs auto`: `runs` is then the most runs of a cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_auto: Option<AutoRuns>,
    /// `--dataset`: the file (path, size, CRC-32) and the rows measured, each with its token
    /// count once the server counted it. It replaces `contexts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<crate::dataset::Dataset>,
    /// `--turns`: hot measures this turn (absent in run.json: the default, 3).
    #[serde(default = "default_turns", skip_serializing_if = "is_default_turns")]
    pub turns: u32,
    /// `--think-time`: the pause between a hot conversation's turns, ms (absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub think_time_ms: f64,
    /// `--request-bodies`: every measured request's exact body goes to request-bodies.jsonl in
    /// the run directory, for a client other than bench to replay (scripts/parity.py).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub request_bodies: bool,
}

pub(crate) const DEFAULT_WARMUP: u32 = 1;
pub(crate) const DEFAULT_TARGET_CI: f64 = 0.05;
pub(crate) const DEFAULT_MIN_RUNS: u32 = 5;
pub(crate) const DEFAULT_MAX_RUNS: u32 = 30;

/// `--runs auto`: each matrix point is repeated until the 95% interval of its median TTFT (E2E
/// for non-streaming) lies within `target_ci` of the median on both sides, after at least
/// `min_runs` and at most `max_runs` runs (the matrix's `runs` is `max_runs`; the runs a point
/// did not need are skipped). As criterion and hyperfine do, the sample decides its own size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoRuns {
    /// A share of the median (0.05 is 5%).
    pub target_ci: f64,
    pub min_runs: u32,
    pub max_runs: u32,
}

/// Why a `--target-ci` is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShareError {
    #[error(transparent)]
    NotANumber(#[from] ttft_model::spec::SpecError),
    /// The text as given (trimmed).
    #[error("{0:?} must be above 0% and below 100% (e.g. 5%)")]
    OutOfRange(String),
}

/// `--target-ci`: `5%` or `0.05`, above 0 and below 1.
fn parse_share(text: &str) -> Result<f64, ShareError> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => ttft_model::spec::finite(p).map(|v| v / 100.0),
        None => ttft_model::spec::finite(t),
    }?;
    if value > 0.0 && value < 1.0 { Ok(value) } else { Err(ShareError::OutOfRange(t.to_string())) }
}

/// The `--runs auto` settings, or None for a fixed number of runs (the auto-only flags are then
/// refused: they would do nothing).
pub(crate) fn validate_auto_runs(
    plan: &MeasureArgs,
    origins: &Origins,
) -> Result<Option<AutoRuns>, ConfigError> {
    if plan.runs != Some(ttft_model::spec::Runs::Auto) {
        for key in ["target_ci", "min_runs", "max_runs"] {
            if origins.flags.contains(key) || origins.keys.contains(key) {
                return Err(origins.invalid(key, "applies only with --runs auto"));
            }
        }
        return Ok(None);
    }
    let target_ci = match &plan.target_ci {
        Some(t) => parse_share(t).map_err(|e| origins.invalid("target_ci", e.to_string()))?,
        None => DEFAULT_TARGET_CI,
    };
    let min_runs = plan.min_runs.map_or(DEFAULT_MIN_RUNS, |c| c.0);
    let max_runs = plan.max_runs.map_or(DEFAULT_MAX_RUNS, |c| c.0);
    if max_runs < min_runs {
        return Err(origins.invalid("max_runs", format!("{max_runs} is below --min-runs ({min_runs})")));
    }
    Ok(Some(AutoRuns { target_ci, min_runs, max_runs }))
}

fn default_warmup() -> u32 {
    DEFAULT_WARMUP
}

/// Request body keys bench sets itself, and the flag that sets each: `--extra-body` may not
/// replace them (a body with another `max_tokens` or `stream` would measure something else than
/// the record says).
pub(crate) const OWNED_BODY_KEYS: [(&str, &str); 9] = [
    ("model", "--model"),
    ("messages", "--contexts"),
    ("prompt", "--contexts"),
    ("stream", "--modes"),
    ("stream_options", "--modes (bench asks for usage in every stream)"),
    ("max_tokens", "--output-tokens"),
    ("max_completion_tokens", "--output-tokens"),
    ("temperature", "--temperature"),
    ("n", "nothing: bench measures one choice per request"),
];

/// Request headers bench sets itself (framing and content negotiation).
const OWNED_HEADERS: [&str; 6] =
    ["content-type", "content-length", "host", "accept", "connection", "transfer-encoding"];

/// `headers` as written out: credential values masked.
fn redacted_headers<S: serde::Serializer>(headers: &[String], s: S) -> Result<S::Ok, S::Error> {
    headers.iter().map(|h| ttft_model::secrets::redact_header(h)).collect::<Vec<_>>().serialize(s)
}

/// Why a `--header` line is refused. It never holds the header's value: a credential's would be
/// shown wherever the error is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeaderError {
    /// The line as `secrets::redact_header` shows it.
    #[error("{0:?} is not 'Name: value'")]
    NotNameValue(String),
    #[error("{0:?} is not an HTTP header name")]
    BadName(String),
    /// The header's name.
    #[error("the value of {0} is not a valid HTTP header value")]
    BadValue(String),
    #[error("{0} is set by bench itself")]
    Owned(String),
}

/// The name and value of a `--header` line, checked as HTTP allows them.
pub(crate) fn parse_header(line: &str) -> Result<(String, String), HeaderError> {
    let Some((name, value)) = line.split_once(':') else {
        return Err(HeaderError::NotNameValue(ttft_model::secrets::redact_header(line)));
    };
    let (name, value) = (name.trim(), value.trim());
    reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| HeaderError::BadName(name.into()))?;
    reqwest::header::HeaderValue::from_str(value).map_err(|_| HeaderError::BadValue(name.into()))?;
    if OWNED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(HeaderError::Owned(name.into()));
    }
    Ok((name.to_string(), value.to_string()))
}

/// An `--extra-body` key bench sets itself, and the flag that sets it (`OWNED_BODY_KEYS`).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key:?} is set by bench itself (use {flag}), not by --extra-body")]
pub(crate) struct OwnedBodyKey {
    pub key: &'static str,
    pub flag: &'static str,
}

/// The extra body, unless it names a key bench sets itself.
pub(crate) fn validate_extra_body(body: &serde_json::Map<String, Value>) -> Result<(), OwnedBodyKey> {
    match OWNED_BODY_KEYS.iter().find(|(key, _)| body.contains_key(*key)) {
        None => Ok(()),
        Some(&(key, flag)) => Err(OwnedBodyKey { key, flag }),
    }
}

/// One constant for the sweep and for reading run.json back (merge compares it).
pub(crate) use ttft_results::results::run_meta::DEFAULT_TURNS;

fn default_turns() -> u32 {
    DEFAULT_TURNS
}

fn is_default_turns(turns: &u32) -> bool {
    *turns == DEFAULT_TURNS
}

fn is_zero(ms: &f64) -> bool {
    *ms == 0.0
}

/// `server_cmd` as written out: never with its keys, whatever file or output it goes to.
fn redacted_command<S: serde::Serializer>(command: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    command.as_deref().map(ttft_model::secrets::redact_command).serialize(s)
}

impl SweepConfig {
    /// The matrix this config measures.
    pub fn matrix(&self) -> Matrix {
        Matrix {
            contexts: self.contexts.clone(),
            modes: self.modes.clone(),
            cache_states: self.cache_states.clone(),
            batch_sizes: self.batch_sizes.clone(),
            runs: self.runs,
            concurrent_max_context: self.concurrent_max_context,
            staggered: self.staggered.as_ref().map(|s| (s.context_tokens, s.runs)),
            reuse_primes: self.reuse_primes,
            dataset_rows: self
                .dataset
                .iter()
                .flat_map(|d| &d.rows)
                .map(|r| (r.row, r.tokens.unwrap_or(0)))
                .collect(),
        }
    }
}

/// A setting that cannot be used, named by the flag or file key it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--scenario {path}: {message}")]
    Scenario { path: String, message: String },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("{0}")]
    Missing(String),
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Failure {
        Failure::usage(e.to_string())
    }
}

/// Where each setting came from: a flag, a scenario key, or the default.
pub(crate) struct Origins {
    file: Option<PathBuf>,
    flags: BTreeSet<String>,
    keys: BTreeSet<String>,
}

impl Origins {
    /// `--runs`, `scenarios/x.toml: runs`, or `default runs`.
    pub(crate) fn of(&self, key: &str) -> String {
        if self.flags.contains(key) {
            format!("--{}", key.replace('_', "-"))
        } else if let (true, Some(file)) = (self.keys.contains(key), &self.file) {
            format!("{}: {key}", file.display())
        } else {
            format!("default {key}")
        }
    }

    fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { origin: self.of(key), message: message.into() }
    }
}

/// The keys a layer sets (non-null in its serialized form).
fn given<T: Serialize>(layer: &T) -> BTreeSet<String> {
    match serde_json::to_value(layer) {
        Ok(Value::Object(map)) => map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k).collect(),
        _ => BTreeSet::new(),
    }
}

/// `top` over `base`, key by key: a value `top` sets wins. Generic over the layer types, so a new
/// setting needs no merge code of its own.
fn overlay<T: Serialize + DeserializeOwned>(top: &T, base: &T) -> Result<T, ConfigError> {
    let internal = |e: serde_json::Error| ConfigError::Missing(format!("cannot merge settings: {e}"));
    let mut merged = serde_json::to_value(base).map_err(internal)?;
    if let (Value::Object(m), Value::Object(t)) = (&mut merged, serde_json::to_value(top).map_err(internal)?)
    {
        m.extend(t.into_iter().filter(|(_, v)| !v.is_null()));
    }
    serde_json::from_value(merged).map_err(internal)
}

/// The plan and connection layers of a sweep, merged, with their origins.
pub(crate) struct Layered {
    pub connection: ConnectionArgs,
    pub measure: MeasureArgs,
    pub origins: Origins,
}

pub(crate) fn layered(args: &SweepArgs) -> Result<Layered, ConfigError> {
    let file = match &args.scenario {
        Some(path) => scenario_file::load(path)?,
        None => ScenarioFile::default(),
    };
    let mut flags = given(&args.connection);
    flags.extend(given(&args.measure));
    let mut keys = given(&file.connection);
    keys.extend(given(&file.measure));
    Ok(Layered {
        connection: overlay(&args.connection, &file.connection)?,
        measure: overlay(&args.measure, &file.measure)?,
        origins: Origins { file: args.scenario.clone(), flags, keys },
    })
}

/// Validates the merged layers of a new sweep into its config.
pub fn resolve(args: &SweepArgs) -> Result<SweepConfig, ConfigError> {
    resolve_with(args, true)
}

/// The same, for a config that contacts no server (`bench plan --from RUN`): the server may be
/// absent, and is then empty.
pub(crate) fn resolve_offline(args: &SweepArgs) -> Result<SweepConfig, ConfigError> {
    resolve_with(args, false)
}

fn resolve_with(args: &SweepArgs, need_server: bool) -> Result<SweepConfig, ConfigError> {
    let Layered { connection, measure: plan, origins } = layered(args)?;
    let matrix = validate_matrix(&plan, &origins)?;
    let server = match (&connection.server, &connection.server_cmd, need_server) {
        (Some(_), Some(_), _) => {
            return Err(origins.invalid("server_cmd", "give --server or --server-cmd, not both"));
        }
        (Some(server), None, _) => {
            let checked = validate_server(server).map_err(|e| origins.invalid("server", e.to_string()))?;
            if let Some(note) = &checked.note {
                eprintln!("{note}");
            }
            checked.url
        }
        // Known once the command has started it (`supervise`).
        (None, Some(_), _) | (None, None, false) => String::new(),
        (None, None, true) => {
            return Err(ConfigError::Missing(
                "--server (or --server-cmd) is required (or `server = ...` in the scenario file, or \
                 TTFT_BENCH_SERVER)"
                    .into(),
            ));
        }
    };
    let thermal = validate_thermal(&plan, &origins)?;
    // The files named by flags are looked at before anything is created or contacted: a FIFO, a
    // device or an oversized CA bundle is bad input, named with its flag, not a hang mid-run.
    let named_files = [
        ("ca_cert", connection.ca_cert.as_deref(), Some(ttft_model::input_file::Limit::CA_BUNDLE)),
        // Only the header of a GGUF is read (however large the model), so no size is checked here.
        ("model_file", plan.physics.model_file.as_deref(), None),
    ];
    for (key, path, limit) in named_files {
        if let Some(path) = path {
            ttft_model::input_file::check(path, limit)
                .map_err(|e| origins.invalid(key, format!("{}: {e}", path.display())))?;
        }
    }
    let dataset = validate_dataset(args, &plan, &origins)?;
    let turns = plan.workload.turns.map_or(DEFAULT_TURNS, |c| c.0);
    if turns < 2 {
        return Err(origins.invalid(
            "turns",
            "hot needs at least 2 turns: turn 1 builds the cache the last turn is measured on",
        ));
    }
    // Secrets are known before anything is written or printed: the key of --api-key-env may also
    // be spelled out in --server-cmd, and the command's own keys may show up in its stderr.
    if let Some(var) = &connection.api_key_env
        && let Ok(key) = std::env::var(var)
    {
        ttft_model::secrets::register(&key);
    }
    if let Some(cmd) = &connection.server_cmd {
        ttft_model::secrets::redact_command(cmd);
    }
    let headers = connection.header.clone().unwrap_or_default();
    for line in &headers {
        ttft_model::secrets::redact_header(line);
        parse_header(line).map_err(|e| origins.invalid("header", e.to_string()))?;
    }
    let extra_body = plan.extra_body.clone().map(|b| b.0).unwrap_or_default();
    validate_extra_body(&extra_body).map_err(|e| origins.invalid("extra_body", e.to_string()))?;
    // A field named for a credential (`api_key`) travels in every body: its value is a secret.
    ttft_model::secrets::register_secret_fields(&Value::Object(extra_body.clone()));
    let runs_auto = validate_auto_runs(&plan, &origins)?;
    let temperature = plan.temperature.unwrap_or(0.0);
    if temperature < 0.0 {
        return Err(origins.invalid("temperature", format!("{temperature} must be at least 0")));
    }
    Ok(SweepConfig {
        server: ttft_model::secrets::redact_url(&server),
        server_url: server,
        model: plan.target.model.clone(),
        api: plan.target.api.unwrap_or(Api::Openai),
        preset: plan.target.preset.clone().unwrap_or_else(|| AUTO_PRESET.to_string()),
        scenario_file: args.scenario.clone(),
        // A dataset replaces the contexts: its rows are the context axis (`matrix`).
        contexts: if dataset.is_some() { Vec::new() } else { matrix.contexts },
        modes: matrix.modes,
        cache_states: matrix.cache_states,
        batch_sizes: matrix.batch_sizes,
        concurrent_max_context: matrix.concurrent_max_context,
        runs: matrix.runs,
        output_tokens: plan.sizes.output_tokens.map_or(DEFAULT_OUTPUT_TOKENS, |c| c.0),
        request_timeout_s: validate_timeout(&connection, &origins)?,
        api_key_env: connection.api_key_env.clone(),
        server_cmd: connection.server_cmd.clone(),
        max_restarts: connection.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS),
        server_start_timeout_s: validate_start_timeout(&connection, &origins)?,
        ca_cert: connection.ca_cert.clone(),
        insecure: connection.insecure,
        seed: plan.workload.seed.unwrap_or(DEFAULT_SEED),
        out_dir: args.output.out.clone().unwrap_or_else(|| PathBuf::from("results")),
        staggered: stagger_config(&plan),
        thermal,
        physics: plan.physics.clone(),
        shard: None,
        reuse_primes: matrix.reuse_primes,
        slot_dir: plan.slot_dir.clone().or_else(|| connection.server_cmd.as_deref().and_then(slot_save_path)),
        page_cache: None,
        extra_body,
        temperature,
        headers,
        warmup: plan.warmup.unwrap_or(DEFAULT_WARMUP),
        runs_auto,
        dataset,
        turns,
        think_time_ms: plan.workload.think_time.map_or(0.0, |s| s.secs() * 1000.0),
        request_bodies: args.request_bodies,
    })
}

/// `--dataset`, read whole (every row checked) and sampled. It replaces `--contexts`, so both
/// given is refused; so is `--shard` (a shard's cells are dealt before the rows are counted).
fn validate_dataset(
    args: &SweepArgs,
    plan: &MeasureArgs,
    origins: &Origins,
) -> Result<Option<crate::dataset::Dataset>, ConfigError> {
    let Some(path) = &plan.workload.dataset else {
        if plan.workload.dataset_limit.is_some() {
            return Err(origins.invalid("dataset_limit", "needs --dataset"));
        }
        if plan.workload.dataset_strict {
            return Err(origins.invalid("dataset_strict", "needs --dataset"));
        }
        if plan.workload.dataset_output_tokens {
            return Err(origins.invalid("dataset_output_tokens", "needs --dataset"));
        }
        return Ok(None);
    };
    if plan.sizes.contexts.is_some() {
        return Err(origins.invalid(
            "contexts",
            "--dataset replaces --contexts (each row is measured at its own length): give one of them",
        ));
    }
    if args.shard.is_some() {
        return Err(origins.invalid("dataset", "a dataset sweep cannot be sharded (yet): drop --shard"));
    }
    let seed = plan.workload.seed.unwrap_or(DEFAULT_SEED);
    let reading = crate::dataset::Reading {
        strict: plan.workload.dataset_strict,
        output_tokens_from_rows: plan.workload.dataset_output_tokens,
    };
    crate::dataset::Dataset::load(path, plan.workload.dataset_limit.map(|c| c.0), seed, reading)
        .map(Some)
        .map_err(|e| ConfigError::Missing(e.to_string()))
}

/// The directory a llama-server command line saves slots to (`--slot-save-path DIR` or
/// `--slot-save-path=DIR`), quotes removed; None when it names none.
pub(crate) fn slot_save_path(command: &str) -> Option<PathBuf> {
    const FLAG: &str = "--slot-save-path";
    let mut words = command.split_whitespace();
    while let Some(word) = words.next() {
        let value = match word.strip_prefix(FLAG) {
            Some("") => words.next(),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        if let Some(v) = value.map(|v| v.trim_matches(|c| c == '"' || c == '\'')).filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(v));
        }
    }
    None
}

/// A server address bench cannot use; it holds the address with any password redacted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadServerUrl(String);

/// A server address as bench will use it, and what was changed in it (for a note on stderr).
#[derive(Debug, PartialEq)]
pub(crate) struct ServerUrl {
    pub url: String,
    pub note: Option<String>,
}

/// `http://` or `https://` with a host and a port that exists (a bad address is bad input, not an
/// unreachable server), without a trailing slash. A trailing `/v1` is dropped: it is the base URL
/// an OpenAI SDK takes, while bench appends the API's own `/v1/...` paths, so keeping it would
/// ask for `/v1/v1/models`.
pub(crate) fn validate_server(server: &str) -> Result<ServerUrl, BadServerUrl> {
    let server = server.trim().trim_end_matches('/');
    let shown = || ttft_model::secrets::redact_url(server);
    if !(server.starts_with("http://") || server.starts_with("https://")) {
        return Err(BadServerUrl(format!("{:?} must start with http:// or https://", shown())));
    }
    let parsed = reqwest::Url::parse(server)
        .map_err(|e| BadServerUrl(format!("{:?} is not a usable URL: {e}", shown())))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(BadServerUrl(format!("{:?} names no host", shown())));
    }
    // Port 0 is "any free port" to a server binding one, never a port a client can reach.
    if parsed.port() == Some(0) {
        return Err(BadServerUrl(format!("{:?} names port 0, which no server listens on", shown())));
    }
    match server.strip_suffix("/v1").map(|base| base.trim_end_matches('/')) {
        Some(base) if base.len() > "https://".len() && parsed.query().is_none() => Ok(ServerUrl {
            url: base.to_string(),
            note: Some(format!(
                "note: --server {:?}: the trailing /v1 is dropped (bench adds the API's /v1/... paths \
                 itself); using {:?}",
                shown(),
                ttft_model::secrets::redact_url(base)
            )),
        }),
        _ => Ok(ServerUrl { url: server.to_string(), note: None }),
    }
}

pub(crate) fn validate_timeout(connection: &ConnectionArgs, origins: &Origins) -> Result<f64, ConfigError> {
    let secs = connection.request_timeout.map_or(DEFAULT_TIMEOUT_S, |s| s.secs());
    if secs <= 0.0 {
        return Err(origins.invalid("request_timeout", "must be more than 0"));
    }
    Ok(secs)
}

pub(crate) fn validate_start_timeout(
    connection: &ConnectionArgs,
    origins: &Origins,
) -> Result<f64, ConfigError> {
    let secs = connection.server_start_timeout.map_or_else(default_server_start_timeout_s, |s| s.secs());
    if secs <= 0.0 {
        return Err(origins.invalid("server_start_timeout", "must be more than 0"));
    }
    Ok(secs)
}

fn stagger_config(plan: &MeasureArgs) -> Option<StaggerConfig> {
    if plan.staggered != Some(true) {
        return None;
    }
    let (delay_ms, delay_share_of_a) = match plan.stagger_delay {
        None => (None, Some(DEFAULT_STAGGER_SHARE)),
        Some(StaggerDelay::Fixed(span)) => (Some(span.secs() * 1000.0), None),
        Some(StaggerDelay::ShareOfA(share)) => (None, Some(share)),
    };
    Some(StaggerConfig {
        delay_ms,
        delay_share_of_a,
        context_tokens: plan.stagger_context.map_or(DEFAULT_STAGGER_CONTEXT, |t| t.0),
        runs: plan.stagger_runs.map_or(DEFAULT_RUNS, |c| c.0),
    })
}

fn list_or<T: Clone>(value: &Option<ttft_model::spec::List<T>>, default: Vec<T>) -> Vec<T> {
    value.as_ref().map_or(default, |l| l.0.clone())
}

/// The matrix part of a plan: what `bench merge --expect` needs, no server involved.
pub(crate) fn validate_matrix(plan: &MeasureArgs, origins: &Origins) -> Result<Matrix, ConfigError> {
    let matrix = Matrix {
        contexts: plan.sizes.contexts.as_ref().map_or(DEFAULT_CONTEXTS.to_vec(), |c| c.0.clone()),
        modes: list_or(&plan.modes, vec![Mode::Streaming]),
        cache_states: list_or(&plan.cache_states, vec![CacheState::Cold]),
        batch_sizes: plan.batch_sizes.as_ref().map_or(vec![1], |l| l.0.iter().map(|c| c.0).collect()),
        runs: match plan.runs {
            None => DEFAULT_RUNS,
            Some(ttft_model::spec::Runs::Fixed(n)) => n,
            Some(ttft_model::spec::Runs::Auto) => plan.max_runs.map_or(DEFAULT_MAX_RUNS, |c| c.0),
        },
        concurrent_max_context: plan.concurrent_max_context.map(|t| t.0),
        staggered: stagger_config(plan).map(|s| (s.context_tokens, s.runs)),
        reuse_primes: plan.reuse_primes != Some(false),
        dataset_rows: vec![],
    };
    let small = |key: &str, tokens: u32| {
        origins.invalid(
            key,
            format!(
                "a context of {tokens} tokens is too small: the nonce, the question and the chat \
                 template alone take up to {MIN_CONTEXT_TOKENS} (give at least {MIN_CONTEXT_TOKENS})"
            ),
        )
    };
    if let Some(&tokens) = matrix.contexts.iter().find(|&&c| c < MIN_CONTEXT_TOKENS) {
        return Err(small("contexts", tokens));
    }
    if let Some((tokens, _)) = matrix.staggered.filter(|(c, _)| *c < MIN_CONTEXT_TOKENS) {
        return Err(small("stagger_context", tokens));
    }
    let cells = matrix.cell_count();
    if cells > MAX_CELLS {
        let key = ["runs", "contexts", "batch_sizes", "stagger_runs"]
            .into_iter()
            .find(|k| origins.flags.contains(*k) || origins.keys.contains(*k))
            .unwrap_or("runs");
        return Err(origins.invalid(
            key,
            format!(
                "the matrix has {cells} cells, more than the limit of {MAX_CELLS}: is a number mistyped?"
            ),
        ));
    }
    Ok(matrix)
}

fn validate_thermal(plan: &MeasureArgs, origins: &Origins) -> Result<ThermalPolicy, ConfigError> {
    let t = &plan.thermal;
    match t.thermal.unwrap_or(ThermalChoice::Probe) {
        ThermalChoice::Off => Ok(ThermalPolicy::Off),
        ThermalChoice::Fixed(span) => Ok(ThermalPolicy::Fixed { cooldown_s: span.secs() }),
        ThermalChoice::Probe => {
            let tolerance = t.tolerance.unwrap_or(0.20);
            if !(0.0..1.0).contains(&tolerance) {
                return Err(origins.invalid(
                    "tolerance",
                    format!("{tolerance} must be at least 0 and below 1 (e.g. 0.20)"),
                ));
            }
            let min_cooldown_s = t.min_cooldown.map_or(DEFAULT_MIN_COOLDOWN_S, |s| s.secs());
            let max_cooldown_s = t.max_cooldown.map_or(DEFAULT_MAX_COOLDOWN_S, |s| s.secs());
            if max_cooldown_s < min_cooldown_s {
                return Err(origins.invalid(
                    "max_cooldown",
                    format!("{max_cooldown_s}s is shorter than the minimum cooldown ({min_cooldown_s}s)"),
                ));
            }
            Ok(ThermalPolicy::Probe { tolerance, min_cooldown_s, max_cooldown_s })
        }
    }
}

/// What a scenario file expects of a merged result: its matrix, model and output tokens.
pub struct Expectation {
    pub matrix: Matrix,
    pub model: Option<String>,
    pub output_tokens: u32,
}

/// Reads a scenario file the way `bench sweep` would, without a server.
pub(crate) fn expectation(path: &Path) -> Result<Expectation, ConfigError> {
    let file = scenario_file::load(path)?;
    let origins =
        Origins { file: Some(path.to_path_buf()), flags: BTreeSet::new(), keys: given(&file.measure) };
    Ok(Expectation {
        matrix: validate_matrix(&file.measure, &origins)?,
        model: file.measure.target.model.clone(),
        output_tokens: file.measure.sizes.output_tokens.map_or(DEFAULT_OUTPUT_TOKENS, |c| c.0),
    })
}

/// The shard of a run, as run.json records it (in `config.shard`, so `--resume` keeps it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    /// 1-based: shard `index` of `count`.
    pub index: u32,
    pub count: u32,
    /// Where index and count came from (a flag or the scheduler's environment variables).
    pub origin: String,
    /// The partition rule (`crate::shard::RULE`).
    pub rule: String,
    /// Units (matrix points with their runs; the staggered pairs) and cells of this shard.
    pub units: usize,
    pub cells: usize,
    /// This shard's share of the matrix's nominal cost (1/count when perfectly balanced).
    pub cost_share: f64,
}

#[cfg(test)]
mod tests;
