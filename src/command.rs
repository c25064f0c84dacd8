//! The `bench` command line: its verbs and each verb's arguments. The top of the layer table
//! (src/layers.rs): it names every verb, and nothing below it names a verb.

use clap::{Parser, Subcommand};

use crate::cli::{
    CompareArgs, LoadArgs, MergeArgs, PlanArgs, ReportArgs, SoakArgs, SweepArgs, VerifyArgs, WatchArgs,
};

#[derive(Debug, Parser)]
#[command(
    name = "bench",
    version,
    about = "Measure LLM inference servers: TTFT and decode across cache states, with integrity checks",
    long_about = "Measure LLM inference servers the way a careful reviewer would.\n\n\
        bench sweep   run a matrix (contexts x cache states x modes x batch sizes x runs) against a server\n\
        bench verify  flag physically impossible or suspicious numbers in result files\n\
        bench merge   build one canonical result file from partial runs and re-runs\n\
        bench report  statistics, tables, CSV and SVG plots\n\
        bench plan    the cells of a sweep and a forecast of its time, before it starts\n\
        bench soak    concurrent greedy load: does the server stay up and give the serial answers?\n\
        bench load    open-loop Poisson arrivals per rate and cache state: latency, goodput, the knee\n\
        bench compare candidates against a base, cell by cell, with bootstrap intervals\n\
        bench watch   follow run directories being written: the live view of their records\n\n\
        Exit codes: 0 success; 1 findings (verify errors, failed measurements, incomplete merge);\n\
        2 bad input (flags, files); 3 server unreachable or stopped answering (records kept);\n\
        4 results could not be written; 5 internal error (a bug); 130 interrupted (records kept)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a measurement matrix against a running server; records are written as they happen.
    Sweep(Box<SweepArgs>),
    /// Check result files for impossible or suspicious numbers.
    Verify(VerifyArgs),
    /// Combine result files into one canonical file.
    Merge(MergeArgs),
    /// Statistics, tables, CSV and plots from result files.
    Report(ReportArgs),
    /// What a sweep will measure and how long it will take, before it starts.
    Plan(Box<PlanArgs>),
    /// N concurrent clients for M iterations: does the server stay up, and stay correct?
    Soak(Box<SoakArgs>),
    /// Which build is faster: candidates against a base, cell by cell, with confidence intervals.
    Compare(CompareArgs),
    /// Open-loop load: Poisson arrivals at each rate, a mix of cold, warm and hot sessions; TTFT,
    /// inter-token latency and goodput per rate and cache state, and where the SLO breaks.
    Load(Box<LoadArgs>),
    /// Follow run directories another bench is writing: the live view of their records as they
    /// land, until every run has ended.
    Watch(WatchArgs),
}
