//! The measuring core that `bench sweep`, `bench soak` and `bench load` drive alike: one run's life
//! (`open`, `drive`), the server a run may start (`start_server`), what every request measured
//! needs (`RunContext`: the client, preset, prompts and evidence), one request measured with its
//! preset actions and records (`measure`, `fired`, `lifecycle`), the run's setup (preflight,
//! sizing, warm-up, the thermal gate: `setup`), the slot files warm sessions leave on the server's
//! disk (`slot_files`) and where the harness's own time goes (`harness_time`). The verbs above
//! (runner: the sweep's cell loop and the soak; load) only say what to measure and when.

pub(crate) mod drive;
mod fired;
pub(crate) mod harness_time;
pub(crate) mod lifecycle;
pub(crate) mod measure;
pub(crate) mod open;
pub(crate) mod setup;
pub(crate) mod slot_files;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::SweepConfig;
use crate::exit::Failure;
use crate::meta::RunMeta;
use crate::preset::{Preset, Session};
use crate::progress::Progress;
use crate::prompt::{Nonces, Sizer};
use crate::supervise::Supervisor;
use ttft_client::{ChatRequest, Client, Exchange};
use ttft_model::record::{ErrorInfo, ErrorKind, Measurement, QualityFlag};
use ttft_results::store;

/// How long an interrupted work task gets to reach its next await point before bench exits anyway.
pub(crate) const ABORT_GRACE: Duration = Duration::from_secs(3);

/// Everything a cell needs, shared read-only across the requests of a batch.
pub(crate) struct RunContext {
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
    pub physics: Option<(ttft_results::physics::Hardware, ttft_results::physics::ModelProfile)>,
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
    pub(crate) fn new_session(&self, request_index: u32) -> Session {
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        Session::new(format!("tb-{}-{n}", self.nonces.next()), request_index % self.slots.max(1))
    }

    /// An unmeasured request (priming, earlier turns, probes). Its error, like the measured
    /// request's (`measure::fire`), carries what to do where a flag helps (`server::advised`).
    pub(crate) async fn send(&self, request: &ChatRequest) -> Exchange {
        match self.client.prepare(request) {
            Ok(p) => {
                let mut exchange = self.client.send(p).await;
                exchange.error = exchange.error.map(crate::server::advised);
                exchange
            }
            Err(e) => Exchange {
                error: Some(ErrorInfo::new(ErrorKind::Protocol, e.to_string())),
                ..Default::default()
            },
        }
    }

    /// The server's counters now, when the preset names some (outside every timed window).
    pub(crate) async fn metrics(&self) -> Option<crate::metrics::Snapshot> {
        let spec = self.preset.metrics.as_ref()?;
        crate::metrics::snapshot(&self.client, spec, Duration::from_secs_f64(self.config.request_timeout_s))
            .await
    }

    /// The counters' change since `before`.
    pub(crate) async fn metrics_since(
        &self,
        before: Option<crate::metrics::Snapshot>,
    ) -> Option<ttft_model::record::MetricsDelta> {
        let (spec, before) = (self.preset.metrics.as_ref()?, before?);
        Some(crate::metrics::delta(spec, &before, &self.metrics().await?))
    }

    /// Quality gate, cache-state gate and (where configured) physical ceilings of a finished
    /// measurement. A row whose cache evidence contradicts its claimed state is a failed
    /// measurement, exactly like a failed quality gate: it must not count as a warm or hot number.
    pub(crate) fn annotate(&self, m: &mut Measurement, full_output: &str) {
        m.quality_flags = ttft_results::quality::assess(m, full_output);
        if m.cache_state_confirmed == Some(false) {
            m.quality_flags.push(QualityFlag {
                flag: ttft_model::record::QualityCode::CacheStateUnconfirmed,
                reason: ttft_results::quality::cache_verdict_reason(
                    m.cell.cache_state,
                    m.cache_evidence.as_ref(),
                    ttft_results::quality::PromptTokens::of(m),
                ),
                fails_gate: true,
            });
        }
        m.quality_ok = ttft_results::quality::gate(&m.quality_flags) && m.error.is_none();
        if let Some((hw, model)) = &self.physics {
            m.physics = Some(ttft_results::physics::ceilings(hw, model, m));
        }
    }
}

/// run.json, shared by the work (which fills in what it learns) and `close` (which ends it).
#[derive(Clone)]
pub(crate) struct Journal {
    dir: std::path::PathBuf,
    meta: Arc<Mutex<RunMeta>>,
}

impl Journal {
    pub(crate) fn update(&self, change: impl FnOnce(&mut RunMeta)) -> Result<(), Failure> {
        let mut meta = self.meta.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut meta);
        let path = self.dir.join(store::RUN_FILE);
        store::write_json_atomic(&path, &*meta)
            .map_err(|e| Failure::io(format!("cannot write {}: {e}", path.display())))
    }

    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// What run.json holds now.
    pub(crate) fn read<T>(&self, look: impl FnOnce(&RunMeta) -> T) -> T {
        look(&self.meta.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Starts the `--server-cmd` server, when there is one, and points the config at it.
pub(crate) async fn start_server(
    config: &mut SweepConfig,
    progress: &Progress,
) -> Result<Option<Supervisor>, Failure> {
    let Some(cmd) = &config.server_cmd else { return Ok(None) };
    progress.note(&format!("starting the server: {}", ttft_model::secrets::redact_command(cmd)));
    let timeout = Duration::from_secs_f64(config.server_start_timeout_s);
    let sup = Supervisor::start(cmd, config.max_restarts, timeout, &|line| progress.note(line)).await?;
    config.server = sup.url();
    config.server_url = sup.url();
    Ok(Some(sup))
}

/// run.json learns the started server's command (redacted) and address.
pub(crate) fn record_server(supervisor: Option<&Supervisor>, journal: &Journal) -> Result<(), Failure> {
    let Some(sup) = supervisor else { return Ok(()) };
    let (command, url) = (ttft_model::secrets::redact_command(&sup.command()), sup.url());
    journal.update(|m| {
        m.server.command = Some(command);
        m.config.server = url.clone();
        m.server.base_url = url;
    })
}

/// Resolves when Ctrl-C or SIGTERM arrives: the one interrupt path of every verb (the live view's
/// `q` sends SIGINT to this process).
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
