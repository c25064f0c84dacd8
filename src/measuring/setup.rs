//! Before the first cell: is the server there and set up for this plan, what does it say about
//! itself, how are prompts sized, and the warm-up and thermal baseline. Everything that can make
//! every cell fail the same way is found here, once, before anything is measured: a missing
//! environment variable of the preset, a server whose preset actions fail (llama.cpp started
//! without `--slot-save-path`), a server that can count no tokens.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde_json::Value;

use super::{Journal, RunContext};
use crate::config::{SweepConfig, ThermalPolicy};
use crate::exit::Failure;
use crate::meta::{PhysicsProfiles, ServerInfo, StaggerCalibration, ThermalBaseline};
use crate::preset::{ActionError, Preset, Scope};
use crate::progress::Progress;
use crate::prompt::{Nonces, Sizer};
use crate::server;
use ttft_client::{ChatRequest, Client, ClientOptions, Message};
use ttft_model::record::{CacheState, ErrorInfo, ErrorKind, PageCache, ThermalRecord};

/// Writes what setup learned into run.json, when there is a run (`bench plan` has none).
fn learn(journal: Option<&Journal>, change: impl FnOnce(&mut crate::meta::RunMeta)) -> Result<(), Failure> {
    journal.map_or(Ok(()), |j| j.update(change))
}

/// Builds the sweep's context: client, preflight, physics, prompt sizing; run.json learns each.
pub(crate) async fn prepare(
    config: SweepConfig,
    journal: Option<&Journal>,
    progress: &Progress,
) -> Result<RunContext, Failure> {
    let mut config = config;
    let detecting = config.preset == crate::config::AUTO_PRESET;
    let api = config.api.to_string();
    let load = |name: &str| Preset::load(name).and_then(|p| p.for_api(&api)).map_err(Failure::from);
    // A named preset is checked before anything touches the server; `auto` is known only after
    // preflight, and a plain preset stands in until then (preflight drives no action).
    let mut preset = load(if detecting { "openai" } else { &config.preset })?;
    if !detecting {
        required_env(&preset, &config)?;
    }
    let api_key = match &config.api_key_env {
        Some(var) => {
            let key = std::env::var(var).map_err(|_| {
                Failure::usage(format!("--api-key-env {var}: the environment variable {var} is not set"))
            })?;
            ttft_model::secrets::register(&key);
            Some(key)
        }
        None => None,
    };
    if config.insecure {
        // Even with --quiet: turning verification off is never silent.
        eprintln!("warning: --insecure: the server's TLS certificate is not verified");
    }
    let mut client = connect(&config, &preset, api_key.clone())?;
    let mut facts = preflight(&client, &config, &preset).await?;
    if detecting {
        let found = crate::detect::detect(&client, facts.info.props.as_ref()).await;
        progress.note(&found.announce());
        preset = load(found.preset)?;
        required_env(&preset, &config)?;
        // The client's connection and usage handling follow the preset.
        client = connect(&config, &preset, api_key)?;
        config.preset = preset.name.clone();
        facts.info.preset = preset.name.clone();
        facts.info.preset_detected = Some(found.why);
    }
    config.model = Some(facts.model.clone());
    if let Some(note) = page_cache_plan(&mut config, &preset) {
        progress.note(&note);
    }
    learn(journal, |m| {
        m.server = facts.info.clone();
        // A resumed run drives the server with the preset detection chose when it began.
        m.config.preset = config.preset.clone();
        m.config.model = Some(facts.model.clone());
        m.config.slot_dir = config.slot_dir.clone();
        m.config.page_cache = config.page_cache;
    })?;
    let (physics, kv_bytes_per_token) = physics(&mut config, &facts.info, journal, progress)?;
    let nonces = Nonces::new();
    progress.note(&format!("sizing prompts against {} ({}) ...", config.server, facts.model));
    let sizer = Sizer::calibrate(&client, &facts.model, &nonces, config.seed).await?;
    learn(journal, |m| m.prompt_sizing = Some(sizer.describe()))?;
    count_rows(&mut config, &client, &sizer, progress).await?;
    learn(journal, |m| m.config.dataset = config.dataset.clone())?;
    let config_bodies = config.request_bodies;
    let ctx = RunContext {
        client,
        config,
        preset,
        model: facts.model,
        run_id: journal.and_then(|j| j.meta.lock().ok().map(|m| m.run_id.clone())).unwrap_or_default(),
        sizer,
        nonces,
        slots: facts.slots,
        physics,
        warm_disk: None,
        stagger_delay: tokio::sync::OnceCell::new(),
        sessions: AtomicU64::new(0),
        harness: Default::default(),
        bodies: match journal.filter(|_| config_bodies) {
            Some(j) => Some(ttft_results::store::BodyLog::open(j.dir())?),
            None => None,
        },
    };
    let mut ctx = ctx;
    if let Err(failure) = dry_run_actions(&ctx).await {
        // A preset the user named that cannot drive the server is their error, refused. A detected
        // one is the server's own, started without what its actions need: llama.cpp without
        // --slot-save-path refuses every slot action. Without warm's actions (evict, reload) its
        // warm cells are unsupported; a server that refuses even the reset is measured with the
        // plain preset (cold rests on the prompt's nonce), and each step is said.
        let Failure::Usage(why) = failure else { return Err(failure) };
        if !detecting {
            return Err(Failure::Usage(why));
        }
        let warm_planned = ctx.config.cache_states.contains(&CacheState::Warm) && ctx.preset.supports_warm();
        ctx.preset.evict.clear();
        ctx.preset.reload.clear();
        let refused = if warm_planned {
            match dry_run_actions(&ctx).await {
                Ok(()) => {
                    progress.note(&format!(
                        "warning: {why}\nwarm cells will be recorded as unsupported (the detected server cannot evict a session)"
                    ));
                    None
                }
                Err(Failure::Usage(why)) => Some(why),
                Err(failure) => return Err(failure),
            }
        } else {
            Some(why)
        };
        if let Some(why) = refused {
            let detected = ctx.preset.name.clone();
            ctx.preset = load("openai")?;
            ctx.config.preset = ctx.preset.name.clone();
            progress.note(&format!(
                "warning: {why}\nthe detected {detected} server refuses its preset's actions: measured with the plain \
                 preset instead (cold rests on the prompt's nonce, warm is unsupported)"
            ));
            learn(journal, |m| {
                let found = m.server.preset_detected.take().unwrap_or_default();
                m.server.preset_detected = Some(format!(
                    "{found}; the server refused the {detected} preset's actions: the plain preset"
                ));
                m.server.preset = ctx.preset.name.clone();
                m.config.preset = ctx.preset.name.clone();
            })?;
            dry_run_actions(&ctx).await?;
        }
    }
    if ctx.preset.supports_warm() {
        ctx.warm_disk = warm_disk(&ctx, kv_bytes_per_token, progress)?;
    }
    if ctx.config.cache_states.contains(&CacheState::Warm) && !ctx.preset.supports_warm() {
        progress.note(&format!(
            "warning: preset {} cannot evict to disk; warm cells will be recorded as unsupported",
            ctx.preset.name
        ));
    }
    Ok(ctx)
}

/// What the warm cells will save on the server's disk, said before the first cell; where bench
/// reaches the save directory, a directory that cannot hold the largest warm cell ends the run
/// here (exit 4), before a full disk fails cells one by one.
fn warm_disk(
    ctx: &RunContext,
    kv_bytes_per_token: Option<f64>,
    progress: &Progress,
) -> Result<Option<super::slot_files::WarmDisk>, Failure> {
    let cells = ctx.config.matrix().cells(&ctx.model);
    let reachable = ctx.config.slot_dir.as_deref().filter(|_| ctx.preset.saved_file.is_some());
    let output_tokens = ctx.config.output_tokens;
    let Some(disk) =
        super::slot_files::warm_disk(&cells, output_tokens, kv_bytes_per_token, reachable.is_some())
    else {
        return Ok(None);
    };
    progress.note(&disk.line());
    if let Some(dir) = reachable {
        super::slot_files::check_room(dir, &disk).map_err(Failure::io)?;
    }
    Ok(Some(disk))
}

/// The client of this run: its TLS settings, credentials, and the user's request knobs, which
/// every call carries from preflight on.
fn connect(config: &SweepConfig, preset: &Preset, api_key: Option<String>) -> Result<Client, Failure> {
    let timeout = Duration::from_secs_f64(config.request_timeout_s);
    let options = ClientOptions {
        ca_cert: config.ca_cert.clone(),
        insecure: config.insecure,
        close_after_stream: preset.stream_closes_connection,
        anthropic_input_tokens_total: preset.anthropic_input_tokens_total,
        ..Default::default()
    };
    let mut client = Client::new(&config.server_url, config.api, api_key, timeout, options)?;
    client.set_knobs(ttft_client::RequestKnobs {
        extra_body: config.extra_body.clone(),
        temperature: (config.temperature != 0.0).then_some(config.temperature),
        // Checked when the config was resolved (and on resume): a line that fails here never
        // came through either.
        headers: config.headers.iter().filter_map(|h| crate::config::parse_header(h).ok()).collect(),
    });
    Ok(client)
}

/// From this many rows to count, the count says how far it got, and a sweep without
/// `--dataset-limit` says how to measure fewer.
const MANY_ROWS: usize = 1000;

/// Each dataset row's turn-1 tokens as the server counts them (a resumed run keeps the counts of
/// its run.json, so its cells are the ones it began with): the row's context.
async fn count_rows(
    config: &mut SweepConfig,
    client: &Client,
    sizer: &Sizer,
    progress: &Progress,
) -> Result<(), Failure> {
    let Some(dataset) = config.dataset.as_mut() else { return Ok(()) };
    for line in dataset.skipped_lines() {
        progress.warn(&line);
    }
    if dataset.output_tokens_from_rows {
        reply_lengths(dataset, client, sizer, progress).await?;
    }
    let todo = dataset.rows.iter().filter(|r| r.tokens.is_none()).count();
    if todo > 0 {
        progress.note(&format!("counting the tokens of {todo} dataset rows (one call each) ..."));
    }
    if todo >= MANY_ROWS && dataset.limit.is_none() {
        progress.note(&format!(
            "{todo} rows: every row is measured in every cell; --dataset-limit N measures N rows drawn with --seed"
        ));
    }
    let nonce = "0".repeat(12);
    // Each tenth of a long count is said: a million rows are a million calls.
    let step = if todo >= MANY_ROWS { todo.div_ceil(10) } else { usize::MAX };
    for (i, row) in dataset.rows.iter_mut().filter(|r| r.tokens.is_none()).enumerate() {
        if i > 0 && i % step == 0 {
            progress.note(&format!("counted {i} of {todo} dataset rows ({}%)", i * 100 / todo));
        }
        let messages = super::measure::turn_1_messages(row, &nonce);
        let tokens = sizer.count(client, messages).await.map_err(|e| count_failure(&dataset.path, row, e))?;
        row.tokens = Some(u32::try_from(tokens).unwrap_or(u32::MAX));
    }
    Ok(())
}

/// A row the server could not count: the server's failure when it did not answer, else the row's
/// (named by `file:line`).
fn count_failure(
    path: &std::path::Path,
    row: &crate::dataset::Row,
    e: crate::prompt::sizing::SizingError,
) -> Failure {
    match e.kind {
        ErrorKind::Connect | ErrorKind::Timeout => Failure::server(e.to_string()),
        _ => Failure::usage(format!("{}:{}: {e}", path.display(), row.line)),
    }
}

/// `--dataset-output-tokens`: each row without a reply length of its own asks for as many tokens
/// as the server counts in its reply to turn 1; rows without a reply keep `--output-tokens`, said.
async fn reply_lengths(
    dataset: &mut crate::dataset::Dataset,
    client: &Client,
    sizer: &Sizer,
    progress: &Progress,
) -> Result<(), Failure> {
    let mut without = 0;
    for row in dataset.rows.iter_mut().filter(|r| r.output_tokens.is_none()) {
        let Some(reply) = row.answer_to(1).filter(|r| !r.trim().is_empty()).map(str::to_string) else {
            without += 1;
            continue;
        };
        let tokens =
            sizer.count_text(client, &reply).await.map_err(|e| count_failure(&dataset.path, row, e))?;
        row.output_tokens = Some(u32::try_from(tokens).unwrap_or(u32::MAX));
    }
    if without > 0 {
        progress.warn(&format!(
            "--dataset-output-tokens: {without} rows give no reply length (no output length field, no reply): they ask for --output-tokens"
        ));
    }
    Ok(())
}

/// Where warm's saved sessions are (the flag or command line, else the preset), and whether each
/// can be dropped from the page cache before its restore; nothing to say without warm cells. A
/// save directory on a filesystem that keeps its files in memory (tmpfs, ramfs) can never send a
/// session to disk: the run says `memory`, and the returned line says why.
fn page_cache_plan(config: &mut SweepConfig, preset: &Preset) -> Option<String> {
    if config.slot_dir.is_none() {
        config.slot_dir = preset.slot_dir.clone();
    }
    let warm = config.cache_states.contains(&CacheState::Warm) && preset.supports_warm();
    let reachable = config.slot_dir.as_ref().filter(|_| preset.saved_file.is_some());
    let in_memory =
        reachable.and_then(|dir| Some((dir, ttft_model::page_cache::memory_filesystem(dir).ok()??)));
    config.page_cache = warm.then_some(match (reachable, in_memory) {
        (None, _) => PageCache::Unknown,
        (Some(_), Some(_)) => PageCache::Memory,
        (Some(_), None) => PageCache::Evicted,
    });
    let (dir, filesystem) = in_memory.filter(|_| warm)?;
    Some(format!(
        "warm: the save directory {} is on {filesystem}, which keeps its files in memory: each restore reads \
         memory, not the disk (records say page_cache: memory); give the server a save directory on a disk \
         to measure warm from disk",
        dir.display()
    ))
}

/// Every `{env:NAME}` the plan's preset actions need is set: otherwise every cell would fail the
/// same way.
fn required_env(preset: &Preset, config: &SweepConfig) -> Result<(), Failure> {
    let mut actions = vec![("reset", preset.reset.as_slice()), ("cleanup", preset.cleanup.as_slice())];
    if config.cache_states.contains(&CacheState::Warm) {
        actions.extend([("evict", preset.evict.as_slice()), ("reload", preset.reload.as_slice())]);
    }
    for (var, action) in preset.required_env(&actions) {
        if std::env::var_os(&var).is_none() {
            return Err(Failure::usage(format!(
                "preset {}: its {action} action needs the environment variable {var}, which is not set",
                preset.name
            )));
        }
    }
    Ok(())
}

/// A refused connection to this machine (loopback, localhost): the one case where no server
/// running is the likely cause, and starting one the likely cure.
fn refused_locally(server: &str, e: &server::CallError) -> bool {
    let host = reqwest::Url::parse(server).ok().and_then(|u| u.host_str().map(str::to_ascii_lowercase));
    let local = host.is_some_and(|h| {
        let ip = h.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
        h == "localhost" || h.ends_with(".localhost") || ip.is_ok_and(|ip| ip.is_loopback())
    });
    local && e.is_unreachable() && e.to_string().to_ascii_lowercase().contains("connection refused")
}

pub(crate) struct ServerFacts {
    pub model: String,
    pub slots: u32,
    pub info: ServerInfo,
}

/// Is the server there, which model, how many slots. Fails with exit code 3 before anything is
/// measured, so a typo in --server costs nothing.
pub(crate) async fn preflight(
    client: &Client,
    config: &SweepConfig,
    preset: &Preset,
) -> Result<ServerFacts, Failure> {
    let models = server::preflight_get(client, "/v1/models").await.map_err(|e| {
        Failure::server(match &e {
            // It answered: a hint about starting a server would mislead.
            _ if e.status().is_some() => format!("the server at {} refused the preflight: {e}", config.server),
            // The message names the trust problem and --ca-cert (`server::TRUST_ADVICE`).
            server::CallError::Tls { .. } => format!("cannot trust the server at {}: {e}", config.server),
            _ if refused_locally(&config.server, &e) => format!(
                "cannot reach the server at {}: {e}\n(is it running? `just server` starts a local llama-server)",
                config.server
            ),
            _ => format!("cannot reach the server at {}: {e}", config.server),
        })
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
            preset_detected: None,
            command: None,
        },
    })
}

/// Runs the preset's actions once on a throwaway session, the way the plan will use them: reset
/// and cleanup always; prime, evict and reload when warm is planned. A server that refuses one
/// (vLLM without VLLM_SERVER_DEV_MODE, llama.cpp without `--slot-save-path`) ends the run here with
/// its own words, instead of failing every cell.
async fn dry_run_actions(ctx: &RunContext) -> Result<(), Failure> {
    let p = &ctx.preset;
    let session = ctx.new_session(0);
    let fail = |e: ActionError| match e.kind {
        ErrorKind::Connect | ErrorKind::Timeout => {
            Failure::server(format!("preflight: preset {}: {e}", p.name))
        }
        _ => Failure::usage(format!(
            "preflight: preset {} cannot drive this server: {e}\n(preset {}: {})",
            p.name, p.name, p.description
        )),
    };
    p.run(&ctx.client, "reset", &p.reset, None, &session).await.map_err(fail)?;
    if ctx.config.cache_states.contains(&CacheState::Warm) && p.supports_warm() {
        let text = crate::prompt::document(ctx.config.seed, &ctx.nonces.next(), 32);
        let mut req = ChatRequest {
            model: ctx.model.clone(),
            messages: vec![Message::new("user", text)],
            max_tokens: 1,
            ..Default::default()
        };
        p.bind(&mut req, &session).map_err(|e| Failure::usage(format!("preset {}: {e}", p.name)))?;
        let primed = ctx.send(&req).await;
        if let Some(e) = primed.error {
            return Err(Failure::server(format!("preflight: priming request failed: {}", e.message)));
        }
        super::measure::saved_path(ctx, &session).into_iter().for_each(super::slot_files::track);
        p.run(&ctx.client, "evict", &p.evict, None, &session).await.map_err(fail)?;
        p.run(&ctx.client, "reload", &p.reload, None, &session).await.map_err(fail)?;
    }
    if let Some(listing) = p.fetch_session_listing(&ctx.client, &session).await {
        // The listing is read the way every measurement reads it, so a preset whose session_state
        // does not fit this server is refused here, naming it, rather than leaving every row unconfirmed.
        let unusable = |why: String| {
            Failure::usage(format!("preflight: preset {}: session_state cannot be read: {why}", p.name))
        };
        let spec = p.session_state.as_ref().expect("a listing comes from a session_state");
        spec.session_cache(&listing.map_err(unusable)?, &session).map_err(unusable)?;
    }
    p.run(&ctx.client, "cleanup", &p.cleanup, None, &session).await.map_err(fail)?;
    super::measure::remove_saved(ctx, &session);
    Ok(())
}

/// The hardware and model the physical ceilings come from, when both are known.
type Ceilings = Option<(ttft_results::physics::Hardware, ttft_results::physics::ModelProfile)>;

/// Resolves the physical ceilings' inputs. Where the flags name no model, a llama.cpp server on
/// this machine tells which GGUF it serves: its header is read (and recorded, so `bench verify`
/// finds it). Hardware is never guessed: a local server only earns a printed suggestion.
fn physics(
    config: &mut SweepConfig,
    server: &ServerInfo,
    journal: Option<&Journal>,
    progress: &Progress,
) -> Result<(Ceilings, Option<f64>), Failure> {
    let p = &mut config.physics;
    let local = ["://127.0.0.1", "://localhost", "://[::1]"].iter().any(|h| config.server.contains(h));
    if p.model_file.is_none() && p.model_bytes.is_none() && local {
        let served = server.props.as_ref().and_then(|v| v.get("model_path")).and_then(Value::as_str);
        if let Some(path) = served.map(PathBuf::from).filter(|p| p.is_file()) {
            progress.note(&format!("model profile: reading the served GGUF header ({})", path.display()));
            p.model_file = Some(path);
        }
    }
    let hardware =
        ttft_results::physics::resolve_hardware(p.hardware.as_deref(), p.bandwidth_gbps, p.tflops)?;
    let model = ttft_results::physics::resolve_model(
        p.model_bytes.as_deref(),
        p.params.as_deref(),
        p.model_file.as_deref(),
    )?;
    if hardware.is_none() {
        let cpu = match journal {
            Some(j) => j.meta.lock().map(|m| m.host.cpu_brand.clone()).unwrap_or_default(),
            None => crate::meta::HostFacts::collect().cpu_brand,
        };
        let suggestion = ttft_results::physics::suggest_hardware(&cpu)
            .filter(|_| local)
            .map_or(String::new(), |s| format!(" (this host looks like {}: --hardware {})", s.name, s.name));
        progress.note(&format!(
            "note: no --hardware / --bandwidth-gbps given: physical ceilings are not computed{suggestion}"
        ));
    }
    let profiles = PhysicsProfiles { hardware: hardware.clone(), model: model.clone() };
    let inputs = config.physics.clone();
    learn(journal, |m| {
        m.physics = Some(profiles);
        m.config.physics = inputs;
    })?;
    let kv_bytes_per_token = model.as_ref().and_then(|m| m.kv_bytes_per_token);
    Ok((hardware.zip(model), kv_bytes_per_token))
}

/// The thermal gate: a baseline TPS before the first cell, a cooldown before every later one.
pub(crate) struct ThermalGate {
    policy: ThermalPolicy,
    warmup: (Option<f64>, Option<String>),
    probe_e2e_ms: Option<f64>,
    probes: Vec<f64>,
    baseline_tps: Option<f64>,
}

impl ThermalGate {
    /// Discards `--warmup` requests (the first requests after a server starts are slower), then
    /// takes the baseline probes. The last warm-up's E2E is kept, with the first error.
    pub(crate) async fn start(ctx: &RunContext, progress: &Progress) -> ThermalGate {
        let n = ctx.config.warmup;
        if n > 0 {
            progress.note(&format!(
                "warming up the server ({n} discarded request{}) ...",
                if n == 1 { "" } else { "s" }
            ));
        }
        let min_context = ctx.config.contexts.iter().copied().min().unwrap_or(512);
        let (mut e2e, mut error) = (None, None);
        for _ in 0..n {
            let (_, took, failed) = probe_request(ctx, min_context / 2, 8).await;
            e2e = took;
            error = error.or(failed);
        }
        let mut probes = Vec::new();
        let mut probe_e2e = Vec::new();
        if matches!(ctx.config.thermal, ThermalPolicy::Probe { .. }) {
            progress.note("measuring the thermal baseline (3 probes) ...");
            for _ in 0..3 {
                if let (Some(tps), e2e, _) = probe_request(ctx, 256, 16).await {
                    probes.push(tps);
                    probe_e2e.extend(e2e);
                }
            }
        }
        let baseline_tps = crate::thermal::baseline(&probes);
        ThermalGate {
            policy: ctx.config.thermal.clone(),
            warmup: (e2e, error),
            probe_e2e_ms: ttft_model::stats::median(&probe_e2e),
            probes,
            baseline_tps,
        }
    }

    /// One probe's duration, seconds (the cost model's cooldown term).
    pub(crate) fn probe_s(&self) -> f64 {
        self.probe_e2e_ms.unwrap_or(500.0) / 1000.0
    }

    pub(crate) fn describe(&self) -> ThermalBaseline {
        ThermalBaseline {
            policy: self.policy.clone(),
            warmup_e2e_ms: self.warmup.0,
            warmup_error: self.warmup.1.clone(),
            baseline_probes_tps: self.probes.clone(),
            baseline_tps: self.baseline_tps,
        }
    }

    /// The record of the first cell: nothing ran before it but the baseline.
    pub(crate) fn first(&self) -> ThermalRecord {
        ThermalRecord {
            policy: crate::thermal::policy_kind(&self.policy),
            baseline_tps: self.baseline_tps,
            recovered: true,
            ..Default::default()
        }
    }

    pub(crate) async fn wait(&self, ctx: &RunContext, progress: &Progress) -> ThermalRecord {
        crate::thermal::cooldown(
            &self.policy,
            self.baseline_tps,
            || async {
                match probe_request(ctx, 256, 16).await {
                    (Some(tps), _, _) => Ok(tps),
                    (None, _, why) => Err(why.unwrap_or_else(|| "no output tokens to time".to_string())),
                }
            },
            |status: &str| progress.cooling(status),
        )
        .await
    }
}

/// One thermal probe's duration, seconds (for a forecast without a thermal baseline).
pub(crate) async fn probe_seconds(ctx: &RunContext) -> f64 {
    probe_request(ctx, 256, 16).await.1.map_or(0.5, |ms| ms / 1000.0)
}

/// A short request in its own session, cleaned up after. Returns (output tokens per second of
/// E2E, e2e_ms, error message).
async fn probe_request(
    ctx: &RunContext,
    words: u32,
    max_tokens: u32,
) -> (Option<f64>, Option<f64>, Option<String>) {
    let text = crate::prompt::document(ctx.config.seed ^ 0x9807E, &ctx.nonces.next(), words as usize);
    let ex = unmeasured(ctx, text, max_tokens, false).await;
    let tps = match (ex.usage.output_tokens, ex.e2e_ms) {
        (Some(out), Some(e2e)) if e2e > 0.0 && ex.error.is_none() => Some(out as f64 / (e2e / 1000.0)),
        _ => None,
    };
    (tps, ex.e2e_ms, ex.error.map(|e| e.message))
}

/// One request on a fresh session of its own, its session actions run around it.
async fn unmeasured(ctx: &RunContext, text: String, max_tokens: u32, stream: bool) -> ttft_client::Exchange {
    let session = ctx.new_session(0);
    let mut req = ChatRequest {
        model: ctx.model.clone(),
        messages: vec![Message::new("user", text)],
        max_tokens,
        stream,
        ..Default::default()
    };
    if let Err(e) = ctx.preset.bind(&mut req, &session) {
        return ttft_client::Exchange {
            error: Some(ErrorInfo::new(ErrorKind::PresetAction, e.to_string())),
            ..Default::default()
        };
    }
    let p = &ctx.preset;
    let _ = p.run(&ctx.client, "reset", &p.reset, Some(Scope::Session), &session).await;
    let ex = ctx.send(&req).await;
    let _ = p.run(&ctx.client, "cleanup", &p.cleanup, Some(Scope::Session), &session).await;
    ex
}

/// User A's duration alone at the staggered context, for a delay given as a share of it: the
/// median of `STAGGER_CALIBRATIONS` unmeasured streaming requests, sent as A will be (one alone is
/// at the mercy of a single slow request).
pub(crate) async fn calibrate_stagger(ctx: &RunContext, share: f64) -> Result<StaggerCalibration, ErrorInfo> {
    let context = ctx.config.staggered.as_ref().map_or(4096, |s| s.context_tokens);
    let mut durations = Vec::new();
    for _ in 0..STAGGER_CALIBRATIONS {
        let nonce = ctx.nonces.next();
        let prompt = ctx
            .sizer
            .build(&ctx.client, context, ctx.config.seed ^ 0x57A6, nonce)
            .await
            .map_err(|e| ErrorInfo::new(e.kind, format!("stagger calibration: {e}")))?;
        let ex = unmeasured(ctx, prompt.text, ctx.config.output_tokens, true).await;
        if let Some(e) = ex.error {
            return Err(ErrorInfo::new(e.kind, format!("stagger calibration: {}", e.message)));
        }
        durations.extend(ex.e2e_ms.filter(|&e| e > 0.0));
    }
    let a_e2e_ms = ttft_model::stats::median(&durations).ok_or_else(|| {
        ErrorInfo::new(ErrorKind::Protocol, "stagger calibration: the requests reported no duration")
    })?;
    Ok(StaggerCalibration {
        a_e2e_ms,
        a_e2e_samples_ms: durations,
        share_of_a: share,
        delay_ms: a_e2e_ms * share,
    })
}

/// The rates the cost model needs (`cost::ServerRates`), measured after the warm-up with cold requests
/// of two sizes (a short and a longer prompt fit prefill's linear and quadratic terms), each size
/// twice in alternation so one slow request cannot set the rate. None when a request fails: a sweep
/// without a forecast still measures.
pub(crate) async fn calibrate_rates(ctx: &RunContext, probe_s: f64) -> Option<crate::cost::ServerRates> {
    let min = ctx.config.contexts.iter().copied().min().unwrap_or(512);
    let max = ctx.config.contexts.iter().copied().max().unwrap_or(4096);
    let small = min.min(1024);
    let large = max.min(4096).max(small * 2);
    let mut ttft: [Vec<f64>; 2] = Default::default();
    let mut input = [f64::from(small), f64::from(large)];
    let mut decode = Vec::new();
    let mut overhead = Vec::new();
    for (i, context) in [small, large, small, large].into_iter().enumerate() {
        let started = std::time::Instant::now();
        let prompt =
            ctx.sizer.build(&ctx.client, context, ctx.config.seed ^ 0xC057, ctx.nonces.next()).await.ok()?;
        overhead.push(started.elapsed().as_secs_f64());
        // Enough tokens for a decode rate; a size apart from measured ones, so a server log tells them apart.
        let ex = unmeasured(ctx, prompt.text, CALIBRATION_OUTPUT_TOKENS, true).await;
        let (t, e2e, out) = (ex.ttft_ms?, ex.e2e_ms?, ex.usage.output_tokens?);
        ttft[i % 2].push(t / 1000.0);
        input[i % 2] = ex.usage.input_tokens.map_or(input[i % 2], |n| n as f64);
        decode.extend(ttft_model::record::decode_tps(Some(out), Some(t), Some(e2e)));
    }
    let point = |i: usize| Some((input[i], ttft_model::stats::median(&ttft[i])?));
    let (a, b) = crate::cost::ServerRates::fit_prefill(point(0)?, point(1)?);
    Some(crate::cost::ServerRates {
        prefill_s_per_token: a,
        prefill_s_per_token2: b,
        decode_tps: ttft_model::stats::median(&decode)?,
        overhead_s: ttft_model::stats::median(&overhead).unwrap_or(0.0),
        probe_s,
        source: format!("calibrated: cold requests of {small} and {large} tokens, twice each"),
    })
}

const CALIBRATION_OUTPUT_TOKENS: u32 = 16;

/// Calibration requests behind a staggered delay given as a share of user A.
const STAGGER_CALIBRATIONS: usize = 3;
