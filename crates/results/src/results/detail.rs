//! How much of each record a reader keeps: below every reader (a records file read in parts, a
//! JSON document, the loader that chooses between them), which all read to the detail asked.

use std::io;

use crate::store::{self, LineError};
use ttft_model::record::fast::{self, Keep};
use ttft_model::record::{LeanRecord, Record, SCHEMA_VERSION, TimedRecord};

/// How much of each record a reader keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Every field (merge writes records back).
    Full,
    /// `Record::lean`: what verify and report read, dropped as each record streams by, so the
    /// raw samples of a large input are never all in memory at once.
    Lean,
    /// Lean, and where each record's text lies in its file (`text`): what merge reads, to copy
    /// the texts into its output. Records that cannot be located (not read from a regular file
    /// in parts, or not one line each) are read `Full`.
    Located,
    /// `Record::timed` (lean, a measurement's token offsets kept), located as `Located` is: what
    /// report reads. Its statistics need the offsets (inter-token latency) and nothing else lean
    /// drops; located, a slot whose candidates tie is decided on their texts, as whole records
    /// decide it, so the statistics are the ones whole records give.
    Timed,
}

impl Detail {
    /// One record's JSON text, read to this detail; fails exactly where `store::parse_record`
    /// fails, with its error (a lean reading that fails is done again in full for the message).
    /// A measurement as bench writes it is read by hand (`record::fast`), anything else by serde.
    pub(super) fn parse(self, bytes: &[u8]) -> Result<Record, LineError> {
        let by_hand = match self {
            Detail::Full => None,
            Detail::Lean | Detail::Located => fast::measurement(bytes, Keep::Lean),
            Detail::Timed => fast::measurement(bytes, Keep::Timed),
        };
        if let Some(record) = by_hand {
            return Ok(record);
        }
        match self {
            Detail::Full => store::parse_record(bytes),
            Detail::Lean | Detail::Located => match serde_json::from_slice::<LeanRecord>(bytes) {
                Ok(LeanRecord(r)) if r.schema_version() == SCHEMA_VERSION => Ok(r),
                _ => store::parse_record(bytes).map(Record::lean),
            },
            Detail::Timed => match serde_json::from_slice::<TimedRecord>(bytes) {
                Ok(TimedRecord(r)) if r.schema_version() == SCHEMA_VERSION => Ok(r),
                _ => store::parse_record(bytes).map(Record::timed),
            },
        }
    }

    /// A record read otherwise (converted from another format), to this detail.
    pub(super) fn keep(self, record: Record) -> Record {
        match self {
            // Not located: whole, so a tie among them is decided on whole records (`combine`).
            Detail::Full | Detail::Located | Detail::Timed => record,
            Detail::Lean => record.lean(),
        }
    }

    /// Whether records read this way are located.
    pub(super) fn locates(self) -> bool {
        matches!(self, Detail::Located | Detail::Timed)
    }

    /// What a reading that cannot locate its records keeps: `Located` ones are read whole.
    pub(super) fn unlocated(self) -> Detail {
        if self.locates() { Detail::Full } else { self }
    }
}

/// The token offsets of a measurement read located (`Detail::Located` drops them), from its text
/// read back (`text::read_each`) into `offsets`, exactly as `Detail::Timed` would have kept them.
pub fn token_offsets_read_back(line: &[u8], offsets: &mut Vec<f64>) -> io::Result<()> {
    if fast::token_offsets_ms(line, offsets).is_some() {
        return Ok(());
    }
    offsets.clear();
    match Detail::Timed.parse(line) {
        Ok(Record::Measurement(m)) => offsets.extend_from_slice(&m.token_offsets_ms),
        Ok(_) => {}
        Err(e) => {
            return Err(io::Error::other(format!("a record that read before does not read back: {e:?}")));
        }
    }
    Ok(())
}
