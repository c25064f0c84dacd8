//! `bench report`'s settings, validated before an input is read: where the report goes. An HTML
//! page is one self-contained file for a browser, so it is written to `-o FILE` and never to stdout;
//! the other formats go to stdout unless `-o` names a file.

use std::path::PathBuf;

use crate::cli::{ReportArgs, ReportFormat};
use crate::exit::Failure;

/// Where the report is written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Destination {
    Stdout,
    /// Written atomically (a reader never sees half of it); its path alone on stdout.
    File(PathBuf),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReportSettings {
    pub format: ReportFormat,
    pub destination: Destination,
}

impl ReportSettings {
    /// The settings `args` give, or why not, naming the flag (exit 2, nothing read or written).
    pub(crate) fn from_args(args: &ReportArgs) -> Result<ReportSettings, Failure> {
        let destination = match (&args.output, args.format) {
            (Some(path), _) => Destination::File(path.clone()),
            (None, ReportFormat::Html) => {
                return Err(Failure::usage(
                    "--format html writes one file: give -o FILE (e.g. -o report.html); nothing was written",
                ));
            }
            (None, _) => Destination::Stdout,
        };
        Ok(ReportSettings { format: args.format, destination })
    }
}
