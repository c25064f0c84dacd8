//! In-process and scripted-server tests: one binary, so `cargo test` links the library once.
//! Each module is one behaviour of `bench`; tests/real/ holds the ones that need llama-server or Chromium.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod client_lanes;
mod compare;
mod dialects;
mod echoed_secrets;
mod faults;
mod fuzz_corpus;
mod h1_differential;
mod import_tools;
mod kill9_status;
mod load_cli;
mod load_engine;
mod load_stops;
mod merge_batches;
mod merge_located;
mod merge_origin;
mod merge_output;
mod merge_records;
mod merge_run_meta;
mod merge_servers;
mod plan;
mod preset_connections;
mod preset_evidence;
mod prompt_sizing;
mod record;
mod redirects;
mod reference;
mod report_output;
mod report_scripted;
mod reuse_primes;
mod scenarios_scripted;
mod schema;
mod scripted_server;
mod server_cmd;
mod shard_deploy;
mod shard_partition;
mod shard_sweep;
mod store_lock;
mod sweep_harness_time;
mod sweep_runner;
mod sweep_scripted;
mod tls;
mod verdicts;
mod verify_cli;
mod verify_fixtures;
mod verify_model_file;
mod verify_origin;
mod verify_sources;
