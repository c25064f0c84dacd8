//! Properties checked by the fuzz targets, one module per input kind. Plain functions (no
//! libFuzzer here), so tests/it/fuzz_corpus.rs replays the committed corpus through the same checks
//! on stable, in CI.

pub mod h1;
pub mod results;
pub mod stream;
