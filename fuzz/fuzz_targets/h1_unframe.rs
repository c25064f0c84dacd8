//! The direct path's HTTP/1.1 response framing: arbitrary bytes as a response, read in pieces.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ttft_bench_fuzz::h1::check(data);
});
