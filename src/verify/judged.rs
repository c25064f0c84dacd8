//! What verify keeps of each record: made as the record is read (`table::judge`, in the reading
//! threads), so a million records are never held whole. The rules that need nothing but the record
//! have run by then and left their findings; of a measurement only what the other rules read is
//! kept (`Measured`: its place, times, cache evidence's verdicts, and what the ceiling rules need,
//! which wait for the input's hardware and model: its metadata is known only once it is read, a
//! document's members coming in any order and a run directory's run.json being its own file).
//! Group and staggered records, one per batch or pair, are kept whole.

use std::io;

use super::finding::Finding;
use ttft_model::record::{CellKey, Measurement, PageCache, PhysicsRecord, Record};
use ttft_results::physics::Rates;
use ttft_results::results::packed::{OptF64, Packed};
use ttft_results::results::slotted::{RECORD_TYPES, Slotted};

/// One record as verify keeps it.
pub struct Judged {
    /// What the rules that read the record alone found, their input not named yet (`Finding::file`
    /// is filled where the input is judged).
    pub found: Box<[Finding]>,
    pub kind: Kind,
}

#[allow(clippy::large_enum_variant)] // nearly every record is a measurement: a box would be one more allocation each
pub enum Kind {
    Measured(Measured),
    /// A group or staggered record.
    Other(Record),
}

/// What verify's cell, cross-input and ceiling rules read of a measurement: about 200 bytes and
/// two allocations (its model's name, its other names `Packed`), its optional numbers packed
/// (`OptF64`, `Counts`).
pub struct Measured {
    pub cell: CellKey,
    /// Its run id, group id (empty when none), start time and nonce.
    names: Packed<4>,
    counts: Counts,
    ttft_ms: OptF64,
    decode_tps: OptF64,
    computed_prefill_tps: OptF64,
    /// The physics the record stored: decode ceiling and fraction, prefill ceiling and fraction.
    stored: [OptF64; 4],
    /// What few records carry: an import note, a burst, stored verdicts that disagree.
    rare: Option<Box<Rare>>,
    pub request_index: u32,
    pub page_cache: Option<PageCache>,
    /// Warm with cache evidence: whether it shows the cache served the prompt.
    warm_served: Option<bool>,
    /// The request failed (`error` set): no numbers to judge.
    pub failed: bool,
    pub good: bool,
    /// An imported origin batch's stand-in (`slotted::is_aggregate_stand_in`).
    pub stand_in: bool,
    /// Read lean (arrival times dropped), with counts that hint at a burst its flags do not name:
    /// read again whole from its text to tell (`records::burst_unflagged`).
    pub burst_suspect: bool,
}

/// A measurement's optional token counts, packed: input, prompt tokens evaluated (its cache
/// evidence's), warm cached (its evidence's, where it shows the cache served), computed
/// (`physics::computed_prompt_tokens`).
struct Counts {
    values: [u64; 4],
    /// Bit i: `values[i]` is there.
    present: u8,
}

impl Counts {
    fn new(counts: [Option<u64>; 4]) -> Counts {
        let mut packed = Counts { values: [0; 4], present: 0 };
        for (i, count) in counts.into_iter().enumerate() {
            if let Some(n) = count {
                packed.values[i] = n;
                packed.present |= 1 << i;
            }
        }
        packed
    }

    fn get(&self, i: usize) -> Option<u64> {
        (self.present & (1 << i) != 0).then_some(self.values[i])
    }
}

/// What few measurements carry, boxed so that the rest carry 8 bytes for it.
#[derive(Default)]
pub struct Rare {
    /// The import note of a record imported from another tool (`import::imported_reason`).
    pub imported: Option<Box<str>>,
    /// Read whole, its arrivals show a burst its flags do not name: the sweep's reason.
    pub burst_unflagged: Option<Box<str>>,
    /// Flagged `stream_burst` (and not failed): that finding's message up to the ceiling's part.
    pub burst_note: Option<Box<str>>,
    /// The stored verdicts its own numbers contradict (`stored_verdict_disagrees`), each said; the
    /// ceilings the input's physics give now are judged beside them.
    pub verdicts_differ: Vec<String>,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.imported.is_none()
            && self.burst_unflagged.is_none()
            && self.burst_note.is_none()
            && self.verdicts_differ.is_empty()
    }
}

/// What a measurement as read gives the fields of `Measured` that are not its own.
pub struct Made {
    pub rates: Rates,
    pub stored: Option<PhysicsRecord>,
    pub warm_served: Option<(bool, Option<u64>)>,
    pub failed: bool,
    pub good: bool,
    pub stand_in: bool,
    pub burst_suspect: bool,
    pub rare: Rare,
}

impl Measured {
    /// `m`'s own fields (consumed) with what was made of it.
    pub fn new(m: Measurement, made: Made) -> Measured {
        let stored = made.stored.unwrap_or_default();
        let group_id = m.group_id.as_deref().unwrap_or_default();
        Measured {
            names: Packed::new([&m.run_id, group_id, &m.started_at, &m.nonce]),
            counts: Counts::new([
                m.input_tokens,
                m.cache_evidence.as_ref().and_then(|e| e.prompt_evaluated_tokens),
                made.warm_served.and_then(|(_, c)| c),
                made.rates.computed_prompt_tokens,
            ]),
            ttft_ms: OptF64::of(m.ttft_ms),
            decode_tps: OptF64::of(made.rates.decode_tps),
            computed_prefill_tps: OptF64::of(made.rates.computed_prefill_tps),
            stored: [
                stored.decode_ceiling_tps,
                stored.decode_fraction,
                stored.prefill_ceiling_tps,
                stored.prefill_fraction,
            ]
            .map(OptF64::of),
            rare: (!made.rare.is_empty()).then(|| Box::new(made.rare)),
            request_index: m.request_index,
            page_cache: m.page_cache,
            warm_served: made.warm_served.map(|(served, _)| served),
            failed: made.failed,
            good: made.good,
            stand_in: made.stand_in,
            burst_suspect: made.burst_suspect,
            cell: m.cell,
        }
    }

    pub fn run_id(&self) -> &str {
        self.names.get(0)
    }

    /// Empty when the record names none.
    pub fn group_id(&self) -> &str {
        self.names.get(1)
    }

    pub fn started_at(&self) -> &str {
        self.names.get(2)
    }

    pub fn nonce(&self) -> &str {
        self.names.get(3)
    }

    pub fn input_tokens(&self) -> Option<u64> {
        self.counts.get(0)
    }

    /// The cache evidence's count of prompt tokens the server computed.
    pub fn prompt_evaluated_tokens(&self) -> Option<u64> {
        self.counts.get(1)
    }

    pub fn ttft_ms(&self) -> Option<f64> {
        self.ttft_ms.get()
    }

    pub fn decode_tps(&self) -> Option<f64> {
        self.decode_tps.get()
    }

    /// What the ceilings depend on (`physics::Rates::of` of the record).
    pub fn rates(&self) -> Rates {
        Rates {
            context_tokens: Rates::context_of(self.input_tokens(), &self.cell),
            batch_size: self.cell.batch_size,
            computed_prompt_tokens: self.counts.get(3),
            decode_tps: self.decode_tps.get(),
            computed_prefill_tps: self.computed_prefill_tps.get(),
        }
    }

    /// The physics the record stored, as it stored them (none stored reads as all none: every
    /// rule reads each pair only where both are there).
    pub fn stored(&self) -> PhysicsRecord {
        let [decode_ceiling_tps, decode_fraction, prefill_ceiling_tps, prefill_fraction] =
            self.stored.map(OptF64::get);
        PhysicsRecord { decode_ceiling_tps, decode_fraction, prefill_ceiling_tps, prefill_fraction }
    }

    /// Warm with cache evidence: whether it shows the cache served the prompt, and the prompt
    /// tokens it says were served.
    pub fn warm_served(&self) -> Option<(bool, Option<u64>)> {
        self.warm_served.map(|served| (served, self.counts.get(2)))
    }

    pub fn rare(&self) -> &Rare {
        static NONE: Rare =
            Rare { imported: None, burst_unflagged: None, burst_note: None, verdicts_differ: Vec::new() };
        self.rare.as_deref().unwrap_or(&NONE)
    }

    /// Judged by the ceiling rules: not failed, not an imported origin batch's stand-in.
    pub fn judged(&self) -> bool {
        !self.failed && !self.stand_in
    }
}

impl Judged {
    pub(crate) fn measured(&self) -> Option<&Measured> {
        match &self.kind {
            Kind::Measured(m) => Some(m),
            Kind::Other(_) => None,
        }
    }

    pub(crate) fn other(&self) -> Option<&Record> {
        match &self.kind {
            Kind::Other(r) => Some(r),
            Kind::Measured(_) => None,
        }
    }

    pub(crate) fn run_id(&self) -> &str {
        match &self.kind {
            Kind::Measured(m) => m.run_id(),
            Kind::Other(r) => r.run_id(),
        }
    }
}

impl Slotted for Judged {
    fn record_type(&self) -> &'static str {
        match &self.kind {
            Kind::Measured(_) => RECORD_TYPES[1],
            Kind::Other(r) => r.record_type(),
        }
    }

    fn cell(&self) -> &CellKey {
        match &self.kind {
            Kind::Measured(m) => &m.cell,
            Kind::Other(r) => r.cell(),
        }
    }

    fn request_index(&self) -> u32 {
        match &self.kind {
            Kind::Measured(m) => m.request_index,
            Kind::Other(r) => Slotted::request_index(r),
        }
    }

    fn group_id(&self) -> &str {
        match &self.kind {
            Kind::Measured(m) => m.group_id(),
            Kind::Other(r) => Slotted::group_id(r),
        }
    }

    fn run_id(&self) -> &str {
        Judged::run_id(self)
    }

    fn started_at(&self) -> &str {
        match &self.kind {
            Kind::Measured(m) => m.started_at(),
            Kind::Other(r) => r.started_at(),
        }
    }

    fn is_good(&self) -> bool {
        match &self.kind {
            Kind::Measured(m) => m.good,
            Kind::Other(r) => r.is_good(),
        }
    }

    fn is_batch_stand_in(&self) -> bool {
        match &self.kind {
            Kind::Measured(m) => m.stand_in,
            Kind::Other(r) => r.is_batch_stand_in(),
        }
    }

    /// Verify writes no records: a measurement kept here has no text to give.
    fn write_json(&self, out: &mut Vec<u8>) -> io::Result<()> {
        match &self.kind {
            Kind::Other(r) => r.write_json(out),
            Kind::Measured(_) => {
                Err(io::Error::other("verify keeps what its rules read of a measurement, not the record"))
            }
        }
    }
}
