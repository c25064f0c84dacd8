//! One record's line: the hand reading of a measurement reads what serde reads, or leaves it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::results::check_record_line(data);
});
