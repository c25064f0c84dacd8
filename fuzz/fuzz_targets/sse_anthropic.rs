//! Anthropic message streams: arbitrary bytes through the SSE decoder and event handling.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::stream::check(ttft_model::spec::Api::Anthropic, data);
});
