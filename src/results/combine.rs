//! De-duplication: one winner per slot, and an account of every loser.
//!
//! A slot is (record type, cell, request index) — except concurrent cells, where the whole batch
//! (its group record and its requests) is one slot, so a merge never pairs request 0 of one run with
//! request 1 of another. Among candidates: a complete batch beats a partial one whatever their ages
//! (a sweep killed mid-append leaves members without their group record: see `batch`), then passing
//! (quality_ok, error-free) beats failing, then the most recent `started_at`, then (only to stay
//! deterministic) the smallest serialized content.

use std::cell::OnceCell;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::SystemTime;

use super::batch::batches;
use super::canonical::{Candidate, Loser, Provenance, Replacement};
use super::load::Source;
use crate::record::{CellKey, Record, Scenario};

pub struct Combined {
    /// Sorted by (record type, cell, request index).
    pub records: Vec<Record>,
    pub provenance: Provenance,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Single { record_type: &'static str, cell: CellKey, request_index: u32 },
    Batch(CellKey),
}

/// One candidate for a slot: a single record, or a whole batch from one source and run.
struct Bundle {
    /// Index into the sources' paths.
    source: usize,
    /// What a partial batch lacks ("group record missing"); empty when complete (and for singles).
    gaps: Vec<String>,
    good: bool,
    /// Serialized records: only needed to break ties and spot identical copies, so made on demand.
    content: OnceCell<String>,
    records: Vec<Record>,
}

impl Bundle {
    fn new(source: usize, mut records: Vec<Record>) -> Bundle {
        records.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
        Bundle {
            source,
            gaps: partial_batch_gaps(&records),
            good: records.iter().all(Record::is_good),
            content: OnceCell::new(),
            records,
        }
    }

    fn run_id(&self) -> &str {
        self.records.first().map_or("", Record::run_id)
    }

    fn started_at(&self) -> &str {
        self.records.iter().map(Record::started_at).max().unwrap_or_default()
    }

    fn content(&self) -> &str {
        self.content.get_or_init(|| {
            self.records.iter().map(|r| serde_json::to_string(r).unwrap_or_default()).collect()
        })
    }

    fn candidate(&self, paths: &[String]) -> Candidate {
        Candidate {
            source: paths[self.source].clone(),
            run_id: self.run_id().to_string(),
            started_at: self.started_at().to_string(),
            good: self.good,
        }
    }
}

pub fn request_index(record: &Record) -> u32 {
    match record {
        Record::Measurement(m) => m.request_index,
        _ => 0,
    }
}

/// Sort key of a record in every output.
pub fn record_order(r: &Record) -> (&'static str, &CellKey, u32) {
    (r.record_type(), r.cell(), request_index(r))
}

fn slot_of(record: &Record) -> (Slot, &str) {
    let cell = record.cell().clone();
    if cell.scenario == Scenario::Concurrent && !matches!(record, Record::Staggered(_)) {
        let group = match record {
            Record::Measurement(m) => m.group_id.as_deref().unwrap_or_default(),
            Record::Group(g) => g.group_id.as_str(),
            Record::Staggered(_) => "",
        };
        return (Slot::Batch(cell), group);
    }
    let slot = Slot::Single { record_type: record.record_type(), cell, request_index: request_index(record) };
    (slot, "")
}

fn label(slot: &Slot) -> String {
    let (kind, c, idx) = match slot {
        Slot::Single { record_type, cell, request_index } => {
            (*record_type, cell, format!(" #{request_index}"))
        }
        Slot::Batch(cell) => ("batch", cell, String::new()),
    };
    format!(
        "{kind} {} {}/{} {} {} b{} r{}{idx}",
        c.model,
        c.scenario.as_str(),
        c.cache_state.as_str(),
        c.mode.as_str(),
        c.context_tokens,
        c.batch_size,
        c.run
    )
}

/// RFC 3339 timestamps compared as instants where they parse, as text otherwise.
fn instant(ts: &str) -> (Option<SystemTime>, &str) {
    (humantime::parse_rfc3339_weak(ts).ok(), ts)
}

/// Ordering where `Less` means "a is preferred".
fn prefer(paths: &[String], a: &Bundle, b: &Bundle) -> Ordering {
    b.gaps
        .is_empty()
        .cmp(&a.gaps.is_empty())
        .then_with(|| b.good.cmp(&a.good))
        .then_with(|| instant(b.started_at()).cmp(&instant(a.started_at())))
        .then_with(|| a.content().cmp(b.content()))
        .then_with(|| paths[a.source].cmp(&paths[b.source]))
}

fn reason(kept: &Bundle, loser: &Bundle) -> String {
    if kept.content() == loser.content() {
        "identical copy".into()
    } else if kept.gaps.is_empty() && !loser.gaps.is_empty() {
        format!("partial batch: {}; a complete batch was kept", loser.gaps.join(", "))
    } else if kept.good && !loser.good {
        "failed (quality or error); a passing record was kept".into()
    } else if instant(loser.started_at()) < instant(kept.started_at()) {
        format!("older (started {} before {})", loser.started_at(), kept.started_at())
    } else {
        "tie on quality and start time; kept the first by content".into()
    }
}

/// One record per slot from `sources` (consumed: records are moved, never copied).
pub fn combine(mut sources: Vec<Source>) -> Combined {
    sources.sort_by_key(|s| s.path.display().to_string());
    let paths: Vec<String> = sources.iter().map(|s| s.path.display().to_string()).collect();
    let mut slots: BTreeMap<Slot, Vec<Bundle>> = BTreeMap::new();
    for (source, s) in sources.into_iter().enumerate() {
        // Batch members from one source and run travel together; everything else is its own bundle.
        let mut batches: BTreeMap<(Slot, String, String), Vec<Record>> = BTreeMap::new();
        for record in s.records {
            match slot_of(&record) {
                (slot @ Slot::Batch(_), group) => {
                    let key = (slot, record.run_id().to_string(), group.to_string());
                    batches.entry(key).or_default().push(record);
                }
                (slot, _) => slots.entry(slot).or_default().push(Bundle::new(source, vec![record])),
            }
        }
        for ((slot, _, _), records) in batches {
            slots.entry(slot).or_default().push(Bundle::new(source, records));
        }
    }
    let mut records = Vec::new();
    let mut provenance = Provenance::default();
    for (slot, mut bundles) in slots {
        bundles.sort_by(|a, b| prefer(&paths, a, b));
        let mut bundles = bundles.into_iter();
        let Some(kept) = bundles.next() else { continue };
        let losers: Vec<Loser> =
            bundles.map(|l| Loser { candidate: l.candidate(&paths), reason: reason(&kept, &l) }).collect();
        *provenance.kept_by_source.entry(paths[kept.source].clone()).or_default() += kept.records.len();
        if !losers.is_empty() {
            provenance.replaced.push(Replacement {
                slot: label(&slot),
                kept: kept.candidate(&paths),
                beat: losers.len(),
                losers,
            });
        }
        records.extend(kept.records);
    }
    records.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
    Combined { records, provenance }
}

/// What keeps the batch among `records` from being whole (empty for a complete batch and for
/// records outside batches).
fn partial_batch_gaps(records: &[Record]) -> Vec<String> {
    let found = batches(records);
    match found.as_slice() {
        [] => Vec::new(),
        [one] if one.is_complete() => Vec::new(),
        [one] => one.gaps(),
        _ => vec![format!("{} batches in one slot", found.len())],
    }
}
