//! Before the first cell: which run (new or resumed), is the server there and what does it say
//! about itself, and the warm-up and thermal baseline.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::Ctx;
use crate::cli::SweepArgs;
use crate::client::{ChatRequest, Client, Message};
use crate::config::{self, SweepConfig, ThermalPolicy};
use crate::exit::Failure;
use crate::meta::{self, Harness, HostFacts, RunMeta, RunStatus, ServerInfo};
use crate::preset::Preset;
use crate::progress::Progress;
use crate::record::{SCHEMA_VERSION, ThermalRecord};
use crate::server;
use crate::store;

/// Resolves the config and the run directory. With `--resume` both come from the run's run.json
/// and only connection settings may be changed.
pub fn resolve_run(args: &SweepArgs) -> Result<(SweepConfig, PathBuf, RunMeta, bool), Failure> {
    let Some(dir) = &args.resume else {
        let config = config::resolve(args).map_err(Failure::usage)?;
        let label: Vec<&str> = config.cache_states.iter().map(|c| c.as_str()).collect();
        let run_id = args.run_id.clone().unwrap_or_else(|| meta::new_run_id(&label.join("-")));
        if run_id.is_empty() || run_id.contains(['/', '\\']) || run_id.starts_with('.') {
            return Err(Failure::usage(format!("--run-id {run_id:?}: must be a plain directory name")));
        }
        let run_dir = super::run_dir_for(&config, &run_id);
        if run_dir.join(store::MEASUREMENTS_FILE).exists() {
            return Err(Failure::usage(format!(
                "{} already holds measurements; finish it with --resume {0} or choose another --run-id",
                run_dir.display()
            )));
        }
        let meta = RunMeta {
            schema_version: SCHEMA_VERSION,
            run_id,
            harness: Harness::current(),
            started_at: meta::now_rfc3339(),
            ended_at: None,
            status: RunStatus::Running,
            resumed_at: Vec::new(),
            config: config.clone(),
            server: ServerInfo::default(),
            host: HostFacts::collect(),
            prompt_sizing: None,
            thermal_baseline: None,
            physics: None,
        };
        return Ok((config, run_dir, meta, false));
    };
    let fixed = [
        ("--scenario", args.scenario.is_some()),
        ("--contexts", args.contexts.is_some()),
        ("--modes", args.modes.is_some()),
        ("--cache-states", args.cache_states.is_some()),
        ("--batch-sizes", args.batch_sizes.is_some()),
        ("--runs", args.runs.is_some()),
        ("--output-tokens", args.output_tokens.is_some()),
        ("--model", args.model.is_some()),
        ("--preset", args.preset.is_some()),
        ("--run-id", args.run_id.is_some()),
        ("--staggered", args.staggered),
    ];
    if let Some((flag, _)) = fixed.iter().find(|(_, given)| *given) {
        return Err(Failure::usage(format!(
            "{flag} cannot be combined with --resume: the matrix comes from the run's run.json"
        )));
    }
    let path = dir.join(store::RUN_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Failure::usage(format!("--resume {}: cannot read {}: {e}", dir.display(), path.display()))
    })?;
    let mut meta: RunMeta = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{}:{}: not a bench run.json: {e}", path.display(), e.line())))?;
    if let Some(server) = &args.server {
        meta.config.server = server.trim_end_matches('/').to_string();
    }
    if let Some(var) = &args.api_key_env {
        meta.config.api_key_env = Some(var.clone());
    }
    if let Some(t) = &args.request_timeout {
        meta.config.request_timeout_s =
            crate::spec::parse_duration("--request-timeout", t).map_err(Failure::usage)?.as_secs_f64();
    }
    meta.resumed_at.push(meta::now_rfc3339());
    meta.status = RunStatus::Running;
    meta.ended_at = None;
    Ok((meta.config.clone(), dir.clone(), meta, true))
}

pub struct ServerFacts {
    pub model: String,
    pub slots: u32,
    pub info: ServerInfo,
}

/// Is the server there, which model, how many slots. Fails with exit code 3 before anything is
/// measured, so a typo in --server costs nothing.
pub async fn preflight(
    client: &Client,
    config: &SweepConfig,
    preset: &Preset,
) -> Result<ServerFacts, Failure> {
    let models = server::preflight_get(client, "/v1/models").await.map_err(|e| {
        Failure::server(format!(
            "cannot reach the server at {}: {e}\n(is it running? `just server` starts a local llama-server)",
            config.server
        ))
    })?;
    let model = match &config.model {
        Some(m) => m.clone(),
        None => server::first_model_id(&models).ok_or_else(|| {
            Failure::server(format!("{}/v1/models lists no model; pass --model", config.server))
        })?,
    };
    // llama.cpp only; other servers answer 404, which is fine.
    let props = server::preflight_get(client, "/props").await.ok();
    let slots =
        props.as_ref().and_then(|p| p.get("total_slots")).and_then(Value::as_u64).unwrap_or(1).max(1) as u32;
    Ok(ServerFacts {
        model,
        slots,
        info: ServerInfo {
            base_url: config.server.clone(),
            models: Some(models),
            props,
            preset: preset.name.clone(),
        },
    })
}

/// Resolves the physical ceilings' inputs. Where the flags name no model, a llama.cpp server on
/// this machine tells which GGUF it serves: its header is read (and recorded, so `bench verify`
/// finds it). Hardware is never guessed: a local server only earns a printed suggestion.
pub fn physics(
    meta: &mut RunMeta,
    progress: &Progress,
) -> Result<Option<(crate::physics::Hardware, crate::physics::ModelProfile)>, Failure> {
    let p = &mut meta.config.physics;
    let local = ["://127.0.0.1", "://localhost", "://[::1]"].iter().any(|h| meta.config.server.contains(h));
    if p.model_file.is_none() && p.model_bytes.is_none() && local {
        let served = meta.server.props.as_ref().and_then(|v| v.get("model_path")).and_then(Value::as_str);
        if let Some(path) = served.map(PathBuf::from).filter(|p| p.is_file()) {
            progress.note(&format!("model profile: reading the served GGUF header ({})", path.display()));
            p.model_file = Some(path);
        }
    }
    let hardware = crate::physics::resolve_hardware(p.hardware.as_deref(), p.bandwidth_gbps, p.tflops)
        .map_err(Failure::usage)?;
    let model =
        crate::physics::resolve_model(p.model_bytes.as_deref(), p.params.as_deref(), p.model_file.as_deref())
            .map_err(Failure::usage)?;
    if hardware.is_none() {
        let suggestion = crate::physics::suggest_hardware(&meta.host.cpu_brand)
            .filter(|_| local)
            .map_or(String::new(), |s| format!(" (this host looks like {}: --hardware {})", s.name, s.name));
        progress.note(&format!(
            "note: no --hardware / --bandwidth-gbps given: physical ceilings are not computed{suggestion}"
        ));
    }
    meta.physics = Some(json!({ "hardware": hardware, "model": model }));
    Ok(hardware.zip(model))
}

/// The thermal gate: a baseline TPS before the first cell, a cooldown before every later one.
pub struct ThermalGate {
    policy: ThermalPolicy,
    warmup: Option<Value>,
    probes: Vec<f64>,
    baseline_tps: Option<f64>,
}

impl ThermalGate {
    /// Discards one warm-up request (the first request after a server starts is slower), then
    /// takes the baseline probes.
    pub async fn start(ctx: &Ctx, progress: &Progress) -> ThermalGate {
        progress.note("warming up the server (one discarded request) ...");
        let warm = probe_request(ctx, ctx.config.contexts.iter().copied().min().unwrap_or(512) / 2, 8).await;
        let warmup = Some(json!({"e2e_ms": warm.1, "error": warm.2}));
        let mut probes = Vec::new();
        if matches!(ctx.config.thermal, ThermalPolicy::Probe { .. }) {
            progress.note("measuring the thermal baseline (3 probes) ...");
            for _ in 0..3 {
                if let (Some(tps), _, _) = probe_request(ctx, 256, 16).await {
                    probes.push(tps);
                }
            }
        }
        let baseline_tps = crate::thermal::baseline(&probes);
        ThermalGate { policy: ctx.config.thermal.clone(), warmup, probes, baseline_tps }
    }

    pub fn describe(&self) -> Option<Value> {
        Some(json!({
            "policy": self.policy,
            "warmup": self.warmup,
            "baseline_probes_tps": self.probes,
            "baseline_tps": self.baseline_tps,
        }))
    }

    /// The record of the first cell: nothing ran before it but the baseline.
    pub fn first(&self) -> Option<ThermalRecord> {
        Some(ThermalRecord {
            policy: policy_name(&self.policy).into(),
            baseline_tps: self.baseline_tps,
            recovered: true,
            ..Default::default()
        })
    }

    pub async fn wait(&self, ctx: &Ctx, progress: &Progress) -> Option<ThermalRecord> {
        let record = crate::thermal::cooldown(
            &self.policy,
            self.baseline_tps,
            || async { probe_request(ctx, 256, 16).await.0 },
            |status: &str| progress.cooling(status),
        )
        .await;
        Some(record)
    }
}

fn policy_name(p: &ThermalPolicy) -> &'static str {
    match p {
        ThermalPolicy::Probe { .. } => "probe",
        ThermalPolicy::Fixed { .. } => "fixed",
        ThermalPolicy::Off => "off",
    }
}

/// A short non-streaming request in its own session, cleaned up after. Returns (output tokens per
/// second of E2E, e2e_ms, error message).
async fn probe_request(ctx: &Ctx, words: u32, max_tokens: u32) -> (Option<f64>, Option<f64>, Option<String>) {
    let session = ctx.new_session(0);
    let text = crate::prompt::document(ctx.config.seed ^ 0x9807E, &ctx.nonces.next(), words as usize);
    let mut req = ChatRequest {
        model: ctx.model.clone(),
        messages: vec![Message::new("user", text)],
        max_tokens,
        stream: false,
        ..Default::default()
    };
    if let Err(e) = ctx.preset.bind(&mut req, &session) {
        return (None, None, Some(e));
    }
    let ex = ctx.send(&req).await;
    let _ = ctx.preset.run(&ctx.client, &ctx.preset.cleanup, &session).await;
    let tps = match (ex.usage.output_tokens, ex.e2e_ms) {
        (Some(out), Some(e2e)) if e2e > 0.0 && ex.error.is_none() => Some(out as f64 / (e2e / 1000.0)),
        _ => None,
    };
    (tps, ex.e2e_ms, ex.error.map(|e| e.message))
}
