//! `bench load`: open-loop load with cache states. For each offered rate, requests arrive at the
//! instants of a seeded Poisson process, each on its own session in a cache state drawn from the
//! mix (cold, warm, hot), prepared ahead of its instant so that preparation never delays the
//! schedule (`engine`). Every request is an ordinary measurement record (scenario `load`),
//! fsync'd as it finishes; the summary (`summary`), a plot (`plot`) and the table come from the
//! records. docs/load.md explains the method.

pub mod closed;
pub mod engine;
pub mod plot;
pub mod prepare;
pub mod run;
pub mod schedule;
pub mod search;
pub mod summary;

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

pub use summary::LoadSummary;

use run::{End, LivePlan};

use crate::cli::{
    ConnectionArgs, Levels, MAX_BATCH, MAX_OUTPUT_TOKENS, MeasureArgs, Mix, Rates, Slo, SweepArgs,
    ThermalArgs,
};
use crate::exit::{Failure, Outcome};
use crate::meta::{LoadPlan, RunStatus};
use crate::progress::Progress;
use crate::record::{CacheState, Measurement, Mode, Record, Scenario};
use crate::runner::open;
use crate::spec::Api;
use crate::spec::{Contexts, Count, List, Span};
use crate::store;

/// The summary file in the run directory.
pub const SUMMARY_FILE: &str = "load-summary.json";
/// The plot in the run directory: TTFT p50 and p99 against the offered rate.
pub const PLOT_FILE: &str = "load-ttft-p99.svg";
/// The closed loop's plot: output tokens/s against TTFT p50 and p99, a point per level.
pub const CURVE_FILE: &str = "load-throughput-latency.svg";

#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    bench load --server http://127.0.0.1:8080 --preset llama.cpp --rates 0.5,1,2,4,8 \\\n      \
    --duration 60s --mix cold=0.5,warm=0.2,hot=0.3 --contexts 4k\n  \
    bench load --server http://127.0.0.1:8000 --preset vllm --rates 1,2,4 \\\n      \
    --mix cold=0.7,hot=0.3 --slo ttft=1s,itl=40ms\n  \
    bench load --server URL --concurrency 1,4,16,64 --duration 60s --mix cold=0.5,hot=0.5\n  \
    bench load --server URL --rates auto --slo ttft=500ms --search-steps 6\n\n\
    For each rate, requests arrive at the instants of a Poisson process (seeded by --seed;\n\
    the schedule is in run.json), each on a session of its own in a cache state drawn from\n\
    --mix. A session is prepared (primed, evicted, its earlier turns sent) before its instant,\n\
    so preparation never delays a send; a late preparation shows in its record\n\
    (prepare_late_ms) and in the send lag.\n\n\
    The table: per rate and cache state, TTFT and inter-token latency (ITL) percentiles in ms,\n\
    the achieved request rate, output tokens/s, and goodput (the share of requests that were\n\
    good AND met the SLO, TTFT counted from the scheduled send). Per rate, the send lag (actual\n\
    - scheduled send): a rate whose p99 lag is above 1 ms, or 2% of its median TTFT where that\n\
    is more, was NOT honestly offered (the client, not the server, set the pace). A p99 of fewer\n\
    than 20 values is printed with its n. The knee: the highest honestly offered rate at which\n\
    goodput, and goodput at every lower rate, is at least --slo-target.\n\n\
    Closed loop (--concurrency): per level, N users each send their next request when the last\n\
    ended; requests sent in the first --warmup (default a tenth of --duration) are recorded\n\
    (warmup: true) and left out; the table gives requests/s, output tok/s, TTFT and ITL\n\
    p50/p90/p99 and goodput per level, records carry concurrency and user_id, and\n\
    load-throughput-latency.svg plots output tok/s against TTFT p50 and p99 per level.\n\n\
    Rate search (--rates auto): a synchronous pass (1 user) and a saturation pass (64 users)\n\
    bound the rate; then up to --search-steps open-loop rates bisect between them. A rate passes\n\
    when it was honestly offered and its goodput (the mix as a whole) is at least --slo-target;\n\
    the answer is the highest rate that passed. Every step is in run.json (load.search) and in a\n\
    table on stderr.\n\n\
    Files in <out>/<run-id>/: measurements.jsonl (scenario load, run = the rate's position),\n\
    run.json, load-summary.json, load-ttft-p99.svg (TTFT p50 and p99 against the rate).\n\
    Stopped early (a signal; a --server-cmd server's crash: restarted, the rate run again), a\n\
    load summarizes what finished and marks the rate it cut short. Exit codes: 0 all good; 1 failed measurements, a rate not honestly\n\
    offered or cut short; 3 the server is gone; 130 interrupted. Method: docs/load.md.")]
pub struct LoadArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Offered arrival rates, requests/s, comma-separated; each runs for --duration. `auto`:
    /// search for the highest rate honestly offered that meets --slo-target (a synchronous pass,
    /// a saturation pass, then up to --search-steps rates bisecting between them).
    #[arg(long, default_value = "0.5,1,2,4,8", help_heading = "Load")]
    pub rates: Rates,
    /// Closed loop instead of rates: levels of N users (e.g. 1,4,16,64), each user sending its
    /// next request when its last one ended, each level for --duration; the table and
    /// load-throughput-latency.svg give throughput against latency per level.
    #[arg(long, value_name = "USERS", conflicts_with_all = ["rates", "concurrency_limit"], help_heading = "Load")]
    pub concurrency: Option<Levels>,
    /// Closed loop: requests sent in each level's first SPAN are warm-up (recorded with
    /// `warmup: true`, left out of the statistics) [default: a tenth of --duration].
    #[arg(long, value_name = "SPAN", help_heading = "Load")]
    pub warmup: Option<Span>,
    /// `--rates auto`: at most this many rates offered after the two passes.
    #[arg(long, default_value = "6", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=30), help_heading = "Load")]
    pub search_steps: u32,
    /// How long arrivals come at each rate (the rate then drains its requests in flight).
    #[arg(long, default_value = "60s", help_heading = "Load")]
    pub duration: Span,
    /// Share of arrivals per cache state: cold (nothing cached), warm (reloaded from disk; needs a
    /// preset that evicts, e.g. llama.cpp), hot (turn N of a live conversation, --turns, default 3).
    #[arg(long, default_value = "cold=1", help_heading = "Load")]
    pub mix: Mix,
    /// A request meets the SLO when its TTFT and its mean inter-token latency are at most these.
    #[arg(long, default_value = "ttft=500ms,itl=50ms", help_heading = "Load")]
    pub slo: Slo,
    /// Goodput a rate must reach to be below the knee (0..1).
    #[arg(long, default_value = "0.9", value_parser = crate::spec::finite, help_heading = "Load")]
    pub slo_target: f64,
    /// Closed-loop cap: at most N measured requests in flight; an arrival waits for a place (and
    /// its send lag shows it) [default: no cap, open loop].
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub concurrency_limit: Option<Count<MAX_BATCH>>,
    /// Sessions prepared ahead of their arrival instants (a slot-pinned server such as llama.cpp
    /// also caps them at its slots).
    #[arg(long, default_value = "8", value_name = "N", help_heading = "Load")]
    pub prepare_ahead: Count<MAX_BATCH>,
    /// Seed of the arrival schedules and of the prompt text [default: 20260208].
    #[arg(long, help_heading = "Load")]
    pub seed: Option<u64>,
    /// Prompt size, one context (e.g. 4k) [default: 4096].
    #[arg(long, help_heading = "Load")]
    pub contexts: Option<Contexts>,
    /// max_tokens of every measured request [default: 64].
    #[arg(long, help_heading = "Load")]
    pub output_tokens: Option<Count<MAX_OUTPUT_TOKENS>>,
    /// Prompts of a file instead of generated ones (as `bench sweep --dataset`): arrival i sends
    /// row i mod n of the rows sampled, at its own length; replaces --contexts.
    #[arg(long, value_name = "FILE", help_heading = "Workload")]
    pub dataset: Option<PathBuf>,
    /// Rows of --dataset used, drawn with --seed [default: every row].
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub dataset_limit: Option<Count<{ crate::cli::MAX_DATASET_ROWS }>>,
    /// Hot arrivals are sessions of N turns: turns 1 to N-1 are prepared ahead (each kept in the
    /// record's turns), turn N is the request sent at the arrival instant [default: 3].
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub turns: Option<Count<{ crate::cli::MAX_TURNS }>>,
    /// Pause between a hot session's turns while it is prepared (recorded as measured, think_ms)
    /// [default: 0s].
    #[arg(long, value_name = "DURATION", help_heading = "Workload")]
    pub think_time: Option<Span>,
    /// Model name sent in requests [default: the first model the server lists].
    #[arg(long, help_heading = "Server")]
    pub model: Option<String>,
    /// openai or anthropic [default: openai].
    #[arg(long, help_heading = "Server")]
    pub api: Option<Api>,
    /// Server preset (openai, llama.cpp, vllm, sglang, agent-memory) or a preset TOML file
    /// [default: openai].
    #[arg(long, help_heading = "Server")]
    pub preset: Option<String>,
    #[command(flatten)]
    pub thermal: ThermalArgs,
    /// Directory that receives <run-id>/ [default: results].
    #[arg(long, help_heading = "Run")]
    pub out: Option<PathBuf>,
    /// Name of the run directory (default: a UTC timestamp and "load").
    #[arg(long, help_heading = "Run")]
    pub run_id: Option<String>,
    /// No progress output.
    #[arg(long, short, help_heading = "Run")]
    pub quiet: bool,
}

/// The load as the sweep's settings (its preflight, prompt sizing, presets and thermal gate).
fn sweep_args(args: &LoadArgs) -> SweepArgs {
    let states: Vec<CacheState> = args.mix.states();
    SweepArgs {
        connection: args.connection.clone(),
        measure: MeasureArgs {
            model: args.model.clone(),
            api: args.api,
            preset: args.preset.clone(),
            // A dataset replaces the context (each row keeps its own length).
            contexts: match args.dataset {
                Some(_) => args.contexts.clone(),
                None => Some(args.contexts.clone().unwrap_or(Contexts(vec![4096]))),
            },
            dataset: args.dataset.clone(),
            dataset_limit: args.dataset_limit,
            turns: args.turns,
            think_time: args.think_time,
            modes: Some(List(vec![Mode::Streaming])),
            cache_states: Some(List(states)),
            output_tokens: args.output_tokens,
            seed: args.seed,
            thermal: args.thermal.clone(),
            ..Default::default()
        },
        out: args.out.clone(),
        run_id: Some(args.run_id.clone().unwrap_or_else(|| crate::clock::new_run_id("load"))),
        quiet: args.quiet,
        ..Default::default()
    }
}

/// Refuses, before anything is created, what cannot be measured honestly.
fn check(args: &LoadArgs) -> Result<(), Failure> {
    if let Some(c) = &args.contexts
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
    if args.mix.states().contains(&CacheState::Warm) {
        let preset = crate::preset::Preset::load(args.preset.as_deref().unwrap_or("openai"))
            .map_err(|e| Failure::usage(e.to_string()))?;
        let problem = if preset.supports_warm() {
            preset.warm_batch_problem()
        } else {
            Some(format!(
                "preset {} has no evict action, so a warm cache cannot be produced honestly",
                preset.name
            ))
        };
        if let Some(why) = problem {
            return Err(Failure::usage(format!(
                "--mix has warm arrivals, but {why}; under load several warm sessions exist at once. \
                 Use a preset that evicts one session to disk (llama.cpp, agent-memory) or leave warm out of --mix"
            )));
        }
    }
    Ok(())
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
    let progress = Arc::new(Progress::new(0, args.quiet));
    let reads = crate::client::read_counts();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut work = tokio::spawn(run::run(config, live.clone(), progress.clone(), stop_rx));
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
            if !args.quiet {
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
