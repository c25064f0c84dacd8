//! The result-file layer shared by the reading verbs (merge, verify, report): what a batch is, and
//! (as they move here) loading, the canonical format, combining and origin import.

pub mod batch;
