//! `bench watch`'s arguments: the run directories to follow.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    bench watch results/20261122T031500Z-cold\n  \
    bench watch results/paper-shard-*          # every shard of a sharded sweep\n\n\
    Follows run directories while another bench writes them (a sweep on another terminal, the\n\
    shards of a sweep on a cluster's shared disk): the live view of sweep, load or soak, from\n\
    the records as they land in measurements.jsonl. It ends when every run has ended (run.json\n\
    complete or interrupted, or no process holds a run that says running: it was killed) and\n\
    says how each ended. q or Ctrl-C stops watching (exit 130); the runs go on.\n\
    Without a terminal on stderr it prints plain lines.\n\
    Exit codes: 0 every run ended; 2 a directory that is not a run; 130 stopped watching.\n\n\
    Guide: docs/live.md (in the ttft-bench repository)")]
pub struct WatchArgs {
    /// Run directories (each holds run.json), being written or already ended.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// How often the runs' files are read again.
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub every: ttft_model::spec::Span,
}
