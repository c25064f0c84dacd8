//! Run directories as a sweep writes them, for tests that need chosen records: run.json from the
//! sweep's own start (`RunMeta::started` over a config resolved from sweep flags), records appended
//! by the sweep's `RecordWriter`, and run.json closed the way the runner closes a finished run. A
//! test never writes run.json or measurements.jsonl by hand: a hand-written shape drifts from what
//! bench writes (a crash list under a key bench never used) and the test then proves nothing.

use std::path::{Path, PathBuf};

use clap::Parser;
use ttft_bench::command::{Cli, Command as Verb};
use ttft_bench::config::SweepConfig;
use ttft_bench::meta::{HostFacts, RunMeta, RunStatus};
use ttft_bench::shard;
use ttft_model::record::Record;
use ttft_results::store;

/// When every helper run starts and ends: fixed, so two runs built alike are alike.
pub const STARTED_AT: &str = "2026-01-01T00:00:00.000Z";
pub const ENDED_AT: &str = "2026-01-01T01:00:00.000Z";

/// The config `bench sweep FLAGS` resolves to, with `--server http://127.0.0.1:1` and `--model m`
/// unless `flags` name their own.
pub fn config(flags: &[&str]) -> SweepConfig {
    let mut argv = vec!["bench", "sweep"];
    if !flags.contains(&"--server") {
        argv.extend(["--server", "http://127.0.0.1:1"]);
    }
    if !flags.contains(&"--model") {
        argv.extend(["--model", "m"]);
    }
    argv.extend_from_slice(flags);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let Verb::Sweep(args) = cli.command else { panic!("{argv:?} parsed as sweep") };
    let mut config = ttft_bench::config::resolve(&args).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    // `--shard K/N` is planned where the sweep opens its run (`measuring::open`), from the same two
    // calls; the environment is not read (a scheduler's variables would change the test).
    let env = |_: &str| None;
    let spec = shard::resolve(args.shard.as_deref(), args.shard_count, &env).unwrap();
    if let Some(spec) = spec {
        config.shard = Some(shard::plan(&config.matrix(), &spec).unwrap_or_else(|e| panic!("{argv:?}: {e}")));
    }
    config
}

/// run.json of a sweep started with `flags` as `run_id`, before anything is measured.
pub fn meta(run_id: &str, flags: &[&str]) -> RunMeta {
    RunMeta::started(run_id.into(), config(flags), STARTED_AT.into(), HostFacts::default())
}

/// `dir/name` as a finished sweep leaves it: `meta` started the run (through `store::start_run`,
/// the sweep's own open), `records` appended one by one, then run.json closed complete.
pub fn write_with(dir: &Path, name: &str, meta: &RunMeta, records: &[Record]) -> PathBuf {
    let run = dir.join(name);
    let mut writer = store::start_run(&run, meta).unwrap();
    for record in records {
        writer.append(record).unwrap();
    }
    let closed = RunMeta { status: RunStatus::Complete, ended_at: Some(ENDED_AT.into()), ..meta.clone() };
    store::write_json_atomic(&run.join(store::RUN_FILE), &closed).unwrap();
    run
}

/// `dir/name` as a finished sweep with run id `name` leaves it, its `--model` the model of the
/// first record (as a sweep's records carry the model it was given), default flags otherwise.
pub fn write(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    let model = records.first().map_or("m", |r| r.cell().model.as_str());
    write_with(dir, name, &meta(name, &["--model", model]), records)
}

/// The records of a `.jsonl` file as bench's own reader parses them (a line bench would refuse
/// panics), so a fixture's records reach a run directory only through the types bench writes.
pub fn records_of(path: &Path) -> Vec<Record> {
    store::read_records(path, store::TornTail::Reject).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
