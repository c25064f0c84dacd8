//! `bench verify FILE...`: flags impossible or suspicious numbers in result files.
//!
//! Every rule is declared once (`rule::rule_ids!`: its name, severity and reason) and checked by
//! one function in one list, `table::RULES` (record rules, cell rules, cross-input rules);
//! `bench verify --list-rules` prints it.
//!
//! Exit codes: 0 clean (warnings and infos allowed unless --strict); 1 any error, or any warning
//! with --strict; 2 unusable input (unreadable file, an input without records, bad flag).
//!
//! `--format json` prints one object (shape version `verify_schema`, additions only within a
//! version; the types below are the shape):
//! ```text
//! { "verify_schema": 1,
//!   "inputs":   [{"path", "kind", "records"}],
//!   "sources":  [{"path", "kind", "records"}],   // only with --sources: what the inputs were audited against
//!   "physics":  [{"path", "hardware": {name, bandwidth_gbps, tflops} | null, "models": [ModelProfile]}],
//!   "notes":    ["..."],               // e.g. why physics rules were skipped
//!   "findings": [{"severity": "error"|"warning"|"info", "rule", "file", "run_id", "cell": CellKey | null,
//!                 "value", "limit", "unit", "message"}],
//!   "summary":  {"errors", "warnings", "infos", "records", "exit_code"} }
//! ```

mod cells;
mod explain;
mod finding;
mod imported;
mod inputs;
mod judged;
#[cfg(test)]
mod lean_tests;
mod outlier;
mod provenance;
mod records;
pub(crate) mod rule;
mod table;

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use crate::cli::{VerifyArgs, VerifyFormat as Format};
pub(crate) use crate::config::verify::VerifySettings;
use crate::exit::{Failure, Outcome};
use crate::output;
pub(crate) use finding::Finding;
pub(crate) use judged::Judged;
pub(crate) use provenance::{Claims, Held};
pub(crate) use rule::Severity;
use rule::{Input, RuleContext};
use table::Check;
pub use table::RULES;
use ttft_results::physics::{Hardware, ModelProfile};
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{self, Detail, Source};
use ttft_results::store::InputError;

pub fn run(args: &VerifyArgs) -> anyhow::Result<Outcome> {
    if args.list_rules {
        output::print(&table::list())?;
        return Ok(Outcome::Clean);
    }
    let settings = VerifySettings::from_args(args)?;
    // The claimed sources first, one at a time, each held as hashes (`provenance::Held`); then
    // each published input, held so, audited against them and let go. Verify then reads its
    // inputs as it does without --sources: never the audit's records beside its own.
    let mut claims = Claims::default();
    for path in &args.sources {
        let source = sources::load_with(path, Detail::Located);
        let source = source.map_err(|e| Failure::usage(format!("--sources: {e}")))?;
        sources::require_records(std::slice::from_ref(&source), args.allow_empty).map_err(Failure::from)?;
        claims.add(source);
    }
    let mut audited = Vec::new();
    let mut kept: Vec<Option<Source<Judged>>> = Vec::new();
    for path in args.inputs.iter().filter(|_| !claims.sources.is_empty()) {
        let published: Source<Held> = sources::load_with(path, Detail::Located).map_err(Failure::from)?;
        audit(&published, &claims, &mut audited).map_err(Failure::from)?;
        // Records kept whole (not located: a pipe, another format) are judged from these: a pipe
        // cannot be read twice.
        kept.push(if published.records.iter().all(|h| h.whole.is_some()) {
            Some(judged_from(published))
        } else {
            sources::free(published);
            None
        });
    }
    claims.free_held();
    // Located: a record whose lean form hints at a burst its flags do not name is read again
    // whole (`records::burst_unflagged`). Each record is judged as it is read (`judged`).
    let mut sources: Vec<Source<Judged>> = Vec::new();
    for (at, path) in args.inputs.iter().enumerate() {
        match kept.get_mut(at).and_then(Option::take) {
            Some(judged) => sources.push(judged),
            None => sources.push(sources::load_with(path, Detail::Located).map_err(Failure::from)?),
        }
    }
    sources::require_records(&sources, args.allow_empty).map_err(Failure::from)?;
    let mut report = verify_sources(&settings, &sources, &claims, audited);
    sources::release(sources);
    let failed = report.summary.errors > 0 || (args.strict && report.summary.warnings > 0);
    let outcome = Outcome::findings_if(failed);
    report.summary.exit_code = Some(outcome.exit_code());
    sources::release(claims);
    match args.format {
        // Through a Value so keys come out sorted, as they always have.
        Format::Json => output::println(&serde_json::to_string_pretty(&serde_json::to_value(&report)?)?)?,
        Format::Text => output::print(&text(&report, args.strict))?,
    }
    Ok(outcome)
}

fn text(report: &Report, strict: bool) -> String {
    let mut out = String::new();
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    for f in &report.findings {
        out.push_str(&f.line());
        out.push('\n');
    }
    let s = &report.summary;
    out.push_str(&format!(
        "summary: {} error(s), {} warning(s), {} info in {} record(s) from {} input(s){}{}\n",
        s.errors,
        s.warnings,
        s.infos,
        s.records,
        report.inputs.len(),
        match report.sources.len() {
            0 => String::new(),
            n => format!(", audited against {n} source(s)"),
        },
        if strict { " (--strict: warnings fail)" } else { "" }
    ));
    out
}

/// The `--format json` document (`verify_schema` 1).
#[derive(Serialize)]
pub(crate) struct Report {
    pub verify_schema: u32,
    pub inputs: Vec<InputSummary>,
    /// `--sources`, in the order given (absent without the flag, so the shape stays as it was).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<InputSummary>,
    pub physics: Vec<InputPhysicsSummary>,
    pub notes: Vec<String>,
    pub findings: Vec<Finding>,
    pub summary: Summary,
}

#[derive(Serialize)]
pub(crate) struct InputSummary {
    pub path: String,
    pub kind: &'static str,
    pub records: usize,
}

#[derive(Serialize)]
pub(crate) struct InputPhysicsSummary {
    pub path: String,
    pub hardware: Option<Hardware>,
    pub models: Vec<ModelProfile>,
}

#[derive(Serialize)]
pub(crate) struct Summary {
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
    pub records: usize,
    /// Filled once the exit code is known.
    pub exit_code: Option<u8>,
}

/// The provenance rules' findings of a published input (`--sources`, held as hashes) against the
/// claimed sources, added to `findings`. An error: a text that cannot be read again.
fn audit(published: &Source<Held>, claims: &Claims, findings: &mut Vec<Finding>) -> Result<(), InputError> {
    let audit = provenance::Audit::of(published, claims)?;
    for rule in RULES {
        if let Check::Sources(check) = rule.check {
            check(&audit, findings);
        }
    }
    Ok(())
}

/// A published input held whole as verify keeps it, each record judged as read whole.
fn judged_from(published: Source<Held>) -> Source<Judged> {
    Source {
        records: published
            .records
            .into_iter()
            .filter_map(|h| h.whole)
            .map(|r| table::judge(r, Detail::Full))
            .collect(),
        path: published.path,
        kind: published.kind,
        run_meta: published.run_meta,
        texts: published.texts,
        conflicts: published.conflicts,
    }
}

/// Runs every rule of `RULES` over `sources` (each record as verify keeps it, `judged`; lean
/// records are enough: `Record::lean` keeps every field a rule reads, and
/// `lean_and_judged_records_give_the_same_report` holds it): record rules on each record, cell
/// rules on each input, cross-input rules on all inputs together; then the provenance rules'
/// findings (`audited`, against `claims`: none without --sources). Findings: most severe first,
/// then in input order.
pub(crate) fn verify_sources(
    settings: &VerifySettings,
    sources: &[Source<Judged>],
    claims: &Claims,
    audited: Vec<Finding>,
) -> Report {
    let mut report = Report {
        verify_schema: 1,
        inputs: Vec::new(),
        sources: claims
            .sources
            .iter()
            .map(|c| InputSummary { path: c.path.clone(), kind: c.kind, records: c.records })
            .collect(),
        physics: Vec::new(),
        notes: Vec::new(),
        findings: Vec::new(),
        summary: Summary { errors: 0, warnings: 0, infos: 0, records: 0, exit_code: None },
    };
    for src in sources {
        verify_input(settings, src, &mut report);
    }
    let together: Vec<Input> =
        sources.iter().map(|s| Input { file: s.path.display().to_string(), records: &s.records }).collect();
    for rule in RULES {
        if let Check::CrossInput(check) = rule.check {
            check(&together, &mut report.findings);
        }
    }
    report.findings.extend(audited);
    let findings = &mut report.findings;
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    report.summary = Summary {
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        infos: count(Severity::Info),
        records: sources.iter().map(|s| s.records.len()).sum(),
        exit_code: None,
    };
    report
}

fn summary(src: &Source<Judged>) -> InputSummary {
    InputSummary { path: src.path.display().to_string(), kind: src.kind.as_str(), records: src.records.len() }
}

/// The record and cell rules of one input.
fn verify_input(settings: &VerifySettings, src: &Source<Judged>, report: &mut Report) {
    let file = src.path.display().to_string();
    for note in src.run_meta.iter().filter_map(|m| m.raw.get("status_note").and_then(|n| n.as_str())) {
        report.notes.push(format!("{file}: {note}; {}", crate::exit::RESUME_ADVICE));
    }
    if src.run_meta.iter().any(|m| m.view.insecure()) {
        report
            .notes
            .push(format!("{file}: measured with --insecure: the server's TLS certificate was not verified"));
    }
    let phys =
        inputs::resolve(src, &file, settings.hardware.as_ref(), settings.model.as_ref(), &mut report.notes);
    // Each model once (sorted): not a name per record.
    let names: BTreeSet<&str> = src.records.iter().map(|r| r.cell().model.as_str()).collect();
    let names: Vec<String> = names.into_iter().map(str::to_string).collect();
    let models = phys.profiles(&file, &names, &mut report.notes);
    // Looked up for every record by the ceiling rules: found once per model here.
    let profiles: HashMap<&str, ModelProfile> =
        names.iter().filter_map(|name| Some((name.as_str(), phys.model_for(name)?))).collect();
    report.physics.push(InputPhysicsSummary { path: file.clone(), hardware: phys.hardware.clone(), models });
    report.inputs.push(summary(src));
    let model_for = |name: &str| profiles.get(name);
    let ctx = RuleContext {
        file: &file,
        hardware: phys.hardware.as_ref(),
        model_for: &model_for,
        run_json_hardware: phys.run_json_hardware.as_deref(),
        host: phys.host.as_ref().map(|(b, p)| (b.as_str(), *p)),
        min_warm_speedup: settings.min_warm_speedup,
        storage_gbps: settings.storage_gbps,
        stored: phys.stored,
    };
    // Each record's findings in `RULES` order: what it found alone as it was read, then what the
    // ceilings give now.
    for rec in &src.records {
        let measured = rec.measured();
        if rec.found.is_empty() && measured.is_none_or(|m| m.failed) {
            continue;
        }
        for rule in RULES {
            let rated = match rule.check {
                Check::Record(_) => None,
                Check::Rated { rated, .. } => Some(rated),
                _ => continue,
            };
            for f in rec.found.iter().filter(|f| f.rule == rule.id) {
                report.findings.push(Finding { file: file.clone(), ..f.clone() });
            }
            if let (Some(check), Some(m)) = (rated, measured) {
                check(&ctx, m, &mut report.findings);
            }
        }
    }
    for rule in RULES {
        match rule.check {
            Check::Cell(check) => check(&ctx, &src.records, &mut report.findings),
            Check::Input(check) => check(&ctx, src, &mut report.findings),
            _ => {}
        }
    }
}
