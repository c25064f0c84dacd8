//! The terminal table (100 columns) and markdown of `bench compare`.

use std::collections::BTreeSet;

use super::cells::{CellComparison, Metric, MetricComparison, Verdict, Wins};
use super::failures::{InputFailures, Reason};
use super::{CandidateReport, InputInfo, Report};

use crate::output::{TableStyle, short, table, table_text};

/// Ratios keep 3 decimals: near 1 (0.98 vs 1.02) is where they matter.
fn ratio_number(v: f64) -> String {
    if v.abs() >= 1e6 { format!("{v:.2e}") } else { format!("{v:.3}") }
}

fn interval(m: &MetricComparison) -> String {
    match (m.ci95_lo, m.ci95_hi) {
        (Some(lo), Some(hi)) => format!("{}..{}", ratio_number(lo), ratio_number(hi)),
        _ => "-".into(),
    }
}

/// A short name for sentences: the file or directory name, or the whole path when two inputs
/// share a name.
fn names(report: &Report) -> Vec<String> {
    let paths: Vec<&str> = std::iter::once(report.base.path.as_str())
        .chain(report.candidates.iter().map(|c| c.input.path.as_str()))
        .collect();
    let last = |p: &str| p.trim_end_matches('/').rsplit('/').next().unwrap_or(p).to_string();
    let lasts: Vec<String> = paths.iter().map(|p| last(p)).collect();
    paths
        .iter()
        .zip(&lasts)
        .map(|(p, l)| if lasts.iter().filter(|x| *x == l).count() > 1 { p.to_string() } else { l.clone() })
        .collect()
}

/// "base", "cand 1", "cand 2": the inputs' labels in tables.
fn label(i: usize) -> String {
    if i == 0 { "base".into() } else { format!("cand {i}") }
}

fn describe(label: &str, i: &InputInfo) -> String {
    format!(
        "{label:<8}{} ({}, {} records; model {})\n",
        i.path,
        i.kind,
        i.records,
        if i.models.is_empty() { "-".to_string() } else { i.models.join(", ") }
    )
}

pub(crate) fn text(report: &Report, markdown: bool) -> String {
    let names = names(report);
    let base = names.first().cloned().unwrap_or_default();
    let mut out = describe(&label(0), &report.base);
    for (i, c) in report.candidates.iter().enumerate() {
        out.push_str(&describe(&label(i + 1), &c.input));
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    let pct = report.summary.fail_on_regression_pct;
    for (c, name) in report.candidates.iter().zip(names.iter().skip(1)) {
        out.push_str(&format!("\n{}{name} vs {base}\n\n", if markdown { "### " } else { "" }));
        out.push_str(&cells_table(c, markdown, pct));
        out.push('\n');
        out.push_str(&wins_text(c, name, &base));
    }
    out.push_str(&format!("\n{}failures\n\n", if markdown { "### " } else { "" }));
    out.push_str(&failures_table(&report.failures, markdown));
    out.push_str(&format!(
        "\nratio: median(candidate) / median(base), runs pooled.\nmethod: {}.\n\
         Verdicts need the interval to exclude 1: lower is faster for times (ms), higher for rates.\n",
        report.method
    ));
    if let Some(p) = pct {
        out.push_str(&format!(
            "--fail-on-regression {p}: {} significant regression(s) beyond {p}%.\n",
            report.summary.regressions
        ));
    }
    out
}

fn verdict(m: &MetricComparison, pct: Option<f64>) -> String {
    match (pct, m.verdict) {
        (Some(p), _) if m.regressed(p) => format!("SLOWER >{p}%"),
        (_, Verdict::Insufficient) => "too few".into(),
        (_, v) => v.label().to_string(),
    }
}

fn cells_table(c: &CandidateReport, markdown: bool, pct: Option<f64>) -> String {
    let mut t =
        table(style(markdown), &["cell", "metric", "base", "cand", "n", "ratio", "95% CI", "verdict"], 2);
    // A cell's label names every field of its key: it may wrap between words to fit the terminal.
    if let Some(col) = t.column_mut(0) {
        col.remove_constraint();
    }
    let many_models = c.comparison.cells.iter().map(|x| &x.cell.model).collect::<BTreeSet<_>>().len() > 1;
    let mut model = None;
    for cell in &c.comparison.cells {
        if many_models && model != Some(&cell.cell.model) {
            model = Some(&cell.cell.model);
            t.add_row(vec![cell.cell.model.clone()]);
        }
        for (i, m) in cell.metrics.iter().enumerate() {
            t.add_row(vec![
                if i == 0 { cell_label(cell) } else { String::new() },
                m.metric.label().to_string(),
                short(m.base.median),
                short(m.candidate.median),
                format!("{}/{}", m.base.n, m.candidate.n),
                m.ratio.map_or("-".into(), ratio_number),
                interval(m),
                verdict(m, pct),
            ]);
        }
    }
    table_text(t)
}

fn style(markdown: bool) -> TableStyle {
    if markdown { TableStyle::Markdown } else { TableStyle::Terminal }
}

/// The cell in `CellKey`'s one label, as verify names it, without the model (a table of several
/// models says each once): "ctx 1024 warm streaming b1 all runs"; a load level adds its level
/// ("at 4 users").
fn cell_label(c: &CellComparison) -> String {
    let key = c.cell.key();
    match c.cell.level_label() {
        Some(level) => format!("{key:#} at {level}"),
        None => format!("{key:#}"),
    }
}

fn wins_text(c: &CandidateReport, name: &str, base: &str) -> String {
    let w = &c.comparison.wins;
    let primaries: BTreeSet<Metric> = c.comparison.cells.iter().map(|x| x.primary).collect();
    let by: Vec<&str> = Metric::ALL.iter().filter(|m| primaries.contains(m)).map(|m| m.label()).collect();
    let mut s = format!(
        "{name} beats {base} in {} of {} cells, loses {}, {} no difference{} (by {}).\n",
        w.faster,
        w.cells,
        w.slower,
        w.no_difference,
        if w.insufficient > 0 { format!(", {} too few samples", w.insufficient) } else { String::new() },
        if by.is_empty() { "-".to_string() } else { by.join(", ") }
    );
    for (metric, w) in &c.comparison.wins_by_metric {
        if primaries.len() == 1 && primaries.contains(metric) {
            continue;
        }
        s.push_str(&format!("  {}: {}\n", metric.label(), counts(w)));
    }
    let (ob, oc) = (c.comparison.only_in_base.len(), c.comparison.only_in_candidate.len());
    if ob + oc > 0 {
        s.push_str(&format!("  not compared: {ob} cell(s) only in {base}, {oc} only in {name}\n"));
    }
    s
}

fn counts(w: &Wins) -> String {
    let mut s = format!(
        "faster in {} of {}, slower in {}, {} no difference",
        w.faster, w.cells, w.slower, w.no_difference
    );
    if w.insufficient > 0 {
        s.push_str(&format!(", {} too few samples", w.insufficient));
    }
    s
}

fn reasons(f: &InputFailures) -> String {
    let mut parts: Vec<String> = f
        .nonzero()
        .into_iter()
        .map(|(r, n)| match r {
            Reason::OtherError => {
                let kinds: Vec<String> = f.other_errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
                format!("{} {n} ({})", r.label(), kinds.join(", "))
            }
            _ => format!("{} {n}", r.label()),
        })
        .collect();
    if f.server_crash_events > 0 {
        parts.push(format!("server crashes {} (run.json)", f.server_crash_events));
    }
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

fn failures_table(failures: &[InputFailures], markdown: bool) -> String {
    let mut t =
        table(style(markdown), &["input", "status", "cells", "ok", "failed", "unusable", "missing"], 2);
    // Reasons go below the table, one line per input: in a cell they would wrap mid-phrase.
    let mut why = String::new();
    for (i, f) in failures.iter().enumerate() {
        why.push_str(&format!("{}: {}\n", label(i), reasons(f)));
        t.add_row(vec![
            label(i),
            f.status.label().to_string(),
            f.cells.to_string(),
            f.cells_ok.to_string(),
            f.cells_failed.to_string(),
            f.cells_unusable.to_string(),
            f.cells_missing.map_or("-".into(), |n| n.to_string()),
        ]);
    }
    let mut s = table_text(t);
    s.push_str("\nreasons (failed records):\n");
    s.push_str(&why);
    s.push_str(&format!(
        "\nfailed: some record failed, the cell still has usable samples; unusable: none.\n\
         Reasons count failed records, except incomplete batch (batches) and missing (expected\n\
         cell-runs, with --expect). n: usable samples, base/cand. too few: fewer than {} on a side,\n\
         so no interval.\n",
        ttft_model::stats::RATIO_CI_MIN_N
    ));
    s
}
