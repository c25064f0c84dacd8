//! `bench verify` (to be built).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Result files or run directories.
    pub inputs: Vec<std::path::PathBuf>,
}

pub fn run(_args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bench verify is not built yet")
}
