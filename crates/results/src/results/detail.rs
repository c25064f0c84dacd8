//! How much of each record a reader keeps: below every reader (a records file read in parts, a
//! JSON document, the loader that chooses between them), which all read to the detail asked.

use std::io;

use crate::store::{self, LineError};
use ttft_model::record::fast::{self, Floats, Keep};
use ttft_model::record::{LeanRecord, Record, SCHEMA_VERSION, TimedRecord};

/// How much of each record a reader keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Every field (merge writes records back).
    Full,
    /// `Record::lean`, not located: the raw samples dropped as each record streams by, so they
    /// are never all in memory at once. No verb reads so now (each reads `Located`); tests hold the
    /// readings to one another with it (`verify::lean_tests`).
    Lean,
    /// Lean, and where each record's text lies in its file (`text`): what merge reads, to copy
    /// the texts into its output, and what verify, report and compare read: a slot whose
    /// candidates tie is decided on their texts, as whole records decide it, and report reads a
    /// cell's token offsets back from them (`token_offsets_read_back`). Records that cannot be
    /// located (not read from a regular file in parts, or not one line each) are read `Full`.
    Located,
}

/// What a reader keeps of each record it reads: the record, or a verb's compact form of it
/// (`digest::Kept`), made as each record is read so the records themselves are never all held.
pub trait FromRecord: Sized + Send {
    /// The floats what is kept of a located record reads. A measurement read by hand has only
    /// those converted, every other float checked (`Keep::Converting`): merge's digest (where a
    /// record goes and what decides its slot) reads none, report's samples a few.
    const CONVERTS: Floats = Floats::ALL;

    /// `record`, read to `detail`: located (its text's place kept beside it) when
    /// `detail.locates()`, whole otherwise.
    fn from_record(record: Record, detail: Detail) -> Self;
}

impl FromRecord for Record {
    fn from_record(record: Record, _: Detail) -> Record {
        record
    }
}

impl Detail {
    /// One record's JSON text, read to this detail and kept as `T`.
    pub(super) fn parse<T: FromRecord>(self, bytes: &[u8]) -> Result<T, LineError> {
        // A located record is kept as `T` makes it, never whole: a float `T` does not read is
        // not converted.
        let keep = match T::CONVERTS {
            floats if self.locates() && floats != Floats::ALL => Keep::Converting(floats),
            _ => Keep::Lean,
        };
        self.parse_record(bytes, keep).map(|record| T::from_record(record, self))
    }

    /// One record's JSON text, read to this detail (`keep`: what a hand reading keeps); fails
    /// exactly where `store::parse_record` fails, with its error (a lean reading that fails is done
    /// again in full for the message). A measurement as bench writes it is read by hand
    /// (`record::fast`), anything else by serde.
    fn parse_record(self, bytes: &[u8], keep: Keep) -> Result<Record, LineError> {
        let by_hand = match self {
            Detail::Full => None,
            Detail::Lean | Detail::Located => fast::measurement(bytes, keep),
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
        }
    }

    /// A record read otherwise (converted from another format), to this detail, kept as `T`.
    pub(super) fn keep<T: FromRecord>(self, record: Record) -> T {
        let record = match self {
            // Not located: whole, so a tie among them is decided on whole records (`combine`).
            Detail::Full | Detail::Located => record,
            Detail::Lean => record.lean(),
        };
        T::from_record(record, self.unlocated())
    }

    /// Whether records read this way are located.
    pub fn locates(self) -> bool {
        self == Detail::Located
    }

    /// What a reading that cannot locate its records keeps: `Located` ones are read whole.
    pub(super) fn unlocated(self) -> Detail {
        if self.locates() { Detail::Full } else { self }
    }
}

/// The token offsets of a measurement read located (`Detail::Located` drops them), from its text
/// read back (`text::read_each`) into `offsets`, exactly as a timed reading (`Record::timed`) keeps
/// them: by the walk over the members before them, or where it cannot tell, by that reading.
pub fn token_offsets_read_back(line: &[u8], offsets: &mut Vec<f64>) -> io::Result<()> {
    if fast::token_offsets_ms(line, offsets).is_some() {
        return Ok(());
    }
    offsets.clear();
    let timed = fast::measurement(line, Keep::Timed)
        .or_else(|| serde_json::from_slice::<TimedRecord>(line).ok().map(|TimedRecord(r)| r));
    match timed {
        Some(Record::Measurement(m)) => offsets.extend_from_slice(&m.token_offsets_ms),
        Some(_) => {}
        None => return Err(io::Error::other("a record that read before does not read back")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{Measurement, SCHEMA_VERSION};

    /// Where the walk cannot tell a line's offsets (their key written with an escape), the timed
    /// reading gives them, the same ones.
    #[test]
    fn offsets_read_back_from_a_line_the_walk_declines_are_the_timed_readings() {
        let m = Measurement {
            schema_version: SCHEMA_VERSION,
            token_offsets_ms: vec![10.5, 31.25, 52.0],
            ..Default::default()
        };
        let line = serde_json::to_string(&Record::Measurement(Box::new(m))).unwrap();
        let escaped = line.replacen("\"token_offsets_ms\"", "\"token_offsets_m\\u0073\"", 1);
        assert_ne!(escaped, line);
        let mut offsets = vec![1.0];
        assert!(fast::token_offsets_ms(escaped.as_bytes(), &mut offsets).is_none(), "the walk declines it");
        for text in [&line, &escaped] {
            token_offsets_read_back(text.as_bytes(), &mut offsets).unwrap();
            assert_eq!(offsets, [10.5, 31.25, 52.0], "{text}");
        }
        assert!(token_offsets_read_back(b"{\"record_type\":\"measurement\"", &mut offsets).is_err());
    }
}
