//! The record model and the leaf types every other crate of ttft-bench builds on: what a
//! measurement is (`record`), the typed values of a matrix (`spec`), statistics,
//! secrets' masking, clocks. It knows nothing of flags, servers, files or verbs
//! (docs/design.md#architecture).

pub mod clock;
pub mod input_file;
pub mod page_cache;
pub mod record;
pub mod secrets;
pub mod spec;
pub mod stats;
