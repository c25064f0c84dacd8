//! The cell loop: for each cell of the plan, the thermal gate, the measurement, the annotations,
//! and the durable append, then the decision to go on.
//!
//! A server that stops answering is detected here: a cell none of whose requests got an answer
//! (refused, or no answer within --request-timeout) counts against the server, and after
//! `UNANSWERED_CELLS` such cells in a row the sweep stops (exit 3) instead of paying a timeout per
//! cell for the rest of the plan. Everything measured stays on disk; `--resume` finishes.

use std::collections::BTreeSet;
use std::path::Path;

use super::batch;
use crate::cost::{self, ServerRates};
use crate::exit::Failure;
use crate::measuring::harness_time::Part;
use crate::measuring::{Journal, RunContext, lifecycle, measure, setup};
use crate::meta::Forecast;
use crate::progress::Progress;
use crate::supervise::Supervisor;
use ttft_model::record::{CellKey, ErrorKind, Mode, Record, Scenario};
use ttft_results::plan::lifecycle_key;
use ttft_results::store::{self, RecordWriter, TornTail};

/// Cells in a row without any answer from the server after which it is taken for gone.
pub(crate) const UNANSWERED_CELLS: usize = 3;

/// How the cell loop ended.
#[derive(Debug)]
pub(crate) enum Stop {
    Finished,
    /// The server stopped answering; the text says how.
    ServerGone(String),
}

pub(crate) struct CellLoop<'a> {
    ctx: &'a RunContext,
    gate: setup::ThermalGate,
    journal: &'a Journal,
    progress: Progress,
    writer: RecordWriter,
    cells: Vec<CellKey>,
    pub measured: usize,
    pub failed: usize,
    /// The cost model's forecast for the cells of this loop, seconds.
    pub eta_s: Option<f64>,
    /// The server process, when bench started it (`--server-cmd`).
    pub supervisor: Option<Supervisor>,
    /// The session lifecycle in progress (`--reuse-primes`).
    lifecycle: Option<lifecycle::Lifecycle>,
    /// `--runs auto`: what each matrix point has measured, and which need no more runs.
    auto: Option<AutoRuns>,
    /// The live view's feed: each cell's records once they are on disk.
    pub live: crate::live::Publisher,
}

/// `--runs auto` as the loop goes: per matrix point (a cell with run 0) its runs and values.
struct AutoRuns {
    target: crate::config::AutoRuns,
    points: std::collections::BTreeMap<CellKey, (u32, Vec<f64>)>,
    settled: BTreeSet<CellKey>,
}

impl AutoRuns {
    /// Seeded with the records a resumed run already holds.
    fn new(target: crate::config::AutoRuns, dir: &Path) -> Result<AutoRuns, Failure> {
        let mut auto = AutoRuns { target, points: Default::default(), settled: BTreeSet::new() };
        let path = dir.join(store::MEASUREMENTS_FILE);
        if path.exists() {
            let records = store::read_records(&path, TornTail::Skip)?;
            let mut runs: std::collections::BTreeMap<CellKey, BTreeSet<u32>> = Default::default();
            for r in &records {
                runs.entry(r.cell().point()).or_default().insert(r.cell().run);
            }
            for (p, seen) in runs {
                let at = records.iter().filter(|r| r.cell().point() == p).cloned().collect::<Vec<_>>();
                auto.add_values(&p, &at);
                if let Some(entry) = auto.points.get_mut(&p) {
                    entry.0 = seen.len() as u32;
                }
                auto.judge(&p);
            }
        }
        Ok(auto)
    }

    /// The value a record adds to its point: TTFT, or E2E where the mode has no TTFT.
    fn add_values(&mut self, p: &CellKey, records: &[Record]) {
        let entry = self.points.entry(p.clone()).or_default();
        for r in records {
            if let Record::Measurement(m) = r
                && r.is_good()
                && let Some(v) = if m.cell.mode == Mode::Streaming { m.ttft_ms } else { m.e2e_ms }
            {
                entry.1.push(v);
            }
        }
    }

    /// One more run of `cell` measured `records`.
    fn add(&mut self, cell: &CellKey, records: &[Record]) {
        let p = cell.point();
        self.add_values(&p, records);
        self.points.entry(p.clone()).or_default().0 += 1;
        self.judge(&p);
    }

    /// Where point `p` stands; settled when its interval meets the target.
    fn judge(&mut self, p: &CellKey) -> crate::meta::AutoRunsCell {
        let (runs, values) = self.points.get(p).cloned().unwrap_or_default();
        let s = ttft_model::stats::summarize(&values);
        let share = match (s.median, s.median_ci_lo, s.median_ci_hi) {
            (Some(m), Some(lo), Some(hi)) if m > 0.0 => Some((m - lo).max(hi - m) / m),
            _ => None,
        };
        let within = runs >= self.target.min_runs
            && s.median_ci_level.is_some_and(|l| l >= 0.95)
            && share.is_some_and(|w| w <= self.target.target_ci);
        if within {
            self.settled.insert(p.clone());
        }
        crate::meta::AutoRunsCell {
            cell: format!("{p:#}"),
            runs,
            metric: if p.mode == Mode::Streaming { "ttft_ms" } else { "e2e_ms" }.to_string(),
            n: s.n,
            median_ms: s.median,
            ci_lo_ms: s.median_ci_lo,
            ci_hi_ms: s.median_ci_hi,
            ci_level: s.median_ci_level,
            ci_half_width_share: share,
            within_target: within,
        }
    }

    /// Whether `cell` is not needed. Staggered pairs keep their own runs. Under `--reuse-primes`
    /// the cache states of one (context, mode, run) share a session, so they are skipped together,
    /// once every one of them is settled.
    fn skip(&self, cell: &CellKey, config: &crate::config::SweepConfig) -> bool {
        if cell.scenario.is_staggered() {
            return false;
        }
        if config.reuse_primes && lifecycle_key(cell).is_some() {
            return config.cache_states.iter().all(|&state| {
                let scenario = match state {
                    ttft_model::record::CacheState::Cold => Scenario::Cold,
                    ttft_model::record::CacheState::Warm => Scenario::Warm,
                    ttft_model::record::CacheState::Hot => Scenario::Hot,
                };
                self.settled.contains(&CellKey { scenario, cache_state: state, ..cell.point() })
            });
        }
        self.settled.contains(&cell.point())
    }

    /// Every point's standing, for run.json.
    fn report(&mut self) -> Vec<crate::meta::AutoRunsCell> {
        let points: Vec<CellKey> = self.points.keys().cloned().collect();
        points.iter().map(|p| self.judge(p)).collect()
    }
}

impl<'a> CellLoop<'a> {
    pub(crate) fn new(
        ctx: &'a RunContext,
        gate: setup::ThermalGate,
        journal: &'a Journal,
        note: &Progress,
        done: BTreeSet<CellKey>,
        rates: Option<ServerRates>,
    ) -> Result<CellLoop<'a>, Failure> {
        let all = crate::shard::cells(&ctx.config.matrix(), &ctx.model, ctx.config.shard.as_ref());
        let cells: Vec<CellKey> = all.iter().filter(|c| !done.contains(*c)).cloned().collect();
        if let Some(s) = &ctx.config.shard {
            note.note(&format!(
                "shard {}/{} ({}): {} of {} cells",
                s.index,
                s.count,
                s.origin,
                all.len(),
                ctx.config.matrix().cell_count()
            ));
        }
        if !done.is_empty() {
            note.note(&format!("resuming: {} cells done, {} to go", all.len() - cells.len(), cells.len()));
        }
        let writer = RecordWriter::open(journal.dir())?;
        let (progress, eta_s) = match rates {
            Some(rates) => {
                let (costs, eta_s) = cost::estimate(&cells, &ctx.config, &rates);
                note.note(&format!(
                    "{} cells, forecast {} ({})",
                    cells.len(),
                    humantime::format_duration(std::time::Duration::from_secs(eta_s.round() as u64)),
                    rates.source
                ));
                note.note(&cost::thermal_line(&ctx.config.thermal, cells.len(), &rates, eta_s));
                let forecast = Forecast { rates, eta_s, cells: cells.len() };
                journal.update(|m| m.forecast = Some(forecast))?;
                (note.reweighted(costs, true), Some(eta_s))
            }
            None => (note.reweighted(vec![1.0; cells.len()], false), None),
        };
        Ok(CellLoop {
            ctx,
            gate,
            journal,
            progress,
            writer,
            cells,
            measured: 0,
            failed: 0,
            eta_s,
            supervisor: None,
            lifecycle: None,
            live: crate::live::Publisher::off(),
            auto: match &ctx.config.runs_auto {
                Some(target) => Some(AutoRuns::new(target.clone(), journal.dir())?),
                None => None,
            },
        })
    }

    pub(crate) async fn run(&mut self) -> Result<Stop, Failure> {
        let mut unanswered = 0;
        let cells = std::mem::take(&mut self.cells);
        for (i, cell) in cells.iter().enumerate() {
            if self.auto.as_ref().is_some_and(|a| a.skip(cell, &self.ctx.config)) {
                // A point known well enough: its remaining runs are not measured.
                continue;
            }
            let next = cells.get(i + 1);
            let mut records = self.one(i, cell, next).await?;
            match self.survive_crash(cell).await? {
                Survived::NoCrash => {}
                Survived::Restarted => {
                    unanswered = 0;
                    // The restarted server has none of the lifecycle's session.
                    self.lifecycle = None;
                    // The cell the crash spoiled is measured again on the restarted server (its
                    // failed records stay on disk: merge and resume prefer the good ones). A cell
                    // whose records are all good was answered whole before the server died (the
                    // crash is seen only after the cell's records are written): measuring it again
                    // would give the cell two good measurements.
                    if !records.iter().all(Record::is_good) {
                        records = self.one(i, cell, next).await?;
                        if let Survived::Gone(why) = self.survive_crash(cell).await? {
                            return Ok(Stop::ServerGone(why));
                        }
                    }
                }
                Survived::Gone(why) => return Ok(Stop::ServerGone(why)),
            }
            if let Some(auto) = &mut self.auto {
                auto.add(cell, &records);
                let standing = auto.report();
                self.journal.update(|m| m.runs_auto = standing)?;
            }
            unanswered = if records.iter().all(unanswered_record) { unanswered + 1 } else { 0 };
            if unanswered >= UNANSWERED_CELLS {
                let how = if records.iter().any(|r| error_kind(r) == Some(ErrorKind::Timeout)) {
                    format!(
                        "the server at {} gave no answer within the request timeout for {UNANSWERED_CELLS} \
                         cells in a row: it is wedged",
                        self.ctx.config.server
                    )
                } else {
                    format!(
                        "the server at {} refused {UNANSWERED_CELLS} cells in a row: it is down",
                        self.ctx.config.server
                    )
                };
                return Ok(Stop::ServerGone(how));
            }
        }
        self.progress.finish();
        Ok(Stop::Finished)
    }

    /// Measures one cell and appends its records (each fsync'd) before anything else happens.
    async fn one(
        &mut self,
        i: usize,
        cell: &CellKey,
        next: Option<&CellKey>,
    ) -> Result<Vec<Record>, Failure> {
        let label = format!("{cell:#}");
        let clock = &self.ctx.harness;
        let waited = std::time::Instant::now();
        let mut thermal =
            if i == 0 { self.gate.first() } else { self.gate.wait(self.ctx, &self.progress).await };
        clock.add(Part::Thermal, waited.elapsed());
        self.progress.cell(i, &label);
        if cell.scenario.is_staggered() {
            let calibrating = std::time::Instant::now();
            self.calibrate_stagger().await?;
            clock.add(Part::Priming, calibrating.elapsed());
        }
        thermal.before = clock.time(Part::Thermal, snapshot()).await.map(Box::new);
        let mut records = if self.ctx.config.reuse_primes && lifecycle_key(cell).is_some() {
            lifecycle::step(self.ctx, cell, next, &mut self.lifecycle).await
        } else {
            execute(self.ctx, cell).await
        };
        thermal.after = clock.time(Part::Thermal, snapshot()).await.map(Box::new);
        for r in &mut records {
            match r {
                Record::Measurement(m) => m.thermal = Some(thermal.clone()),
                Record::Staggered(s) => s.thermal = Some(thermal.clone()),
                Record::Group(_) => {}
            }
        }
        let writing = std::time::Instant::now();
        for r in &records {
            self.writer.append(r)?;
        }
        clock.add(Part::Write, writing.elapsed());
        for r in &records {
            self.live.record(r);
        }
        // The cell's records are safe; a body that could not be written stops the sweep (exit 4).
        if let Some(why) = self.ctx.bodies.as_ref().and_then(|b| b.error()) {
            return Err(Failure::io(why));
        }
        self.measured += 1;
        if records.iter().any(|r| !r.is_good()) {
            self.failed += 1;
        }
        self.progress.done(i, &label, &summary(&records));
        Ok(records)
    }

    /// A server bench started that died during `cell`: recorded in run.json and restarted.
    async fn survive_crash(&mut self, cell: &CellKey) -> Result<Survived, Failure> {
        let Some(sup) = &mut self.supervisor else { return Ok(Survived::NoCrash) };
        let Some(crash) = sup.check(&format!("cell {cell:#}")) else { return Ok(Survived::NoCrash) };
        self.progress.note(&format!("{}; restarting it", crate::supervise::describe(&crash)));
        let restarted = sup.restart(crash).await;
        let crashes = sup.crashes.clone();
        self.journal.update(|m| m.server_crashes = crashes)?;
        Ok(match restarted {
            Ok(()) => Survived::Restarted,
            Err(gone) => Survived::Gone(gone.to_string()),
        })
    }

    /// The staggered delay, when it is a share of A's duration: measured once, right before the
    /// first pair, and recorded in run.json.
    async fn calibrate_stagger(&mut self) -> Result<(), Failure> {
        let ctx = self.ctx;
        let share = ctx.config.staggered.as_ref().and_then(|s| s.delay_share_of_a);
        let (Some(share), None) = (share, ctx.stagger_delay.get()) else { return Ok(()) };
        self.progress.note("calibrating the staggered delay (one unmeasured request as user A) ...");
        let calibrated = setup::calibrate_stagger(ctx, share).await;
        if let Ok(c) = &calibrated {
            let c = c.clone();
            self.journal.update(|m| m.stagger_calibration = Some(c))?;
        }
        let _ = ctx.stagger_delay.set(calibrated.map(|c| c.delay_ms));
        Ok(())
    }
}

enum Survived {
    NoCrash,
    Restarted,
    Gone(String),
}

/// Host and GPU temperatures (sysinfo, nvidia-smi): blocking calls, kept off the async workers.
async fn snapshot() -> Option<serde_json::Value> {
    tokio::task::spawn_blocking(crate::thermal::host_snapshot).await.ok().filter(|v| !v.is_null())
}

async fn execute(ctx: &RunContext, cell: &CellKey) -> Vec<Record> {
    if let Err(error) = ctx.harness.time(Part::Preset, measure::begin_cell(ctx)).await {
        return vec![failed_cell(ctx, cell, error)];
    }
    let records = match cell.scenario {
        Scenario::Cold | Scenario::Warm | Scenario::Hot => {
            let m = match measure::prepare(ctx, cell, 0).await {
                Ok(mut ready) => {
                    measure::read_sessions_before(ctx, &mut [&mut ready]).await;
                    let before = ctx.harness.time(Part::Metrics, ctx.metrics()).await;
                    let fired = ctx.harness.time(Part::Measured, measure::fire(ctx, &ready)).await;
                    let metrics = ctx.harness.time(Part::Metrics, ctx.metrics_since(before)).await;
                    measure::finish(ctx, ready, fired, None, metrics).await
                }
                Err(m) => *m,
            };
            vec![Record::Measurement(Box::new(m))]
        }
        Scenario::Concurrent => batch::concurrent(ctx, cell).await,
        Scenario::StaggeredBatched | Scenario::StaggeredSequential => vec![batch::staggered(ctx, cell).await],
        // Not cells of any matrix: `bench soak` and `bench load` drive their own loops.
        Scenario::Soak | Scenario::Load => Vec::new(),
    };
    // A failed global cleanup leaves the next cell's state unknown; its own reset deals with it.
    let _ = ctx.harness.time(Part::Preset, measure::end_cell(ctx)).await;
    records
}

/// The record of a cell whose global reset failed: nothing was measured.
fn failed_cell(ctx: &RunContext, cell: &CellKey, error: ttft_model::record::ErrorInfo) -> Record {
    let mut m = measure::blank(ctx, cell, 0, "");
    m.error = Some(error);
    Record::Measurement(Box::new(m))
}

fn error_kind(r: &Record) -> Option<ErrorKind> {
    match r {
        Record::Measurement(m) => m.error.as_ref().map(|e| e.kind),
        Record::Staggered(s) => s.error.as_ref().map(|e| e.kind),
        Record::Group(g) => g.error.as_ref().map(|e| e.kind),
    }
}

/// A record whose request got no answer at all: refused, or nothing within the timeout.
fn unanswered_record(r: &Record) -> bool {
    matches!(error_kind(r), Some(ErrorKind::Connect | ErrorKind::Timeout))
}

/// The records a run directory already holds (none when it holds none, or they cannot be read:
/// the view then starts empty, and `completed` says what is wrong).
pub(crate) fn written(run_dir: &Path) -> Vec<Record> {
    store::read_records(&run_dir.join(store::MEASUREMENTS_FILE), TornTail::Skip).unwrap_or_default()
}

/// Cells with a good record (a batch: a complete, good batch): `--resume` skips them. An empty
/// or missing measurements file means nothing is done yet.
pub(crate) fn completed(run_dir: &Path) -> Result<BTreeSet<CellKey>, Failure> {
    let path = run_dir.join(store::MEASUREMENTS_FILE);
    if !path.exists() {
        return Ok(BTreeSet::new());
    }
    let records = store::read_records(&path, TornTail::Skip)?;
    let mut good = BTreeSet::new();
    for r in &records {
        match r {
            Record::Measurement(m) if m.group_id.is_none() && r.is_good() => {
                good.insert(m.cell.clone());
            }
            Record::Staggered(s) if r.is_good() => {
                good.insert(s.cell.clone());
            }
            _ => {}
        }
    }
    for b in ttft_results::results::batch::batches(&records) {
        if b.is_good() {
            good.insert(b.cell.clone());
        }
    }
    Ok(good)
}

fn summary(records: &[Record]) -> String {
    let mut parts = Vec::new();
    for r in records {
        match r {
            Record::Measurement(m) => parts.push(match (&m.error, m.ttft_ms, m.e2e_ms) {
                (Some(e), _, _) => format!("error {}: {}", e.kind.as_str(), clip(&e.message)),
                (None, Some(t), _) => format!("ttft {t:.1} ms"),
                (None, None, Some(e)) => format!("e2e {e:.1} ms"),
                _ => "no timing".into(),
            }),
            Record::Staggered(s) => parts.push(format!(
                "B waited {:.1} ms from wall start{}",
                s.user_b_ttft_from_wall_start_ms.unwrap_or(f64::NAN),
                // Only the batched pair is meant to overlap; its sequential twin never does.
                if s.overlapped == Some(false) && s.cell.scenario == Scenario::StaggeredBatched {
                    " (did not overlap A)"
                } else {
                    ""
                }
            )),
            Record::Group(g) => {
                parts.push(format!("wall {:.1} ms, {:.1} tok/s", g.wall_ms, g.system_tps.unwrap_or(0.0)))
            }
        }
    }
    let mut text = parts.join("; ");
    let failed_gate = |m: &ttft_model::record::Measurement| !m.quality_ok && m.error.is_none();
    if records.iter().any(|r| matches!(r, Record::Measurement(m) if failed_gate(m))) {
        let flags: BTreeSet<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::Measurement(m) => Some(m),
                _ => None,
            })
            .flat_map(|m| m.quality_flags.iter().filter(|f| f.fails_gate).map(|f| f.flag.as_str()))
            .collect();
        text.push_str(&format!(" (failed: {})", flags.into_iter().collect::<Vec<_>>().join(", ")));
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
