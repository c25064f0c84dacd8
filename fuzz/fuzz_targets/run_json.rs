//! run.json read back as a type.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::results::check_run_json(data);
});
