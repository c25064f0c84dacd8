//! OpenAI chat-completion streams: arbitrary bytes through the SSE decoder and chunk handling.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::stream::check(ttft_model::spec::Api::Openai, data);
});
