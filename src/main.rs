use std::future::Future;
use std::process::ExitCode;

use clap::Parser;
use ttft_bench::command::{Cli, Command};
use ttft_bench::exit;

/// The verbs that talk to a server run on a multi-threaded runtime.
fn block_on(work: impl Future<Output = anyhow::Result<ExitCode>>) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(work)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Sweep(args) => block_on(ttft_bench::command::sweep(args)),
        Command::Plan(args) => block_on(ttft_bench::runner::plan(args)),
        Command::Soak(args) => block_on(ttft_bench::runner::soak(args)),
        Command::Load(args) => block_on(ttft_bench::load::load(args)),
        Command::Verify(args) => ttft_bench::verify::run(args),
        Command::Merge(args) => ttft_bench::merge::run(args),
        Command::Report(args) => ttft_bench::report::run(args),
        Command::Compare(args) => ttft_bench::compare::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit::code(exit::code_of(&err))
        }
    }
}
