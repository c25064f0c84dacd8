//! De-duplication: one winner per slot, and an account of every loser.
//!
//! A slot is (record type, cell, request index) — except concurrent cells, where the whole batch
//! (its group record and its requests) is one slot, so a merge never pairs request 0 of one run with
//! request 1 of another. Among candidates: a complete batch beats a partial one whatever their ages
//! (a sweep killed mid-append leaves members without their group record: see `batch`), then passing
//! (quality_ok, error-free) beats failing, then the most recent `started_at`, then (only to stay
//! deterministic) the smallest serialized content.

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

struct Bundle {
    source: String,
    run_id: String,
    started_at: String,
    /// What a partial batch lacks ("group record missing"); empty when complete (and for singles).
    gaps: Vec<String>,
    good: bool,
    content: String,
    records: Vec<Record>,
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

fn slot_of(record: &Record) -> (Slot, String) {
    let cell = record.cell().clone();
    if cell.scenario == Scenario::Concurrent && !matches!(record, Record::Staggered(_)) {
        let group = match record {
            Record::Measurement(m) => m.group_id.clone().unwrap_or_default(),
            Record::Group(g) => g.group_id.clone(),
            Record::Staggered(_) => String::new(),
        };
        return (Slot::Batch(cell), group);
    }
    let slot = Slot::Single { record_type: record.record_type(), cell, request_index: request_index(record) };
    (slot, String::new())
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
fn prefer(a: &Bundle, b: &Bundle) -> Ordering {
    a.gaps
        .is_empty()
        .cmp(&b.gaps.is_empty())
        .reverse()
        .then_with(|| b.good.cmp(&a.good))
        .then_with(|| instant(&b.started_at).cmp(&instant(&a.started_at)))
        .then_with(|| a.content.cmp(&b.content))
        .then_with(|| a.source.cmp(&b.source))
}

fn reason(kept: &Bundle, loser: &Bundle) -> String {
    if kept.content == loser.content {
        "identical copy".into()
    } else if kept.gaps.is_empty() && !loser.gaps.is_empty() {
        format!("partial batch: {}; a complete batch was kept", loser.gaps.join(", "))
    } else if kept.good && !loser.good {
        "failed (quality or error); a passing record was kept".into()
    } else if instant(&loser.started_at) < instant(&kept.started_at) {
        format!("older (started {} before {})", loser.started_at, kept.started_at)
    } else {
        "tie on quality and start time; kept the first by content".into()
    }
}

fn candidate(b: &Bundle) -> Candidate {
    Candidate {
        source: b.source.clone(),
        run_id: b.run_id.clone(),
        started_at: b.started_at.clone(),
        good: b.good,
    }
}

pub fn combine(sources: &[Source]) -> Combined {
    let mut order: Vec<&Source> = sources.iter().collect();
    order.sort_by_key(|s| s.path.display().to_string());
    let mut slots: BTreeMap<Slot, Vec<Bundle>> = BTreeMap::new();
    for source in order {
        let path = source.path.display().to_string();
        // Batch members from one source and run travel together; everything else is its own bundle.
        let mut batches: BTreeMap<(Slot, String, String), Vec<Record>> = BTreeMap::new();
        for record in &source.records {
            match slot_of(record) {
                (slot @ Slot::Batch(_), group) => batches
                    .entry((slot, record.run_id().to_string(), group))
                    .or_default()
                    .push(record.clone()),
                (slot, _) => slots.entry(slot).or_default().push(bundle(&path, vec![record.clone()])),
            }
        }
        for ((slot, _, _), records) in batches {
            slots.entry(slot).or_default().push(bundle(&path, records));
        }
    }
    let mut records = Vec::new();
    let mut provenance = Provenance::default();
    for (slot, mut bundles) in slots {
        bundles.sort_by(prefer);
        let mut bundles = bundles.into_iter();
        let Some(kept) = bundles.next() else { continue };
        let losers: Vec<Loser> =
            bundles.map(|l| Loser { candidate: candidate(&l), reason: reason(&kept, &l) }).collect();
        *provenance.kept_by_source.entry(kept.source.clone()).or_default() += kept.records.len();
        if !losers.is_empty() {
            provenance.replaced.push(Replacement {
                slot: label(&slot),
                kept: candidate(&kept),
                beat: losers.len(),
                losers,
            });
        }
        records.extend(kept.records);
    }
    records.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
    Combined { records, provenance }
}

fn bundle(source: &str, mut records: Vec<Record>) -> Bundle {
    records.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
    let started_at = records.iter().map(|r| r.started_at().to_string()).max().unwrap_or_default();
    let run_id = records.first().map(|r| r.run_id().to_string()).unwrap_or_default();
    let content = records.iter().map(|r| serde_json::to_string(r).unwrap_or_default()).collect();
    let gaps = partial_batch_gaps(&records);
    Bundle {
        source: source.to_string(),
        run_id,
        started_at,
        gaps,
        good: records.iter().all(Record::is_good),
        content,
        records,
    }
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
