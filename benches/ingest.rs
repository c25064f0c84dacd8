//! Ingest at scale: every reading verb (merge, verify, `verify --sources`, report in every format,
//! compare) of 100,000 records, from a run directory (`measurements.jsonl`) and from a canonical
//! file, timed end to end with the release `bench` binary, each with its CPU time and peak memory
//! (the child's rusage from `wait4`), printed as a markdown table.
//!
//! Records are realistic in size (`tests/common/ingest_records.rs`, shared with the memory test of
//! the reading verbs): 64 token offsets at full f64 precision, a ~250-character output sample,
//! llama.cpp's `timings` object, thermal probes and cache evidence, as a llama.cpp sweep writes them
//! (about 2.9 KB a line). One in ten cells is a concurrent batch of 4 (members + group record) and
//! a few are staggered pairs, so batches and every record type take part.
//!
//! Above the verbs, three rows that are not verbs: the floor under any reading of the records file,
//! in this benchmark's own child process (one thread): its bytes read out of the page cache; each
//! line checked to be JSON by serde_json with nothing converted or kept; and each line read by
//! bench's own lightest reading (merge's: by hand, floats checked and not converted), the record
//! built and dropped. A verb that reads two inputs (compare, `--sources`) cannot take less than
//! twice the last.
//!
//! Then the merge of a sharded sweep's N shard directories (`-- --shards N`, default 1000; 0 skips
//! it; `-- --shards-only` skips the 100,000 records): a matrix of 1002 units (501 contexts x both
//! modes, each with cold/warm/hot, one run) cut into N shards by bench's own partition, each shard's
//! run.json and records written by bench's own writers (`store::start_run`, `RecordWriter`), then
//! `bench merge` of every shard directory with `--expect` the scenario, which must say Complete.
//!
//! Run with `cargo bench --bench ingest` (`-- --records N` for another size, `-- --timeout S` per
//! step, `-- --keep DIR` to keep the generated files, `-- --repeat N` to keep the cheapest of N runs
//! of each step). The goal on the 2-core CI machine class (`goal`): at 1,000,000 records every step
//! under 5 CPU-seconds and 500 MB, at 100,000 under 1 s and 200 MB. The CPU column (user + system)
//! is what is judged: where other work shares the cores, wall time is CPU time plus waiting.
//! Reports numbers; never asserts them.

// A benchmark's table on stdout is its output.
#![allow(clippy::print_stdout)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/common/ingest_records.rs"]
mod ingest_records;

use ingest_records::{measurement, records, write_run_dir};
use ttft_model::record::Record;
use ttft_model::stats::Rng;

/// The goal: every reading verb at 1,000,000 records under 5 CPU-seconds and 500 MB on the 2-core
/// machine class; at 100,000, under 1 s and 200 MB. Between and beyond, linear in the records
/// from those two points' larger (a fixed cost counts at small sizes).
fn goal(records: usize) -> (f64, f64) {
    let millions = records as f64 / 1e6;
    ((5.0 * millions).max(1.0), (500.0 * millions).max(200.0))
}

struct Step {
    wall_s: f64,
    cpu_s: f64,
    peak_mb: f64,
    code: Option<i32>,
    timed_out: bool,
}

/// Runs `bench ARGS` with stdout discarded; wall time and the child's own peak RSS.
fn step(args: &[&str], timeout: Duration) -> Step {
    step_of(Path::new(env!("CARGO_BIN_EXE_bench")), args, timeout)
}

/// `step` of any program.
fn step_of(program: &Path, args: &[&str], timeout: Duration) -> Step {
    let start = Instant::now();
    // Reaped below with wait4, which (unlike Child::wait) also returns the child's rusage.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start bench");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    loop {
        // SAFETY: waiting on a child we spawned and have not reaped.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if start.elapsed() > timeout && !timed_out {
            timed_out = true;
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall_s = start.elapsed().as_secs_f64();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    Step { wall_s, cpu_s, peak_mb: usage.ru_maxrss as f64 / 1024.0, code, timed_out }
}

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The path given after `name`, if any (an empty one is none).
fn path_arg(name: &str) -> Option<PathBuf> {
    Some(PathBuf::from(arg::<String>(name, String::new()))).filter(|p| !p.as_os_str().is_empty())
}

fn mb(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1e6)
}

/// The sharded job's scenario: 501 contexts x 2 modes = 1002 units (a unit is a context and mode
/// with all its cache states, a session lifecycle), so up to 1002 shards; cold, warm and hot, one
/// run each: 3006 cells.
fn shard_scenario() -> String {
    let contexts: Vec<String> = (0..501).map(|i| (1024 + 64 * i).to_string()).collect();
    format!(
        "contexts = \"{}\"\nmodes = \"streaming,non-streaming\"\ncache_states = \"cold,warm,hot\"\n\
         batch_sizes = \"1\"\nruns = 1\noutput_tokens = 64\nthermal = \"off\"\n",
        contexts.join(",")
    )
}

/// A sweep's config from a scenario file, resolved as `bench sweep --scenario FILE` resolves it.
fn sweep_config(scenario: &Path) -> ttft_bench::config::SweepConfig {
    use clap::Parser;
    use ttft_bench::command::{Cli, Command as Verb};
    let cli = Cli::try_parse_from([
        "bench",
        "sweep",
        "--server",
        "http://127.0.0.1:1",
        "--model",
        "bench/ingest-8b",
        "--scenario",
        &scenario.to_string_lossy(),
    ])
    .expect("the sweep's flags parse");
    let Verb::Sweep(args) = cli.command else { unreachable!("parsed as sweep") };
    ttft_bench::config::resolve(&args).expect("the scenario resolves")
}

/// How evenly `bench sweep --shard K/N` splits the matrix of `scenario`, for each N: the largest
/// and smallest shard's share of the nominal cost, times N (1.00 is a perfect split), and the
/// fewest and most cells a shard gets; or why N shards are refused.
fn balance(label: &str, scenario: &Path, counts: &[u32]) {
    let matrix = sweep_config(scenario).matrix();
    let units = ttft_bench::shard::units(&matrix).len();
    println!(
        "balance: {label}: {} cells, {units} units (a matrix point with all its runs)",
        matrix.cell_count()
    );
    for &count in counts {
        let started = Instant::now();
        let mut shares = Vec::new();
        for index in 1..=count {
            let spec =
                ttft_bench::shard::ShardSpec { index, count, origin: format!("--shard {index}/{count}") };
            match ttft_bench::shard::plan(&matrix, &spec) {
                Ok(shard) => shares.push((shard.cost_share, shard.cells)),
                Err(e) => {
                    println!("  {count:>5} shards: refused: {e}");
                    break;
                }
            }
        }
        if shares.len() == count as usize {
            let n = f64::from(count);
            let max = shares.iter().map(|s| s.0).fold(0.0, f64::max) * n;
            let min = shares.iter().map(|s| s.0).fold(f64::INFINITY, f64::min) * n;
            let cells_min = shares.iter().map(|s| s.1).min().unwrap_or(0);
            let cells_max = shares.iter().map(|s| s.1).max().unwrap_or(0);
            println!(
                "  {count:>5} shards: largest {max:.2}x and smallest {min:.2}x the mean cost, {cells_min}-{cells_max} cells \
                 a shard (every shard planned in {:.2} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Writes shard `index` of `count` of the scenario at `scenario` into `out`, as a sweep would: the
/// run.json bench's sweep writes (its config resolved from the same flags, the shard planned by
/// `shard::plan`), then one record per cell through bench's record writer.
fn write_shard(scenario: &Path, out: &Path, index: u32, count: u32) {
    use ttft_bench::meta::{HostFacts, RunMeta, RunStatus};
    let mut config = sweep_config(scenario);
    let spec = ttft_bench::shard::ShardSpec { index, count, origin: format!("--shard {index}/{count}") };
    let shard = ttft_bench::shard::plan(&config.matrix(), &spec).expect("the matrix has enough units");
    let cells = ttft_bench::shard::cells(&config.matrix(), "bench/ingest-8b", Some(&shard));
    config.shard = Some(shard);
    let run_id = ttft_bench::shard::run_id("20260205T213000Z-job", &spec);
    let meta = RunMeta {
        ended_at: Some("2026-02-05T21:40:00.000Z".into()),
        status: RunStatus::Complete,
        ..RunMeta::started(run_id.clone(), config, "2026-02-05T21:30:00.000Z".into(), HostFacts::default())
    };
    let mut rng = Rng::new(u64::from(index));
    let mut writer = ttft_results::store::start_run(&out.join(&run_id), &meta).expect("start the shard");
    for (i, cell) in cells.into_iter().enumerate() {
        let record = Record::Measurement(Box::new(measurement(&mut rng, &run_id, cell, i as u32, None)));
        writer.append(&record).expect("append a record");
    }
}

fn main() {
    let n: usize = arg("--records", 100_000);
    let repeat: usize = arg("--repeat", 1).max(1);
    let timeout = Duration::from_secs(arg("--timeout", 300));
    let keep = path_arg("--keep");
    let shards: u32 = arg("--shards", 1000);
    let shards_only = std::env::args().any(|a| a == "--shards-only");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("create the output dir");

    // The shard directories, also made in a child process (see below for why).
    if let Some(into) = path_arg("--shards-into") {
        let scenario = into.join("scenario.toml");
        std::fs::write(&scenario, shard_scenario()).expect("write the scenario");
        for index in 1..=shards {
            write_shard(&scenario, &into.join("shards"), index, shards);
        }
        return;
    }
    if shards_only {
        merge_shards(&dir, shards, timeout);
        return;
    }

    // The records are made in a child process: a child's peak memory counts its parent's peak at
    // the time it was started (Linux carries the high-water mark across exec), so this process
    // must never hold them.
    if let Some(into) = path_arg("--generate-into") {
        write_run_dir(&into, &records(n));
        return;
    }
    for (flag, floor_of) in FLOORS {
        if let Some(path) = path_arg(flag) {
            floor(&path, floor_of);
            return;
        }
    }
    let generated = Command::new(std::env::current_exe().expect("this benchmark's path"))
        .args(["--records", &n.to_string(), "--generate-into", &dir.to_string_lossy()])
        .status()
        .expect("generate the records");
    assert!(generated.success(), "generating the records failed");
    let run = dir.join("run");
    let jsonl = run.join("measurements.jsonl");
    let canonical = dir.join("canonical.json");
    let run_s = run.to_string_lossy().to_string();
    let can_s = canonical.to_string_lossy().to_string();
    let again = dir.join("again.json").to_string_lossy().to_string();
    println!("ingest: {n} records; measurements.jsonl {:.0} MB", mb(&jsonl));

    let html = dir.join("report.html").to_string_lossy().to_string();
    // Every reading verb, from the run directory and from the canonical file merge writes of it;
    // compare takes the run as its base and the canonical file as its candidate (the same
    // records: two whole inputs read, de-duplicated, sampled and bootstrapped).
    let steps: Vec<(&str, &str, Vec<&str>)> = vec![
        ("jsonl", "merge", vec!["merge", &run_s, "-o", &can_s]),
        ("jsonl", "verify", vec!["verify", &run_s]),
        ("jsonl", "report", vec!["report", &run_s, "--format", "csv"]),
        ("canonical", "verify", vec!["verify", &can_s]),
        ("canonical", "sources", vec!["verify", &can_s, "--sources", &run_s]),
        ("canonical", "report", vec!["report", &can_s, "--format", "csv"]),
        ("canonical", "table", vec!["report", &can_s]),
        ("canonical", "json", vec!["report", &can_s, "--format", "json"]),
        ("canonical", "html", vec!["report", &can_s, "--format", "html", "-o", &html]),
        ("canonical", "merge", vec!["merge", &can_s, "-o", &again]),
        ("both", "compare", vec!["compare", &run_s, &can_s]),
    ];
    // What any reading of the records file costs, in this benchmark's own child (one thread, a
    // 64 KiB buffer): its bytes out of the page cache; each line checked to be JSON by serde_json,
    // nothing converted or kept; and each line read by bench's own lightest reading. A verb reads
    // at least the last of them per input.
    let this = std::env::current_exe().expect("this benchmark's path");
    let jsonl_s = jsonl.to_string_lossy().to_string();
    let floors = FLOORS.map(|(flag, floor_of)| {
        let runs: Vec<Step> = (0..repeat).map(|_| step_of(&this, &[flag, &jsonl_s], timeout)).collect();
        (floor_of.name(), runs.into_iter().min_by(|a, b| a.cpu_s.total_cmp(&b.cpu_s)))
    });
    let (goal_s, goal_mb) = goal(n);
    println!(
        "| {:<9} | {:<7} | {:>7} | {:>7} | {:>7} | {:>4} |  goal < {goal_s:.1} CPU s, < {goal_mb:.0} MB",
        "input", "verb", "wall s", "cpu s", "peak MB", "exit"
    );
    println!("|---|---|---|---|---|---|");
    for (verb, s) in &floors {
        let Some(s) = s else { continue };
        println!(
            "| {:<9} | {verb:<7} | {:>7.2} | {:>7.2} | {:>7.0} | {:>4} |  floor: not a verb",
            "jsonl",
            s.wall_s,
            s.cpu_s,
            s.peak_mb,
            s.code.map_or("sig".to_string(), |c| c.to_string())
        );
    }
    for (input, verb, args) in steps {
        if input != "jsonl" && !canonical.exists() {
            println!("| {input:<9} | {verb:<7} | skipped: no canonical file (the merge step failed) |");
            continue;
        }
        let runs: Vec<Step> = (0..repeat).map(|_| step(&args, timeout)).collect();
        let Some(s) = runs.into_iter().min_by(|a, b| a.cpu_s.total_cmp(&b.cpu_s)) else { continue };
        let code = s.code.map_or("sig".to_string(), |c| c.to_string());
        // CPU time, not wall time: on a shared machine wall time is CPU time plus waiting.
        let over = if s.cpu_s > goal_s || s.peak_mb > goal_mb { "  over goal" } else { "" };
        let limit = if s.timed_out {
            format!("  (killed at the {} s timeout)", timeout.as_secs())
        } else {
            String::new()
        };
        println!(
            "| {input:<9} | {verb:<7} | {:>7.2} | {:>7.2} | {:>7.0} | {code:>4} |{over}{limit}",
            s.wall_s, s.cpu_s, s.peak_mb
        );
        if verb == "merge" && input == "jsonl" {
            // merge writes around the page cache (docs/performance.md, "Writing a large
            // document"): the file is read once here, so the canonical rows, like the run's, time
            // each verb on an input in the page cache, not the first of them the disk as well.
            let cached = Instant::now();
            let read = File::open(&canonical).and_then(|mut f| std::io::copy(&mut f, &mut std::io::sink()));
            println!(
                "{:<22} canonical file {:.0} MB, read into the page cache in {:.1} s{}",
                "",
                mb(&canonical),
                cached.elapsed().as_secs_f64(),
                read.err().map_or(String::new(), |e| format!(" (failed: {e})"))
            );
        }
    }
    if let [_, (_, Some(json)), (_, Some(hand))] = &floors {
        println!(
            "floor: checking the records file's JSON alone takes {:.2} CPU s (serde_json), bench's own lightest \
             reading {:.2}; compare and --sources read two inputs, so no reading of them by bench takes less \
             than {:.2}",
            json.cpu_s,
            hand.cpu_s,
            2.0 * hand.cpu_s
        );
    }
    if shards > 0 {
        merge_shards(&dir, shards, timeout);
    }
    if let Some(dir) = keep {
        println!("kept: {}", dir.display());
    }
}

/// A floor under reading the records file (`floor`).
#[derive(Clone, Copy)]
enum Floor {
    /// Its bytes read.
    Read,
    /// Each line checked to be JSON by serde_json, nothing converted or kept.
    Json,
    /// Each line read by bench's own lightest reading (merge's: `fast::measurement` with
    /// `Keep::Converting(Floats::NONE)`, a line of another record type by serde), the record built
    /// and dropped.
    Hand,
}

impl Floor {
    fn name(self) -> &'static str {
        match self {
            Floor::Read => "read",
            Floor::Json => "json",
            Floor::Hand => "hand",
        }
    }
}

/// Each floor, by the flag that runs it in a child of this benchmark.
const FLOORS: [(&str, Floor); 3] =
    [("--floor-read", Floor::Read), ("--floor-json", Floor::Json), ("--floor-hand", Floor::Hand)];

/// The floor of reading the records file at `path`: its bytes read, a 64 KiB buffer at a time, and
/// each line as `floor_of` says; one thread. Exits 1 where a line does not read.
fn floor(path: &Path, floor_of: Floor) {
    use std::io::BufRead;
    use ttft_model::record::fast::{self, Floats, Keep};
    let file = File::open(path).expect("open the records file");
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    loop {
        if let Floor::Read = floor_of {
            let n = reader.fill_buf().expect("read").len();
            if n == 0 {
                return;
            }
            reader.consume(n);
            continue;
        }
        line.clear();
        if reader.read_until(b'\n', &mut line).expect("read") == 0 {
            return;
        }
        let body = line.trim_ascii();
        let read = match floor_of {
            _ if body.is_empty() => true,
            Floor::Json => serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok(),
            // A line of another record type is read as bench reads it: by serde.
            _ => {
                fast::measurement(body, Keep::Converting(Floats::NONE)).is_some()
                    || serde_json::from_slice::<Record>(body).is_ok()
            }
        };
        if !read {
            std::process::exit(1);
        }
    }
}

/// `bench merge` of `count` shard directories of one job, with `--expect` its scenario; first the
/// partition's balance, on the paper's matrix at 10x its runs and on the job's.
fn merge_shards(dir: &Path, count: u32, timeout: Duration) {
    let paper = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/paper.toml"))
        .expect("scenarios/paper.toml");
    assert!(paper.contains("\nruns = 3\n"), "scenarios/paper.toml no longer says runs = 3");
    let paper10 = dir.join("paper-10x.toml");
    std::fs::write(
        &paper10,
        paper.replace("\nruns = 3\n", "\nruns = 30\n").replace("stagger_runs = 3", "stagger_runs = 30"),
    )
    .expect("write the 10x paper scenario");
    balance("scenarios/paper.toml at 10x its runs", &paper10, &[4, 16, 64, 67, count]);
    let job = dir.join("job-scenario.toml");
    std::fs::write(&job, shard_scenario()).expect("write the job's scenario");
    balance("the sharded job below", &job, &[4, 16, 64, 256, count]);

    let made = Instant::now();
    let generated = Command::new(std::env::current_exe().expect("this benchmark's path"))
        .args(["--shards", &count.to_string(), "--shards-into", &dir.to_string_lossy()])
        .status()
        .expect("write the shard directories");
    assert!(generated.success(), "writing the shard directories failed");
    let mut inputs: Vec<String> = std::fs::read_dir(dir.join("shards"))
        .expect("the shard directories")
        .map(|e| e.expect("a shard directory").path().to_string_lossy().into_owned())
        .collect();
    inputs.sort();
    let bytes: u64 = inputs
        .iter()
        .filter_map(|d| std::fs::metadata(Path::new(d).join("measurements.jsonl")).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "shards: {} directories of one job, {:.0} MB of records, written in {:.1} s",
        inputs.len(),
        bytes as f64 / 1e6,
        made.elapsed().as_secs_f64()
    );
    let merged = dir.join("shards.json").to_string_lossy().into_owned();
    let scenario = dir.join("scenario.toml").to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(inputs.iter().map(String::as_str));
    args.extend(["-o", &merged, "--expect", &scenario]);
    let s = step(&args, timeout);
    let code = s.code.map_or("sig".to_string(), |c| c.to_string());
    println!(
        "{:<10} {:<7} {:>9.2} {:>9.2} {:>9.0} {code:>5}  ({count} shard directories, --expect: exit 0 is Complete)",
        "shards", "merge", s.wall_s, s.cpu_s, s.peak_mb
    );

    // The same job merged as a tree: groups of 100 shards into partial files (no --expect: each
    // is incomplete on its own), then the partial files with --expect.
    let (mut wall, mut cpu, mut peak) = (0.0, 0.0, 0.0f64);
    let mut partials = Vec::new();
    for (i, group) in inputs.chunks(100).enumerate() {
        let partial = dir.join(format!("partial-{i:03}.json")).to_string_lossy().into_owned();
        let mut args: Vec<&str> = vec!["merge"];
        args.extend(group.iter().map(String::as_str));
        args.extend(["-o", &partial]);
        let s = step(&args, timeout);
        (wall, cpu, peak) = (wall + s.wall_s, cpu + s.cpu_s, peak.max(s.peak_mb));
        partials.push(partial);
    }
    let top = dir.join("tree.json").to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(partials.iter().map(String::as_str));
    args.extend(["-o", &top, "--expect", &scenario]);
    let s = step(&args, timeout);
    let code = s.code.map_or("sig".to_string(), |c| c.to_string());
    println!(
        "{:<10} {:<7} {:>9.2} {:>9.2} {:>9.0} {code:>5}  (as a tree: {} merges of up to 100 shards, {wall:.2} s, \
         {cpu:.2} s CPU, peak {peak:.0} MB; then those {} files with --expect)",
        "tree",
        "merge",
        s.wall_s,
        s.cpu_s,
        s.peak_mb,
        partials.len(),
        partials.len()
    );
}
