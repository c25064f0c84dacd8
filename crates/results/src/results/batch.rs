//! A concurrent batch is one unit everywhere (merge, `--expect`, report, verify): its B member
//! measurements and its group record belong together, and a batch is complete only when all of
//! them are there. A sweep killed while a batch was being appended leaves members without their
//! group record (or fewer than B members); such a partial batch must never pass for a measured cell.

use std::collections::BTreeMap;

use ttft_model::record::{CellKey, GroupRecord, Measurement, Record, Scenario};

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
        let Some(_) = self.group else { return false };
        if self.members.iter().any(|m| is_aggregate_stand_in(m)) {
            return true;
        }
        self.members_are_each_request_once()
    }

    /// Request indices 0..B, each exactly once.
    fn members_are_each_request_once(&self) -> bool {
        let b = self.cell.batch_size;
        let mut seen: Vec<u32> = self.members.iter().map(|m| m.request_index).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len() == self.members.len() && seen == (0..b).collect::<Vec<u32>>()
    }

    /// Complete, and every member and the group record passed.
    pub fn is_good(&self) -> bool {
        self.is_complete()
            && self.group.is_some_and(|g| g.error.is_none() && g.requests_failed == 0)
            && self.members.iter().all(|m| m.quality_ok && m.error.is_none())
    }

    /// What is missing, for messages: "group record missing", "1 of 2 members".
    pub fn gaps(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.group.is_none() {
            out.push("group record missing".to_string());
        }
        let b = self.cell.batch_size as usize;
        if !self.members.iter().any(|m| is_aggregate_stand_in(m)) {
            if self.members.len() != b {
                out.push(format!("{} of {b} member requests", self.members.len()));
            } else if !self.members_are_each_request_once() {
                out.push(format!("member requests are not 0..{b} once each"));
            }
        }
        out
    }
}

/// The origin importer's stand-in for a batch it only kept totals of.
fn is_aggregate_stand_in(m: &Measurement) -> bool {
    m.quality_flags.iter().any(|f| f.flag == super::origin::BATCH_AGGREGATE_FLAG)
}

/// Whether a record belongs to a concurrent batch (members and group records of batch cells).
pub fn in_batch(record: &Record) -> bool {
    record.cell().scenario == Scenario::Concurrent && !matches!(record, Record::Staggered(_))
}

/// Every batch among `records`, in record order of first appearance.
pub fn batches(records: &[Record]) -> Vec<Batch<'_>> {
    let mut index: BTreeMap<(String, Option<CellKey>), usize> = BTreeMap::new();
    let mut out: Vec<Batch> = Vec::new();
    for record in records.iter().filter(|r| in_batch(r)) {
        let (group_id, member, group) = match record {
            Record::Measurement(m) => (m.group_id.as_deref().unwrap_or(""), Some(m.as_ref()), None),
            Record::Group(g) => (g.group_id.as_str(), None, Some(g.as_ref())),
            Record::Staggered(_) => continue,
        };
        // Members without a group id can only be told apart by run and cell.
        let key = if group_id.is_empty() {
            (record.run_id().to_string(), Some(record.cell().clone()))
        } else {
            (group_id.to_string(), None)
        };
        let at = *index.entry(key).or_insert_with(|| {
            out.push(Batch {
                cell: record.cell(),
                run_id: record.run_id(),
                group_id,
                group: None,
                members: Vec::new(),
            });
            out.len() - 1
        });
        let batch = &mut out[at];
        if let Some(m) = member {
            batch.members.push(m);
        }
        if let Some(g) = group {
            batch.group = Some(g);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::{CacheState, SCHEMA_VERSION};

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
