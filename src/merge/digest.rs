//! What merge keeps of each record while it reads: of a record whose text it will copy (read
//! located), a digest of the few fields that place it and decide between candidates (its slot, run,
//! start, whether it passed), a few hundred bytes instead of the record's thousand; any other
//! record (converted from another format, or not one line) whole, since merge serializes it.
//! The digest is made as each record is read, so a million records are never held whole.

use std::io;

use ttft_model::record::{CellKey, Record};
use ttft_results::results::slotted::{RECORD_TYPES, Slotted};
use ttft_results::results::sources::{Detail, FromRecord};

/// A record as merge keeps it.
#[derive(Debug)]
pub enum Digested {
    /// Read located: its text, beside it in the source, is what merge writes.
    Located(Digest),
    Whole(Record),
}

/// What places a located record and decides between its slot's candidates (`combine`).
#[derive(Debug)]
pub struct Digest {
    /// Its record type's place in `RECORD_TYPES`.
    type_rank: u8,
    cell: CellKey,
    request_index: u32,
    group_id: Box<str>,
    run_id: Box<str>,
    started_at: Box<str>,
    good: bool,
    stand_in: bool,
}

impl Digest {
    fn of(record: Record) -> Digest {
        let type_rank = Slotted::type_rank(&record);
        let (request_index, good) = (Slotted::request_index(&record), record.is_good());
        let stand_in = record.is_batch_stand_in();
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
            group_id: group_id.into_boxed_str(),
            run_id: run_id.into_boxed_str(),
            started_at: started_at.into_boxed_str(),
            good,
            stand_in,
        }
    }
}

impl FromRecord for Digested {
    fn from_record(record: Record, detail: Detail) -> Digested {
        if detail.locates() { Digested::Located(Digest::of(record)) } else { Digested::Whole(record) }
    }
}

impl Slotted for Digested {
    fn record_type(&self) -> &'static str {
        match self {
            Digested::Located(d) => RECORD_TYPES[usize::from(d.type_rank)],
            Digested::Whole(r) => r.record_type(),
        }
    }

    fn type_rank(&self) -> u8 {
        match self {
            Digested::Located(d) => d.type_rank,
            Digested::Whole(r) => Slotted::type_rank(r),
        }
    }

    fn cell(&self) -> &CellKey {
        match self {
            Digested::Located(d) => &d.cell,
            Digested::Whole(r) => r.cell(),
        }
    }

    fn request_index(&self) -> u32 {
        match self {
            Digested::Located(d) => d.request_index,
            Digested::Whole(r) => Slotted::request_index(r),
        }
    }

    fn group_id(&self) -> &str {
        match self {
            Digested::Located(d) => &d.group_id,
            Digested::Whole(r) => Slotted::group_id(r),
        }
    }

    fn run_id(&self) -> &str {
        match self {
            Digested::Located(d) => &d.run_id,
            Digested::Whole(r) => r.run_id(),
        }
    }

    fn started_at(&self) -> &str {
        match self {
            Digested::Located(d) => &d.started_at,
            Digested::Whole(r) => r.started_at(),
        }
    }

    fn is_good(&self) -> bool {
        match self {
            Digested::Located(d) => d.good,
            Digested::Whole(r) => r.is_good(),
        }
    }

    fn is_batch_stand_in(&self) -> bool {
        match self {
            Digested::Located(d) => d.stand_in,
            Digested::Whole(r) => r.is_batch_stand_in(),
        }
    }

    fn write_json(&self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Digested::Located(d) => Err(io::Error::other(format!(
                "{} {}: its text was not kept to be copied (a record read located is written from its text)",
                RECORD_TYPES[usize::from(d.type_rank)],
                d.cell
            ))),
            Digested::Whole(r) => r.write_json(out),
        }
    }
}
