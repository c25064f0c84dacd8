//! Command-line surface (clap derive): every verb's arguments, and each flag declared once.
//!
//! Files by concept: `groups` (the flag groups the verbs share: connection, target, sizes, workload,
//! output, thermal gate, physics), `sweep` (sweep and plan, and `MeasureArgs`: what a run
//! measures), `load` (load and soak), `reading` (verify, merge, report, compare), `watch` (the run
//! directories it follows), `load_values` (load's flag values). Only value types (`spec`, `record`) are named here, never a verb: the
//! verbs import their arguments from here, and `config` validates them.
//!
//! A sweep setting is a field of `ConnectionArgs` or `MeasureArgs` (or a group they flatten). The
//! same structs are filled by clap (flags) and by serde (scenario files: keys are the flag names
//! with underscores), so adding a setting means adding one field here and reading it in
//! `config::validate`. Values are typed here (`spec`), so clap names a bad flag itself and a bad
//! scenario key is named with its file. The split between the two is the resume policy:
//! `ConnectionArgs` may change on `--resume` (they say how to reach the server, not what is
//! measured); `MeasureArgs` are fixed for the life of a run and refused on `--resume`.

mod groups;
mod load;
mod load_values;
mod reading;
mod sweep;
#[cfg(test)]
mod tests;
mod watch;

pub(crate) use groups::{
    ConnectionArgs, OutputArgs, PhysicsArgs, SizeArgs, TargetArgs, ThermalArgs, WorkloadArgs,
};
pub(crate) use load::{LoadArgs, SoakArgs};
pub use load_values::{Levels, LoadSpecError, MAX_RATE_PER_S, MAX_USERS, Mix, OfferedRates, Rate, Slo};
pub(crate) use reading::{
    CompareArgs, CompareFormat, MergeArgs, ReportArgs, ReportFormat, VerifyArgs, VerifyFormat,
};
pub use sweep::{MeasureArgs, PlanArgs, PlanFormat, SweepArgs};
pub(crate) use watch::WatchArgs;

/// Bounds of the matrix flags: large enough for any real sweep, small enough that a typo
/// (`--runs 4000000000`) is an error instead of a plan that never ends.
pub(crate) const MAX_RUNS: u32 = 10_000;
pub(crate) const MAX_BATCH: u32 = 4_096;
pub(crate) const MAX_OUTPUT_TOKENS: u32 = 1_048_576;
/// Turns of a hot conversation: an agent's session runs to dozens, a typo to millions.
pub(crate) const MAX_TURNS: u32 = 256;
/// Rows sampled from a dataset (`--dataset-limit`).
pub(crate) const MAX_DATASET_ROWS: u32 = 1_000_000;
