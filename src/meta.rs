//! `run.json`: everything a reader needs to trust (or distrust) a run's numbers — which harness,
//! which server, which host, the fully resolved config — rewritten atomically as the run goes.
//!
//! The reading verbs' views of run.json (`results::run_meta`) are built here from the structs
//! written, each conversion naming every field of both sides, so a field renamed on either side
//! fails the build.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cli::{PhysicsArgs, Slo};
use crate::config::{SweepConfig, ThermalPolicy};
use crate::supervise::ServerCrash;
use ttft_model::record::CacheState;
use ttft_results::results::run_meta as view;

pub(crate) const HARNESS_NAME: &str = "ttft-bench";
pub(crate) const HARNESS_VERSION: &str = env!("CARGO_PKG_VERSION");
pub(crate) const HARNESS_GIT_SHA: &str = env!("TTFT_BENCH_GIT_SHA");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Complete,
    /// Stopped by a signal or an error; `bench sweep --resume` finishes it.
    Interrupted,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    pub schema_version: u32,
    pub run_id: String,
    pub harness: Harness,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub status: RunStatus,
    /// Every time `--resume` picked this run up again, and what it changed.
    pub resumed_at: Vec<Resumption>,
    pub config: SweepConfig,
    pub server: ServerInfo,
    pub host: HostFacts,
    /// How prompts were sized to the nominal context (tokenizer or calibration numbers).
    pub prompt_sizing: Option<crate::prompt::sizing::SizingMethod>,
    /// The discarded warm-up and the thermal gate's baseline probes.
    pub thermal_baseline: Option<ThermalBaseline>,
    /// Hardware and model profiles the physical ceilings were computed from.
    pub physics: Option<PhysicsProfiles>,
    /// How the staggered pair's delay was set, when it is a share of user A's duration.
    #[serde(default)]
    pub stagger_calibration: Option<StaggerCalibration>,
    /// The cost model's forecast of this run, made before the first cell.
    #[serde(default)]
    pub forecast: Option<Forecast>,
    /// Every crash of a server bench started (`--server-cmd`), in order.
    #[serde(default)]
    pub server_crashes: Vec<ServerCrash>,
    /// `bench soak`: its settings, then its outcome.
    #[serde(default)]
    pub soak: Option<SoakSummary>,
    /// `bench load`: the seed, the rates and every rate's arrival schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadPlan>,
    /// Where the cell loop's wall time went (of the last session, when resumed).
    #[serde(default)]
    pub harness_time: Option<HarnessTime>,
    /// How the run's reads were stamped (a sweep's cell loop, of its last session when resumed;
    /// a soak's or a load's whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_stamps: Option<ArrivalStamps>,
    /// `--runs auto`: per matrix point, how many runs it took and the interval its median reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_auto: Vec<AutoRunsCell>,
}

/// One matrix point of a `--runs auto` sweep (`config.runs_auto` says the target).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoRunsCell {
    /// The cell's label without its run (`ctx 1024 cold streaming b1`).
    pub cell: String,
    /// Runs measured (each run of a batch is one, whatever its size).
    pub runs: u32,
    /// What the interval is of: `ttft_ms`, or `e2e_ms` for non-streaming cells.
    pub metric: String,
    /// Values the interval is computed from (good records only).
    pub n: usize,
    pub median_ms: Option<f64>,
    /// The distribution-free interval of the median (`stats`) and its exact coverage.
    pub ci_lo_ms: Option<f64>,
    pub ci_hi_ms: Option<f64>,
    pub ci_level: Option<f64>,
    /// The interval's farther end from the median, as a share of the median.
    pub ci_half_width_share: Option<f64>,
    /// The interval met the target (at 95% coverage or more) and the cell's remaining runs were
    /// skipped; false when `max_runs` ran out first.
    pub within_target: bool,
}

impl RunMeta {
    /// A run as it begins: `config` to measure, started at `started_at` on `host`, nothing
    /// measured or learned about the server yet (every later section empty).
    pub fn started(run_id: String, config: SweepConfig, started_at: String, host: HostFacts) -> RunMeta {
        RunMeta {
            schema_version: ttft_model::record::SCHEMA_VERSION,
            run_id,
            harness: Harness::current(),
            started_at,
            ended_at: None,
            status: RunStatus::Running,
            resumed_at: Vec::new(),
            config,
            server: ServerInfo::default(),
            host,
            prompt_sizing: None,
            thermal_baseline: None,
            physics: None,
            stagger_calibration: None,
            forecast: None,
            server_crashes: Vec::new(),
            harness_time: None,
            arrival_stamps: None,
            soak: None,
            load: None,
            runs_auto: Vec::new(),
        }
    }
}

/// Where a run's arrival times came from, so a figure never rests on the fallback unawares
/// (docs/client-lanes.md). `direct`: plain HTTP read by bench's own HTTP/1.1 path, each read
/// carrying the kernel's arrival stamp where the kernel gives one. `reqwest`: HTTPS, a proxy, or
/// `TTFT_BENCH_TRANSPORT=reqwest`; each read stamped when it returned.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ArrivalStamps {
    pub transport: String,
    /// Direct-path reads stamped by the kernel, and those without a stamp (stamped on return).
    pub reads_kernel_stamped: u64,
    pub reads_stamped_on_return: u64,
    /// Peeks of a lane behind, to read queued events one at a time.
    pub peeks_while_behind: u64,
}

impl ArrivalStamps {
    /// What the direct path's read counters say happened since they read `before`.
    pub(crate) fn since(before: ttft_client::ReadCounts) -> ArrivalStamps {
        let reads = ttft_client::read_counts().since(before);
        let direct = reads.kernel_stamped + reads.stamped_on_return > 0;
        ArrivalStamps {
            transport: if direct { "direct" } else { "reqwest" }.to_string(),
            reads_kernel_stamped: reads.kernel_stamped,
            reads_stamped_on_return: reads.stamped_on_return,
            peeks_while_behind: reads.peeks_while_behind,
        }
    }
}

/// The cell loop's wall time, split into the server's work (measured windows, priming requests)
/// and the harness's own time between cells. Seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HarnessTime {
    pub wall_s: f64,
    pub measured_s: f64,
    pub priming_s: f64,
    pub prompt_s: f64,
    pub preset_s: f64,
    pub metrics_s: f64,
    /// Appending records (fsync) and rewriting run.json.
    pub write_s: f64,
    /// Thermal gate waits and probes, temperature snapshots.
    pub thermal_s: f64,
    /// `--think-time` pauses between hot turns (asked for: not harness time).
    #[serde(default)]
    pub think_s: f64,
    /// Wall time no part explains (progress output, record building).
    pub other_s: f64,
    /// prompt + preset + metrics + write + thermal + other.
    pub harness_s: f64,
    /// harness_s / wall_s.
    pub harness_fraction: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub rates: crate::cost::ServerRates,
    /// Expected seconds for the cells still to measure when the forecast was made.
    pub eta_s: f64,
    pub cells: usize,
}

/// One `--resume`: when, and the connection settings it changed (names and values; a key's value
/// is never among them, only the name of its variable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "ResumptionOnDisk")]
pub struct Resumption {
    pub at: String,
    pub changed: std::collections::BTreeMap<String, String>,
}

/// Early run.json files kept a bare timestamp per resume.
#[derive(Deserialize)]
#[serde(untagged)]
enum ResumptionOnDisk {
    At(String),
    Full { at: String, changed: std::collections::BTreeMap<String, String> },
}

impl From<ResumptionOnDisk> for Resumption {
    fn from(d: ResumptionOnDisk) -> Resumption {
        match d {
            ResumptionOnDisk::At(at) => Resumption { at, changed: Default::default() },
            ResumptionOnDisk::Full { at, changed } => Resumption { at, changed },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThermalBaseline {
    pub policy: ThermalPolicy,
    /// The discarded first request (a server's first large request is slower).
    pub warmup_e2e_ms: Option<f64>,
    pub warmup_error: Option<String>,
    pub baseline_probes_tps: Vec<f64>,
    pub baseline_tps: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhysicsProfiles {
    pub hardware: Option<ttft_results::physics::Hardware>,
    pub model: Option<ttft_results::physics::ModelProfile>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StaggerCalibration {
    /// User A's end-to-end time alone: the median of unmeasured requests at the staggered context.
    pub a_e2e_ms: f64,
    #[serde(default)]
    pub a_e2e_samples_ms: Vec<f64>,
    pub share_of_a: f64,
    /// The delay B is sent after A: share x A's duration.
    pub delay_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Harness {
    pub name: String,
    pub version: String,
    pub git_sha: String,
}

impl Harness {
    pub fn current() -> Harness {
        Harness {
            name: HARNESS_NAME.into(),
            version: HARNESS_VERSION.into(),
            git_sha: HARNESS_GIT_SHA.into(),
        }
    }
}

/// What the server says about itself, verbatim (no secrets: these are public endpoints).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub base_url: String,
    /// GET /v1/models
    pub models: Option<serde_json::Value>,
    /// GET /props (llama.cpp: build_info, model path, n_ctx, slots)
    pub props: Option<serde_json::Value>,
    /// The preset the sweep drove the server with.
    pub preset: String,
    /// Why this preset, when bench chose it (no `--preset`): the server's own answer that named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset_detected: Option<String>,
    /// The command bench started the server with (`--server-cmd`, port filled in).
    #[serde(default)]
    pub command: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostFacts {
    pub hostname: Option<String>,
    pub os: Option<String>,
    pub os_version: Option<String>,
    pub kernel: Option<String>,
    pub arch: String,
    pub cpu_brand: String,
    pub cpu_cores_physical: Option<usize>,
    pub cpu_cores_logical: usize,
    pub memory_bytes: u64,
}

impl HostFacts {
    pub fn collect() -> HostFacts {
        use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
        let sys = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        );
        HostFacts {
            hostname: System::host_name(),
            os: System::name(),
            os_version: System::os_version(),
            kernel: System::kernel_version(),
            arch: System::cpu_arch(),
            cpu_brand: sys.cpus().first().map(|c| c.brand().trim().to_string()).unwrap_or_default(),
            cpu_cores_physical: System::physical_core_count(),
            cpu_cores_logical: sys.cpus().len(),
            memory_bytes: sys.total_memory(),
        }
    }
}

/// One arrival: when (ms after its rate's clock started) and which cache state its session is in.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub at_ms: f64,
    pub state: CacheState,
}

/// One rate as planned: its run number (the records' `run`: its position in `--rates`, 1-based;
/// a repeat after a server crash gets the next free number), its rate and its schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateSchedule {
    pub run: u32,
    /// The offered rate; 0 for a closed-loop level (`concurrency`), which offers no rate: its
    /// users send when their last request ends.
    pub rate_per_s: f64,
    /// `--concurrency`: this run is a closed loop of this many users (its `arrivals` are empty:
    /// each user draws its cache states in turn from the mix, seeded by the seed, level and user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    pub arrivals: Vec<Arrival>,
    /// When the rate's clock started (RFC 3339, UTC); the arrivals' `at_ms` count from it.
    pub clock_started_at: Option<String>,
    /// Why the rate ended before every arrival had finished (a signal, a crash of the server
    /// bench started), and when; None when it ran to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The run whose schedule this one repeats, from its first arrival (a server crash cut that
    /// one short).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats_run: Option<u32>,
}

/// Everything `bench load` offers, as run.json records it (`load`): enough to re-create every
/// schedule and to recompute the summary from the records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadPlan {
    /// Seed of the arrival schedules (and of the prompt text).
    pub seed: u64,
    pub duration_s: f64,
    pub mix: Vec<(CacheState, f64)>,
    pub context_tokens: u32,
    pub slo: Slo,
    pub slo_target: f64,
    /// Closed-loop cap: at most this many measured requests in flight.
    pub concurrency_limit: Option<u32>,
    /// Arrivals prepared (or being prepared) ahead of their instants.
    pub prepare_ahead: u32,
    /// The server pins sessions to slots (the preset binds `{slot}`): a session holds its slot
    /// from its preparation to its cleanup, so at most this many are prepared or in flight.
    pub slots_held: Option<u32>,
    pub rates: Vec<RateSchedule>,
    /// Closed-loop levels (`--concurrency`): requests sent in each level's first `warmup_s` are
    /// recorded (`warmup: true`) and left out of its statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_s: Option<f64>,
    /// `--rates auto`: the search for the highest rate honestly offered that meets the SLO target,
    /// every step as it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<RateSearch>,
}

/// `--rates auto`: a synchronous pass (one user) and a saturation pass (many users) bound the
/// rate; open-loop rates then bisect the bound, at most `max_steps` of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateSearch {
    pub max_steps: u32,
    /// Users of the saturation pass.
    pub saturation_users: u32,
    pub steps: Vec<SearchStep>,
    /// The highest rate that passed (None: none did, or the search was cut short).
    pub found_rate_per_s: Option<f64>,
    /// Whether the search ran all its steps (or knew its answer before).
    pub finished: bool,
}

/// One run of the search: its kind (`synchronous`, `saturation` or `rate`), what it measured and,
/// for a rate, whether it passed (honestly offered and goodput at least the target).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchStep {
    pub run: u32,
    pub kind: String,
    /// The offered rate (a rate step) or the users (a pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Good requests per second the run achieved.
    pub achieved_rate_per_s: Option<f64>,
    pub goodput: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub send_lag_p99_ms: Option<f64>,
    pub honestly_offered: bool,
    /// A rate step: met the target and was honestly offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// The bracket [lo, hi] after this step (requests/s): lo passed (or is 0), hi failed (or is
    /// the saturation throughput); None before the saturation pass bounds it.
    pub bracket_per_s: Option<(f64, f64)>,
}

/// What run.json records of a soak's settings, and its outcome.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoakSummary {
    pub concurrency: u32,
    pub iterations_planned: u32,
    pub duration_limit_s: Option<f64>,
    pub iterations_run: u32,
    pub requests: u32,
    pub passed: u32,
    pub mismatches: u32,
    pub crashes: u32,
    /// Why the requests that did not pass failed: each error kind or gate-failing quality flag,
    /// with how many requests it failed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub failed_by: std::collections::BTreeMap<String, u32>,
    pub wall_s: f64,
    pub requests_per_s: Option<f64>,
    /// Output tokens of the iterations over the time their requests were in flight (each
    /// iteration from its release to its last answer).
    pub output_tps: Option<f64>,
    /// One stream's output tok/s: the serial pass's output tokens over its time, each prompt sent
    /// alone a second time, so its prompt is cached as every iteration finds it.
    pub single_stream_tps: Option<f64>,
    /// output_tps / single_stream_tps: what N streams buy over one.
    pub speedup: Option<f64>,
    /// speedup / N: the share of N lone streams' output that N concurrent streams give.
    pub efficiency: Option<f64>,
}

// What the reading verbs see of a run.json (`results::run_meta`), from what the sweep writes. Each
// conversion destructures the writer's struct naming every field (no `..`) and builds the view with
// every field named, so a field renamed, added or dropped on either side is a compile error that
// asks whether the readers need it. Serde's names are held by the test that reads a serialized
// RunMeta back through the view and compares it with these (tests/it/merge_run_meta.rs).

impl From<&RunMeta> for view::OurMeta {
    fn from(meta: &RunMeta) -> view::OurMeta {
        let RunMeta {
            schema_version: _,
            run_id,
            harness,
            started_at: _,
            ended_at: _,
            status: _,
            resumed_at: _,
            config,
            server,
            host,
            prompt_sizing: _,
            thermal_baseline: _,
            physics,
            stagger_calibration: _,
            forecast: _,
            server_crashes,
            soak: _,
            load: _,
            harness_time: _,
            arrival_stamps: _,
            runs_auto: _,
        } = meta;
        view::OurMeta {
            run_id: Some(run_id.clone()),
            harness: Some(harness.into()),
            config: Some(config.into()),
            server: Some(server.into()),
            host: Some(host.into()),
            server_crashes: server_crashes.iter().map(Into::into).collect(),
            physics: physics.as_ref().map(Into::into),
        }
    }
}

impl From<&Harness> for view::HarnessView {
    fn from(harness: &Harness) -> view::HarnessView {
        let Harness { name, version, git_sha } = harness;
        view::HarnessView { name: name.clone(), version: version.clone(), git_sha: git_sha.clone() }
    }
}

impl From<&SweepConfig> for view::ConfigView {
    fn from(config: &SweepConfig) -> view::ConfigView {
        let SweepConfig {
            server,
            server_url: _,
            model,
            api,
            preset,
            scenario_file: _,
            contexts: _,
            modes: _,
            cache_states: _,
            batch_sizes: _,
            concurrent_max_context: _,
            runs: _,
            output_tokens,
            request_timeout_s: _,
            api_key_env: _,
            server_cmd,
            max_restarts: _,
            server_start_timeout_s: _,
            ca_cert: _,
            insecure,
            seed: _,
            out_dir: _,
            staggered: _,
            thermal,
            physics,
            shard: _,
            reuse_primes: _,
            slot_dir: _,
            page_cache: _,
            extra_body,
            temperature,
            headers: _,
            warmup: _,
            runs_auto: _,
            dataset: _,
            turns,
            think_time_ms: _,
            request_bodies: _,
        } = config;
        view::ConfigView {
            server: Some(server.clone()),
            // Written out with its secrets masked, so read back masked.
            server_cmd: server_cmd.as_deref().map(ttft_model::secrets::redact_command),
            // The view keeps the dialect as written; a unit enum always serializes.
            api: serde_json::to_value(api).ok(),
            preset: Some(preset.clone()),
            model: model.clone(),
            output_tokens: Some(*output_tokens),
            thermal: Some(thermal.into()),
            physics: Some(physics.into()),
            insecure: *insecure,
            turns: *turns,
            temperature: *temperature,
            extra_body: extra_body.clone(),
        }
    }
}

impl From<&ThermalPolicy> for view::ThermalView {
    fn from(policy: &ThermalPolicy) -> view::ThermalView {
        match policy {
            ThermalPolicy::Probe { tolerance, min_cooldown_s: _, max_cooldown_s: _ } => {
                view::ThermalView::Probe { tolerance: *tolerance }
            }
            ThermalPolicy::Fixed { cooldown_s } => view::ThermalView::Fixed { cooldown_s: *cooldown_s },
            ThermalPolicy::Off => view::ThermalView::Off,
        }
    }
}

impl From<&PhysicsArgs> for view::PhysicsView {
    fn from(inputs: &PhysicsArgs) -> view::PhysicsView {
        let PhysicsArgs { hardware, bandwidth_gbps, tflops, model_bytes, params, model_file } = inputs;
        view::PhysicsView {
            hardware: hardware.clone(),
            bandwidth_gbps: *bandwidth_gbps,
            tflops: *tflops,
            model_bytes: model_bytes.clone(),
            params: params.clone(),
            model_file: model_file.clone(),
        }
    }
}

impl From<&ServerInfo> for view::ServerView {
    fn from(server: &ServerInfo) -> view::ServerView {
        let ServerInfo { base_url: _, models: _, props, preset: _, preset_detected: _, command: _ } = server;
        view::ServerView { props: props.clone() }
    }
}

impl From<&HostFacts> for view::HostView {
    fn from(host: &HostFacts) -> view::HostView {
        let HostFacts {
            hostname: _,
            os: _,
            os_version: _,
            kernel: _,
            arch,
            cpu_brand,
            cpu_cores_physical: _,
            cpu_cores_logical: _,
            memory_bytes: _,
        } = host;
        view::HostView { cpu_brand: Some(cpu_brand.clone()), arch: Some(arch.clone()) }
    }
}

impl From<&ServerCrash> for view::ServerCrashView {
    fn from(crash: &ServerCrash) -> view::ServerCrashView {
        let ServerCrash { at, exit_code, signal, in_flight, stderr_tail: _, restarted } = crash;
        view::ServerCrashView {
            at: at.clone(),
            exit_code: *exit_code,
            signal: *signal,
            in_flight: in_flight.clone(),
            restarted: *restarted,
        }
    }
}

impl From<&PhysicsProfiles> for view::ProfilesView {
    fn from(profiles: &PhysicsProfiles) -> view::ProfilesView {
        let PhysicsProfiles { hardware: _, model } = profiles;
        // The view keeps the model profile as the JSON written; verify types it.
        view::ProfilesView { model: model.as_ref().and_then(|m| serde_json::to_value(m).ok()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_are_filled_on_this_machine() {
        let h = HostFacts::collect();
        assert!(h.cpu_cores_logical >= 1);
        assert!(h.memory_bytes > 0);
        assert!(!h.arch.is_empty());
    }
}
