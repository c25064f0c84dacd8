//! What the provenance audit keeps of each record, a million on each side: keyed hashes of what
//! places it (its unit, its batch, its start) and of the numbers a published copy must keep, and
//! the record itself only where no text of it was located to read again. About a hundred bytes a
//! record, where its lean form is a kilobyte: a published input and its sources fit side by side.
//!
//! A hash only ever finds a copy (`Claims::traced_by_hash`), never rules one out: units whose
//! hashes agree hold the same numbers, but for a chance of about one in 2^128 a comparison (keyed
//! SipHash-1-3, 128 bits; the keys are drawn afresh each run, so no file can be made to collide).
//! Every unit the hashes do not trace is read again and compared number by number, as the audit
//! always compared.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::ops::Range;
use std::sync::OnceLock;

use siphasher::sip128::{Hasher128, SipHasher13};

use super::numbers::{Value, each_value};
use ttft_model::record::Record;
use ttft_results::results::run_meta::SourceMeta;
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{self, Detail, FromRecord, Source};
use ttft_results::results::text::Texts;

/// A keyed 128-bit hash.
pub(super) type Hash128 = u128;

fn hasher() -> SipHasher13 {
    static KEYS: OnceLock<(u64, u64)> = OnceLock::new();
    let (k0, k1) = *KEYS.get_or_init(|| {
        let random = RandomState::new();
        (random.hash_one(0u8), random.hash_one(1u8))
    });
    SipHasher13::new_with_keys(k0, k1)
}

fn hash128(value: impl Hash) -> Hash128 {
    let mut h = hasher();
    value.hash(&mut h);
    h.finish128().as_u128()
}

/// A number by its bits: equal hashes mean equal bits, which the exact comparison finds the
/// same (the converse need not hold: -0 is 0, and a rounded copy is its source).
fn feed(value: Value, h: &mut impl Hasher) {
    match value {
        Value::Real(v) => (0u8, v.map(f64::to_bits)).hash(h),
        Value::Count(v) => (1u8, v).hash(h),
        Value::Flag(b) => (2u8, b).hash(h),
    }
}

/// What the audit keeps of one record.
pub(crate) struct Held {
    /// Its unit's key: its record type, cell and request index, or, in a batch, its cell.
    unit: Hash128,
    /// Its batch as `batch::batch_records` tells batches apart (its group id, or, without one,
    /// its run and cell); 0 outside a batch.
    batch: Hash128,
    start: Hash128,
    /// Its record type and the numbers a published copy must keep.
    numbers: Hash128,
    request_index: u32,
    is_group: bool,
    in_batch: bool,
    /// The record, where it was not read located: it has no text to read again.
    pub(crate) whole: Option<Record>,
}

/// A published record: one not located is kept as read, to be judged as verify judges it.
impl FromRecord for Held {
    fn from_record(record: Record, detail: Detail) -> Held {
        Held::of(record, detail, |r| r)
    }
}

/// A claimed source's record, which is only ever compared: one not located is kept lean (its
/// compared numbers are all a lean record's), not whole (a claimed pipe of a million records
/// would be held whole otherwise).
pub(crate) struct HeldLean(pub(super) Held);

impl FromRecord for HeldLean {
    fn from_record(record: Record, detail: Detail) -> HeldLean {
        HeldLean(Held::of(record, detail, Record::lean))
    }
}

impl Held {
    /// `record`'s hashes, and `keep(record)` where it was not read located.
    fn of(record: Record, detail: Detail, keep: fn(Record) -> Record) -> Held {
        let (cell, request_index) = (record.cell(), Slotted::request_index(&record));
        let in_batch = Slotted::in_batch(&record);
        let unit = match in_batch {
            true => hash128((0u8, cell)),
            false => hash128((1u8, record.record_type(), cell, request_index)),
        };
        let batch = match (in_batch, Slotted::group_id(&record)) {
            (false, _) => 0,
            (true, "") => hash128((0u8, record.run_id(), cell)),
            (true, group_id) => hash128((1u8, group_id)),
        };
        let mut h = hasher();
        h.write_u8(record.type_rank());
        each_value(&record, |v| feed(v, &mut h));
        Held {
            unit,
            batch,
            start: hash128(record.started_at()),
            numbers: h.finish128().as_u128(),
            request_index,
            is_group: record.record_type() == "group",
            in_batch,
            whole: (!detail.locates()).then(|| keep(record)),
        }
    }
}

/// One unit as hashes (a record, or a batch's group record and members, as the exact audit's
/// `units` makes them, in the same order), and which of its source's records it is.
#[derive(Clone, Copy)]
pub(super) struct HeldUnit {
    pub(super) key: Hash128,
    pub(super) start: Hash128,
    /// Its record's numbers; a batch's: whether it has a group record, the last one's numbers,
    /// each request's last member's numbers.
    numbers: Hash128,
    records: (u32, u32),
}

/// Every unit of one source's held records.
pub(super) struct Units {
    pub(super) units: Vec<HeldUnit>,
    /// Each unit's record indices, end to end (`HeldUnit::records` is a range of it).
    indices: Vec<u32>,
}

impl Units {
    /// The units of `held`: its batches in order of first appearance, then every record outside
    /// a batch in its order.
    pub(super) fn of(held: &[Held]) -> Units {
        let mut at: HashMap<Hash128, usize> = HashMap::new();
        let mut batches: Vec<Vec<u32>> = Vec::new();
        for (i, h) in held.iter().enumerate().filter(|(_, h)| h.in_batch) {
            let slot = *at.entry(h.batch).or_insert_with(|| {
                batches.push(Vec::new());
                batches.len() - 1
            });
            batches[slot].push(i as u32);
        }
        let mut units = Units { units: Vec::new(), indices: Vec::new() };
        for batch in batches {
            let records = || batch.iter().map(|&i| &held[i as usize]);
            let group = records().rev().find(|h| h.is_group);
            let started = group.or_else(|| records().find(|h| !h.is_group));
            let members: BTreeMap<u32, Hash128> =
                records().filter(|h| !h.is_group).map(|h| (h.request_index, h.numbers)).collect();
            let numbers = hash128((group.map(|g| g.numbers), members));
            let start = started.map_or_else(|| hash128(""), |h| h.start);
            units.push(held[batch[0] as usize].unit, start, numbers, &batch);
        }
        for (i, h) in held.iter().enumerate().filter(|(_, h)| !h.in_batch) {
            units.push(h.unit, h.start, h.numbers, &[i as u32]);
        }
        units
    }

    fn push(&mut self, key: Hash128, start: Hash128, numbers: Hash128, records: &[u32]) {
        let from = self.indices.len() as u32;
        self.indices.extend_from_slice(records);
        self.units.push(HeldUnit { key, start, numbers, records: (from, records.len() as u32) });
    }

    /// The indices of `unit`'s records in its source.
    pub(super) fn records(&self, unit: &HeldUnit) -> &[u32] {
        unit_records(&self.indices, unit)
    }
}

fn unit_records<'a>(indices: &'a [u32], unit: &HeldUnit) -> &'a [u32] {
    let (from, len) = unit.records;
    let range: Range<usize> = from as usize..(from + len) as usize;
    &indices[range]
}

/// A claimed source as the audit names it.
pub(crate) struct Claimed {
    pub(crate) path: String,
    pub(crate) kind: &'static str,
    pub(crate) records: usize,
    pub(super) run_meta: Vec<SourceMeta>,
}

/// A claimed unit: which source, and the unit.
pub(super) struct Candidate {
    pub(super) source: usize,
    pub(super) unit: HeldUnit,
}

/// What the audit keeps of a claimed source to read its units' records again: where their texts
/// lie, the records themselves where none was located, and each unit's record indices.
pub(super) struct Rereadable {
    pub(super) name: String,
    pub(super) texts: Option<Texts>,
    pub(super) whole: Vec<Option<Record>>,
    indices: Vec<u32>,
}

impl Rereadable {
    /// The indices of `unit`'s records in this source.
    pub(super) fn records(&self, unit: &HeldUnit) -> &[u32] {
        unit_records(&self.indices, unit)
    }
}

/// The `--sources` of a verify, as the audit reads them: each source's name and metadata, what
/// reads its records again, and every unit sorted by key (stable: a key's candidates in source
/// order, then in their source's order).
#[derive(Default)]
pub(crate) struct Claims {
    pub(crate) sources: Vec<Claimed>,
    pub(super) rereadable: Vec<Rereadable>,
    index: Vec<Candidate>,
}

impl Claims {
    /// Takes what the audit compares of `source`, which is let go.
    pub(crate) fn add(&mut self, source: Source<HeldLean>) {
        let at = self.sources.len();
        let held: Vec<Held> = source.records.into_iter().map(|HeldLean(h)| h).collect();
        let units = Units::of(&held);
        self.index.extend(units.units.iter().map(|&unit| Candidate { source: at, unit }));
        self.index.sort_by_key(|c| c.unit.key);
        let path = source.path.display().to_string();
        let (kind, records) = (source.kind.as_str(), held.len());
        self.rereadable.push(Rereadable {
            name: path.clone(),
            texts: source.texts,
            whole: held.into_iter().map(|h| h.whole).collect(),
            indices: units.indices,
        });
        self.sources.push(Claimed { path, kind, records, run_meta: source.run_meta });
    }

    /// Lets go of the sources' records and units once every input is audited (their names and
    /// metadata stay, for the report).
    pub(crate) fn free_held(&mut self) {
        sources::free((std::mem::take(&mut self.rereadable), std::mem::take(&mut self.index)));
    }

    /// Every claimed source's candidates for a unit of `key`, in order (hashes agreeing: a
    /// candidate's exact key is compared when it is read again).
    pub(super) fn candidates(&self, key: Hash128) -> &[Candidate] {
        let from = self.index.partition_point(|c| c.unit.key < key);
        let to = from + self.index[from..].iter().take_while(|c| c.unit.key == key).count();
        &self.index[from..to]
    }

    /// The source `unit` traces to, where its hashes tell: the first candidate that started when
    /// it did holds its numbers exactly. The exact audit traces it there too: it sorts the
    /// candidates by differences, then by a start of their own, then by source, keeping their
    /// order otherwise, and takes the first without differences or with its start; no candidate
    /// before this one has its start. None: the hashes cannot tell; it is compared number by
    /// number.
    pub(super) fn traced_by_hash(&self, unit: &HeldUnit) -> Option<usize> {
        let first = self.candidates(unit.key).iter().find(|c| c.unit.start == unit.start)?;
        (first.unit.numbers == unit.numbers).then_some(first.source)
    }
}
