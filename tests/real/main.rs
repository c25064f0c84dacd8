//! Tests against real programs: a llama-server the project builds, the origin benchmark's agent-memory
//! server (scripts/agent-memory.sh), and Chromium. They skip with a message where the program is
//! missing, unless TTFT_BENCH_REQUIRE_LLAMA / TTFT_BENCH_REQUIRE_AGENT_MEMORY /
//! TTFT_BENCH_REQUIRE_CHROMIUM is set; and the anchors, AIPerf and GuideLLM against
//! bench-scripted-server (TTFT_BENCH_REQUIRE_ANCHORS).

#[path = "../common/mod.rs"]
mod common;

mod agent_memory;
mod anchors;
mod batches_real;
mod datasets_real;
mod first_session;
mod load_closed_real;
mod load_real;
mod parity;
mod real_llama;
mod report_html;
mod reuse_real;
mod shard_llama;
mod soak;
