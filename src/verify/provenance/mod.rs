//! The provenance audit: `bench verify PUBLISHED --sources RAW...`.
//!
//! A published (merged) file must be traceable, record by record, to the raw files it claims to
//! come from. A published number with no measurement behind it is the worst finding a reviewer can
//! make, so every rule here is an error:
//! - `provenance_no_source`: no source holds the record. The origin's published DeepSeek file
//!   holds 35 batch rows of a run that was never published; its Gemma file a warm batch-2 row
//!   (avg TTFT 798.6 ms) whose cell and run exist in a source only as another, failed measurement.
//! - `provenance_numbers_differ`: a source holds the same measurement (same cell, run and start
//!   time) with other numbers: the published copy was edited.
//! - `provenance_metadata_conflict`: the published metadata says what the sources of its records
//!   contradict. Both origin merged files carry their first run's metadata (tolerance 0.05, harness
//!   ee24513) over records taken at tolerance 0.2 with harness 371aaa0.
//!
//! A record is identified by its type, cell (model, scenario, cache state, mode, context, batch,
//! run) and request index; a concurrent batch (group record and members) is one unit, as
//! everywhere (`results::batch`). Run ids are not compared: a merged origin file names its records
//! after itself. "Same numbers" allows rounding: a published value may be the source's rounded to
//! the decimals the published value shows (798.6 for 798.64), never the other way round (a
//! published value more precise than its source did not come from it).
//!
//! Both sides of a million records are held as hashes (`held`: about a hundred bytes a record):
//! a published unit whose first candidate with its start holds its numbers exactly is traced
//! there by them; every other unit, and its candidates, is read again from the files and compared
//! number by number.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::finding::Finding;
use super::rule::RuleId;
pub(crate) use held::{Claimed, Claims, Held};
use held::{HeldUnit, Units};
use numbers::{
    Diff, Numbers, Value, diff_numbers, diff_record, each_value, group_numbers, measurement_numbers,
    presence, show_diffs,
};
use ttft_model::record::{CellKey, GroupRecord, Measurement, Record};
use ttft_results::results::batch::{batches, in_batch};
use ttft_results::results::run_meta::{RunMetaView, SourceMeta};
use ttft_results::results::sources::Source;
use ttft_results::results::text::{self, Texts};
use ttft_results::store::{self, InputError};

mod held;
mod numbers;

/// What makes two records the same slot: a single record, or a whole batch.
#[derive(Clone, Copy, Debug, PartialEq)]
enum UnitKey<'a> {
    Single { record_type: &'static str, cell: &'a CellKey, request_index: u32 },
    Batch(&'a CellKey),
}

/// What the audit compares of a claimed unit: its start and the numbers a published copy must keep
/// (`measurement_numbers` and its kin, values only, in their order).
struct Digest {
    started_at: Box<str>,
    body: DigestBody,
}

enum DigestBody {
    Single(Box<[Value]>),
    Batch { group: Option<Box<[Value]>>, members: BTreeMap<u32, Box<[Value]>> },
}

fn values<const N: usize>(numbers: Numbers<N>) -> Box<[Value]> {
    numbers.into_iter().map(|(_, v)| v).collect()
}

fn record_values(r: &Record) -> Box<[Value]> {
    let mut out = Vec::new();
    each_value(r, |v| out.push(v));
    out.into()
}

impl Digest {
    fn of(unit: &Unit) -> Digest {
        let body = match &unit.body {
            Body::Single(r) => DigestBody::Single(record_values(r)),
            Body::Batch { group, members } => DigestBody::Batch {
                group: group.map(|g| values(group_numbers(g))),
                members: members.iter().map(|(&i, m)| (i, values(measurement_numbers(m)))).collect(),
            },
        };
        Digest { started_at: unit.started_at.into(), body }
    }
}

/// One record, or one batch's group record and members.
struct Unit<'a> {
    key: UnitKey<'a>,
    cell: &'a CellKey,
    run_id: &'a str,
    started_at: &'a str,
    body: Body<'a>,
}

enum Body<'a> {
    Single(&'a Record),
    Batch { group: Option<&'a GroupRecord>, members: BTreeMap<u32, &'a Measurement> },
}

fn units(records: &[Record]) -> Vec<Unit<'_>> {
    let mut out = Vec::new();
    for b in batches(records) {
        let started_at = b.group.map(|g| g.started_at.as_str());
        let started_at = started_at.or(b.members.first().map(|m| m.started_at.as_str())).unwrap_or("");
        out.push(Unit {
            key: UnitKey::Batch(b.cell),
            cell: b.cell,
            run_id: b.run_id,
            started_at,
            body: Body::Batch {
                group: b.group,
                members: b.members.iter().map(|m| (m.request_index, *m)).collect(),
            },
        });
    }
    for r in records.iter().filter(|r| !in_batch(r)) {
        let request_index = match r {
            Record::Measurement(m) => m.request_index,
            _ => 0,
        };
        out.push(Unit {
            key: UnitKey::Single { record_type: r.record_type(), cell: r.cell(), request_index },
            cell: r.cell(),
            run_id: r.run_id(),
            started_at: r.started_at(),
            body: Body::Single(r),
        });
    }
    out
}

fn diff_units(published: &Unit, source: &Digest) -> Vec<Diff> {
    let mut out = Vec::new();
    match (&published.body, &source.body) {
        (Body::Single(p), DigestBody::Single(s)) => diff_record(p, s, &mut out),
        (Body::Batch { group: pg, members: pm }, DigestBody::Batch { group: sg, members: sm }) => {
            match (pg, sg) {
                (Some(p), Some(s)) => diff_numbers("group ", group_numbers(p), s, &mut out),
                (None, None) => {}
                (p, s) => out.push(Diff {
                    field: "group record".into(),
                    published: presence(p.is_some()),
                    source: presence(s.is_some()),
                }),
            }
            for index in pm.keys().chain(sm.keys()).collect::<BTreeSet<_>>() {
                match (pm.get(index), sm.get(index)) {
                    (Some(p), Some(s)) => {
                        diff_numbers(&format!("request {index} "), measurement_numbers(p), s, &mut out)
                    }
                    (p, s) => out.push(Diff {
                        field: format!("request {index}"),
                        published: presence(p.is_some()),
                        source: presence(s.is_some()),
                    }),
                }
            }
        }
        // Never paired: the key tells singles from batches.
        _ => {}
    }
    out
}

/// What became of one published unit.
enum Outcome {
    /// A source holds it with the same numbers.
    Traced { source: usize },
    /// A source holds the same measurement (same start time) with other numbers.
    Differs { source: usize, diffs: Vec<Diff> },
    /// No source holds it; `other`: the closest other measurement of the slot, if any.
    NoSource { other: Option<(usize, String, Vec<Diff>)> },
}

/// A published unit the hashes did not trace, as the exact comparison found it.
struct Trace {
    /// "batch", "staggered pair" or "record".
    what: &'static str,
    run_id: String,
    cell: CellKey,
    started_at: String,
    outcome: Outcome,
}

/// A published input traced to its claimed sources: what every provenance rule reads.
pub struct Audit<'a> {
    published: &'a Source<Held>,
    sources: &'a [Claimed],
    /// Its units that no source holds with the same numbers, in its order.
    traces: Vec<Trace>,
    /// How many of its units each source holds (with the same numbers or not).
    from: BTreeMap<usize, usize>,
    /// How many of its units were read again to be compared number by number.
    pub(crate) read_again: usize,
}

/// How many units are read again at once: their records and their candidates' are read in one
/// pass over each file (texts that lie near one another in one read).
const UNITS_READ_AT_ONCE: usize = 4096;

impl<'a> Audit<'a> {
    /// Traces every unit of `published`: by its hashes where they tell (`Claims::traced_by_hash`),
    /// else read again, its candidates too, and compared number by number. An error: a text that
    /// cannot be read again as it was read.
    pub(crate) fn of(published: &'a Source<Held>, claims: &'a Claims) -> Result<Audit<'a>, InputError> {
        let units = Units::of(&published.records);
        let mut audit = Audit {
            published,
            sources: &claims.sources,
            traces: Vec::new(),
            from: BTreeMap::new(),
            read_again: 0,
        };
        let mut unresolved = Vec::new();
        for unit in &units.units {
            match claims.traced_by_hash(unit) {
                Some(source) => *audit.from.entry(source).or_default() += 1,
                None => unresolved.push(*unit),
            }
        }
        audit.read_again = unresolved.len();
        for some in unresolved.chunks(UNITS_READ_AT_ONCE) {
            audit.trace_exactly(some, &units, claims)?;
        }
        Ok(audit)
    }

    /// Reads `some` of the published units again, and their candidates, and traces them.
    fn trace_exactly(&mut self, some: &[HeldUnit], units: &Units, claims: &Claims) -> Result<(), InputError> {
        let published = self.published;
        let whole = |i: usize| published.records[i].whole.as_ref();
        let indices = some.iter().flat_map(|u| units.records(u));
        let mut published = read_again(&path(published), published.texts.as_ref(), whole, indices)?;
        let mut claimed = Vec::new();
        for (at, source) in claims.rereadable.iter().enumerate() {
            let candidates = some.iter().flat_map(|u| claims.candidates(u.key)).filter(|c| c.source == at);
            let indices = candidates.flat_map(|c| source.records(&c.unit));
            let whole = |i: usize| source.whole[i].as_ref();
            claimed.push(read_again(&source.name, source.texts.as_ref(), whole, indices)?);
        }
        for unit in some {
            let records: Vec<Record> =
                units.records(unit).iter().filter_map(|i| published.remove(i)).collect();
            for exact in self::units(&records) {
                let mut candidates: Vec<(usize, Digest)> = Vec::new();
                for c in claims.candidates(unit.key) {
                    let indices = claims.rereadable[c.source].records(&c.unit);
                    let records: Vec<Record> =
                        indices.iter().filter_map(|i| claimed[c.source].get(i).cloned()).collect();
                    let same_key = self::units(&records).into_iter().filter(|u| u.key == exact.key);
                    candidates.extend(same_key.map(|u| (c.source, Digest::of(&u))));
                }
                let outcome = decide(&exact, &candidates);
                if let Outcome::Traced { source } | Outcome::Differs { source, .. } = outcome {
                    *self.from.entry(source).or_default() += 1;
                }
                if !matches!(outcome, Outcome::Traced { .. }) {
                    self.traces.push(Trace {
                        what: what(&exact),
                        run_id: exact.run_id.to_string(),
                        cell: exact.cell.clone(),
                        started_at: exact.started_at.to_string(),
                        outcome,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The records at `indices` of the input `name`, read again: from their `texts`, or kept `whole`.
fn read_again<'a, 'i>(
    name: &str,
    texts: Option<&Texts>,
    whole: impl Fn(usize) -> Option<&'a Record>,
    indices: impl Iterator<Item = &'i u32>,
) -> Result<HashMap<u32, Record>, InputError> {
    let mut out = HashMap::new();
    let mut located = Vec::new();
    let mut indices: Vec<u32> = indices.copied().collect();
    indices.sort_unstable();
    indices.dedup();
    for i in indices {
        match (whole(i as usize), texts) {
            (Some(record), _) => {
                out.insert(i, record.clone());
            }
            (None, Some(texts)) => located.extend(texts.text(i as usize).map(|t| (i, t))),
            (None, None) => {}
        }
    }
    let texts: Vec<_> = located.iter().map(|(_, t)| t).collect();
    let changed =
        "changed while it was being audited (a record read before is not there now): verify it again";
    let mut unparsable = false;
    text::read_each(&texts, |at, bytes| {
        let record = store::parse_record(bytes).map_err(|_| {
            unparsable = true;
            std::io::Error::other(changed)
        })?;
        out.insert(located[at].0, record);
        Ok(())
    })
    .map_err(|e| match unparsable || text::InputFault::of(&e).is_some() {
        true => InputError::new(name, 0, changed),
        false => InputError::new(name, 0, format!("cannot read again: {e}")),
    })?;
    Ok(out)
}

/// What becomes of `unit` against its `candidates` (in order: by source, then as they lie in it):
/// the first without differences, or that started when it did, once sorted by their differences,
/// then by a start of their own, then by source.
fn decide(unit: &Unit, candidates: &[(usize, Digest)]) -> Outcome {
    let mut compared: Vec<(usize, &Digest, Vec<Diff>)> =
        candidates.iter().map(|(i, c)| (*i, c, diff_units(unit, c))).collect();
    compared.sort_by_key(|(i, c, d)| (d.len(), *c.started_at != *unit.started_at, *i));
    match compared.iter().position(|(_, c, d)| d.is_empty() || *c.started_at == *unit.started_at) {
        Some(at) => {
            let (source, _, diffs) = compared.swap_remove(at);
            if diffs.is_empty() { Outcome::Traced { source } } else { Outcome::Differs { source, diffs } }
        }
        None => Outcome::NoSource {
            other: compared.into_iter().next().map(|(i, c, d)| (i, c.started_at.to_string(), d)),
        },
    }
}

fn path<T>(s: &Source<T>) -> String {
    s.path.display().to_string()
}

fn claimed_path(s: &Claimed) -> String {
    s.path.clone()
}

fn what(unit: &Unit) -> &'static str {
    match &unit.body {
        Body::Batch { .. } => "batch",
        Body::Single(Record::Staggered(_)) => "staggered pair",
        Body::Single(_) => "record",
    }
}

pub(crate) fn no_source(audit: &Audit, out: &mut Vec<Finding>) {
    let file = path(audit.published);
    let names: Vec<String> = audit.sources.iter().map(claimed_path).collect();
    for t in &audit.traces {
        let Outcome::NoSource { other } = &t.outcome else { continue };
        let mut message =
            format!("this {} of {file} is in none of its sources ({})", t.what, names.join(", "));
        if let Some((i, started, diffs)) = other {
            message.push_str(&format!(
                "; {} holds another measurement of this cell and run (started {started}, not {}): {}",
                names[*i],
                t.started_at,
                show_diffs(diffs, &names[*i])
            ));
        }
        out.push(Finding::new(RuleId::ProvenanceNoSource, &file, message).at(&t.run_id, &t.cell));
    }
}

pub(crate) fn numbers_differ(audit: &Audit, out: &mut Vec<Finding>) {
    let file = path(audit.published);
    for t in &audit.traces {
        let Outcome::Differs { source, diffs } = &t.outcome else { continue };
        let name = claimed_path(&audit.sources[*source]);
        let message = format!(
            "this {} of {file} (started {}) differs from the same measurement in {name}: {}",
            t.what,
            t.started_at,
            show_diffs(diffs, &name)
        );
        out.push(Finding::new(RuleId::ProvenanceNumbersDiffer, &file, message).at(&t.run_id, &t.cell));
    }
}

/// The settings a metadata document states, by a name shared between our run.json and the
/// origin's metadata where the two mean the same thing.
fn facts(meta: &SourceMeta) -> Vec<(&'static str, String)> {
    let view = &meta.view;
    let mut out = Vec::new();
    if let Some(t) = view.thermal_tolerance() {
        out.push(("thermal tolerance", format!("{t}")));
    }
    if let Some(sha) = view.harness_git_sha() {
        out.push(("harness git sha", sha.to_string()));
    }
    let compact = |v: &serde_json::Value| serde_json::to_string(v).unwrap_or_default();
    match view {
        RunMetaView::Ours(m) => {
            if let Some(h) = &m.harness {
                out.push(("harness version", h.version.clone()));
            }
            let config = m.config.as_ref();
            if let Some(model) = config.and_then(|c| c.model.clone()) {
                out.push(("model", model));
            }
            if let Some(n) = config.and_then(|c| c.output_tokens) {
                out.push(("max tokens", n.to_string()));
            }
            if let Some(hw) = config.and_then(|c| c.physics.as_ref()?.hardware.clone()) {
                out.push(("hardware", hw));
            }
            if let Some(cpu) = m.host.as_ref().and_then(|h| h.cpu_brand.clone()) {
                out.push(("host cpu", cpu));
            }
        }
        RunMetaView::Origin(m) => {
            if let Some(model) = &m.model_id {
                out.push(("model", model.clone()));
            }
            if let Some(n) = &m.metadata.config.output_tokens {
                out.push(("max tokens", n.to_string()));
            }
            if let Some(machine) = m.metadata.machine.as_ref().filter(|v| !v.is_null()) {
                out.push(("machine", compact(machine)));
            }
            if let Some(env) = m.server_env.as_ref().filter(|v| !v.is_null()) {
                out.push(("server settings", compact(env)));
            }
        }
    }
    out
}

fn fact_sets(metas: &[SourceMeta]) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for (name, value) in metas.iter().flat_map(facts) {
        out.entry(name).or_default().insert(value);
    }
    out
}

pub(crate) fn metadata_conflict(audit: &Audit, out: &mut Vec<Finding>) {
    let file = path(audit.published);
    let claimed = fact_sets(&audit.published.run_meta);
    if claimed.is_empty() {
        return;
    }
    for (&i, &records) in &audit.from {
        let name = claimed_path(&audit.sources[i]);
        for (fact, values) in fact_sets(&audit.sources[i].run_meta) {
            let Some(said) = claimed.get(fact) else { continue };
            let unsaid: Vec<&String> = values.difference(said).collect();
            if unsaid.is_empty() {
                continue;
            }
            let join = |v: Vec<&String>| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
            let message = format!(
                "{file} states {fact} {}, but {records} of its measurements (a batch counts once) come from {name}, whose metadata says {}",
                join(said.iter().collect()),
                join(unsaid)
            );
            out.push(Finding::new(RuleId::ProvenanceMetadataConflict, &file, message));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use ttft_results::results::sources::{Detail, load_with};

    fn fixture(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
    }

    fn held(path: &Path) -> Source<Held> {
        load_with(path, Detail::Located).unwrap()
    }

    /// `published` audited against `sources`: its audit's units read again, and the rules of the
    /// traces it left.
    fn audited(published: &Path, sources: &[&Path]) -> (usize, Vec<&'static str>) {
        let mut claims = Claims::default();
        for source in sources {
            claims.add(load_with(source, Detail::Located).unwrap());
        }
        let published = held(published);
        let audit = Audit::of(&published, &claims).unwrap();
        let outcomes = audit.traces.iter().map(|t| match t.outcome {
            Outcome::Traced { .. } => "traced",
            Outcome::Differs { .. } => "differs",
            Outcome::NoSource { .. } => "no source",
        });
        (audit.read_again, outcomes.collect())
    }

    /// A copy of `path` with `edit` applied to its `line`th record (0-based), as a records file.
    fn edited(dir: &Path, path: &Path, line: usize, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut record: serde_json::Value = serde_json::from_str(&lines[line]).unwrap();
        edit(&mut record);
        lines[line] = serde_json::to_string(&record).unwrap();
        let out = dir.join(path.file_name().unwrap());
        std::fs::write(&out, lines.join("\n") + "\n").unwrap();
        out
    }

    /// The hashes trace a faithful copy whole (measurements, staggered pairs, batches, read located
    /// or converted from the origin's format): nothing is read again, where each unit of a slot
    /// has a start of its own. A copy with one number changed, in a member or in a batch's group record, is read
    /// again, that unit alone, and found to differ.
    #[test]
    fn a_faithful_copy_is_traced_by_its_hashes_and_an_edited_unit_is_read_again() {
        for name in ["verify/batch_outlier.jsonl", "verify/clean_m4_pro.jsonl", "origin/small_first.json"] {
            let path = fixture(name);
            assert_eq!(audited(&path, &[&path]), (0, vec![]), "{name}");
        }
        // Units of one slot that started together: the hashes cannot tell which copy the exact
        // comparison takes; read again, each is traced.
        for name in ["verify/paper_run_outlier.jsonl", "verify/staggered_not_overlapped.jsonl"] {
            let path = fixture(name);
            assert_eq!(audited(&path, &[&path]).1, Vec::<&str>::new(), "{name}");
        }
        let dir = tempfile::tempdir().unwrap();
        let batches = fixture("verify/batch_outlier.jsonl");
        let text = std::fs::read_to_string(&batches).unwrap();
        let group = text.lines().position(|l| l.contains("\"record_type\":\"group\"")).unwrap();
        for (line, field) in [(0, "ttft_ms"), (group, "wall_ms")] {
            let copy = edited(dir.path(), &batches, line, |r| r[field] = serde_json::json!(12345.5));
            assert_eq!(audited(&copy, &[&batches]), (1, vec!["differs"]), "{field} edited");
        }
    }

    /// A claimed record that was not located (a pipe, another format) is kept lean: its token
    /// offsets and payloads are not held for the audit; a published one is kept as read, for
    /// verify to judge.
    #[test]
    fn a_claimed_record_kept_whole_is_kept_lean() {
        use ttft_results::results::sources::FromRecord;
        let text = std::fs::read_to_string(fixture("verify/batch_outlier.jsonl")).unwrap();
        let mut record: Record = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        if let Record::Measurement(m) = &mut record {
            m.token_offsets_ms = vec![10.0, 20.0, 30.0];
        }
        let offsets = |r: &Option<Record>| match r {
            Some(Record::Measurement(m)) => m.token_offsets_ms.len(),
            _ => usize::MAX,
        };
        let claimed = held::HeldLean::from_record(record.clone(), Detail::Full);
        assert_eq!(offsets(&claimed.0.whole), 0);
        assert_eq!(offsets(&Held::from_record(record.clone(), Detail::Full).whole), 3);
        assert!(held::HeldLean::from_record(record, Detail::Located).0.whole.is_none());
    }

    /// A published file changed between its reading and the audit's reading it again is named,
    /// never compared as it is now.
    #[test]
    fn a_file_changed_before_it_is_read_again_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let batches = fixture("verify/batch_outlier.jsonl");
        let copy = edited(dir.path(), &batches, 0, |r| r["ttft_ms"] = serde_json::json!(12345.5));
        let mut claims = Claims::default();
        claims.add(load_with(&batches, Detail::Located).unwrap());
        let published = held(&copy);
        let text = std::fs::read_to_string(&copy).unwrap();
        std::fs::write(&copy, text.replacen("12345.5", "54321.5", 1)).unwrap();
        let err = Audit::of(&published, &claims).err().expect("the changed text is refused");
        assert!(err.to_string().starts_with(&format!("{}:", copy.display())), "{err}");
        assert!(err.message.contains("changed while it was being audited"), "{err}");
    }
}
