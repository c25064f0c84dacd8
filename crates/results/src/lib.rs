//! Result files and what is checked in them: records on disk (`store`), run metadata and result
//! files read back (`results`), the plan a run expects (`plan`), physical ceilings (`physics`) and
//! quality gating (`quality`). Built on the record model (ttft-model) only: it never drives a
//! server and never sees a flag (docs/design.md#architecture).

pub mod physics;
pub mod plan;
pub mod quality;
pub mod results;
pub mod store;
