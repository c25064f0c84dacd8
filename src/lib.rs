//! ttft-bench: measures LLM inference servers (TTFT, decode, cache states) with integrity checks.
//!
//! Data flows one way (docs/design.md#architecture): cli -> config -> plan -> runner (client,
//! preset, prompt, metrics) -> record -> store; results -> merge / verify / report only read
//! records. The crates below this one hold the lower layers, so the compiler refuses an import
//! that points up: ttft-model (the record model and leaves), ttft-results (result files, physics,
//! quality) and ttft-client (the transport). Code names them directly (`ttft_model::record`), so
//! a path says which crate it reaches into; src/layers.rs orders the modules of all of them.
//!
//! Visibility says what is API: an item is `pub` only when the binaries, tests or benchmarks use
//! it; everything else is `pub(crate)`, and `unreachable_pub` keeps it that way.

#![warn(unreachable_pub)]

pub mod cli;
pub mod command;
pub mod compare;
pub mod config;
pub(crate) mod cost;
pub(crate) mod dataset;
pub(crate) mod detect;
pub mod exit;
#[cfg(test)]
mod layers;
pub(crate) mod live;
pub mod load;
pub(crate) mod measuring;
pub mod merge;
pub mod meta;
pub(crate) mod metrics;
pub mod output;
pub(crate) mod preset;
pub(crate) mod progress;
pub mod prompt;
pub mod report;
pub mod runner;
pub mod server;
pub mod shard;
pub mod supervise;
pub(crate) mod thermal;
pub(crate) mod ticks;
pub mod verify;
pub mod watch;
