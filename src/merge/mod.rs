//! `bench merge`: many result files -> one canonical file (format in `canonical`).
//!
//! Inputs are anything `results::sources::load` reads. Re-runs replace failures (`combine`), the
//! metadata of every source is kept and disagreements listed (`settings`), and `--expect` checks the result
//! against a scenario's matrix (`expect`). Bad input: exit 2 and nothing written (an input without
//! records is bad input unless `--allow-empty`; so is an output that is one of the raw inputs
//! or lies inside a run directory). Sources of one model that disagree on the server or on what
//! was measured (`settings`): exit 1 and nothing written, unless `--allow-conflicts`. Incomplete
//! (missing or failed cells) with `--expect`: exit 1, file still written; `--allow-incomplete`: 0.

pub mod expect;
pub(crate) mod settings;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::cli::MergeArgs;
use crate::exit::{Failure, Outcome};
use crate::output;
use ttft_model::record::{Record, SCHEMA_VERSION};
use ttft_results::results::canonical::{self, CANONICAL_KIND, Canonical, SourceEntry};
use ttft_results::results::combine;
use ttft_results::results::digest::Kept;
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{Detail, Source, SourceKind, load_all_with, require_records};
use ttft_results::results::text::Text;

/// A merge's document, and where its located records' texts are (`texts[i]` for
/// `doc.records[i]`; see `results::text`).
pub struct Merged<T = Record> {
    pub doc: Canonical<T>,
    pub texts: Vec<Option<Text>>,
}

/// What merge keeps of each record: a located one's digest (its slot, run, start and verdict; its
/// text, beside it, is what merge writes), any other whole (`results::digest`).
pub type Digested = Kept<()>;

/// How merge reads its inputs: located where the texts can be read back (unix), whole elsewhere.
const DETAIL: Detail = if cfg!(unix) { Detail::Located } else { Detail::Full };

/// Builds the canonical document from loaded sources (pure: no clock, no input order). The
/// sources are consumed: their records move into the document. Fails only where a located
/// record's text is not what was read (`results::text`). `T`: the records, or what merge keeps of
/// each (`digest`).
pub fn build<T: Slotted>(sources: Vec<Source<T>>) -> std::io::Result<Merged<T>> {
    let mut entries: Vec<SourceEntry> = sources
        .iter()
        .map(|s| {
            let run_ids: BTreeSet<&str> = s.records.iter().map(T::run_id).collect();
            SourceEntry {
                path: s.path.display().to_string(),
                kind: s.kind.as_str().to_string(),
                records: s.records.len(),
                run_ids: run_ids.into_iter().map(str::to_string).collect(),
                run_meta: s.run_meta.iter().map(|m| m.raw.clone()).collect(),
            }
        })
        .collect();
    entries.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.kind.cmp(&b.kind)));
    let mut ordered: Vec<&Source<T>> = sources.iter().collect();
    ordered.sort_by_key(|s| s.path.display().to_string());
    let conflicts = settings::conflicts(&ordered);
    let combined = combine::combine(sources)?;
    let doc = Canonical {
        schema_version: SCHEMA_VERSION,
        kind: CANONICAL_KIND.to_string(),
        sources: entries,
        conflicts,
        provenance: combined.provenance,
        records: combined.records,
    };
    Ok(Merged { doc, texts: combined.texts })
}

pub fn run(args: &MergeArgs) -> anyhow::Result<Outcome> {
    // Ctrl-C or SIGTERM: exit 130, no temp file left beside the output, the output untouched.
    ttft_results::store::stop_writes_on_signal(crate::exit::INTERRUPTED);
    let expectation = match &args.expect {
        Some(path) => Some(expect::from_scenario(path).map_err(Failure::from)?),
        None => None,
    };
    // Each record located is kept as its digest; its text is what is written.
    let sources: Vec<Source<Digested>> = load_all_with(&args.inputs, DETAIL).map_err(Failure::from)?;
    require_records(&sources, args.allow_empty).map_err(Failure::from)?;
    refuse_output_over_inputs(&args.output, &sources)?;
    let Merged { doc, texts } = build(sources).map_err(|e| Failure::usage(e.to_string()))?;
    for conflict in &doc.conflicts {
        eprintln!("{}", settings::describe(conflict));
    }
    if !doc.conflicts.is_empty() && !args.allow_conflicts {
        eprintln!(
            "the sources disagree on the server or on what was measured ({} conflicts above): \
             their records would be pooled and replace one another; nothing was written to {} \
             (merge runs of one server and settings, or pass --allow-conflicts)",
            doc.conflicts.len(),
            args.output.display()
        );
        ttft_results::results::sources::release(doc);
        return Ok(Outcome::Findings);
    }
    let written = ttft_results::store::write_atomic_with(&args.output, |w| {
        canonical::write_with_texts(&doc, &texts, w)
    });
    if written.is_err() && ttft_results::store::interrupted() {
        eprintln!("interrupted by a signal: nothing was written to {}", args.output.display());
        return Ok(Outcome::Interrupted);
    }
    written.map_err(Failure::from)?;
    let replaced: usize = doc.provenance.replaced.iter().map(|r| r.beat).sum();
    eprintln!(
        "merged {} records from {} sources ({} duplicates set aside, see provenance) -> {}",
        doc.records.len(),
        doc.sources.len(),
        replaced,
        args.output.display()
    );
    // The output path alone on stdout, for scripts (the completeness table of --expect follows).
    output::println(&args.output.display().to_string()).map_err(|e| Failure::io(format!("stdout: {e}")))?;
    let code = check_expectation(args, &doc, expectation);
    ttft_results::results::sources::release(doc);
    code
}

/// Refuses (exit 2, before anything is written) an output that would replace one of the raw
/// inputs (a records file, an origin file) or land inside a run directory: the run could no
/// longer be verified or resumed. Paths are compared resolved, symlinks included. An existing
/// canonical file may be the output: it is replaced whole, after its records were read.
fn refuse_output_over_inputs<T>(output: &Path, sources: &[Source<T>]) -> Result<(), Failure> {
    let out = resolved(output);
    let refuse = |why: String| {
        Err(Failure::usage(format!(
            "-o {}: {why}; writing there would destroy what was measured. Nothing was written: \
             give an output outside the run directories (e.g. results/merged.json)",
            output.display()
        )))
    };
    for source in sources {
        let input = resolved(&source.path);
        match source.kind {
            SourceKind::Canonical => {}
            SourceKind::RunDir if out.starts_with(&input) => {
                return refuse(format!("inside the run directory {}, an input", source.path.display()));
            }
            _ if out == input => {
                return refuse(format!("it is the input {}", source.path.display()));
            }
            _ => {}
        }
    }
    let mut dir = out.parent();
    while let Some(d) = dir {
        if d.join("measurements.jsonl").is_file() || d.join("run.json").is_file() {
            return refuse(format!("inside the run directory {}", d.display()));
        }
        dir = d.parent();
    }
    Ok(())
}

/// `path` with every symlink resolved and made absolute; where the path (or a tail of it) does
/// not exist yet, its deepest existing ancestor resolved and the rest appended.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => resolved(parent).join(name),
        (_, Some(name)) => std::env::current_dir().map(|d| resolved(&d)).unwrap_or_default().join(name),
        _ => path.to_path_buf(),
    }
}

/// With `--expect`: the completeness table, and exit 1 when cells are missing or failed.
fn check_expectation<T: Slotted>(
    args: &MergeArgs,
    doc: &Canonical<T>,
    expectation: Option<expect::Expectation>,
) -> anyhow::Result<Outcome> {
    let Some(expectation) = expectation else {
        return Ok(Outcome::Clean);
    };
    let rows = expect::completeness(&expectation, &doc.records);
    output::print(&expect::render(&rows)).map_err(|e| Failure::io(format!("stdout: {e}")))?;
    let metas: Vec<&serde_json::Value> = doc.sources.iter().flat_map(|s| &s.run_meta).collect();
    output::print(&expect::missing_shards(&expectation, &rows, &metas))
        .map_err(|e| Failure::io(format!("stdout: {e}")))?;
    for conflict in doc.conflicts.iter().filter(|c| c.setting == "output_tokens") {
        let want = expectation.output_tokens.to_string();
        if conflict.values.iter().any(|v| v.value != want) {
            eprintln!("warning: the scenario expects {want} output tokens; sources differ (see conflicts)");
        }
    }
    let complete = !rows.is_empty() && rows.iter().all(expect::ModelCompleteness::is_complete);
    if complete || args.allow_incomplete {
        Ok(Outcome::Clean)
    } else {
        eprintln!(
            "incomplete against {} (use --allow-incomplete to accept)",
            args.expect.as_ref().map_or(String::new(), |p| p.display().to_string())
        );
        Ok(Outcome::Findings)
    }
}
