use std::process::ExitCode;

use clap::Parser;
use ttft_bench::cli::{Cli, Command};
use ttft_bench::exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Sweep(args) => match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => rt.block_on(ttft_bench::runner::run(args)),
            Err(e) => Err(e.into()),
        },
        Command::Verify(args) => ttft_bench::verify::run(args),
        Command::Merge(args) => ttft_bench::merge::run(args),
        Command::Report(args) => ttft_bench::report::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit::code(exit::code_of(&err))
        }
    }
}
