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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::finding::Finding;
use super::rule::RuleId;
use ttft_model::record::{CellKey, CellRest, GroupRecord, Measurement, Record, StaggeredRecord};
use ttft_results::results::batch::{batches, in_batch};
use ttft_results::results::run_meta::{RunMetaView, SourceMeta};
use ttft_results::results::sources::Source;

/// What makes two records the same slot: a single record, or a whole batch. Borrowed from the
/// records: a million of them are keyed without a copy of a cell (and compared as `Numbered`).
#[derive(Clone, Copy, Debug)]
enum UnitKey<'a> {
    Single { record_type: &'static str, cell: &'a CellKey, request_index: u32 },
    Batch(&'a CellKey),
}

/// A unit's key as numbers: what it is (a batch, or a record's type), its model's number, the rest
/// of its cell, its request index. Two keys are equal exactly when their `UnitKey`s are.
type Numbered = (u8, u32, CellRest, u32);

/// The claimed sources' models, each given a number.
#[derive(Default)]
struct Models(HashMap<String, u32>);

impl Models {
    /// `key` as numbers, its model numbered if it is new.
    fn number(&mut self, key: &UnitKey) -> Numbered {
        let model = key_cell(key).model.as_str();
        let number = match self.0.get(model) {
            Some(&n) => n,
            None => {
                let next = self.0.len() as u32;
                self.0.insert(model.to_string(), next);
                next
            }
        };
        numbered(key, number)
    }

    /// `key` as numbers, None when no claimed source holds its model.
    fn known(&self, key: &UnitKey) -> Option<Numbered> {
        self.0.get(key_cell(key).model.as_str()).map(|&n| numbered(key, n))
    }
}

fn key_cell<'a>(key: &UnitKey<'a>) -> &'a CellKey {
    match *key {
        UnitKey::Batch(cell) | UnitKey::Single { cell, .. } => cell,
    }
}

fn numbered(key: &UnitKey, model: u32) -> Numbered {
    let (what, cell, request_index) = match *key {
        UnitKey::Batch(cell) => (0, cell, 0),
        UnitKey::Single { record_type, cell, request_index } => {
            let what = match record_type {
                "measurement" => 1,
                "group" => 2,
                "staggered" => 3,
                _ => u8::MAX,
            };
            (what, cell, request_index)
        }
    };
    (what, model, cell.without_model(), request_index)
}

/// A claimed source as the audit names it.
pub(crate) struct Claimed {
    pub(crate) path: String,
    pub(crate) kind: &'static str,
    pub(crate) records: usize,
    run_meta: Vec<SourceMeta>,
}

/// What the audit keeps of a claimed unit: its start and the numbers a published copy must keep
/// (`measurement_numbers` and its kin, values only, in their order), not its records.
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
    match r {
        Record::Measurement(m) => values(measurement_numbers(m)),
        Record::Group(g) => values(group_numbers(g)),
        Record::Staggered(s) => values(staggered_numbers(s)),
    }
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

/// The `--sources` of a verify, as the audit reads them: each source's name and metadata, and every
/// unit's key, start and numbers, sorted by key (stable: a key's candidates in source order, then
/// in their source's order) so a key's candidates lie side by side. A source's records are let go
/// once it is added: the claimed side of a million records is a few hundred bytes a unit here, not
/// a kilobyte a record beside the published side's.
#[derive(Default)]
pub(crate) struct Claims {
    pub(crate) sources: Vec<Claimed>,
    models: Models,
    index: Vec<(Numbered, usize, Digest)>,
}

impl Claims {
    /// Takes what the audit compares of `source`, which is dropped.
    pub(crate) fn add(&mut self, source: Source) {
        let at = self.sources.len();
        for unit in units(&source.records) {
            let key = self.models.number(&unit.key);
            self.index.push((key, at, Digest::of(&unit)));
        }
        let path = source.path.display().to_string();
        let (kind, records) = (source.kind.as_str(), source.records.len());
        self.sources.push(Claimed { path, kind, records, run_meta: source.run_meta });
        self.index.sort_by_key(|(key, ..)| *key);
    }

    /// Every claimed source's candidates for `key`, in order.
    fn candidates(&self, key: &UnitKey) -> &[(Numbered, usize, Digest)] {
        let Some(key) = self.models.known(key) else { return &[] };
        let from = self.index.partition_point(|(c, ..)| *c < key);
        let to = from + self.index[from..].iter().take_while(|(c, ..)| *c == key).count();
        &self.index[from..to]
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

/// A compared value: a rate or time (rounding allowed), a count or a verdict (exact).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Real(Option<f64>),
    Count(Option<u64>),
    Flag(bool),
}

impl Value {
    fn show(self) -> String {
        match self {
            Value::Real(Some(v)) => format!("{v}"),
            Value::Count(Some(n)) => n.to_string(),
            Value::Real(None) | Value::Count(None) => "null".into(),
            Value::Flag(b) => b.to_string(),
        }
    }
}

/// The numbers of a record that a published copy must keep, by name (an array: a million
/// records compared are not a million lists allocated).
type Numbers<const N: usize> = [(&'static str, Value); N];

/// The differences between a published record and its claimed copy's values (the key tells the
/// types apart).
fn diff_record(published: &Record, source: &[Value], out: &mut Vec<Diff>) {
    match published {
        Record::Measurement(p) => diff_numbers("", measurement_numbers(p), source, out),
        Record::Group(p) => diff_numbers("", group_numbers(p), source, out),
        Record::Staggered(p) => diff_numbers("", staggered_numbers(p), source, out),
    }
}

fn measurement_numbers(m: &Measurement) -> Numbers<12> {
    use Value::{Count, Flag, Real};
    [
        ("ttft_ms", Real(m.ttft_ms)),
        ("e2e_ms", Real(m.e2e_ms)),
        ("first_event_ms", Real(m.first_event_ms)),
        ("decode_tps", Real(m.decode_tps)),
        ("prefill_tps", Real(m.prefill_tps)),
        ("reload_ms", Real(m.reload_ms)),
        ("input_tokens", Count(m.input_tokens)),
        ("output_tokens", Count(m.output_tokens)),
        ("cached_tokens", Count(m.cached_tokens)),
        ("max_tokens", Count(Some(u64::from(m.max_tokens)))),
        ("quality_ok", Flag(m.quality_ok)),
        ("failed", Flag(m.error.is_some())),
    ]
}

fn group_numbers(g: &GroupRecord) -> Numbers<9> {
    use Value::{Count, Flag, Real};
    [
        ("wall_ms", Real(Some(g.wall_ms))),
        ("system_tps", Real(g.system_tps)),
        ("per_request_tps", Real(g.per_request_tps)),
        ("avg_ttft_ms", Real(g.avg_ttft_ms)),
        ("avg_e2e_ms", Real(g.avg_e2e_ms)),
        ("total_output_tokens", Count(Some(g.total_output_tokens))),
        ("requests_ok", Count(Some(u64::from(g.requests_ok)))),
        ("requests_failed", Count(Some(u64::from(g.requests_failed)))),
        ("failed", Flag(g.error.is_some())),
    ]
}

fn staggered_numbers(s: &StaggeredRecord) -> Numbers<13> {
    use Value::{Count, Flag, Real};
    [
        ("stagger_delay_ms", Real(s.stagger_delay_ms)),
        ("user_a_ttft_ms", Real(s.user_a_ttft_ms)),
        ("user_a_e2e_ms", Real(s.user_a_e2e_ms)),
        ("user_b_ttft_ms", Real(s.user_b_ttft_ms)),
        ("user_b_e2e_ms", Real(s.user_b_e2e_ms)),
        ("user_b_arrival_ms", Real(s.user_b_arrival_ms)),
        ("user_b_ttft_from_wall_start_ms", Real(s.user_b_ttft_from_wall_start_ms)),
        ("total_wall_ms", Real(s.total_wall_ms)),
        ("system_tps", Real(s.system_tps)),
        ("user_a_output_tokens", Count(s.user_a_output_tokens)),
        ("user_b_output_tokens", Count(s.user_b_output_tokens)),
        ("quality_ok", Flag(s.quality_ok)),
        ("failed", Flag(s.error.is_some())),
    ]
}

/// Whether `published` is `source` as published: equal, or `source` rounded to the decimals
/// `published` shows (Rust prints the shortest text that reads back the same number).
pub(crate) fn same_within_rounding(published: f64, source: f64) -> bool {
    if published == source {
        return true;
    }
    let text = format!("{published}");
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len()).min(15);
    let half_step = 0.5 * 10f64.powi(-(decimals as i32));
    // A hair of relative slack for the binary representation of both numbers.
    (published - source).abs() <= half_step + 1e-12 * published.abs().max(source.abs())
}

fn same(published: Value, source: Value) -> bool {
    match (published, source) {
        (Value::Real(Some(p)), Value::Real(Some(s))) => same_within_rounding(p, s),
        (p, s) => p == s,
    }
}

/// "field: published X, source Y" for every field that differs.
struct Diff {
    field: String,
    published: String,
    source: String,
}

/// `published` against `source`'s values of the same fields (values of another record type, another
/// count of them, are never paired: nothing is compared).
fn diff_numbers<const N: usize>(prefix: &str, published: Numbers<N>, source: &[Value], out: &mut Vec<Diff>) {
    if source.len() != N {
        return;
    }
    for ((field, p), &s) in published.into_iter().zip(source) {
        if !same(p, s) {
            out.push(Diff { field: format!("{prefix}{field}"), published: p.show(), source: s.show() });
        }
    }
}

fn presence(present: bool) -> String {
    if present { "present" } else { "absent" }.into()
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

fn show_diffs(diffs: &[Diff], source: &str) -> String {
    let parts: Vec<String> = diffs
        .iter()
        .map(|d| format!("{} {} published, {} in {source}", d.field, d.published, d.source))
        .collect();
    parts.join("; ")
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

struct Trace<'a> {
    unit: Unit<'a>,
    outcome: Outcome,
}

/// A published input traced to its claimed sources: what every provenance rule reads.
pub struct Audit<'a> {
    published: &'a Source,
    sources: &'a [Claimed],
    traces: Vec<Trace<'a>>,
}

impl<'a> Audit<'a> {
    /// Traces every unit of `published` (a million records are a million lookups: done once,
    /// not once per rule).
    pub(crate) fn of(published: &'a Source, claims: &'a Claims) -> Audit<'a> {
        Audit { published, sources: &claims.sources, traces: trace(published, claims) }
    }
}

fn trace<'a>(published: &'a Source, claims: &Claims) -> Vec<Trace<'a>> {
    let mut out = Vec::new();
    for unit in units(&published.records) {
        let mut compared: Vec<(usize, &Digest, Vec<Diff>)> =
            claims.candidates(&unit.key).iter().map(|(_, i, c)| (*i, c, diff_units(&unit, c))).collect();
        compared.sort_by_key(|(i, c, d)| (d.len(), *c.started_at != *unit.started_at, *i));
        let outcome = match compared
            .iter()
            .position(|(_, c, d)| d.is_empty() || *c.started_at == *unit.started_at)
        {
            Some(at) => {
                let (source, _, diffs) = compared.swap_remove(at);
                if diffs.is_empty() { Outcome::Traced { source } } else { Outcome::Differs { source, diffs } }
            }
            None => Outcome::NoSource {
                other: compared.into_iter().next().map(|(i, c, d)| (i, c.started_at.to_string(), d)),
            },
        };
        out.push(Trace { unit, outcome });
    }
    out
}

fn path(s: &Source) -> String {
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
            format!("this {} of {file} is in none of its sources ({})", what(&t.unit), names.join(", "));
        if let Some((i, started, diffs)) = other {
            message.push_str(&format!(
                "; {} holds another measurement of this cell and run (started {started}, not {}): {}",
                names[*i],
                t.unit.started_at,
                show_diffs(diffs, &names[*i])
            ));
        }
        out.push(Finding::new(RuleId::ProvenanceNoSource, &file, message).at(t.unit.run_id, t.unit.cell));
    }
}

pub(crate) fn numbers_differ(audit: &Audit, out: &mut Vec<Finding>) {
    let file = path(audit.published);
    for t in &audit.traces {
        let Outcome::Differs { source, diffs } = &t.outcome else { continue };
        let name = claimed_path(&audit.sources[*source]);
        let message = format!(
            "this {} of {file} (started {}) differs from the same measurement in {name}: {}",
            what(&t.unit),
            t.unit.started_at,
            show_diffs(diffs, &name)
        );
        out.push(
            Finding::new(RuleId::ProvenanceNumbersDiffer, &file, message).at(t.unit.run_id, t.unit.cell),
        );
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
    // Records of the published file that each source accounts for.
    let mut from: BTreeMap<usize, usize> = BTreeMap::new();
    for t in &audit.traces {
        if let Outcome::Traced { source } | Outcome::Differs { source, .. } = t.outcome {
            *from.entry(source).or_default() += 1;
        }
    }
    for (&i, &records) in &from {
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
    use super::*;

    #[test]
    fn a_published_value_may_round_its_source_but_not_refine_it() {
        assert!(same_within_rounding(798.6, 798.64));
        assert!(same_within_rounding(798.6, 798.55));
        assert!(!same_within_rounding(798.6, 798.7));
        assert!(same_within_rounding(1838.0, 1837.6), "1838 shows no decimals");
        assert!(!same_within_rounding(798.64, 798.6), "more precise than its source");
        assert!(same_within_rounding(0.1 + 0.2, 0.3));
    }
}
