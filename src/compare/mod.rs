//! `bench compare BASE CAND [CAND...]`: which build is faster, with what confidence, and what
//! failed. Documented for users in docs/compare.md.
//!
//! Each input is read with the one loader (run directories, `.jsonl`, canonical files, the origin's
//! JSON) and de-duplicated with merge's rules; a cell is (model, scenario, cache state, mode,
//! context, batch size) with every run pooled, and its samples are exactly the ones `bench report`
//! uses. Per cell present in both: median(candidate) / median(base) of every metric either side
//! measured, with the 95% percentile bootstrap interval of `stats` (fixed seed: the same inputs
//! give the same verdicts), and a verdict that says "faster" or "slower" only when the interval
//! excludes 1 (`cells`). What failed in each input is categorised from its records (`failures`).
//!
//! Exit codes: 0 compared; 1 with `--fail-on-regression PCT` when a candidate is significantly
//! more than PCT% slower than the base on any metric of any cell; 2 bad input (flags, unreadable
//! files as `file:line`, an input without records or a candidate sharing no cell with the base,
//! unless `--allow-empty`).
//!
//! `--format json` prints one object (shape version `compare_schema`; additions only within a
//! version; keys sorted):
//! ```text
//! { "compare_schema": 1,
//!   "method": "ratio of medians, 95% percentile bootstrap (...)",
//!   "base": Input,
//!   "candidates": [ Input + { "matched_by": "cell"|"cell_without_model",
//!       "cells": [{ "cell": {model, scenario, cache_state, mode, context_tokens, batch_size},
//!                   "candidate_model", "primary": Metric, "verdict": Verdict,
//!                   "metrics": [{ "metric": Metric, "better": "lower"|"higher",
//!                                 "base": {n, median}, "candidate": {n, median},
//!                                 "ratio", "ci95_lo", "ci95_hi", "verdict": Verdict }] }],
//!       "only_in_base": [cell], "only_in_candidate": [cell],
//!       "wins": Wins, "wins_by_metric": {Metric: Wins},
//!       "regressions": [{ "cell", "metric", "ratio", "ci95_lo", "ci95_hi" }] } ],
//!   "failures": [{ "path", "role": "base"|"candidate", "status": "complete"|"partial"|"unusable",
//!                  "cells", "cells_ok", "cells_failed", "cells_unusable", "cells_missing",
//!                  "failed_records", "reasons": {Reason: count}, "other_errors": {kind: count},
//!                  "server_crash_events" (run.json `server_crashes`) }],
//!   "notes": ["..."],
//!   "summary": { "fail_on_regression_pct", "regressions", "exit_code" } }
//! Input   = { "path", "kind", "records", "models": [..] }
//! Metric  = "ttft_ms" | "e2e_ms" | "user_b_wait_ms" | "system_tps" | "decode_tps"
//! Verdict = "faster" | "slower" | "no_difference" | "insufficient"
//! Wins    = { "cells", "faster", "slower", "no_difference", "insufficient" }
//! Reason  = "server_crash" | "timeout" | "http_5xx" | "rate_limited" | "quality_gate"
//!         | "cache_state_unconfirmed" | "unsupported" | "incomplete_batch"
//!         | "missing_from_matrix" | "other_error"
//! ```

pub(crate) mod cells;
pub(crate) mod failures;
mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use crate::cli::{CompareArgs, CompareFormat as Format};
use crate::exit::{Failure, Outcome};
use crate::output;
use crate::report::{CellId, CellSamples, PartialBatches, ReportRecord};
use cells::{Comparison, Metric};
use failures::InputFailures;
use ttft_model::stats;

// The result-file layer (loading, de-duplication): one line to follow if it moves.
use ttft_results::results::combine::combine;
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{self, Detail, Source};

pub(crate) const SCHEMA: u32 = 1;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct InputInfo {
    pub path: String,
    pub kind: &'static str,
    pub records: usize,
    pub models: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Regression {
    pub cell: CellId,
    pub metric: Metric,
    pub ratio: Option<f64>,
    pub ci95_lo: Option<f64>,
    pub ci95_hi: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CandidateReport {
    #[serde(flatten)]
    pub input: InputInfo,
    #[serde(flatten)]
    pub comparison: Comparison,
    pub regressions: Vec<Regression>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Summary {
    pub fail_on_regression_pct: Option<f64>,
    pub regressions: usize,
    pub exit_code: u8,
}

/// The `--format json` document (`compare_schema` 1).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    pub compare_schema: u32,
    pub method: &'static str,
    pub base: InputInfo,
    pub candidates: Vec<CandidateReport>,
    pub failures: Vec<InputFailures>,
    pub notes: Vec<String>,
    pub summary: Summary,
}

fn check_flags(args: &CompareArgs) -> Result<(), Failure> {
    match args.fail_on_regression {
        Some(p) if !(p.is_finite() && (0.0..100.0).contains(&p)) => Err(Failure::usage(format!(
            "--fail-on-regression {p}: a percentage from 0 up to (not including) 100"
        ))),
        _ => Ok(()),
    }
}

/// One input as compare reads it: loaded, de-duplicated, summarised into report's cell samples
/// and its failures, its records let go (a million-record base is not held while a candidate is
/// read).
pub(crate) struct Summarized {
    pub info: InputInfo,
    pub samples: BTreeMap<CellId, CellSamples>,
    pub failures: InputFailures,
}

/// Reads `path` and summarises it; `role` names it in `failures` ("base" or "candidate"). The
/// records of every input but the `last` are freed before the next is read (`sources::free`); the
/// last one's are left to the exit (`sources::release`).
fn summarize(
    path: &Path,
    role: &'static str,
    expect: Option<&crate::config::Expectation>,
    allow_empty: bool,
    last: bool,
) -> Result<Summarized, Failure> {
    // Of each record its digest and what report's statistics and compare's failures read
    // (`report::sampled`); located, so a slot's candidates tie-break on their texts as whole
    // records would (`combine`).
    let source: Source<ReportRecord> = sources::load_with(path, Detail::Located).map_err(Failure::from)?;
    sources::require_records(std::slice::from_ref(&source), allow_empty).map_err(Failure::from)?;
    let shown = source.path.display().to_string();
    let kind = source.kind.as_str();
    let run_meta: Vec<serde_json::Value> = source.run_meta.iter().map(|m| m.raw.clone()).collect();
    let records = combine(vec![source]).map_err(|e| Failure::usage(e.to_string()))?.records;
    // Each model once, not a name per record.
    let models: BTreeSet<&str> = records.iter().map(|r| r.cell().model.as_str()).collect();
    let models: Vec<String> = models.into_iter().map(str::to_string).collect();
    let partial = PartialBatches::of(&records);
    let samples = crate::report::samples(&records, &[], &partial);
    let failures = failures::classify(&shown, role, &run_meta, &records, &samples, &partial, expect);
    // A base's samples are held while the candidate is read: only what compare compares.
    let samples = samples.into_iter().map(|(id, s)| (id, Metric::keep_compared(s))).collect();
    let info = InputInfo { path: shown, kind, records: records.len(), models };
    if last {
        sources::release(records);
    } else {
        sources::free(records);
    }
    Ok(Summarized { info, samples, failures })
}

/// Compares summarised inputs (the first is the base). Pure: no files, no clock.
pub(crate) fn build(inputs: &[Summarized], fail_on_regression: Option<f64>) -> Report {
    let mut notes = Vec::new();
    let mut candidates = Vec::new();
    let Some(base) = inputs.first() else {
        return Report {
            compare_schema: SCHEMA,
            method: stats::RATIO_METHOD,
            base: InputInfo { path: String::new(), kind: "", records: 0, models: Vec::new() },
            candidates,
            failures: Vec::new(),
            notes,
            summary: Summary { fail_on_regression_pct: fail_on_regression, regressions: 0, exit_code: 0 },
        };
    };
    for cand in inputs.iter().skip(1) {
        let comparison = cells::compare(&base.samples, &cand.samples);
        if comparison.matched_by == cells::MatchedBy::CellWithoutModel {
            notes.push(format!(
                "{}: model {} vs the base's {}: cells matched by everything but the model",
                cand.info.path,
                cand.info.models.join(", "),
                base.info.models.join(", ")
            ));
        }
        let regressions = match fail_on_regression {
            Some(pct) => comparison
                .cells
                .iter()
                .flat_map(|c| c.metrics.iter().filter(move |m| m.regressed(pct)).map(move |m| (c, m)))
                .map(|(c, m)| Regression {
                    cell: c.cell.clone(),
                    metric: m.metric,
                    ratio: m.ratio,
                    ci95_lo: m.ci95_lo,
                    ci95_hi: m.ci95_hi,
                })
                .collect(),
            None => Vec::new(),
        };
        candidates.push(CandidateReport { input: cand.info.clone(), comparison, regressions });
    }
    let failures = inputs.iter().map(|input| input.failures.clone()).collect();
    let regressions = candidates.iter().map(|c| c.regressions.len()).sum();
    Report {
        compare_schema: SCHEMA,
        method: stats::RATIO_METHOD,
        base: base.info.clone(),
        candidates,
        failures,
        notes,
        summary: Summary {
            fail_on_regression_pct: fail_on_regression,
            regressions,
            exit_code: Outcome::findings_if(regressions > 0).exit_code(),
        },
    }
}

pub fn run(args: &CompareArgs) -> anyhow::Result<Outcome> {
    check_flags(args)?;
    let expect = match &args.expect {
        Some(path) => Some(crate::config::expectation(path).map_err(Failure::from)?),
        None => None,
    };
    let mut inputs = Vec::with_capacity(1 + args.candidates.len());
    for (i, path) in std::iter::once(&args.base).chain(&args.candidates).enumerate() {
        let role = if i == 0 { "base" } else { "candidate" };
        let last = i == args.candidates.len();
        inputs.push(summarize(path, role, expect.as_ref(), args.allow_empty, last)?);
    }
    let report = build(&inputs, args.fail_on_regression);
    if !args.allow_empty
        && let Some(c) = report.candidates.iter().find(|c| c.comparison.cells.is_empty())
    {
        return Err(Failure::usage(format!(
            "no cell of {} is in {} (models {} vs {}): nothing to compare (pass --allow-empty to accept)",
            c.input.path,
            report.base.path,
            c.input.models.join(", "),
            report.base.models.join(", ")
        ))
        .into());
    }
    match args.format {
        Format::Json => output::println(&serde_json::to_string_pretty(&serde_json::to_value(&report)?)?)?,
        Format::Table => output::print(&render::text(&report, false))?,
        Format::Markdown => output::print(&render::text(&report, true))?,
    }
    Ok(Outcome::findings_if(report.summary.regressions > 0))
}
