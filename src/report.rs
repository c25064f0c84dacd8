//! `bench report` (to be built).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Result files or run directories.
    pub inputs: Vec<std::path::PathBuf>,
}

pub fn run(_args: &ReportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bench report is not built yet")
}
