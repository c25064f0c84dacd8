//! measurements.jsonl: records one per line, schema-versioned, a torn last line refused.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::results::check_file("measurements.jsonl", data);
});
