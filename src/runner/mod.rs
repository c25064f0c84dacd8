//! `bench sweep`: runs the matrix cell by cell and writes every record the moment it exists.
//!
//! A sweep lives as every run does (`drive`): opened (new or resumed; run.json is written before
//! anything else, so a run directory is never without one), its work driven until it ends or a
//! signal stops it (preflight, prompt sizing, warm-up and thermal baseline, then the cell loop),
//! settled, then closed here (status, messages, exit code).

mod batch;
mod cells;
pub(crate) mod drive;
mod fired;
mod forecast;
pub mod harness_time;
mod lifecycle;
pub(crate) mod measure;
pub(crate) mod open;
pub(crate) mod setup;
pub(crate) mod slot_files;
mod soak;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cli::SweepArgs;
use crate::client::{ChatRequest, Client, Exchange};
use crate::config::SweepConfig;
use crate::exit::{self, Failure, Reported};
use crate::meta::{RunMeta, RunStatus};
use crate::preset::{Preset, Session};
use crate::progress::Progress;
use crate::prompt::{Nonces, Sizer};
use crate::record::{ErrorInfo, ErrorKind, Measurement, QualityFlag};
use crate::store;
use crate::supervise::Supervisor;

pub use batch::{fill_staggered, group_record, release_together, stagger};
pub use cells::Stop;
pub use forecast::plan;
pub use soak::soak;

/// What `q` does in the sweep's view.
const SWEEP_KEYS: &str =
    "q: stop as Ctrl-C does (every finished record kept, run.json interrupted; --resume finishes)";

/// How long an interrupted work task gets to reach its next await point before bench exits anyway.
pub(crate) const ABORT_GRACE: Duration = Duration::from_secs(3);

/// Everything a cell needs, shared read-only across the requests of a batch.
pub struct RunContext {
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
    /// What the warm cells save on the server's disk, where the model's KV size is known.
    pub warm_disk: Option<slot_files::WarmDisk>,
    /// B's delay in the batched staggered pair, set by calibration before the first pair.
    pub stagger_delay: tokio::sync::OnceCell<Result<f64, ErrorInfo>>,
    sessions: AtomicU64,
    /// Where the cell loop's time goes (`harness_time`).
    pub harness: harness_time::HarnessClock,
    /// `--request-bodies`: every measured request's body, in the run directory.
    pub bodies: Option<store::BodyLog>,
}

impl RunContext {
    pub fn new_session(&self, request_index: u32) -> Session {
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        Session::new(format!("tb-{}-{n}", self.nonces.next()), request_index % self.slots.max(1))
    }

    /// An unmeasured request (priming, earlier turns, probes).
    pub async fn send(&self, request: &ChatRequest) -> Exchange {
        match self.client.prepare(request) {
            Ok(p) => self.client.send(p).await,
            Err(e) => Exchange {
                error: Some(ErrorInfo::new(ErrorKind::Protocol, e.to_string())),
                ..Default::default()
            },
        }
    }

    /// The server's counters now, when the preset names some (outside every timed window).
    pub async fn metrics(&self) -> Option<crate::metrics::Snapshot> {
        let spec = self.preset.metrics.as_ref()?;
        crate::metrics::snapshot(&self.client, spec, Duration::from_secs_f64(self.config.request_timeout_s))
            .await
    }

    /// The counters' change since `before`.
    pub async fn metrics_since(
        &self,
        before: Option<crate::metrics::Snapshot>,
    ) -> Option<crate::record::MetricsDelta> {
        let (spec, before) = (self.preset.metrics.as_ref()?, before?);
        Some(crate::metrics::delta(spec, &before, &self.metrics().await?))
    }

    /// Quality gate, cache-state gate and (where configured) physical ceilings of a finished
    /// measurement. A row whose cache evidence contradicts its claimed state is a failed
    /// measurement, exactly like a failed quality gate: it must not count as a warm or hot number.
    pub fn annotate(&self, m: &mut Measurement, full_output: &str) {
        m.quality_flags = crate::quality::assess(m, full_output);
        if m.cache_state_confirmed == Some(false) {
            m.quality_flags.push(QualityFlag {
                flag: crate::record::QualityCode::CacheStateUnconfirmed,
                reason: crate::quality::cache_verdict_reason(
                    m.cell.cache_state,
                    m.cache_evidence.as_ref(),
                    crate::quality::PromptTokens::of(m),
                ),
                fails_gate: true,
            });
        }
        m.quality_ok = crate::quality::gate(&m.quality_flags) && m.error.is_none();
        if let Some((hw, model)) = &self.physics {
            m.physics = Some(crate::physics::ceilings(hw, model, m));
        }
    }
}

/// run.json, shared by the work (which fills in what it learns) and `close` (which ends it).
#[derive(Clone)]
pub struct Journal {
    dir: std::path::PathBuf,
    meta: Arc<Mutex<RunMeta>>,
}

impl Journal {
    pub fn update(&self, change: impl FnOnce(&mut RunMeta)) -> Result<(), Failure> {
        let mut meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut meta);
        let path = self.dir.join(store::RUN_FILE);
        store::write_json_atomic(&path, &*meta)
            .map_err(|e| Failure::io(format!("cannot write {}: {e}", path.display())))
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

/// How the cell loop ended, as `close` reports it.
struct CellLoopEnd {
    stop: Stop,
    measured: usize,
    failed: usize,
    /// The cell loop's duration; `eta_s` what the cost model expected.
    took_s: f64,
    eta_s: Option<f64>,
    harness: crate::meta::HarnessTime,
}

/// How a sweep ended: its outcome, and the run directory when the sweep finished (the caller
/// prints its numbers, then the directory alone on stdout: `command::sweep`).
pub struct Swept {
    pub outcome: exit::Outcome,
    pub finished: Option<std::path::PathBuf>,
}

/// Entry point of `bench sweep`.
pub async fn run(args: &SweepArgs) -> anyhow::Result<Swept> {
    let open::Opened { config, journal, resumed, lock } = open::open(args)?;
    let title = format!("bench sweep {}", journal.dir().display());
    let (mut view, live) =
        crate::live::start(title, SWEEP_KEYS, crate::live::sweep::SweepBoard::new(), args.output.quiet);
    if resumed {
        // A resumed run's table starts from what it already holds.
        for r in cells::written(journal.dir()) {
            live.record(&r);
        }
    }
    let progress = Arc::new(Progress::new(0, args.output.quiet).showing(view.as_ref().map(|v| v.sink())));
    let work = work(config, resumed, journal.clone(), progress.clone(), live.clone());
    let ended = drive::drive("sweep", work, drive::OnSignal::Abort).await;
    match drive::settle(ended, &journal, resumed, lock, &progress, view.as_mut()) {
        drive::Settled::Kept(ended) => close(ended, &journal, args.output.quiet),
        drive::Settled::Removed(outcome) => Ok(Swept { outcome: outcome?, finished: None }),
    }
}

/// Starts the `--server-cmd` server, when there is one, and points the config at it.
pub(crate) async fn start_server(
    config: &mut SweepConfig,
    progress: &Progress,
) -> Result<Option<Supervisor>, Failure> {
    let Some(cmd) = &config.server_cmd else { return Ok(None) };
    progress.note(&format!("starting the server: {}", crate::secrets::redact_command(cmd)));
    let timeout = Duration::from_secs_f64(config.server_start_timeout_s);
    let sup = Supervisor::start(cmd, config.max_restarts, timeout, &|line| progress.note(line)).await?;
    config.server = sup.url();
    config.server_url = sup.url();
    Ok(Some(sup))
}

/// run.json learns the started server's command (redacted) and address.
pub(crate) fn record_server(supervisor: Option<&Supervisor>, journal: &Journal) -> Result<(), Failure> {
    let Some(sup) = supervisor else { return Ok(()) };
    let (command, url) = (crate::secrets::redact_command(&sup.command()), sup.url());
    journal.update(|m| {
        m.server.command = Some(command);
        m.config.server = url.clone();
        m.server.base_url = url;
    })
}

/// Everything that talks to the server, from preflight to the last cell.
async fn work(
    config: SweepConfig,
    resumed: bool,
    journal: Journal,
    progress: Arc<Progress>,
    live: crate::live::Publisher,
) -> Result<CellLoopEnd, Failure> {
    let mut config = config;
    let supervisor = start_server(&mut config, &progress).await?;
    let ctx = setup::prepare(config, Some(&journal), &progress).await?;
    record_server(supervisor.as_ref(), &journal)?;
    let done = if resumed { cells::completed(journal.dir())? } else { Default::default() };
    let gate = setup::ThermalGate::start(&ctx, &progress).await;
    journal.update(|m| m.thermal_baseline = Some(gate.describe()))?;
    progress.note("calibrating the cost model (two cold requests) ...");
    let rates = setup::calibrate_rates(&ctx, gate.probe_s()).await;
    let mut cells = cells::CellLoop::new(&ctx, gate, &journal, &progress, done, rates)?;
    cells.supervisor = supervisor;
    cells.live = live;
    let (started, reads) = (std::time::Instant::now(), crate::client::read_counts());
    let stop = cells.run().await?;
    let took = started.elapsed();
    let harness = ctx.harness.summary(took);
    let stamps = crate::meta::ArrivalStamps::since(reads);
    journal.update(|m| {
        m.harness_time = Some(harness.clone());
        m.arrival_stamps = Some(stamps);
    })?;
    let took_s = took.as_secs_f64();
    Ok(CellLoopEnd {
        stop,
        measured: cells.measured,
        failed: cells.failed,
        took_s,
        eta_s: cells.eta_s,
        harness,
    })
}

/// Ends run.json and says what happened. Every path leaves run.json saying how the run ended.
fn close(ended: drive::Ended<CellLoopEnd>, journal: &Journal, quiet: bool) -> anyhow::Result<Swept> {
    use drive::Ended;
    let finished = matches!(ended, Ended::Done(CellLoopEnd { stop: Stop::Finished, .. }));
    let status = if finished { RunStatus::Complete } else { RunStatus::Interrupted };
    let written = journal.update(|m| {
        m.ended_at = Some(crate::clock::now_rfc3339());
        m.status = status;
    });
    let dir = journal.dir().display();
    let resume = format!("bench sweep --resume {dir}");
    let mut finished = None;
    let outcome = match ended {
        Ended::Signal => {
            eprintln!("interrupted: every finished measurement is in {dir}; finish with: {resume}");
            Ok(exit::Outcome::Interrupted)
        }
        Ended::Failed(failure) => {
            eprintln!("error: {failure}");
            eprintln!("every finished measurement is in {dir}; after fixing this, finish with: {resume}");
            // Said above, with where the records are: `main` only maps it to its exit code.
            Err(Reported(failure))
        }
        Ended::Done(CellLoopEnd { stop: Stop::ServerGone(why), measured, .. }) => {
            eprintln!(
                "{why}. {measured} cells were recorded in {dir}; when the server is back, finish with: \
                 {resume} [--server URL]"
            );
            Ok(exit::Outcome::ServerGone)
        }
        Ended::Done(CellLoopEnd { stop: Stop::Finished, measured, failed, took_s, eta_s, harness }) => {
            if !quiet {
                eprintln!(
                    "{measured} cells measured, {failed} with errors, failed quality or unconfirmed cache \
                     state; records in {dir}"
                );
                eprintln!("{}", forecast_line(took_s, eta_s));
                eprintln!("{}", harness_time::line(&harness));
            }
            finished = Some(journal.dir().to_path_buf());
            let missed = auto_runs_missed(journal);
            if let Some(line) = &missed {
                eprintln!("{line}");
            }
            Ok(exit::Outcome::findings_if(failed > 0 || missed.is_some()))
        }
    };
    written?;
    Ok(Swept { outcome: outcome?, finished })
}

/// `--runs auto`: the cells whose median was not known to the target within `--max-runs`, said
/// (a finding: the sweep exits 1), or None when every cell met it.
fn auto_runs_missed(journal: &Journal) -> Option<String> {
    let meta = journal.meta.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let target = meta.config.runs_auto.as_ref()?;
    let missed: Vec<String> = meta
        .runs_auto
        .iter()
        .filter(|c| !c.within_target)
        .map(|c| match c.ci_half_width_share {
            Some(share) => format!("{} (reached +/-{:.1}% in {} runs)", c.cell, 100.0 * share, c.runs),
            None => format!("{} (no interval from {} good values)", c.cell, c.n),
        })
        .collect();
    (!missed.is_empty()).then(|| {
        format!(
            "--runs auto: {} of {} cells did not reach the +/-{}% interval of their median within --max-runs {}: {}; \
             raise --max-runs or loosen --target-ci (run.json runs_auto has each cell)",
            missed.len(),
            meta.runs_auto.len(),
            100.0 * target.target_ci,
            target.max_runs,
            missed.join(", ")
        )
    })
}

/// "took 1m 21s (forecast 1m 15s, -7%)": the cost model judged against the run.
fn forecast_line(took_s: f64, eta_s: Option<f64>) -> String {
    let show = |s: f64| humantime::format_duration(Duration::from_secs(s.round() as u64)).to_string();
    match eta_s {
        Some(eta) if eta > 0.0 => {
            format!(
                "took {} (forecast {}, {:+.0}%)",
                show(took_s),
                show(eta),
                100.0 * (eta - took_s) / took_s.max(1e-9)
            )
        }
        _ => format!("took {} (no forecast: the cost model could not be calibrated)", show(took_s)),
    }
}

pub(crate) async fn shutdown_signal() {
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
