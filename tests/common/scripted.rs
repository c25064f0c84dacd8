//! The scripted server lives in the crate (src/scripted/, feature `scripted`, on by default) so
//! the benchmarks and `bench-scripted-server` share it; tests keep importing it from here.

#[allow(unused_imports)] // not every test binary uses the server
pub use ttft_bench::scripted::*;
