//! The arguments of the verbs that load a server (`load`, `soak`): their own flags, and the groups
//! they share with the sweep, whose settings they build from those groups
//! (`SweepArgs::new_run`, `MeasureArgs::driven`).

use clap::Args;

use super::{
    ConnectionArgs, Levels, MAX_BATCH, MAX_RUNS, Mix, OfferedRates, OutputArgs, SizeArgs, Slo, TargetArgs,
    ThermalArgs, WorkloadArgs,
};
use ttft_model::record::Mode;
use ttft_model::spec::{Count, Span};

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
    ended; requests sent in the first --warmup-duration (default a tenth of --duration) are recorded\n\
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
    offered or cut short; 3 the server is gone; 130 interrupted. Method: docs/load.md.\n\n\
    Guide: docs/load.md (in the ttft-bench repository)")]
// The shared flags whose meaning is narrower in a load say so here; they are declared once, in
// their groups.
#[command(mut_arg("contexts", |a| a.help("Prompt size, one context (e.g. 4k) [default: 4096]")))]
#[command(mut_arg("seed", |a| a.help("Seed of the arrival schedules and of the prompt text [default: 20260208]")))]
#[command(mut_arg("dataset", |a| a.help(
    "Prompts of a file instead of generated ones (as `bench sweep --dataset`): arrival i sends row i mod n \
     of the rows sampled, at its own length; replaces --contexts"
)))]
#[command(mut_arg("turns", |a| a.help(
    "Hot arrivals are sessions of N turns: turns 1 to N-1 are prepared ahead (each kept in the record's \
     turns), turn N is the request sent at the arrival instant [default: 3]"
)))]
#[command(mut_arg("think_time", |a| a.help(
    "Pause between a hot session's turns while it is prepared (recorded as measured, think_ms) [default: 0s]"
)))]
#[command(mut_arg("run_id", |a| a.help("Name of the run directory (default: a UTC timestamp, \"load\" and 4 random hex digits)")))]
pub struct LoadArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Offered arrival rates, requests/s, comma-separated; each runs for --duration. `auto`:
    /// search for the highest rate honestly offered that meets --slo-target (a synchronous pass,
    /// a saturation pass, then up to --search-steps rates bisecting between them).
    #[arg(long, default_value = "0.5,1,2,4,8", help_heading = "Load")]
    pub rates: OfferedRates,
    /// Closed loop instead of rates: levels of N users (e.g. 1,4,16,64), each user sending its
    /// next request when its last one ended, each level for --duration; the table and
    /// load-throughput-latency.svg give throughput against latency per level.
    #[arg(long, value_name = "USERS", conflicts_with_all = ["rates", "concurrency_limit"], help_heading = "Load")]
    pub concurrency: Option<Levels>,
    /// Closed loop: requests sent in each level's first SPAN, a duration with its unit (10s,
    /// 500ms), are warm-up (recorded with `warmup: true`, left out of the statistics); a bare
    /// number is refused [default: a tenth of --duration].
    #[arg(long, value_name = "SPAN", value_parser = super::load_values::warmup_span, help_heading = "Load")]
    pub warmup_duration: Option<Span>,
    /// The old spelling of --warmup-duration (--warmup is bench sweep's count of requests): always
    /// refused, naming the new flag, so a script written for it fails before anything runs.
    #[arg(long = "warmup", hide = true, value_name = "SPAN", value_parser = super::load_values::renamed_warmup)]
    pub renamed_warmup: Option<Span>,
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
    #[arg(long, default_value = "0.9", value_parser = ttft_model::spec::finite, help_heading = "Load")]
    pub slo_target: f64,
    /// Closed-loop cap: at most N measured requests in flight; an arrival waits for a place (and
    /// its send lag shows it) [default: no cap, open loop].
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub concurrency_limit: Option<Count<MAX_BATCH>>,
    /// Sessions prepared ahead of their arrival instants (a slot-pinned server such as llama.cpp
    /// also caps them at its slots).
    #[arg(long, default_value = "8", value_name = "N", help_heading = "Load")]
    pub prepare_ahead: Count<MAX_BATCH>,
    #[command(flatten, next_help_heading = "Load")]
    pub sizes: SizeArgs,
    #[command(flatten, next_help_heading = "Workload")]
    pub workload: WorkloadArgs,
    #[command(flatten, next_help_heading = "Server")]
    pub target: TargetArgs,
    #[command(flatten)]
    pub thermal: ThermalArgs,
    #[command(flatten, next_help_heading = "Run")]
    pub output: OutputArgs,
}

#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    bench soak --server http://127.0.0.1:8080 --concurrency 8 --iterations 50\n  \
    bench soak --server-cmd \"llama-server -m m.gguf --port {port} --parallel 8\" --concurrency 8 --duration 10m\n\n\
    Each client has its own prompt; a serial pass first records each prompt's greedy output\n\
    (temperature 0), and every concurrent output is compared with it. Records land in\n\
    <out>/<run-id>/measurements.jsonl (scenario soak, run = iteration), crashes in run.json.\n\
    Exit codes: 0 every request passed, no crash, no mismatch; 1 findings; 3 the server is gone.\n\n\
    Guide: docs/sweep.md#bench-soak (in the ttft-bench repository)")]
#[command(mut_arg("contexts", |a| a.help("Prompt sizes; client i uses the (i mod n)-th [default: 1024]")))]
#[command(mut_arg("run_id", |a| a.help("Name of the run directory (default: a UTC timestamp, \"soak\" and 4 random hex digits)")))]
pub struct SoakArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Clients sending at once; every iteration releases one request from each.
    #[arg(long, default_value = "8")]
    pub concurrency: Count<MAX_BATCH>,
    /// Iterations (at most; --duration may end the soak sooner).
    #[arg(long, default_value = "50")]
    pub iterations: Count<MAX_RUNS>,
    /// Stop starting iterations after this long (more than 0).
    #[arg(long)]
    pub duration: Option<Span>,
    /// streaming or non-streaming [default: streaming].
    #[arg(long, default_value = "streaming")]
    pub mode: Mode,
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}
