//! A .json result file: sniffed as records, our canonical document, or the origin benchmark's JSON.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::results::check_file("published.json", data);
});
