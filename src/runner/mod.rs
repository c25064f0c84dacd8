//! `bench sweep`: runs the matrix cell by cell and writes every record the moment it exists.
//!
//! A sweep lives as every run does (`measuring::drive`): opened (new or resumed; run.json is written before
//! anything else, so a run directory is never without one), its work driven until it ends or a
//! signal stops it (preflight, prompt sizing, warm-up and thermal baseline, then the cell loop),
//! settled, then closed here (status, messages, exit code).

mod batch;
mod cells;
mod forecast;
mod soak;

use std::sync::Arc;
use std::time::Duration;

use crate::cli::SweepArgs;
use crate::config::SweepConfig;
use crate::exit::{self, Failure, Reported};
use crate::measuring::{Journal, drive, harness_time, open, record_server, setup, start_server};
use crate::meta::RunStatus;
use crate::progress::Progress;

pub(crate) use cells::Stop;
pub use forecast::plan;
pub use soak::soak;

/// What `q` does in the sweep's view.
const SWEEP_KEYS: &str =
    "q: stop as Ctrl-C does (every finished record kept, run.json interrupted; --resume finishes)";

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
    let (started, reads) = (std::time::Instant::now(), ttft_client::read_counts());
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
        m.ended_at = Some(ttft_model::clock::now_rfc3339());
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
    journal.read(runs_missed)
}

fn runs_missed(meta: &crate::meta::RunMeta) -> Option<String> {
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
