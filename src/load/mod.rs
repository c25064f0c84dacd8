//! `bench load`: open-loop load with cache states. For each offered rate, requests arrive at the
//! instants of a seeded Poisson process, each on its own session in a cache state drawn from the
//! mix (cold, warm, hot), prepared ahead of its instant so that preparation never delays the
//! schedule (`engine`). Every request is an ordinary measurement record (scenario `load`),
//! fsync'd as it finishes; the summary (`summary`), a plot (`plot`) and the table come from the
//! records. docs/load.md explains the method.

pub mod board;
pub mod closed;
pub mod engine;
pub mod plot;
pub mod prepare;
pub mod run;
pub mod schedule;
pub mod search;
pub mod summary;

use std::sync::Arc;

pub use summary::LoadSummary;

use run::{End, LivePlan};

use crate::cli::{LoadArgs, MeasureArgs, OutputArgs, SizeArgs, SweepArgs};
use crate::exit::{Failure, Outcome};
use crate::meta::{LoadPlan, RunStatus};
use crate::progress::Progress;
use crate::record::{CacheState, Measurement, Mode, Record, Scenario};
use crate::runner::open;
use crate::spec::{Contexts, List};
use crate::store;

/// The summary file in the run directory.
pub const SUMMARY_FILE: &str = "load-summary.json";
/// The plot in the run directory: TTFT p50 and p99 against the offered rate.
pub const PLOT_FILE: &str = "load-ttft-p99.svg";
/// The closed loop's plot: output tokens/s against TTFT p50 and p99, a point per level.
pub const CURVE_FILE: &str = "load-throughput-latency.svg";

/// The load as the sweep's settings (its preflight, prompt sizing, presets and thermal gate), from
/// the groups load shares with the sweep: streamed requests, the mix's cache states, one context.
fn sweep_args(args: &LoadArgs) -> SweepArgs {
    let sizes = SizeArgs {
        // A dataset replaces the context (each row keeps its own length).
        contexts: match args.workload.dataset {
            Some(_) => args.sizes.contexts.clone(),
            None => Some(args.sizes.contexts.clone().unwrap_or(Contexts(vec![4096]))),
        },
        ..args.sizes.clone()
    };
    let measure = MeasureArgs::driven(
        args.target.clone(),
        sizes,
        args.workload.clone(),
        args.thermal.clone(),
        Some(List(vec![Mode::Streaming])),
        Some(List(args.mix.states())),
    );
    let output = OutputArgs {
        run_id: Some(args.output.run_id.clone().unwrap_or_else(|| crate::clock::new_run_id("load"))),
        ..args.output.clone()
    };
    SweepArgs::new_run(args.connection.clone(), measure, None, output)
}

/// Refuses, before anything is created, what cannot be measured honestly.
fn check(args: &LoadArgs) -> Result<(), Failure> {
    if let Some(c) = &args.sizes.contexts
        && c.0.len() != 1
    {
        return Err(Failure::usage(
            "--contexts: bench load measures one context at a time (e.g. --contexts 4k); run it once per context",
        ));
    }
    if !(args.slo_target > 0.0 && args.slo_target <= 1.0) {
        return Err(Failure::usage(format!(
            "--slo-target {}: must be above 0 and at most 1",
            args.slo_target
        )));
    }
    if args.duration.secs() <= 0.0 {
        return Err(Failure::usage("--duration: must be more than 0"));
    }
    if let Some(w) = args.warmup
        && w.secs() >= args.duration.secs()
    {
        return Err(Failure::usage(format!(
            "--warmup {w}: must be shorter than --duration {}, or nothing is left to measure",
            args.duration
        )));
    }
    if args.warmup.is_some() && args.concurrency.is_none() && !args.rates.is_auto() {
        return Err(Failure::usage(
            "--warmup: only a closed loop (--concurrency, or the passes of --rates auto) has a warm-up; an open loop's rate starts with its pipeline full",
        ));
    }
    for r in &args.rates.0 {
        let n = r.0 * args.duration.secs();
        if n > schedule::MAX_ARRIVALS as f64 / 2.0 {
            return Err(Failure::usage(format!(
                "--rates {r} x --duration {}: about {n:.0} arrivals, more than one run can hold",
                args.duration
            )));
        }
    }
    // Without --preset the server is detected at setup, which checks its preset then.
    if let Some(name) = args.target.preset.as_deref().filter(|p| *p != crate::config::AUTO_PRESET)
        && args.mix.states().contains(&CacheState::Warm)
    {
        let api = args.target.api.unwrap_or(crate::spec::Api::Openai).to_string();
        let preset = crate::preset::Preset::load(name)
            .and_then(|p| p.for_api(&api))
            .map_err(|e| Failure::usage(e.to_string()))?;
        warm_mix_fits(&preset)?;
    }
    Ok(())
}

/// Warm arrivals under load need a preset that evicts one session to disk, alone.
pub(crate) fn warm_mix_fits(preset: &crate::preset::Preset) -> Result<(), Failure> {
    let problem = if preset.supports_warm() {
        preset.warm_batch_problem()
    } else {
        Some(format!(
            "preset {} has no evict action, so a warm cache cannot be produced honestly",
            preset.name
        ))
    };
    match problem {
        Some(why) => Err(Failure::usage(format!(
            "--mix has warm arrivals, but {why}; under load several warm sessions exist at once. \
             Use a preset that evicts one session to disk (llama.cpp, agent-memory) or leave warm out of --mix"
        ))),
        None => Ok(()),
    }
}

/// Entry point of `bench load`.
pub async fn load(args: &LoadArgs) -> anyhow::Result<Outcome> {
    check(args)?;
    let opened = open::open(&sweep_args(args))?;
    let journal = opened.journal.clone();
    let config = opened.config.clone();
    let rates: Vec<f64> = args.rates.0.iter().map(|r| r.0).collect();
    let closed = args.concurrency.is_some() || args.rates.is_auto();
    let runs = match (&args.concurrency, args.rates.is_auto()) {
        (Some(levels), _) => levels
            .0
            .iter()
            .enumerate()
            .map(|(i, &users)| crate::meta::RateSchedule {
                run: i as u32 + 1,
                concurrency: Some(users),
                ..Default::default()
            })
            .collect(),
        (None, true) => vec![search::first(1)],
        (None, false) => schedule::plan_rates(config.seed, &rates, args.duration.secs(), &args.mix),
    };
    let plan = LoadPlan {
        seed: config.seed,
        duration_s: args.duration.secs(),
        mix: args.mix.shares(),
        // 0 with a dataset: each record's context is its row's own.
        context_tokens: config.contexts.first().copied().unwrap_or(if config.dataset.is_some() {
            0
        } else {
            4096
        }),
        slo: args.slo,
        slo_target: args.slo_target,
        concurrency_limit: args.concurrency_limit.map(|c| c.0),
        prepare_ahead: args.prepare_ahead.0,
        slots_held: None,
        rates: runs,
        warmup_s: closed.then(|| args.warmup.map_or(args.duration.secs() / 10.0, |w| w.secs())),
        search: args.rates.is_auto().then(|| crate::meta::RateSearch {
            max_steps: args.search_steps,
            saturation_users: search::SATURATION_USERS,
            ..Default::default()
        }),
    };
    let live = LivePlan::new(plan, journal.clone())?;
    // Progress in seconds of the plan: each rate or level runs for --duration (a search runs its two
    // passes and at most --search-steps rates), so the bar moves as each one runs.
    let planned = if args.rates.is_auto() { 2 + args.search_steps as usize } else { live.get().rates.len() };
    let title = format!("bench load {}", journal.dir().display());
    let board = board::LoadBoard::new(args.slo, args.mix.states());
    let (mut view, publisher) = crate::live::start(title, crate::live::STOP_KEYS, board, args.output.quiet);
    let progress = Arc::new(
        Progress::weighted(vec![args.duration.secs(); planned], args.output.quiet)
            .showing(view.as_ref().map(|v| v.sink())),
    );
    let reads = crate::client::read_counts();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut work = tokio::spawn(run::run(config, live.clone(), progress.clone(), stop_rx, publisher));
    let outcome: Result<End, Failure> = tokio::select! {
        joined = &mut work => joined.unwrap_or_else(|e| Err(Failure::internal(format!("the load stopped unexpectedly: {e}")))),
        _ = crate::runner::shutdown_signal() => {
            // The rate under way stops and its writer appends what finished; a run still in its
            // setup (which does not watch the stop) is aborted after the grace.
            let _ = stop.send(true);
            if tokio::time::timeout(crate::runner::ABORT_GRACE, &mut work).await.is_err() {
                work.abort();
            }
            Ok(End::Signal)
        }
    };
    progress.finish();
    // The terminal is back before anything below speaks.
    if let Some(v) = view.as_mut() {
        v.finish();
    }
    if let Some(line) = crate::runner::slot_files::remove_leftovers().line() {
        progress.note(&line);
    }
    drop(opened.lock);
    let dir = journal.dir().to_path_buf();
    let empty = std::fs::metadata(dir.join(store::MEASUREMENTS_FILE)).map_or(true, |m| m.len() == 0);
    if empty && !matches!(outcome, Ok(End::Done)) {
        // Nothing measured, nothing kept: a typo in --server costs nothing (as in a sweep).
        let _ = std::fs::remove_dir_all(&dir);
        return match outcome {
            Err(failure) => Err(failure.into()),
            _ => {
                eprintln!("interrupted before anything was measured; nothing was kept");
                Ok(Outcome::Interrupted)
            }
        };
    }
    let complete = matches!(outcome, Ok(End::Done));
    let ended = journal.update(|m| {
        m.status = if complete { RunStatus::Complete } else { RunStatus::Interrupted };
        m.ended_at = Some(crate::clock::now_rfc3339());
        m.arrival_stamps = Some(crate::meta::ArrivalStamps::since(reads));
    });
    // However the run ended, what finished is summarized: the records on disk are the truth.
    let shown = summarize(args, &live.get(), &dir);
    ended?;
    let report = match shown {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: no summary: {e}");
            return match outcome {
                Err(failure) => Err(failure.into()),
                Ok(_) => Err(e.into()),
            };
        }
    };
    let where_ = dir.display();
    // The run directory alone on stdout, however the run ended, for scripts to capture.
    crate::output::println(&where_.to_string())
        .map_err(|e| Failure::io(format!("cannot print the run directory: {e}")))?;
    match outcome {
        Ok(End::Done) => {
            if !args.output.quiet {
                eprintln!(
                    "{} requests, {} failed (errors, failed quality or unconfirmed cache state); records and {SUMMARY_FILE} in {where_}",
                    report.requests, report.failed
                );
            }
            if !report.dishonest.is_empty() {
                eprintln!(
                    "rates not honestly offered (the client set the pace, not the server; left out of the knee): {}",
                    report.dishonest.join(", ")
                );
            }
            let findings = report.failed > 0 || !report.dishonest.is_empty() || report.stopped > 0;
            Ok(Outcome::findings_if(findings))
        }
        Ok(End::Signal) => {
            eprintln!(
                "interrupted: the summary is of the {} requests that finished; they are in {where_}",
                report.requests
            );
            Ok(Outcome::Interrupted)
        }
        Err(failure) => {
            eprintln!(
                "the summary is of the {} requests that finished before this; they are in {where_}",
                report.requests
            );
            Err(failure.into())
        }
    }
}

/// What the end of a run tells the user, besides the table.
struct Report {
    requests: usize,
    failed: usize,
    dishonest: Vec<String>,
    stopped: usize,
}

/// Reads the run's records back, writes the summary file and the plot, prints the table.
fn summarize(args: &LoadArgs, plan: &LoadPlan, dir: &std::path::Path) -> Result<Report, Failure> {
    let path = dir.join(store::MEASUREMENTS_FILE);
    let records: Vec<Measurement> = store::read_records(&path, store::TornTail::Skip)
        .map_err(|e| Failure::io(e.to_string()))?
        .into_iter()
        .filter_map(|r| match r {
            Record::Measurement(m) if m.cell.scenario == Scenario::Load => Some(*m),
            _ => None,
        })
        .collect();
    let summary = summary::of_plan(&records, plan, &args.mix.states());
    store::write_json_atomic(&dir.join(SUMMARY_FILE), &summary).map_err(|e| Failure::io(e.to_string()))?;
    if let Err(e) = plot::write(&dir.join(PLOT_FILE), &summary) {
        eprintln!("warning: no plot: {e}");
    }
    if let Err(e) = plot::write_curve(&dir.join(CURVE_FILE), &summary) {
        eprintln!("warning: no plot: {e}");
    }
    // People's text on stderr; stdout is left to the run directory alone (as every verb does).
    eprint!("{}", summary::table(&summary));
    if let Some(s) = &plan.search {
        eprint!(
            "\nRate search (--rates auto; the mix as a whole, SLO {}, target {:.0}%):\n{}",
            plan.slo,
            plan.slo_target * 100.0,
            search::table(s)
        );
    }
    let failed = records.iter().filter(|m| !Record::Measurement(Box::new((*m).clone())).is_good()).count();
    Ok(Report {
        requests: records.len(),
        failed,
        dishonest: summary
            .rates
            .iter()
            .filter(|r| !r.honestly_offered)
            .map(|r| {
                let p99 = r.send_lag_ms.p99.unwrap_or_default();
                let load = r.concurrency.map_or(format!("{}/s", r.rate_per_s), summary::users_label);
                format!("{load} (p99 send lag {p99:.3} ms > {} ms)", r.honest_lag_limit_ms)
            })
            .collect(),
        stopped: summary.rates.iter().filter(|r| r.stopped.is_some()).count(),
    })
}
