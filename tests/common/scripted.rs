//! The scripted server lives in the crate (crates/scripted/src/, feature `scripted`, on by default) so
//! the benchmarks and `bench-scripted-server` share it; tests keep importing it from here.

#[allow(unused_imports)] // not every test binary uses the server
pub use ttft_scripted::*;
