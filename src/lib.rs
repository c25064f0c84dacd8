//! ttft-bench: measures LLM inference servers (TTFT, decode, cache states) with integrity checks.
//!
//! Data flows one way (docs/design.md#architecture; the layer table is src/layers.rs): cli -> config
//! -> plan -> runner (client, preset, prompt, metrics) -> record -> store; results -> merge / verify /
//! report only read records.

pub mod cli;
pub mod client;
pub mod clock;
pub mod command;
pub mod compare;
pub mod config;
pub mod cost;
pub mod dataset;
pub mod exit;
pub mod input_file;
pub mod layers;
pub mod load;
pub mod merge;
pub mod meta;
pub mod metrics;
pub mod output;
pub mod physics;
pub mod plan;
pub mod preset;
pub mod progress;
pub mod prompt;
pub mod quality;
pub mod record;
pub mod report;
pub mod results;
pub mod runner;
#[cfg(feature = "scripted")]
pub mod scripted;
pub mod secrets;
pub mod server;
pub mod shard;
pub mod spec;
pub mod stats;
pub mod store;
pub mod supervise;
pub mod thermal;
pub mod ticks;
pub mod verify;
