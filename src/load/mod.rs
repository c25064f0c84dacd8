//! `bench load`: open-loop load with cache states. For each offered rate, requests arrive at the
//! instants of a seeded Poisson process, each on its own session in a cache state drawn from the
//! mix (cold, warm, hot), prepared ahead of its instant so that preparation never delays the
//! schedule (`engine`). Every request is an ordinary measurement record (scenario `load`),
//! fsync'd as it finishes; the summary (`summary`), a plot (`plot`) and the table come from the
//! records. docs/load.md explains the method.

pub(crate) mod board;
pub(crate) mod closed;
pub mod engine;
pub mod plot;
pub(crate) mod prepare;
pub(crate) mod run;
pub mod schedule;
pub(crate) mod search;
pub mod summary;

use std::sync::Arc;

use run::{End, LivePlan};

use crate::cli::{LoadArgs, MeasureArgs, OutputArgs, SizeArgs, SweepArgs};
use crate::config::load::{LoadSettings, LoadShape};
use crate::exit::{Failure, Outcome};
use crate::measuring::drive::{self, Ended};
use crate::measuring::open;
use crate::meta::{LoadPlan, RunStatus};
use crate::progress::Progress;
use ttft_model::record::{CacheState, Measurement, Mode, Record, Scenario};
use ttft_model::spec::{Contexts, List};
use ttft_results::store;

/// The summary file in the run directory.
pub(crate) const SUMMARY_FILE: &str = "load-summary.json";
/// The plot in the run directory: TTFT p50 and p99 against the offered rate.
pub(crate) const PLOT_FILE: &str = "load-ttft-p99.svg";
/// The closed loop's plot: output tokens/s against TTFT p50 and p99, a point per level.
pub(crate) const CURVE_FILE: &str = "load-throughput-latency.svg";

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
        run_id: Some(args.output.run_id.clone().unwrap_or_else(|| ttft_model::clock::new_run_id("load"))),
        ..args.output.clone()
    };
    SweepArgs::new_run(args.connection.clone(), measure, None, output)
}

/// Refuses, before anything is created, a warm mix the preset named cannot produce (without
/// --preset the server is detected at setup, which checks its preset then).
fn check_preset(args: &LoadArgs) -> Result<(), Failure> {
    if let Some(name) = args.target.preset.as_deref().filter(|p| *p != crate::config::AUTO_PRESET)
        && args.mix.states().contains(&CacheState::Warm)
    {
        let api = args.target.api.unwrap_or(ttft_model::spec::Api::Openai).to_string();
        let preset = crate::preset::Preset::load(name).and_then(|p| p.for_api(&api))?;
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
    let settings = LoadSettings::from_args(args)?;
    check_preset(args)?;
    let open::Opened { config, journal, resumed, lock } = open::open(&sweep_args(args))?;
    let runs = match &settings.shape {
        LoadShape::Closed { levels } => levels
            .iter()
            .enumerate()
            .map(|(i, &users)| crate::meta::RateSchedule {
                run: i as u32 + 1,
                concurrency: Some(users),
                ..Default::default()
            })
            .collect(),
        LoadShape::Search { .. } => vec![search::first(1)],
        LoadShape::Open { rates } => schedule::plan_rates(config.seed, rates, settings.duration_s, &args.mix),
    };
    let plan = LoadPlan {
        seed: config.seed,
        duration_s: settings.duration_s,
        mix: args.mix.shares(),
        // 0 with a dataset: each record's context is its row's own.
        context_tokens: config.contexts.first().copied().unwrap_or(if config.dataset.is_some() {
            0
        } else {
            4096
        }),
        slo: args.slo,
        slo_target: settings.slo_target,
        concurrency_limit: args.concurrency_limit.map(|c| c.0),
        prepare_ahead: args.prepare_ahead.0,
        slots_held: None,
        rates: runs,
        warmup_s: settings.warmup_s,
        search: match settings.shape {
            LoadShape::Search { max_steps } => Some(crate::meta::RateSearch {
                max_steps,
                saturation_users: search::SATURATION_USERS,
                ..Default::default()
            }),
            _ => None,
        },
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
    let reads = ttft_client::read_counts();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let work = run::run(config, live.clone(), progress.clone(), stop_rx, publisher);
    let ended = match drive::drive("load", work, drive::OnSignal::Ask(stop)).await {
        // The rate under way saw the stop itself.
        Ended::Done(End::Signal) => Ended::Signal,
        ended => ended,
    };
    let dir = journal.dir().to_path_buf();
    let outcome = match drive::settle(ended, &journal, resumed, lock, &progress, view.as_mut()) {
        drive::Settled::Kept(Ended::Done(end)) => Ok(end),
        drive::Settled::Kept(Ended::Signal) => Ok(End::Signal),
        drive::Settled::Kept(Ended::Failed(failure)) => Err(failure),
        drive::Settled::Removed(outcome) => return Ok(outcome?),
    };
    let complete = matches!(outcome, Ok(End::Done));
    let ended = journal.update(|m| {
        m.status = if complete { RunStatus::Complete } else { RunStatus::Interrupted };
        m.ended_at = Some(ttft_model::clock::now_rfc3339());
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
    store::write_json_atomic(&dir.join(SUMMARY_FILE), &summary)?;
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
