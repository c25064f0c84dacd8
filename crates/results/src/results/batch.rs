//! A concurrent batch is one unit everywhere (merge, `--expect`, report, verify): its B member
//! measurements and its group record belong together, and a batch is complete only when all of
//! them are there. A sweep killed while a batch was being appended leaves members without their
//! group record (or fewer than B members); such a partial batch must never pass for a measured cell.

use std::collections::HashMap;

use super::slotted::{Slotted, is_aggregate_stand_in};
use ttft_model::record::{CellKey, GroupRecord, Measurement, Record};

/// One stored batch: the records that share a group id (or, for members that lost theirs, a run
/// and a cell).
#[derive(Debug)]
pub struct Batch<'a> {
    pub cell: &'a CellKey,
    pub run_id: &'a str,
    pub group_id: &'a str,
    pub group: Option<&'a GroupRecord>,
    pub members: Vec<&'a Measurement>,
}

impl Batch<'_> {
    /// All B members (request indices 0..B, each once) and the group record are present. An
    /// imported origin batch keeps one aggregate stand-in instead of B members: its group record
    /// carries the batch, so it is complete with that alone.
    pub fn is_complete(&self) -> bool {
        self.shape().is_complete()
    }

    /// Complete, and every member and the group record passed.
    pub fn is_good(&self) -> bool {
        self.is_complete()
            && self.group.is_some_and(|g| g.error.is_none() && g.requests_failed == 0)
            && self.members.iter().all(|m| m.quality_ok && m.error.is_none())
    }

    /// What is missing, for messages: "group record missing", "1 of 2 members".
    pub fn gaps(&self) -> Vec<String> {
        self.shape().gaps()
    }

    fn shape(&self) -> Shape {
        Shape {
            batch_size: self.cell.batch_size,
            has_group: self.group.is_some(),
            stand_in: self.members.iter().any(|m| is_aggregate_stand_in(m)),
            requests: self.members.iter().map(|m| m.request_index).collect(),
        }
    }
}

/// A batch as counted: whether its group record is there, its members' request indices, and
/// whether a member is the origin importer's aggregate stand-in (one record that carries the batch's
/// totals instead of B members).
pub struct Shape {
    batch_size: u32,
    has_group: bool,
    stand_in: bool,
    requests: Vec<u32>,
}

impl Shape {
    /// The shape of one batch's records (records or compact forms of them: `Slotted`; one of
    /// `batch_records`), of the batch size its cell says.
    pub fn of<T: Slotted>(batch: &[&T]) -> Shape {
        let batch_size = batch.first().map_or(0, |r| r.cell().batch_size);
        let mut shape = Shape { batch_size, has_group: false, stand_in: false, requests: Vec::new() };
        for r in batch {
            if r.record_type() == "group" {
                shape.has_group = true;
            } else {
                shape.stand_in |= r.is_batch_stand_in();
                shape.requests.push(r.request_index());
            }
        }
        shape
    }

    /// The group record, and every member once (or the stand-in).
    pub fn is_complete(&self) -> bool {
        self.has_group && (self.stand_in || self.members_are_each_request_once())
    }

    /// Request indices 0..B, each exactly once.
    fn members_are_each_request_once(&self) -> bool {
        let mut seen = self.requests.clone();
        seen.sort_unstable();
        seen.dedup();
        seen.len() == self.requests.len() && seen == (0..self.batch_size).collect::<Vec<u32>>()
    }

    /// What keeps it from being complete (empty when it is).
    pub fn gaps(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.has_group {
            out.push("group record missing".to_string());
        }
        let b = self.batch_size as usize;
        if !self.stand_in {
            if self.requests.len() != b {
                out.push(format!("{} of {b} member requests", self.requests.len()));
            } else if !self.members_are_each_request_once() {
                out.push(format!("member requests are not 0..{b} once each"));
            }
        }
        out
    }
}

/// Whether a record belongs to a concurrent batch (members and group records of batch cells).
pub fn in_batch(record: &Record) -> bool {
    Slotted::in_batch(record)
}

/// Every batch among `records`, in record order of first appearance.
pub fn batches(records: &[Record]) -> Vec<Batch<'_>> {
    batch_records(records)
        .into_iter()
        .map(|records| {
            let first = records[0];
            let mut batch = Batch {
                cell: first.cell(),
                run_id: first.run_id(),
                group_id: Slotted::group_id(first),
                group: None,
                members: Vec::new(),
            };
            for record in records {
                match record {
                    Record::Measurement(m) => batch.members.push(m),
                    Record::Group(g) => batch.group = Some(g),
                    Record::Staggered(_) => {}
                }
            }
            batch
        })
        .collect()
}

/// The records of every batch among `records` (each batch's in record order, the batches in
/// order of first appearance): records that share a group id, or that name none and share a run
/// and a cell.
pub fn batch_records<'a, T: Slotted + 'a>(records: impl IntoIterator<Item = &'a T>) -> Vec<Vec<&'a T>> {
    let mut index: HashMap<(&str, Option<&CellKey>), usize> = HashMap::new();
    let mut out: Vec<Vec<&T>> = Vec::new();
    // A batch's members lie side by side in a records file and in a canonical one: the batch of
    // the member before is looked at first.
    let mut last = None;
    for record in records.into_iter().filter(|r| r.in_batch()) {
        let group_id = record.group_id();
        // Members without a group id can only be told apart by run and cell.
        let key = if group_id.is_empty() { (record.run_id(), Some(record.cell())) } else { (group_id, None) };
        let at = match last {
            Some((last_key, at)) if last_key == key => at,
            _ => *index.entry(key).or_insert_with(|| {
                out.push(Vec::new());
                out.len() - 1
            }),
        };
        last = Some((key, at));
        out[at].push(record);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{CacheState, SCHEMA_VERSION, Scenario};

    fn cell() -> CellKey {
        CellKey {
            model: "m".into(),
            scenario: Scenario::Concurrent,
            cache_state: CacheState::Cold,
            batch_size: 2,
            context_tokens: 1024,
            run: 1,
            ..Default::default()
        }
    }

    fn member(i: u32, group: &str) -> Record {
        Record::Measurement(Box::new(Measurement {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            cell: cell(),
            request_index: i,
            group_id: Some(group.into()),
            quality_ok: true,
            ..Default::default()
        }))
    }

    fn group(id: &str) -> Record {
        Record::Group(Box::new(GroupRecord {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            cell: cell(),
            group_id: id.into(),
            requests_ok: 2,
            ..Default::default()
        }))
    }

    #[test]
    fn a_batch_is_complete_only_with_every_member_and_its_group() {
        let full = [member(0, "g"), member(1, "g"), group("g")];
        let b = batches(&full);
        assert_eq!(b.len(), 1);
        assert!(b[0].is_complete() && b[0].is_good());

        let no_group = [member(0, "g"), member(1, "g")];
        assert!(!batches(&no_group)[0].is_complete());
        assert_eq!(batches(&no_group)[0].gaps(), ["group record missing"]);

        let half = [member(0, "g"), group("g")];
        assert!(!batches(&half)[0].is_complete());
        assert_eq!(batches(&half)[0].gaps(), ["1 of 2 member requests"]);

        let twice = [member(0, "g"), member(0, "g"), group("g")];
        assert!(!batches(&twice)[0].is_complete(), "request 0 twice is not requests 0 and 1");
        assert_eq!(batches(&twice)[0].gaps(), ["member requests are not 0..2 once each"]);
    }

    #[test]
    fn batches_are_told_apart_by_group_id() {
        let two = [member(0, "a"), member(0, "b"), member(1, "a"), group("a")];
        let b = batches(&two);
        assert_eq!(b.len(), 2);
        assert!(b[0].is_complete());
        assert!(!b[1].is_complete());
    }
}
