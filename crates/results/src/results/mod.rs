//! The result-file layer shared by the reading verbs (merge, verify, report): loading every input
//! kind into records (`sources`, `origin`, and other tools' files: `import`), the canonical file merge writes (`canonical`), choosing one
//! record per slot (`combine`), and what a batch is (`batch`).
//!
//! This layer sits below the verbs: it imports only `record`, `store`, `exit` and itself, never
//! `merge`, `verify`, `report`, `runner`, `cli` or `config`.

pub mod batch;
pub mod canonical;
pub mod combine;
mod detail;
pub mod digest;
mod document;
pub mod import;
mod kind;
pub mod origin;
pub mod packed;
mod parts;
pub mod run_meta;
mod scan;
pub mod slotted;
pub mod sources;
pub mod text;
