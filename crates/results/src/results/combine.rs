//! De-duplication: one winner per slot, and an account of every loser.
//!
//! A slot is (record type, cell, request index) — except concurrent cells, where the whole batch
//! (its group record and its requests) is one slot, so a merge never pairs request 0 of one run with
//! request 1 of another. Among candidates: a complete batch beats a partial one whatever their ages
//! (a sweep killed mid-append leaves members without their group record: see `batch`), then passing
//! (quality_ok, error-free) beats failing, then the most recent `started_at`, then (only to stay
//! deterministic) the smallest serialized content.
//!
//! Located records (`sources::Detail::Located`) travel with their texts, and their text is their
//! content: the records are lean, the texts are what a merge writes.

use std::cmp::Ordering;
use std::io;
use std::time::SystemTime;

use super::batch::{Shape, batch_records};
use super::canonical::{Candidate, Loser, Provenance, Replacement};
use super::slotted::Slotted;
use super::sources::Source;
use super::text::Text;
use ttft_model::record::{CellKey, CellRest, Record};

/// The records kept (or what a verb keeps of each: `Slotted`), one per slot.
pub struct Combined<T = Record> {
    /// Sorted by (record type, cell, request index).
    pub records: Vec<T>,
    /// Each record's text in its input, when it was read located (`texts[i]` for `records[i]`).
    pub texts: Vec<Option<Text>>,
    pub provenance: Provenance,
    /// Some slot's winner was chosen by content among different candidates (tied on completeness,
    /// passing and start time): lean records (`Record::lean`) cannot be combined exactly then,
    /// since the content they compare lacks what they dropped.
    pub decided_by_content: bool,
}

/// A slot, borrowed from one of its records. The variant order (singles, then batches) and the
/// field order are the order in which slots are decided, so `provenance.replaced` lists them in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot<'a> {
    Single { record_type: &'static str, cell: &'a CellKey, request_index: u32 },
    Batch(&'a CellKey),
}

/// One candidate for a slot: a single record, or a whole batch from one source and run; its
/// records stay where they lie among all (`combine`), borrowed.
struct Bundle<'a, T> {
    /// Index into the sources' paths.
    source: usize,
    /// Where its records lie among all.
    at: usize,
    /// What a partial batch lacks ("group record missing"); empty when complete (and for singles).
    gaps: Vec<String>,
    good: bool,
    /// The records' texts end to end (serialized, or as read): they break ties and tell identical
    /// copies apart, and every loser's reason compares them.
    content: String,
    records: &'a [T],
}

impl<'a, T: Slotted> Bundle<'a, T> {
    /// The candidate of `records` with their `texts`, at `at` among all, from `source`; already in
    /// `record_order`.
    fn new(records: &'a [T], texts: &[Option<Text>], at: usize, source: usize) -> io::Result<Bundle<'a, T>> {
        let mut content = Vec::new();
        for (record, text) in records.iter().zip(texts) {
            match text {
                Some(text) => text.append_to(&mut content)?,
                None => record.write_json(&mut content)?,
            }
        }
        let content = String::from_utf8(content).map_err(io::Error::other)?;
        Ok(Bundle {
            source,
            at,
            gaps: partial_batch_gaps(records),
            good: records.iter().all(T::is_good),
            content,
            records,
        })
    }

    fn run_id(&self) -> &str {
        self.records.first().map_or("", T::run_id)
    }

    fn started_at(&self) -> &str {
        self.records.iter().map(T::started_at).max().unwrap_or_default()
    }

    fn content(&self) -> &str {
        &self.content
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

/// Sort key of a record in every output.
pub fn record_order<T: Slotted>(r: &T) -> (&'static str, &CellKey, u32) {
    (r.record_type(), r.cell(), r.request_index())
}

/// A record's slot, and for a batch record its group id (members of one batch share it).
fn slot_of<T: Slotted>(record: &T) -> (Slot<'_>, &str) {
    let cell = record.cell();
    if record.in_batch() {
        return (Slot::Batch(cell), record.group_id());
    }
    let slot =
        Slot::Single { record_type: record.record_type(), cell, request_index: record.request_index() };
    (slot, "")
}

fn label(slot: &Slot) -> String {
    let (kind, c, idx) = match slot {
        Slot::Single { record_type, cell, request_index } => {
            (*record_type, cell, format!(" #{request_index}"))
        }
        Slot::Batch(cell) => ("batch", cell, String::new()),
    };
    format!("{kind} {} r{}{idx}", c.merge_label(), c.run)
}

/// RFC 3339 timestamps compared as instants where they parse, as text otherwise.
fn instant(ts: &str) -> (Option<SystemTime>, &str) {
    (humantime::parse_rfc3339_weak(ts).ok(), ts)
}

/// Ordering where `Less` means "a is preferred".
fn prefer<T: Slotted>(paths: &[String], a: &Bundle<T>, b: &Bundle<T>) -> Ordering {
    b.gaps
        .is_empty()
        .cmp(&a.gaps.is_empty())
        .then_with(|| b.good.cmp(&a.good))
        .then_with(|| instant(b.started_at()).cmp(&instant(a.started_at())))
        .then_with(|| a.content().cmp(b.content()))
        .then_with(|| paths[a.source].cmp(&paths[b.source]))
}

/// Whether the ranked `candidates`' winner was chosen by content among candidates that differ:
/// those that tie with it on completeness, passing and start time but hold other records. (Equal
/// copies tie harmlessly: whichever wins, the same records are kept.)
fn content_decides<T: Slotted>(candidates: &[Bundle<T>]) -> bool {
    let Some((first, rest)) = candidates.split_first() else { return false };
    rest.iter()
        .take_while(|c| {
            c.gaps.is_empty() == first.gaps.is_empty()
                && c.good == first.good
                && instant(c.started_at()) == instant(first.started_at())
        })
        .any(|c| c.content() != first.content())
}

fn reason<T: Slotted>(kept: &Bundle<T>, loser: &Bundle<T>) -> String {
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

/// A cell as numbers, ordered as `CellKey` orders cells (its model by rank in string order, then
/// every other field of the key, a dataset row included: `CellKey::without_model`): sorting
/// 100,000 records compares these millions of times, and comparing model names was a good part of
/// merge's and report's own time.
type CellRank = (u32, CellRest);

/// The models of a set of records, sorted: a model's place is its rank.
struct Models(Vec<String>);

impl Models {
    fn of<'a, T: Slotted + 'a>(records: impl Iterator<Item = &'a T>) -> Models {
        // Records of one model come in long runs: each run's name once, not a name per record.
        let mut names: Vec<&str> = Vec::new();
        for model in records.map(|r| r.cell().model.as_str()) {
            if names.last() != Some(&model) {
                names.push(model);
            }
        }
        names.sort_unstable();
        names.dedup();
        Models(names.into_iter().map(str::to_string).collect())
    }

    fn rank(&self, c: &CellKey) -> CellRank {
        let model = self.0.binary_search(&c.model).unwrap_or_else(|at| at) as u32;
        (model, c.without_model())
    }
}

/// `record_order` as numbers.
fn order_rank<T: Slotted>(models: &Models, r: &T) -> (u8, CellRank, u32) {
    (r.type_rank(), models.rank(r.cell()), r.request_index())
}

/// Where a record goes, as numbers: its slot (singles before batches; then type, cell and request
/// index, or the batch's cell: `Slot`'s order), then within the slot its source. Records of a
/// batch slot are also told apart by the run and group that make one batch (`batch_of`).
type Place = ((bool, u8, CellRank, u32), u32);

/// A slot held by more than one candidate: where it begins in place order, each candidate's size
/// there (a single record, or one batch of one source and run), and its label.
struct Contest {
    at: usize,
    sizes: Vec<usize>,
    label: String,
}

fn place<T: Slotted>(models: &Models, record: &T, source: u32) -> Place {
    let cell = models.rank(record.cell());
    match slot_of(record).0 {
        Slot::Single { request_index, .. } => ((false, record.type_rank(), cell, request_index), source),
        Slot::Batch(_) => ((true, 0, cell, 0), source),
    }
}

/// The run and group of a batch record ("" for records outside batches).
fn batch_of<T: Slotted>(record: &T) -> (&str, &str) {
    match slot_of(record) {
        (Slot::Batch(_), group) => (record.run_id(), group),
        (Slot::Single { .. }, _) => ("", ""),
    }
}

/// `keys` (each with the index of the item it is the key of) sorted, ties in their order; `then`
/// compares (by index) what the keys leave tied, borrowed so no key holds a copy of it. Each key
/// is sorted beside its index, not through it: a million keys compared through their indices were
/// a random read of memory each, and sorting was a tenth of a merge.
fn sorted_keys<K: Ord>(
    mut keys: Vec<(K, usize)>,
    then: impl Fn(usize, usize) -> Ordering,
) -> Vec<(K, usize)> {
    keys.sort_unstable_by(|(a, i), (b, j)| a.cmp(b).then_with(|| then(*i, *j)).then(i.cmp(j)));
    keys
}

/// `items` put in `order` (`sorted_order`, or the indices of `sorted_keys`) in place: a million records are moved, not copied into a
/// second vector beside the first.
fn reorder<T>(items: &mut [T], order: &[usize]) {
    let mut done = vec![false; items.len()];
    for start in 0..items.len() {
        let mut at = start;
        while !done[at] {
            done[at] = true;
            let from = order[at];
            if from == start {
                break;
            }
            items.swap(at, from);
            at = from;
        }
    }
}

/// The order that sorts `items` by `key`, ties in their order (`sorted_keys`).
fn sorted_order<'a, T, K: Ord>(items: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<usize> {
    let keys: Vec<(K, usize)> = items.iter().map(key).zip(0..).collect();
    sorted_keys(keys, |_, _| Ordering::Equal).into_iter().map(|(_, i)| i).collect()
}

/// One record per slot from `sources` (consumed: records are moved, never copied). Fails only
/// where a located record's text cannot be read back as it was read (`Text::read`).
///
/// The slots are found in order of `place` (a permutation of indices sorted, nothing moved), so
/// each slot's candidates, and each batch's records, come side by side; a slot with one candidate
/// (the usual case) is kept as it is, without building and ranking bundles. Only where some slot
/// is contested are the records put in that order, to rank its candidates side by side: an input
/// without duplicates (a run, a canonical file) moves its records once, into record order, and not
/// at all when they are in it already. Records, texts and sources are three vectors moved in step,
/// in place: the first source's records are taken as they are, and no vector of records is made
/// beside them (a million compact records would be held twice).
pub fn combine<T: Slotted>(mut sources: Vec<Source<T>>) -> io::Result<Combined<T>> {
    sources.sort_by_key(|s| s.path.display().to_string());
    let paths: Vec<String> = sources.iter().map(|s| s.path.display().to_string()).collect();
    let models = Models::of(sources.iter().flat_map(|s| &s.records));
    let total = sources.iter().map(|s| s.records.len()).sum();
    let mut records: Vec<T> = Vec::new();
    let mut texts: Vec<Option<Text>> = Vec::with_capacity(total);
    let mut from: Vec<u32> = Vec::with_capacity(total);
    for (source, s) in sources.into_iter().enumerate() {
        let n = s.records.len();
        match &s.texts {
            Some(located) => texts.extend(located.each().map(Some)),
            None => texts.extend(std::iter::repeat_with(|| None).take(n)),
        }
        from.extend(std::iter::repeat_n(source as u32, n));
        if records.is_empty() {
            records = s.records;
            records.reserve_exact(total - n);
        } else {
            records.extend(s.records);
        }
    }
    // Sorted by place: by its numbers, then (records of batches) by run and group.
    let places: Vec<(Place, usize)> =
        records.iter().zip(&from).map(|(r, &s)| place(&models, r, s)).zip(0..).collect();
    let places = sorted_keys(places, |a, b| batch_of(&records[a]).cmp(&batch_of(&records[b])));
    let order: Vec<usize> = places.iter().map(|&(_, i)| i).collect();
    // Each slot, found through the sorted places before anything moves: its candidates' sizes (a
    // single record, or one batch of one source and run). A slot with one candidate (the usual
    // case) is counted and kept where its records lie; only a contested slot (`Contest`, at its
    // place in `order`) needs them side by side. `k` and `l` are places in sorted order.
    let same_batch = |k: usize, l: usize| {
        let ((a, i), (b, j)) = (&places[k], &places[l]);
        a == b && batch_of(&records[*i]) == batch_of(&records[*j])
    };
    let mut kept_by_source = vec![0usize; paths.len()];
    let mut contests: Vec<Contest> = Vec::new();
    let mut sizes = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let slot = places[i].0.0;
        sizes.clear();
        let mut j = i;
        while j < records.len() && places[j].0.0 == slot {
            let mut end = j + 1;
            if slot.0 {
                while end < records.len() && same_batch(end, j) {
                    end += 1;
                }
            }
            sizes.push(end - j);
            j = end;
        }
        if let [size] = sizes[..] {
            kept_by_source[from[order[i]] as usize] += size;
        } else {
            contests.push(Contest {
                at: i,
                sizes: sizes.clone(),
                label: label(&slot_of(&records[order[i]]).0),
            });
        }
        i = j;
    }
    drop(places);
    let mut decided_by_content = false;
    let mut provenance = Provenance::default();
    if !contests.is_empty() {
        reorder(&mut records, &order);
        reorder(&mut texts, &order);
        reorder(&mut from, &order);
        drop(order);
        // Whether each record is kept: every record of a slot with one candidate, the winner's of
        // any other. The losers are let go in place, so the kept records need no second vector.
        let mut keep = vec![true; records.len()];
        for Contest { mut at, sizes, label } in contests {
            let mut starts = Vec::with_capacity(sizes.len());
            for size in sizes {
                let range = at..at + size;
                let order = sorted_order(&records[range.clone()], record_order);
                reorder(&mut records[range.clone()], &order);
                reorder(&mut texts[range], &order);
                starts.push((at, size));
                at += size;
            }
            let mut candidates: Vec<Bundle<T>> = starts
                .iter()
                .map(|&(start, size)| {
                    let range = start..start + size;
                    Bundle::new(&records[range.clone()], &texts[range], start, from[start] as usize)
                })
                .collect::<io::Result<_>>()?;
            candidates.sort_by(|a, b| prefer(&paths, a, b));
            decided_by_content |= content_decides(&candidates);
            let mut candidates = candidates.into_iter();
            let Some(winner) = candidates.next() else { continue };
            let losers: Vec<Loser> = candidates
                .map(|l| {
                    keep[l.at..l.at + l.records.len()].fill(false);
                    Loser { candidate: l.candidate(&paths), reason: reason(&winner, &l) }
                })
                .collect();
            kept_by_source[winner.source] += winner.records.len();
            provenance.replaced.push(Replacement {
                slot: label,
                kept: winner.candidate(&paths),
                beat: losers.len(),
                losers,
            });
        }
        let mut keeps = keep.iter();
        records.retain(|_| keeps.next().copied().unwrap_or(true));
        let mut keeps = keep.iter();
        texts.retain(|_| keeps.next().copied().unwrap_or(true));
    }
    drop(from);
    // The same path given twice is one source in the account.
    for (path, n) in paths.into_iter().zip(kept_by_source).filter(|(_, n)| *n > 0) {
        *provenance.kept_by_source.entry(path).or_default() += n;
    }
    let order = sorted_order(&records, |r| order_rank(&models, r));
    reorder(&mut records, &order);
    reorder(&mut texts, &order);
    Ok(Combined { records, texts, provenance, decided_by_content })
}

/// What keeps the batch among `records` from being whole (empty for a complete batch and for
/// records outside batches).
fn partial_batch_gaps<T: Slotted>(records: &[T]) -> Vec<String> {
    let found = batch_records(records);
    match found.as_slice() {
        [] => Vec::new(),
        [one] => Shape::of(one).gaps(),
        _ => vec![format!("{} batches in one slot", found.len())],
    }
}

#[cfg(test)]
#[path = "combine_tests.rs"]
mod tests;
