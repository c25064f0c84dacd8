//! What de-duplication (`combine`), a batch's completeness (`batch`) and the canonical writer read
//! of a record: its slot, its run and start, whether it passed, and its JSON when it has no text of
//! its own. A record has all of it; a verb may keep a compact form instead (merge keeps a digest of
//! each located record, whose text is what it writes), so a million records need not be held whole.

use std::io;

use super::origin::BATCH_AGGREGATE_FLAG;
use ttft_model::record::{CellKey, Measurement, Record, Scenario};

/// A record, or a compact form of one, as the reading layer sorts, de-duplicates and writes it.
pub trait Slotted {
    /// `measurement`, `group` or `staggered`.
    fn record_type(&self) -> &'static str;
    fn cell(&self) -> &CellKey;
    /// Position inside a concurrent batch (0 for every other record).
    fn request_index(&self) -> u32;
    /// The batch it belongs to ("" where none is named).
    fn group_id(&self) -> &str;
    fn run_id(&self) -> &str;
    fn started_at(&self) -> &str;
    /// Passed: quality ok and no error (a group record: no error and no failed request).
    fn is_good(&self) -> bool;
    /// The origin importer's stand-in for a batch it only kept totals of (`origin`).
    fn is_batch_stand_in(&self) -> bool;
    /// Its JSON, appended to `out`, where no text of it was kept to copy; an error where the
    /// compact form kept only its text's place (the text is then the only copy).
    fn write_json(&self, out: &mut Vec<u8>) -> io::Result<()>;

    /// Whether it belongs to a concurrent batch (members and group records of batch cells).
    fn in_batch(&self) -> bool {
        self.cell().scenario == Scenario::Concurrent && self.record_type() != "staggered"
    }

    /// Its record type's place in `RECORD_TYPES`.
    fn type_rank(&self) -> u8 {
        RECORD_TYPES.iter().position(|&t| t == self.record_type()).unwrap_or(RECORD_TYPES.len()) as u8
    }
}

/// The record types in the order of their names: the order every output sorts them in.
pub const RECORD_TYPES: [&str; 3] = ["group", "measurement", "staggered"];

impl Slotted for Record {
    fn record_type(&self) -> &'static str {
        Record::record_type(self)
    }

    fn cell(&self) -> &CellKey {
        Record::cell(self)
    }

    fn request_index(&self) -> u32 {
        match self {
            Record::Measurement(m) => m.request_index,
            _ => 0,
        }
    }

    fn group_id(&self) -> &str {
        match self {
            Record::Measurement(m) => m.group_id.as_deref().unwrap_or_default(),
            Record::Group(g) => &g.group_id,
            Record::Staggered(_) => "",
        }
    }

    fn run_id(&self) -> &str {
        Record::run_id(self)
    }

    fn started_at(&self) -> &str {
        Record::started_at(self)
    }

    fn is_good(&self) -> bool {
        Record::is_good(self)
    }

    fn is_batch_stand_in(&self) -> bool {
        match self {
            Record::Measurement(m) => is_aggregate_stand_in(m),
            _ => false,
        }
    }

    fn write_json(&self, out: &mut Vec<u8>) -> io::Result<()> {
        serde_json::to_writer(out, self).map_err(io::Error::other)
    }
}

/// The origin importer's stand-in for a batch it only kept totals of.
pub(super) fn is_aggregate_stand_in(m: &Measurement) -> bool {
    m.quality_flags.iter().any(|f| f.flag == BATCH_AGGREGATE_FLAG)
}
