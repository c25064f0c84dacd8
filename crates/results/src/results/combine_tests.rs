//! `combine`: winners by content, the order of ranks, records moved in slot order.

use super::*;
use crate::results::sources::SourceKind;
use std::collections::BTreeMap;
use ttft_model::record::{Measurement, SCHEMA_VERSION, Scenario};

fn record(started_at: &str, ttft: f64, offsets: Vec<f64>) -> Record {
    let mut m = Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r".into(),
        started_at: started_at.into(),
        ttft_ms: Some(ttft),
        token_offsets_ms: offsets,
        quality_ok: true,
        ..Default::default()
    };
    m.cell.model = "m".into();
    Record::Measurement(Box::new(m))
}

fn source(path: &str, records: Vec<Record>) -> Source {
    Source::whole(path.into(), SourceKind::Jsonl, vec![], records)
}

fn combined(a: Record, b: Record, lean: bool) -> Combined {
    let lean = |r: Record| if lean { r.lean() } else { r };
    combine(vec![source("b", vec![lean(b)]), source("a", vec![lean(a)])]).unwrap()
}

#[test]
fn a_winner_picked_by_content_among_different_records_is_reported() {
    let t = "2026-02-05T21:30:00.000Z";
    // Newer wins: not content.
    let c = combined(record(t, 1.0, vec![]), record("2026-02-05T21:31:00.000Z", 2.0, vec![]), false);
    assert!(!c.decided_by_content);
    assert_eq!(c.provenance.replaced.len(), 1);
    // Identical copies: content ties, but whichever wins is the same record.
    assert!(!combined(record(t, 1.0, vec![1.0]), record(t, 1.0, vec![1.0]), false).decided_by_content);
    // Same start, other numbers: content decides.
    let c = combined(record(t, 1.0, vec![]), record(t, 2.0, vec![]), true);
    assert!(c.decided_by_content);
    assert_eq!(c.records.len(), 1);
    // Only the raw offsets differ: the full records are decided by content; the lean ones
    // are equal, so any winner gives the same statistics.
    assert!(combined(record(t, 1.0, vec![1.0]), record(t, 1.0, vec![2.0]), false).decided_by_content);
    assert!(!combined(record(t, 1.0, vec![1.0]), record(t, 1.0, vec![2.0]), true).decided_by_content);
}

#[test]
fn ranks_order_as_the_records_do() {
    let mut rng = ttft_model::stats::Rng::new(3);
    let records: Vec<Record> = (0..300)
        .map(|i| {
            let mut r = record("t", 1.0, vec![]);
            if let Record::Measurement(m) = &mut r {
                m.cell.model = ["b", "a", "ab", "B", ""][rng.below(5)].into();
                m.cell.scenario = [Scenario::Cold, Scenario::Warm, Scenario::Concurrent][rng.below(3)];
                m.cell.context_tokens = [1024, 512][rng.below(2)];
                // Two rows of a dataset may share a length: the row alone tells their cells apart.
                m.cell.dataset_row = [None, Some(1), Some(2)][rng.below(3)];
                m.cell.run = rng.below(3) as u32;
                m.request_index = i % 3;
            }
            match i % 3 {
                0 => r,
                1 => Record::Group(Box::new(ttft_model::record::GroupRecord {
                    cell: r.cell().clone(),
                    ..Default::default()
                })),
                _ => Record::Staggered(Box::new(ttft_model::record::StaggeredRecord {
                    cell: r.cell().clone(),
                    ..Default::default()
                })),
            }
        })
        .collect();
    let models = Models::of(records.iter());
    for a in &records {
        for b in &records {
            assert_eq!(
                order_rank(&models, a).cmp(&order_rank(&models, b)),
                record_order(a).cmp(&record_order(b))
            );
        }
    }
    let mut by_key = records.clone();
    by_key.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
    let mut sorted = records;
    let order = sorted_order(&sorted, |r| order_rank(&models, r));
    reorder(&mut sorted, &order);
    assert_eq!(sorted, by_key, "the same order, ties kept");
}

/// Records are put in order in place, following the permutation's cycles: every permutation of
/// up to 40 items (cycles of every length, fixed points, one long cycle) ends as a copy would.
#[test]
fn reordering_in_place_is_a_copy_in_that_order() {
    let mut rng = ttft_model::stats::Rng::new(7);
    for n in 0..40 {
        for _ in 0..20 {
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, rng.below(i + 1));
            }
            let items: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
            let copy: Vec<String> = order.iter().map(|&i| items[i].clone()).collect();
            let mut moved = items;
            reorder(&mut moved, &order);
            assert_eq!(moved, copy, "{order:?}");
        }
    }
}

/// The TTFT of each record kept, in order: which records were kept, and where.
fn ttfts(c: &Combined) -> Vec<Option<f64>> {
    c.records
        .iter()
        .map(|r| match r {
            Record::Measurement(m) => m.ttft_ms,
            _ => None,
        })
        .collect()
}

#[test]
fn records_are_moved_in_slot_order_and_counted_by_source() {
    let t = "2026-02-05T21:30:00.000Z";
    let mut late = record(t, 3.0, vec![]);
    if let Record::Measurement(m) = &mut late {
        m.cell.context_tokens = 2048;
    }
    let c = combine(vec![
        source("b", vec![late, record(t, 1.0, vec![])]),
        source("a", vec![record("2026-02-05T21:29:00.000Z", 2.0, vec![])]),
    ])
    .unwrap();
    let ttfts = ttfts(&c);
    assert_eq!(ttfts, [Some(1.0), Some(3.0)]);
    assert_eq!(c.provenance.kept_by_source, BTreeMap::from([("b".to_string(), 2)]));
    assert_eq!(c.provenance.replaced[0].losers[0].candidate.source, "a");
}

/// With no slot held twice, nothing is decided: every record is kept, in record order whatever
/// order its input gave it in, and counted by its source.
#[test]
fn an_input_without_duplicates_is_kept_whole_in_record_order_and_counted_by_source() {
    let t = "2026-02-05T21:30:00.000Z";
    let at = |context: u32, ttft: f64| {
        let mut r = record(t, ttft, vec![]);
        if let Record::Measurement(m) = &mut r {
            m.cell.context_tokens = context;
        }
        r
    };
    let c = combine(vec![source("b", vec![at(4096, 4.0), at(1024, 1.0)]), source("a", vec![at(2048, 2.0)])])
        .unwrap();
    let ttfts = ttfts(&c);
    assert_eq!(ttfts, [Some(1.0), Some(2.0), Some(4.0)]);
    assert_eq!(c.provenance.kept_by_source, BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 2)]));
    assert!(c.provenance.replaced.is_empty() && !c.decided_by_content);
}

/// Two batches of one cell and run in one file, their records interleaved (as two writers sharing
/// a file leave them): each batch is one candidate of the slot, its members and group record side
/// by side, and the newer batch is kept whole.
#[test]
fn interleaved_batches_of_one_slot_are_told_apart_by_their_group() {
    let member = |group: &str, started_at: &str, index: u32, ttft: f64| {
        let mut r = record(started_at, ttft, vec![]);
        if let Record::Measurement(m) = &mut r {
            m.cell.scenario = Scenario::Concurrent;
            m.cell.batch_size = 2;
            m.group_id = Some(group.into());
            m.request_index = index;
        }
        r
    };
    let group = |group: &str, started_at: &str| {
        let Record::Measurement(m) = member(group, started_at, 0, 0.0) else { unreachable!() };
        Record::Group(Box::new(ttft_model::record::GroupRecord {
            cell: m.cell,
            group_id: group.into(),
            run_id: m.run_id,
            started_at: started_at.into(),
            ..Default::default()
        }))
    };
    let (old, new) = ("2026-02-05T21:30:00.000Z", "2026-02-05T21:31:00.000Z");
    let records = vec![
        member("g1", old, 0, 1.0),
        member("g2", new, 0, 3.0),
        member("g1", old, 1, 2.0),
        member("g2", new, 1, 4.0),
        group("g1", old),
        group("g2", new),
    ];
    let c = combine(vec![source("a", records)]).unwrap();
    assert_eq!(c.records.len(), 3, "one batch kept: {:?}", c.records);
    assert_eq!(ttfts(&c).into_iter().flatten().collect::<Vec<_>>(), [3.0, 4.0]);
    assert!(c.records.iter().all(|r| r.group_id() == "g2"));
    assert_eq!(c.provenance.replaced.len(), 1);
    assert_eq!(c.provenance.replaced[0].beat, 1);
}
