//! `bench merge` (to be built).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Result files or run directories.
    pub inputs: Vec<std::path::PathBuf>,
}

pub fn run(_args: &MergeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bench merge is not built yet")
}
