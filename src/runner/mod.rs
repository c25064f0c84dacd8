//! `bench sweep`: runs the matrix cell by cell and writes every record the moment it exists.
//!
//! Per cell: thermal gate -> scenario (reset, prime/evict/extend, measure, cleanup) -> quality and
//! physics annotations -> append + fsync. An interrupt (Ctrl-C, SIGTERM) stops between writes:
//! everything measured so far stays on disk and `--resume` finishes the rest.

mod batch;
mod measure;
mod setup;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::cli::SweepArgs;
use crate::client::{ChatRequest, Client, ClientOptions, Exchange};
use crate::config::SweepConfig;
use crate::exit::{self, Failure};
use crate::meta::{self, RunMeta, RunStatus};
use crate::plan::Matrix;
use crate::preset::{Preset, Session};
use crate::progress::Progress;
use crate::prompt::{Nonces, Sizer};
use crate::record::{CellKey, Measurement, Record, Scenario};
use crate::store::{self, RecordWriter, TornTail};

pub use batch::fill_staggered;

/// Cells refused in a row after which the server is taken for dead.
const SERVER_GONE_AFTER: usize = 3;

/// How the cell loop ended.
enum Stop {
    Finished,
    Signal,
    ServerGone,
}

/// A record whose request never reached the server.
fn refused(r: &Record) -> bool {
    let error = match r {
        Record::Measurement(m) => &m.error,
        Record::Staggered(s) => &s.error,
        Record::Group(_) => return true,
    };
    error.as_ref().is_some_and(|e| {
        e.kind == crate::record::ErrorKind::Connect || e.message.contains(crate::server::UNREACHABLE)
    })
}

/// Everything a cell needs, shared read-only across the requests of a batch.
pub struct Ctx {
    pub client: Client,
    pub config: SweepConfig,
    pub preset: Preset,
    pub model: String,
    pub run_id: String,
    pub sizer: Sizer,
    pub nonces: Nonces,
    /// Server slots (llama.cpp `total_slots`); sessions are spread over them.
    pub slots: u32,
    /// Hardware and model the physical ceilings come from, when known.
    pub physics: Option<(crate::physics::Hardware, crate::physics::ModelProfile)>,
    sessions: AtomicU64,
}

impl Ctx {
    pub fn new_session(&self, request_index: u32) -> Session {
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        Session { id: format!("tb-{}-{n}", self.nonces.next()), slot: request_index % self.slots.max(1) }
    }

    /// An unmeasured request (priming, earlier turns, probes).
    pub async fn send(&self, request: &ChatRequest) -> Exchange {
        match self.client.prepare(request) {
            Ok(p) => self.client.send(p).await,
            Err(e) => Exchange {
                error: Some(crate::record::ErrorInfo::new(crate::record::ErrorKind::Protocol, e.to_string())),
                ..Default::default()
            },
        }
    }

    /// Quality gate (and, where configured, physical ceilings) of a finished measurement.
    pub fn annotate(&self, m: &mut Measurement, full_output: &str) {
        m.quality_flags = crate::quality::assess(m, full_output);
        m.quality_ok = crate::quality::gate(&m.quality_flags) && m.error.is_none();
        if let Some((hw, model)) = &self.physics {
            m.physics = Some(crate::physics::ceilings(hw, model, m));
        }
    }
}

/// Entry point of `bench sweep`.
pub async fn run(args: &SweepArgs) -> anyhow::Result<ExitCode> {
    let (config, run_dir, mut meta, resumed) = setup::resolve_run(args)?;
    let progress = Progress::new(0, args.quiet);
    let preset = Preset::load(&config.preset).map_err(Failure::usage)?;
    let api_key = match &config.api_key_env {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            Failure::usage(format!("--api-key-env {var}: the environment variable {var} is not set"))
        })?),
        None => None,
    };
    let options =
        ClientOptions { ca_cert: args.ca_cert.clone(), insecure: args.insecure, ..Default::default() };
    if options.insecure {
        eprintln!("warning: --insecure: the server's TLS certificate is not verified");
    }
    let timeout = Duration::from_secs_f64(config.request_timeout_s);
    let client = Client::new(&config.server, config.api, api_key, timeout, options)?;
    let server = setup::preflight(&client, &config, &preset).await?;
    let model = server.model.clone();
    meta.server = server.info.clone();
    meta.config.model = Some(model.clone());
    let physics = setup::physics(&mut meta, &progress)?;

    std::fs::create_dir_all(&run_dir)
        .map_err(|e| Failure::io(format!("cannot create {}: {e}", run_dir.display())))?;
    let mut writer = RecordWriter::open(&run_dir)
        .map_err(|e| Failure::io(format!("cannot open records in {}: {e}", run_dir.display())))?;
    let done = if resumed { completed_cells(&run_dir)? } else { BTreeSet::new() };
    write_meta(&run_dir, &meta)?;

    let nonces = Nonces::new();
    progress.note(&format!("sizing prompts against {} ({model}) ...", config.server));
    let sizer = Sizer::calibrate(&client, &model, &nonces, config.seed).await.map_err(Failure::server)?;
    meta.prompt_sizing = Some(sizer.describe());

    let ctx = Ctx {
        client,
        config: meta.config.clone(),
        preset,
        model: model.clone(),
        run_id: meta.run_id.clone(),
        sizer,
        nonces,
        slots: server.slots,
        physics,
        sessions: AtomicU64::new(0),
    };
    if ctx.config.cache_states.contains(&crate::record::CacheState::Warm) && !ctx.preset.supports_warm() {
        progress.note(&format!(
            "warning: preset {} cannot evict to disk; warm cells will be recorded as unsupported",
            ctx.preset.name
        ));
    }
    let gate = setup::ThermalGate::start(&ctx, &progress).await;
    meta.thermal_baseline = gate.describe();
    write_meta(&run_dir, &meta)?;

    let cells: Vec<CellKey> =
        Matrix::from_config(&config).cells(&model).into_iter().filter(|c| !done.contains(c)).collect();
    if resumed {
        progress.note(&format!(
            "resuming {}: {} cells done, {} to go",
            run_dir.display(),
            done.len(),
            cells.len()
        ));
    }
    let progress = Progress::new(cells.len(), args.quiet);
    let mut failed = 0usize;
    let mut measured = 0usize;
    let stop = {
        let work = async {
            // Consecutive cells whose every request was refused: the server has died (seed 001's
            // crashes mid-sweep). Stop instead of writing a long tail of connection errors.
            let mut refused_in_a_row = 0;
            for (i, cell) in cells.iter().enumerate() {
                let label = cell_label(cell);
                let thermal = if i == 0 { gate.first() } else { gate.wait(&ctx, &progress).await };
                progress.cell(i, &label);
                let before = snapshot().await;
                let mut records = execute(&ctx, cell).await;
                let after = snapshot().await;
                for r in &mut records {
                    attach_thermal(r, &thermal, &before, &after);
                }
                for r in &records {
                    writer
                        .append(r)
                        .map_err(|e| Failure::io(format!("cannot write {}: {e}", writer.path().display())))?;
                }
                measured += 1;
                if records.iter().any(|r| !r.is_good()) {
                    failed += 1;
                }
                progress.done(i, &label, &summary(&records));
                refused_in_a_row = if records.iter().all(refused) { refused_in_a_row + 1 } else { 0 };
                if refused_in_a_row >= SERVER_GONE_AFTER {
                    return Ok(Stop::ServerGone);
                }
            }
            Ok::<Stop, Failure>(Stop::Finished)
        };
        tokio::select! {
            result = work => result,
            _ = shutdown_signal() => Ok(Stop::Signal),
        }
    };
    progress.finish();
    meta.ended_at = Some(meta::now_rfc3339());
    meta.status =
        if matches!(stop, Ok(Stop::Finished)) { RunStatus::Complete } else { RunStatus::Interrupted };
    write_meta(&run_dir, &meta)?;
    let dir = run_dir.display();
    match stop? {
        Stop::Finished => {}
        Stop::Signal => {
            eprintln!(
                "interrupted: every finished measurement is in {dir}; finish with: bench sweep --resume {dir}"
            );
            return Ok(exit::code(exit::INTERRUPTED));
        }
        Stop::ServerGone => {
            eprintln!(
                "the server at {} refused {SERVER_GONE_AFTER} cells in a row: it is down. {measured} cells were \
                 recorded in {dir}; restart the server and finish with: bench sweep --resume {dir} --server URL",
                config.server
            );
            return Ok(exit::code(exit::SERVER));
        }
    }
    if !args.quiet {
        eprintln!(
            "{} cells measured, {failed} with errors or failed quality gates; records in {dir}",
            cells.len()
        );
    }
    println!("{dir}");
    Ok(exit::code(if failed > 0 { exit::FINDINGS } else { exit::SUCCESS }))
}

/// Host and GPU temperatures (sysinfo, nvidia-smi): blocking calls, kept off the async workers.
async fn snapshot() -> serde_json::Value {
    tokio::task::spawn_blocking(crate::thermal::host_snapshot).await.unwrap_or(serde_json::Value::Null)
}

async fn execute(ctx: &Ctx, cell: &CellKey) -> Vec<Record> {
    match cell.scenario {
        Scenario::Cold | Scenario::Warm | Scenario::Hot => {
            let m = match measure::prepare(ctx, cell, 0).await {
                Ok(ready) => {
                    let fired = measure::fire(ctx, &ready).await;
                    measure::finish(ctx, ready, fired, None).await
                }
                Err(m) => *m,
            };
            vec![Record::Measurement(Box::new(m))]
        }
        Scenario::Concurrent => batch::concurrent(ctx, cell).await,
        Scenario::StaggeredBatched | Scenario::StaggeredSequential => vec![batch::staggered(ctx, cell).await],
    }
}

fn attach_thermal(
    record: &mut Record,
    thermal: &Option<crate::record::ThermalRecord>,
    before: &serde_json::Value,
    after: &serde_json::Value,
) {
    let Some(t) = thermal else { return };
    let mut t = t.clone();
    t.before = (!before.is_null()).then(|| before.clone());
    t.after = (!after.is_null()).then(|| after.clone());
    match record {
        Record::Measurement(m) => m.thermal = Some(t),
        Record::Staggered(s) => s.thermal = Some(t),
        Record::Group(_) => {}
    }
}

/// Cells whose records are all good: `--resume` skips them.
fn completed_cells(run_dir: &std::path::Path) -> Result<BTreeSet<CellKey>, Failure> {
    let path = run_dir.join(store::MEASUREMENTS_FILE);
    if !path.exists() {
        return Ok(BTreeSet::new());
    }
    let records = store::read_records(&path, TornTail::Skip).map_err(|e| Failure::usage(e.to_string()))?;
    let mut good = BTreeSet::new();
    for r in &records {
        match r {
            Record::Measurement(m) if m.group_id.is_none() && r.is_good() => {
                good.insert(m.cell.clone());
            }
            Record::Staggered(s) if r.is_good() => {
                good.insert(s.cell.clone());
            }
            // A concurrent cell is done only when one attempt had every request good.
            Record::Group(g) if r.is_good() => {
                let members_good = records
                    .iter()
                    .filter(|x| matches!(x, Record::Measurement(m) if m.group_id.as_deref() == Some(g.group_id.as_str())))
                    .all(Record::is_good);
                if members_good {
                    good.insert(g.cell.clone());
                }
            }
            _ => {}
        }
    }
    Ok(good)
}

fn write_meta(run_dir: &std::path::Path, meta: &RunMeta) -> Result<(), Failure> {
    let path = run_dir.join(store::RUN_FILE);
    store::write_json_atomic(&path, meta)
        .map_err(|e| Failure::io(format!("cannot write {}: {e}", path.display())))
}

pub fn cell_label(c: &CellKey) -> String {
    let state = if matches!(c.scenario, Scenario::Concurrent) {
        format!("concurrent x{} {}", c.batch_size, c.cache_state.as_str())
    } else {
        c.scenario.as_str().to_string()
    };
    format!("{} ctx {} {} run {}", state, c.context_tokens, c.mode.as_str(), c.run)
}

fn summary(records: &[Record]) -> String {
    let mut parts = Vec::new();
    for r in records {
        match r {
            Record::Measurement(m) => parts.push(match (&m.error, m.ttft_ms, m.e2e_ms) {
                (Some(e), _, _) => format!(
                    "error {}: {}",
                    serde_json::to_string(&e.kind).unwrap_or_default(),
                    clip(&e.message)
                ),
                (None, Some(t), _) => format!("ttft {t:.1} ms"),
                (None, None, Some(e)) => format!("e2e {e:.1} ms"),
                _ => "no timing".into(),
            }),
            Record::Staggered(s) => parts.push(format!(
                "B waited {:.1} ms from wall start",
                s.user_b_ttft_from_wall_start_ms.unwrap_or(f64::NAN)
            )),
            Record::Group(g) => {
                parts.push(format!("wall {:.1} ms, {:.1} tok/s", g.wall_ms, g.system_tps.unwrap_or(0.0)))
            }
        }
    }
    let mut text = parts.join("; ");
    if records.iter().any(|r| matches!(r, Record::Measurement(m) if !m.quality_ok && m.error.is_none())) {
        text.push_str(" (quality gate failed)");
    }
    text
}

fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if s.chars().count() > 120 {
        out.push('…');
    }
    out
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Where a new run's directory goes.
pub fn run_dir_for(config: &SweepConfig, run_id: &str) -> PathBuf {
    config.out_dir.join(run_id)
}
