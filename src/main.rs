use std::future::Future;
use std::process::ExitCode;

use clap::Parser;
use ttft_bench::command::{Cli, Command};
use ttft_bench::exit::{self, Outcome};

/// The verbs that talk to a server run on a multi-threaded runtime.
fn block_on(work: impl Future<Output = anyhow::Result<Outcome>>) -> anyhow::Result<Outcome> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(work)
}

fn main() -> ExitCode {
    // `bench __keep-server LINE`: this binary as the keeper of a `--server-cmd` (supervise.rs).
    #[cfg(target_os = "linux")]
    if std::env::args_os().nth(1).is_some_and(|a| a == ttft_bench::supervise::keeper::KEEPER_ARG) {
        ttft_bench::supervise::keeper::main();
    }
    ttft_bench::supervise::run_server_commands_under_a_keeper();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Verify(_) | Command::Merge(_) | Command::Report(_) | Command::Compare(_)
    ) {
        grow_the_heap_in_large_steps();
    }
    let result = match &cli.command {
        Command::Sweep(args) => block_on(sweep(args)),
        Command::Plan(args) => block_on(ttft_bench::runner::plan(args)),
        Command::Soak(args) => block_on(ttft_bench::runner::soak(args)),
        Command::Load(args) => block_on(ttft_bench::load::load(args)),
        Command::Watch(args) => block_on(ttft_bench::watch::run(args)),
        Command::Verify(args) => ttft_bench::verify::run(args),
        Command::Merge(args) => ttft_bench::merge::run(args),
        Command::Report(args) => ttft_bench::report::run(args),
        Command::Compare(args) => ttft_bench::compare::run(args),
    };
    // The only map from how a verb ended to the process's exit code.
    let code = match result {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            if exit::needs_printing(&err) {
                eprintln!("error: {}", ttft_model::secrets::redact(&format!("{err:#}")));
            }
            exit::code_of(&err)
        }
    };
    ExitCode::from(code)
}

/// The reading verbs hold a million records in memory, allocated by the threads that parse them.
/// glibc grows a thread's heap page by page, one `mprotect` each unless told to pad every growth
/// (its `M_TOP_PAD`): 324,000 calls and 0.5 CPU-s of a million-record verify without the pad, 32
/// with 64 MiB (docs/performance.md, "Reading result files"). Pages of the pad that are never
/// written are never resident.
fn grow_the_heap_in_large_steps() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any parsing thread
    // exists, and an unknown parameter is refused by its return value, not by misbehaving.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

/// `bench sweep`: the sweep, then (when it finished) its numbers per cell on stderr, computed as
/// `bench report` computes them, and the run directory alone on the last stdout line, for scripts.
/// Composed here, above the library's layers: the driving verbs never read what the reading
/// verbs compute (src/layers.rs).
async fn sweep(args: &ttft_bench::cli::SweepArgs) -> anyhow::Result<Outcome> {
    let swept = ttft_bench::runner::run(args).await?;
    if let Some(dir) = &swept.finished {
        if !args.output.quiet {
            match ttft_results::results::sources::load(dir) {
                Ok(source) => eprint!(
                    "per cell (median p50 / p99; `bench report {}` has the full table):\n{}",
                    dir.display(),
                    ttft_bench::report::summary(&source.records)
                ),
                Err(e) => eprintln!("warning: no summary: {e}"),
            }
        }
        ttft_bench::output::println(&dir.display().to_string())?;
    }
    Ok(swept.outcome)
}
