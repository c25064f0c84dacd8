//! What a reading verb keeps of each record it reads located: a digest of the few fields that place
//! the record and decide between its slot's candidates (its slot, run, start, whether it passed),
//! with what the verb itself reads of it (`Extract`: nothing for merge, which copies the text; the
//! samples for report), a few hundred bytes instead of the lean record's 1.3 KB. The text, which a
//! located record keeps beside it, stays its content. A record not read located (converted from
//! another format, or not one line) is kept whole: its content is its serialization. Each is made
//! as the record is read, so a million records are never held whole.

use std::io;

use super::detail::{Detail, FromRecord};
use super::packed::Packed;
use super::slotted::{RECORD_TYPES, Slotted};
use ttft_model::record::fast::Floats;
use ttft_model::record::{CellKey, Record};

/// What a verb reads of a record beside its digest, taken as the record is read.
pub trait Extract: Sized + Send {
    /// The record's floats it reads (`FromRecord::CONVERTS`; a digest reads none).
    const CONVERTS: Floats = Floats::ALL;

    fn extract(record: &Record) -> Self;
}

/// Nothing: merge writes a located record from its text.
impl Extract for () {
    const CONVERTS: Floats = Floats::NONE;

    fn extract(_: &Record) {}
}

/// A record as a reading verb keeps it.
#[derive(Debug)]
pub enum Kept<V> {
    /// Read located: its digest and what the verb reads of it; its text lies beside it.
    Located(Digest, V),
    Whole(Record),
}

/// What places a located record and decides between its slot's candidates (`combine`).
#[derive(Debug)]
pub struct Digest {
    /// Its record type's place in `RECORD_TYPES`.
    type_rank: u8,
    cell: CellKey,
    request_index: u32,
    /// Its group id (empty when none), run id and start time.
    names: Packed<3>,
    good: bool,
    stand_in: bool,
}

impl Digest {
    fn of(record: Record) -> Digest {
        let (type_rank, request_index) = (record.type_rank(), Slotted::request_index(&record));
        let (good, stand_in) = (record.is_good(), record.is_batch_stand_in());
        let (cell, group_id, run_id, started_at) = match record {
            Record::Measurement(m) => {
                let m = *m;
                (m.cell, m.group_id.unwrap_or_default(), m.run_id, m.started_at)
            }
            Record::Group(g) => {
                let g = *g;
                (g.cell, g.group_id, g.run_id, g.started_at)
            }
            Record::Staggered(s) => {
                let s = *s;
                (s.cell, String::new(), s.run_id, s.started_at)
            }
        };
        Digest {
            type_rank,
            cell,
            request_index,
            names: Packed::new([&group_id, &run_id, &started_at]),
            good,
            stand_in,
        }
    }
}

impl<V: Extract> FromRecord for Kept<V> {
    const CONVERTS: Floats = V::CONVERTS;

    fn from_record(record: Record, detail: Detail) -> Kept<V> {
        if !detail.locates() {
            return Kept::Whole(record);
        }
        let extracted = V::extract(&record);
        Kept::Located(Digest::of(record), extracted)
    }
}

impl<V> Slotted for Kept<V> {
    fn record_type(&self) -> &'static str {
        match self {
            Kept::Located(d, _) => RECORD_TYPES[usize::from(d.type_rank)],
            Kept::Whole(r) => r.record_type(),
        }
    }

    fn type_rank(&self) -> u8 {
        match self {
            Kept::Located(d, _) => d.type_rank,
            Kept::Whole(r) => r.type_rank(),
        }
    }

    fn cell(&self) -> &CellKey {
        match self {
            Kept::Located(d, _) => &d.cell,
            Kept::Whole(r) => r.cell(),
        }
    }

    fn request_index(&self) -> u32 {
        match self {
            Kept::Located(d, _) => d.request_index,
            Kept::Whole(r) => Slotted::request_index(r),
        }
    }

    fn group_id(&self) -> &str {
        match self {
            Kept::Located(d, _) => d.names.get(0),
            Kept::Whole(r) => Slotted::group_id(r),
        }
    }

    fn run_id(&self) -> &str {
        match self {
            Kept::Located(d, _) => d.names.get(1),
            Kept::Whole(r) => r.run_id(),
        }
    }

    fn started_at(&self) -> &str {
        match self {
            Kept::Located(d, _) => d.names.get(2),
            Kept::Whole(r) => r.started_at(),
        }
    }

    fn is_good(&self) -> bool {
        match self {
            Kept::Located(d, _) => d.good,
            Kept::Whole(r) => r.is_good(),
        }
    }

    fn is_batch_stand_in(&self) -> bool {
        match self {
            Kept::Located(d, _) => d.stand_in,
            Kept::Whole(r) => r.is_batch_stand_in(),
        }
    }

    fn write_json(&self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Kept::Located(d, _) => Err(io::Error::other(format!(
                "{} {}: its text was not kept to be copied (a record read located is written from its text)",
                RECORD_TYPES[usize::from(d.type_rank)],
                d.cell
            ))),
            Kept::Whole(r) => r.write_json(out),
        }
    }
}
