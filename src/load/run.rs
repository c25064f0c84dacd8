//! Everything `bench load` does with the server: setup, then each rate in turn, every record
//! appended (and fsync'd) the moment its request is finished.
//!
//! A rate can end early, and says so in run.json (`stopped`, with when) and in the summary:
//! - a signal: the rate under way stops at once (requests in flight are dropped; every finished
//!   one is on disk), and no later rate starts;
//! - a crash of the server bench started (`--server-cmd`): the rate under way stops, the crash is
//!   recorded (run.json `server_crashes`) and, within `--max-restarts`, the server is started again
//!   and the rate repeated from its first arrival as a new run (`repeats_run`); past the restarts,
//!   the load stops with exit 3. A rate cut short is left out of the knee: the requests it
//!   finished are the quick ones, the slow ones were cut off;
//! - a server that refuses `REFUSED_IN_A_ROW` requests in a row (it died, and bench did not start
//!   it): the rate stops there, marked stopped, every finished record kept, and the load exits 3.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{closed, engine, prepare, summary};
use crate::exit::Failure;
use crate::live::{Event, Publisher, Step};
use crate::measuring::{Journal, measure, setup};
use crate::meta::{LoadPlan, RateSchedule};
use crate::progress::Progress;
use crate::supervise::{ServerCrash, Supervisor};
use ttft_model::record::{ErrorKind, Measurement, Record};
use ttft_results::store::RecordWriter;

/// How often a supervised server is checked while a rate runs.
const CRASH_POLL: Duration = Duration::from_millis(100);
/// Requests in a row refused at connect after which the server is taken for dead and the load
/// stops, as a sweep stops after three unanswered cells: every later arrival would fail the same
/// way, and a load's arrivals keep coming.
const REFUSED_IN_A_ROW: usize = 3;

/// How the rates ended when nothing failed.
pub(crate) enum End {
    /// Every rate ran (a rate a server crash cut short was repeated).
    Done,
    /// A signal stopped the run.
    Signal,
}

/// The plan as the run fills it in (slots held, clock starts, stops, repeats), mirrored into
/// run.json at every change; `bench load` reads it back for the summary however the run ended.
#[derive(Clone)]
pub(crate) struct LivePlan {
    plan: Arc<Mutex<LoadPlan>>,
    journal: Journal,
}

impl LivePlan {
    pub(crate) fn new(plan: LoadPlan, journal: Journal) -> Result<LivePlan, Failure> {
        let live = LivePlan { plan: Arc::new(Mutex::new(plan)), journal };
        live.update(|_| {})?;
        Ok(live)
    }

    pub(crate) fn update(&self, change: impl FnOnce(&mut LoadPlan)) -> Result<(), Failure> {
        let copy = {
            let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
            change(&mut plan);
            plan.clone()
        };
        self.journal.update(|m| m.load = Some(copy))
    }

    pub(crate) fn get(&self) -> LoadPlan {
        self.plan.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn rate(&self, i: usize) -> Option<RateSchedule> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner()).rates.get(i).cloned()
    }
}

/// Resolves once a stop was asked for (never, when the sender is gone without asking).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves with the crash when the supervised server dies (never without one).
async fn crashed(supervisor: Option<&mut Supervisor>, in_flight: impl Fn() -> String) -> ServerCrash {
    let Some(sup) = supervisor else { return std::future::pending().await };
    loop {
        if let Some(crash) = sup.check(&in_flight()) {
            return crash;
        }
        tokio::time::sleep(CRASH_POLL).await;
    }
}

enum RateEnd {
    Done(engine::RateClock),
    Signal,
    Crashed(ServerCrash),
    /// Requests refused in a row: the server is gone.
    Refused,
}

/// "rate 4/s (run 2)", "16 users (run 3)"
pub(crate) fn label(rate: &RateSchedule) -> String {
    match rate.concurrency {
        Some(users) => format!("{} (run {})", summary::users_label(users), rate.run),
        None => format!("rate {}/s (run {})", rate.rate_per_s, rate.run),
    }
}

/// What one run of the plan is: an open-loop rate or a closed-loop level.
enum Unit {
    Rate(engine::RatePlan),
    Level(closed::LevelPlan),
}

impl Unit {
    async fn run(
        self,
        driver: Arc<prepare::Real>,
        sink: tokio::sync::mpsc::UnboundedSender<Measurement>,
    ) -> engine::RateClock {
        match self {
            Unit::Rate(plan) => engine::run(driver, plan, sink).await,
            Unit::Level(plan) => closed::run(driver, plan, sink).await,
        }
    }
}

/// Setup, then every rate of the plan (which grows when a crashed rate is repeated).
pub(crate) async fn run(
    mut config: crate::config::SweepConfig,
    live: LivePlan,
    progress: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
    view: Publisher,
) -> Result<End, Failure> {
    let journal = live.journal.clone();
    let mut supervisor = crate::measuring::start_server(&mut config, &progress).await?;
    let warm_arrivals =
        live.get().mix.iter().any(|(state, _)| *state == ttft_model::record::CacheState::Warm);
    let ctx = Arc::new(setup::prepare(config, Some(&journal), &progress).await?);
    if warm_arrivals {
        super::warm_mix_fits(&ctx.preset)?;
    }
    crate::measuring::record_server(supervisor.as_ref(), &journal)?;
    let gate = setup::ThermalGate::start(&ctx, &progress).await;
    journal.update(|m| m.thermal_baseline = Some(gate.describe()))?;
    let slots = prepare::slot_bound(&ctx.preset).then_some(ctx.slots);
    live.update(|p| p.slots_held = slots)?;
    let (prepare_ahead, concurrency_limit, context_tokens) = {
        let p = live.get();
        (p.prepare_ahead, p.concurrency_limit, p.context_tokens)
    };
    let mut writer = RecordWriter::open(journal.dir())?;
    let mut i = 0;
    while let Some(rate) = live.rate(i) {
        if *stop.borrow() {
            return Ok(End::Signal);
        }
        let thermal = if i == 0 {
            gate.first()
        } else {
            tokio::select! {
                t = gate.wait(&ctx, &progress) => t,
                _ = stopped(&mut stop) => return Ok(End::Signal),
            }
        };
        // A server that died between rates is started again before the next one begins.
        if let Some(sup) = supervisor.as_mut()
            && let Some(crash) = sup.check(&format!("the pause before {}", label(&rate)))
        {
            restart(sup, crash, &journal, &progress).await?;
        }
        let total = live.get().rates.len();
        let what = match rate.concurrency {
            Some(_) => "closed loop".to_string(),
            None => format!("{} arrivals", rate.arrivals.len()),
        };
        progress.note(&format!(
            "{} ({} of {total}): {what} over {} ...",
            label(&rate),
            i + 1,
            humantime::format_duration(Duration::from_secs_f64(live.get().duration_s))
        ));
        if let Err(e) = measure::begin_cell(&ctx).await {
            progress.note(&format!("warning: the preset's global reset failed: {}", e.message));
        }
        let driver = Arc::new(prepare::Real {
            ctx: ctx.clone(),
            context_tokens,
            run: rate.run,
            thermal: Some(thermal),
        });
        let unit = match rate.concurrency {
            Some(users) => {
                let p = live.get();
                Unit::Level(closed::LevelPlan {
                    users,
                    duration: Duration::from_secs_f64(p.duration_s),
                    warmup: Duration::from_secs_f64(p.warmup_s.unwrap_or(0.0)),
                    seed: p.seed,
                    mix: crate::cli::Mix(p.mix.clone()),
                    slots: slots.map(|s| s as usize),
                })
            }
            None => Unit::Rate(engine::RatePlan {
                rate_per_s: rate.rate_per_s,
                arrivals: rate.arrivals.clone(),
                ahead: prepare_ahead as usize,
                slots: slots.map(|s| s as usize),
                concurrency_limit: concurrency_limit.map(|c| c as usize),
                timer: engine::Timer::Precise,
            }),
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Measurement>();
        let (gone_tx, gone_rx) = tokio::sync::oneshot::channel();
        let finished = Arc::new(AtomicUsize::new(0));
        let counted = finished.clone();
        let shown = view.clone();
        let writing = tokio::task::spawn_blocking(move || append_all(writer, rx, gone_tx, &counted, &shown));
        view.send(Event::Step(Step {
            run: rate.run,
            label: label(&rate),
            duration_s: live.get().duration_s,
            rate_per_s: rate.rate_per_s,
            arrivals: rate.arrivals.clone(),
            concurrency: rate.concurrency,
            warmup_s: rate.concurrency.and(live.get().warmup_s).unwrap_or(0.0),
            began: Some(Instant::now()),
        }));
        let began = Instant::now();
        let ticking = tokio::spawn(tick(progress.clone(), i, rate.clone(), live.get().duration_s, finished));
        let since = || format!("{:.1} s after it began", began.elapsed().as_secs_f64());
        let end = tokio::select! {
            clock = unit.run(driver, tx) => RateEnd::Done(clock),
            crash = crashed(supervisor.as_mut(), || format!("{}, {}", label(&rate), since())) => {
                RateEnd::Crashed(crash)
            }
            _ = stopped(&mut stop) => RateEnd::Signal,
            Ok(()) = gone_rx => RateEnd::Refused,
        };
        // A supervised server that refuses because it died is a crash (restarted, within limits).
        let end = match (end, supervisor.as_mut()) {
            (RateEnd::Refused, Some(sup)) => match sup.check(&format!("{}, {}", label(&rate), since())) {
                Some(crash) => RateEnd::Crashed(crash),
                None => RateEnd::Refused,
            },
            (end, _) => end,
        };
        // A rate stopped early dropped the engine, and with it every task holding a sender: the
        // writer ends once it has appended every record already finished.
        ticking.abort();
        let (w, written) =
            writing.await.map_err(|e| Failure::internal(format!("the record writer stopped: {e}")))??;
        writer = w;
        match end {
            RateEnd::Done(clock) => {
                let _ = measure::end_cell(&ctx).await;
                live.update(|p| {
                    if let Some(r) = p.rates.get_mut(i) {
                        r.clock_started_at = Some(clock.started_at);
                    }
                })?;
                note_rate(&progress, &rate, &written);
                if live.get().search.is_some() {
                    live.update(|p| super::search::advance(p, rate.run, &written))?;
                }
                if !written.is_empty() && written.iter().all(unanswered) {
                    // Every later rate would fail the same way, one timeout per request.
                    let why = format!(
                        "the server at {} answered none of the {} requests at {}/s: it is down or wedged",
                        ctx.config.server,
                        written.len(),
                        rate.rate_per_s
                    );
                    live.update(|p| stop_rate(p, i, why.clone()))?;
                    return Err(Failure::server(format!("{why}; the load stopped there")));
                }
            }
            RateEnd::Refused => {
                let why = format!(
                    "the server at {} refused {REFUSED_IN_A_ROW} requests in a row: it is down; stopped {}",
                    ctx.config.server,
                    since()
                );
                live.update(|p| stop_rate(p, i, why.clone()))?;
                return Err(Failure::server(format!("{why}; the load stopped there")));
            }
            RateEnd::Signal => {
                let why = format!("interrupted by a signal {}", since());
                live.update(|p| stop_rate(p, i, why))?;
                return Ok(End::Signal);
            }
            RateEnd::Crashed(crash) => {
                let why = crate::supervise::describe(&crash);
                // Only a supervised server is watched, so there is one.
                let Some(sup) = supervisor.as_mut() else { return Err(Failure::internal(why)) };
                if let Err(gone) = restart(sup, crash, &journal, &progress).await {
                    live.update(|p| stop_rate(p, i, why))?;
                    return Err(Failure::server(format!("{gone}; the load stopped there")));
                }
                live.update(|p| {
                    let run = p.rates.iter().map(|r| r.run).max().unwrap_or(0) + 1;
                    stop_rate(p, i, format!("{why}; repeated as run {run}"));
                    p.rates.push(RateSchedule {
                        run,
                        clock_started_at: None,
                        stopped: None,
                        repeats_run: Some(rate.run),
                        ..rate.clone()
                    });
                })?;
                progress.note(&format!(
                    "{} was cut short by the crash; it runs again on the restarted server",
                    label(&rate)
                ));
            }
        }
        i += 1;
    }
    drop(supervisor);
    Ok(End::Done)
}

fn stop_rate(plan: &mut LoadPlan, i: usize, why: String) {
    if let Some(r) = plan.rates.get_mut(i) {
        r.stopped = Some(why);
    }
}

/// Records the crash in run.json and starts the server again; Err when it may not (restarts
/// used up) or does not come back.
async fn restart(
    sup: &mut Supervisor,
    crash: ServerCrash,
    journal: &Journal,
    progress: &Progress,
) -> Result<(), Failure> {
    progress.note(&format!("{}; restarting it", crate::supervise::describe(&crash)));
    let restarted = sup.restart(crash).await;
    let crashes = sup.crashes.clone();
    journal.update(|m| m.server_crashes = crashes)?;
    restarted
}

/// Appends every record as it comes (one write and an fsync each, off the async workers); returns
/// the writer and what it wrote when the channel closes. `gone` fires once `REFUSED_IN_A_ROW`
/// records in a row were refused at connect.
fn append_all(
    mut writer: RecordWriter,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Measurement>,
    gone: tokio::sync::oneshot::Sender<()>,
    finished: &AtomicUsize,
    view: &Publisher,
) -> Result<(RecordWriter, Vec<Measurement>), Failure> {
    let mut written = Vec::new();
    let (mut refused, mut gone) = (0, Some(gone));
    while let Some(m) = rx.blocking_recv() {
        refused = if matches!(m.error.as_ref().map(|e| e.kind), Some(ErrorKind::Connect)) {
            refused + 1
        } else {
            0
        };
        if refused >= REFUSED_IN_A_ROW
            && let Some(tell) = gone.take()
        {
            let _ = tell.send(());
        }
        let record = Record::Measurement(Box::new(m));
        writer.append(&record)?;
        // On this writer's thread, after the append: never on a measuring task.
        view.record(&record);
        if let Record::Measurement(m) = record {
            written.push(*m);
        }
        finished.store(written.len(), Ordering::Relaxed);
    }
    Ok((writer, written))
}

/// How often a rate under way says how far it got: a terminal's bar moves each second; lines are
/// written at each tenth of the duration (at most one a second).
const TICK: Duration = Duration::from_secs(1);

/// Moves the progress while run `i` goes on: the share of its duration elapsed (a rate drains its
/// requests in flight after it) and how many of its requests finished. Ends when aborted.
async fn tick(
    progress: Arc<Progress>,
    i: usize,
    rate: RateSchedule,
    duration_s: f64,
    finished: Arc<AtomicUsize>,
) {
    let began = Instant::now();
    let mut told_tenth = 0;
    loop {
        tokio::time::sleep(TICK).await;
        let elapsed_s = began.elapsed().as_secs_f64();
        let share = (elapsed_s / duration_s.max(1e-9)).min(1.0);
        let tenth = (share * 10.0).floor() as u32;
        if !progress.is_live() && (tenth <= told_tenth || tenth >= 10) {
            continue;
        }
        told_tenth = tenth;
        let done = finished.load(Ordering::Relaxed);
        let of = match rate.concurrency {
            Some(_) => format!("{done} requests finished"),
            None => format!("{done} of {} arrivals finished", rate.arrivals.len()),
        };
        progress.partly(i, share, &format!("{}: {:.0}% of {duration_s}s, {of}", label(&rate), share * 100.0));
    }
}

fn unanswered(m: &Measurement) -> bool {
    matches!(m.error.as_ref().map(|e| e.kind), Some(ErrorKind::Connect | ErrorKind::Timeout))
}

fn note_rate(progress: &Progress, rate: &RateSchedule, written: &[Measurement]) {
    let good = written.iter().filter(|m| m.error.is_none() && m.quality_ok).count();
    let lag = summary::Percentiles::of(written.iter().filter_map(|m| m.send_lag_ms));
    progress.note(&format!(
        "{}: {good}/{} good, send lag p99 {:.3} ms",
        label(rate),
        written.len(),
        lag.p99.unwrap_or(0.0)
    ));
}
