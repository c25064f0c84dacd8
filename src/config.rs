//! Raw inputs (scenario TOML + flags) -> one validated `SweepConfig`.
//!
//! Precedence: flag > scenario file > default. The resolved config is written into run.json in
//! full, so a result file always says exactly what it was measured with, and `--resume` reads it
//! back from there.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cli::SweepArgs;
use crate::record::{CacheState, Mode};
use crate::scenario::{ListValue, ScenarioFile, load_scenario};
use crate::spec;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    Openai,
    Anthropic,
}

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
    pub delay_ms: f64,
    pub context_tokens: u32,
    pub runs: u32,
}

/// Inputs of the physical ceilings, as given; `physics` turns them into numbers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhysicsInputs {
    pub hardware: Option<String>,
    pub bandwidth_gbps: Option<f64>,
    pub tflops: Option<f64>,
    pub model_bytes: Option<String>,
    pub params: Option<String>,
    pub model_file: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepConfig {
    pub server: String,
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
    pub seed: u64,
    pub out_dir: PathBuf,
    pub staggered: Option<StaggerConfig>,
    pub thermal: ThermalPolicy,
    pub physics: PhysicsInputs,
}

pub const DEFAULT_CONTEXTS: &str = "1024..4096";
pub const DEFAULT_OUTPUT_TOKENS: u32 = 64;
pub const DEFAULT_TIMEOUT: &str = "600s";
pub const DEFAULT_SEED: u64 = 20_260_208;

pub fn parse_mode(s: &str) -> Option<Mode> {
    match s {
        "streaming" | "stream" => Some(Mode::Streaming),
        "non-streaming" | "non_streaming" | "nonstreaming" => Some(Mode::NonStreaming),
        _ => None,
    }
}

pub fn parse_cache_state(s: &str) -> Option<CacheState> {
    match s {
        "cold" => Some(CacheState::Cold),
        "warm" => Some(CacheState::Warm),
        "hot" => Some(CacheState::Hot),
        _ => None,
    }
}

/// Picks the flag when given, else the scenario key; keeps the name of whichever was used so
/// that a bad value is reported against the right source.
fn pick<T: Clone>(
    flag: &Option<T>,
    flag_name: &str,
    file: Option<T>,
    key: &str,
    file_name: &str,
) -> Option<(T, String)> {
    match (flag, file) {
        (Some(v), _) => Some((v.clone(), flag_name.to_string())),
        (None, Some(v)) => Some((v, format!("{file_name}: {key}"))),
        (None, None) => None,
    }
}

pub fn resolve(args: &SweepArgs) -> Result<SweepConfig, String> {
    let file = match &args.scenario {
        Some(path) => load_scenario(path)?,
        None => ScenarioFile::default(),
    };
    let file_name = args.scenario.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let f = &file_name;

    let (server, _) = pick(&args.server, "--server", file.server.clone(), "server", f)
        .ok_or("--server is required (or `server = ...` in the scenario file, or TTFT_BENCH_SERVER)")?;
    let server = server.trim_end_matches('/').to_string();
    if !(server.starts_with("http://") || server.starts_with("https://")) {
        return Err(format!("--server: {server:?} must start with http:// or https://"));
    }

    let api = match pick(&args.api, "--api", file.api.clone(), "api", f) {
        None => Api::Openai,
        Some((s, src)) => match s.as_str() {
            "openai" => Api::Openai,
            "anthropic" => Api::Anthropic,
            _ => return Err(format!("{src}: unknown api {s:?} (allowed: openai, anthropic)")),
        },
    };
    let preset = pick(&args.preset, "--preset", file.preset.clone(), "preset", f)
        .map(|(s, _)| s)
        .unwrap_or_else(|| "openai".to_string());

    let contexts = {
        let (s, src) =
            pick(&args.contexts, "--contexts", file.contexts.as_ref().map(ListValue::as_spec), "contexts", f)
                .unwrap_or((DEFAULT_CONTEXTS.to_string(), "--contexts".into()));
        spec::parse_contexts(&src, &s)?
    };
    let modes = match pick(&args.modes, "--modes", file.modes.as_ref().map(ListValue::as_spec), "modes", f) {
        None => vec![Mode::Streaming],
        Some((s, src)) => spec::parse_name_list(&src, &s, parse_mode, "streaming, non-streaming")?,
    };
    let cache_states = match pick(
        &args.cache_states,
        "--cache-states",
        file.cache_states.as_ref().map(ListValue::as_spec),
        "cache_states",
        f,
    ) {
        None => vec![CacheState::Cold],
        Some((s, src)) => spec::parse_name_list(&src, &s, parse_cache_state, "cold, warm, hot")?,
    };
    let batch_sizes = match pick(
        &args.batch_sizes,
        "--batch-sizes",
        file.batch_sizes.as_ref().map(ListValue::as_spec),
        "batch_sizes",
        f,
    ) {
        None => vec![1],
        Some((s, src)) => spec::parse_positive_list(&src, &s)?,
    };
    let concurrent_max_context = match pick(
        &args.concurrent_max_context,
        "--concurrent-max-context",
        file.concurrent_max_context.as_ref().map(ListValue::as_spec),
        "concurrent_max_context",
        f,
    ) {
        None => None,
        Some((s, src)) => Some(spec::parse_tokens(&src, &s)?),
    };
    let runs = positive(pick(&args.runs, "--runs", file.runs, "runs", f), 3)?;
    let output_tokens = positive(
        pick(&args.output_tokens, "--output-tokens", file.output_tokens, "output_tokens", f),
        DEFAULT_OUTPUT_TOKENS,
    )?;
    let request_timeout_s = duration_s(
        pick(&args.request_timeout, "--request-timeout", file.request_timeout.clone(), "request_timeout", f),
        DEFAULT_TIMEOUT,
    )?;
    if request_timeout_s <= 0.0 {
        return Err("--request-timeout must be more than 0".into());
    }
    let seed = pick(&args.seed, "--seed", file.seed, "seed", f).map(|(v, _)| v).unwrap_or(DEFAULT_SEED);

    let staggered = if args.staggered || file.staggered.unwrap_or(false) {
        let delay_ms = 1000.0
            * duration_s(
                pick(&args.stagger_delay, "--stagger-delay", file.stagger_delay.clone(), "stagger_delay", f),
                "2s",
            )?;
        let context_tokens = match pick(
            &args.stagger_context,
            "--stagger-context",
            file.stagger_context.as_ref().map(ListValue::as_spec),
            "stagger_context",
            f,
        ) {
            None => 4096,
            Some((s, src)) => spec::parse_tokens(&src, &s)?,
        };
        let runs =
            positive(pick(&args.stagger_runs, "--stagger-runs", file.stagger_runs, "stagger_runs", f), 3)?;
        Some(StaggerConfig { delay_ms, context_tokens, runs })
    } else {
        None
    };

    let thermal = resolve_thermal(args, &file, f)?;
    let a = &args.physics;
    let physics = PhysicsInputs {
        hardware: a.hardware.clone().or(file.hardware.clone()),
        bandwidth_gbps: a.bandwidth_gbps.or(file.bandwidth_gbps),
        tflops: a.tflops.or(file.tflops),
        model_bytes: a.model_bytes.clone().or(file.model_bytes.clone()),
        params: a.params.clone().or(file.params.clone()),
        model_file: a.model_file.clone().or(file.model_file.clone()),
    };

    Ok(SweepConfig {
        server,
        model: args.model.clone().or(file.model.clone()),
        api,
        preset,
        scenario_file: args.scenario.clone(),
        contexts,
        modes,
        cache_states,
        batch_sizes,
        concurrent_max_context,
        runs,
        output_tokens,
        request_timeout_s,
        api_key_env: args.api_key_env.clone(),
        seed,
        out_dir: args.out.clone().unwrap_or_else(|| PathBuf::from("results")),
        staggered,
        thermal,
        physics,
    })
}

fn resolve_thermal(args: &SweepArgs, file: &ScenarioFile, f: &str) -> Result<ThermalPolicy, String> {
    let (policy, src) = pick(&args.thermal, "--thermal", file.thermal.clone(), "thermal", f)
        .unwrap_or(("probe".into(), "--thermal".into()));
    if policy == "off" {
        return Ok(ThermalPolicy::Off);
    }
    if let Some(rest) = policy.strip_prefix("fixed:") {
        let cooldown_s = spec::parse_duration(&src, rest)?.as_secs_f64();
        return Ok(ThermalPolicy::Fixed { cooldown_s });
    }
    if policy != "probe" {
        return Err(format!("{src}: unknown thermal policy {policy:?} (allowed: probe, fixed:30s, off)"));
    }
    let tolerance = match pick(&args.tolerance, "--tolerance", file.tolerance, "tolerance", f) {
        None => 0.20,
        Some((t, _)) if (0.0..1.0).contains(&t) => t,
        Some((t, src)) => {
            return Err(format!("{src}: tolerance {t} must be at least 0 and below 1 (e.g. 0.20)"));
        }
    };
    let min_cooldown_s = duration_s(
        pick(&args.min_cooldown, "--min-cooldown", file.min_cooldown.clone(), "min_cooldown", f),
        "10s",
    )?;
    let max_cooldown_s = duration_s(
        pick(&args.max_cooldown, "--max-cooldown", file.max_cooldown.clone(), "max_cooldown", f),
        "240s",
    )?;
    if max_cooldown_s < min_cooldown_s {
        return Err(format!(
            "--max-cooldown ({max_cooldown_s}s) is shorter than --min-cooldown ({min_cooldown_s}s)"
        ));
    }
    Ok(ThermalPolicy::Probe { tolerance, min_cooldown_s, max_cooldown_s })
}

fn positive(value: Option<(u32, String)>, default: u32) -> Result<u32, String> {
    match value {
        None => Ok(default),
        Some((0, src)) => Err(format!("{src}: must be at least 1")),
        Some((v, _)) => Ok(v),
    }
}

fn duration_s(value: Option<(String, String)>, default: &str) -> Result<f64, String> {
    match value {
        None => Ok(spec::parse_duration("default", default)?.as_secs_f64()),
        Some((s, src)) => Ok(spec::parse_duration(&src, &s)?.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SweepArgs {
        SweepArgs { server: Some("http://127.0.0.1:1/".into()), ..Default::default() }
    }

    #[test]
    fn defaults_are_sane() {
        let c = resolve(&args()).unwrap();
        assert_eq!(c.server, "http://127.0.0.1:1");
        assert_eq!(c.contexts, vec![1024, 2048, 4096]);
        assert_eq!(c.modes, vec![Mode::Streaming]);
        assert_eq!(c.cache_states, vec![CacheState::Cold]);
        assert_eq!(c.runs, 3);
        assert_eq!(c.output_tokens, 64);
        assert!(matches!(c.thermal, ThermalPolicy::Probe { tolerance, .. } if tolerance == 0.20));
    }

    #[test]
    fn flags_override_the_scenario_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "contexts = [512, \"1k\"]\nruns = 5\nmodes = \"streaming,non-streaming\"\n")
            .unwrap();
        let mut a = args();
        a.scenario = Some(path);
        a.runs = Some(2);
        let c = resolve(&a).unwrap();
        assert_eq!(c.contexts, vec![512, 1024]);
        assert_eq!(c.runs, 2, "flag wins over file");
        assert_eq!(c.modes, vec![Mode::Streaming, Mode::NonStreaming]);
    }

    #[test]
    fn errors_name_the_file_key_or_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "contexts = \"1k..3k\"\n").unwrap();
        let mut a = args();
        a.scenario = Some(path.clone());
        let err = resolve(&a).unwrap_err();
        assert!(err.contains("bad.toml: contexts"), "{err}");

        std::fs::write(&path, "contextz = 5\n").unwrap();
        let err = resolve(&a).unwrap_err();
        assert!(err.contains("bad.toml") && err.contains("contextz"), "{err}");

        let mut a = args();
        a.modes = Some("streaming,fast".into());
        assert!(resolve(&a).unwrap_err().contains("--modes"));
        let mut a = args();
        a.thermal = Some("cold".into());
        assert!(resolve(&a).unwrap_err().contains("--thermal"));
        let mut a = args();
        a.server = Some("localhost:8080".into());
        assert!(resolve(&a).unwrap_err().contains("--server"));
    }

    #[test]
    fn shipped_scenarios_parse() {
        for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).unwrap() {
            let path = entry.unwrap().path();
            let mut a = args();
            a.scenario = Some(path.clone());
            resolve(&a).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}
