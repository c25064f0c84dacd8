//! The canonical file `bench merge` writes (and every reader accepts through `load::load`).
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "kind": "ttft-bench-canonical",
//!   "sources": [ { "path": "...", "kind": "run_dir|jsonl|canonical|origin", "records": 198,
//!                  "run_ids": ["..."], "run_meta": [ {run.json or origin metadata}, ... ] } ],
//!   "conflicts": [ { "setting": "thermal_tolerance",
//!                    "values": [ { "value": "0.05", "sources": ["a.json"] },
//!                                { "value": "0.2",  "sources": ["b.json"] } ] } ],
//!   "provenance": { "kept_by_source": { "a.json": 183, "b.json": 15 },
//!                   "replaced": [ { "slot": "measurement m concurrent/warm streaming 1024 b2 r1 #0",
//!                                   "kept": { "source": "b.json", "run_id": "...", "started_at": "...",
//!                                             "good": true },
//!                                   "beat": 1,
//!                                   "losers": [ { "source": "a.json", ..., "reason": "..." } ] } ] },
//!   "records": [ { "record_type": "measurement", ... }, ... ]
//! }
//! ```
//! - `records` are our `Record`s, sorted by (record type, model, scenario, cache state, mode,
//!   context, batch size, run, request index) and kept whole, raw `token_offsets_ms` included.
//! - `sources` are sorted by path; `run_meta` holds every metadata object verbatim (a canonical
//!   input contributes the run_meta of all its own sources).
//! - `conflicts` lists settings whose values differ between sources (also printed to stderr).
//! - `provenance` says where every kept record came from and, for each slot that had more than one
//!   candidate, what was dropped and why; nothing is dropped silently.
//! - Nothing in the file depends on when or in which order the merge ran: same inputs, same bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::Record;

pub const CANONICAL_KIND: &str = "ttft-bench-canonical";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Canonical {
    pub schema_version: u32,
    pub kind: String,
    pub sources: Vec<SourceEntry>,
    pub conflicts: Vec<Conflict>,
    pub provenance: Provenance,
    pub records: Vec<Record>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceEntry {
    pub path: String,
    pub kind: String,
    /// Records read from this source (before de-duplication).
    pub records: usize,
    pub run_ids: Vec<String>,
    pub run_meta: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub setting: String,
    pub values: Vec<ConflictValue>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictValue {
    pub value: String,
    pub sources: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Records in the output, by the source they came from.
    pub kept_by_source: BTreeMap<String, usize>,
    /// Slots that had more than one candidate.
    pub replaced: Vec<Replacement>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replacement {
    pub slot: String,
    pub kept: Candidate,
    /// How many candidates the kept one beat.
    pub beat: usize,
    pub losers: Vec<Loser>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub source: String,
    pub run_id: String,
    pub started_at: String,
    pub good: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Loser {
    #[serde(flatten)]
    pub candidate: Candidate,
    pub reason: String,
}
