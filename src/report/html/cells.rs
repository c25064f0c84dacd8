//! The cell tables (the same rows as the terminal and markdown tables: `table::cell_row`), with
//! verify's findings as rows right under the cell they concern, and the plots of each model.
//!
//! A cell row is `<tr class="cell-row" id="cell-N" data-...>` carrying the cell's key; each of its
//! findings is `<tr class="finding SEVERITY" data-cell="cell-N">` in the same `<tbody>`.

use std::collections::BTreeMap;

use maud::{Markup, PreEscaped, html};

use super::page::thead;
use crate::report::plot::Plot;
use crate::report::table::{self, CELL_HEADER, STAGGERED_HEADER, STAGGERED_TITLE};
use crate::report::{CellId, CellStats};
use crate::verify::{Finding, Severity};

/// Findings by the index (in `cells`) of the cell they concern; the rest concern no cell here (a
/// run, a file, or a cell merge set aside).
pub(crate) struct Attached<'a> {
    pub by_cell: BTreeMap<usize, Vec<&'a Finding>>,
    pub elsewhere: Vec<&'a Finding>,
}

/// Places every finding: a finding about a record (one run, one request) concerns the report's
/// cell that pools that record's runs.
pub(crate) fn attach<'a>(findings: &'a [Finding], cells: &[CellStats]) -> Attached<'a> {
    let index: BTreeMap<&CellId, usize> = cells.iter().enumerate().map(|(i, c)| (&c.id, i)).collect();
    // A load level is known by its runs: a finding names a record's key and run, not its level.
    let level_of = |key: &ttft_model::record::CellKey| {
        let bare = CellId::of(key);
        cells.iter().position(|c| {
            c.id.is_load_level()
                && c.load_runs.contains(&key.run)
                && CellId { concurrency: None, offered_rate_per_s: None, ..c.id.clone() } == bare
        })
    };
    let mut attached = Attached { by_cell: BTreeMap::new(), elsewhere: Vec::new() };
    for f in findings {
        let found =
            f.cell.as_ref().and_then(|key| index.get(&CellId::of(key)).copied().or_else(|| level_of(key)));
        match found {
            Some(i) => attached.by_cell.entry(i).or_default().push(f),
            None => attached.elsewhere.push(f),
        }
    }
    attached
}

/// "2 errors, 1 warning" (empty for none), and the worst severity.
fn tally(findings: &[&Finding]) -> (String, Option<Severity>) {
    let mut parts = Vec::new();
    for (sev, one, many) in [
        (Severity::Error, "error", "errors"),
        (Severity::Warning, "warning", "warnings"),
        (Severity::Info, "info", "infos"),
    ] {
        let n = findings.iter().filter(|f| f.severity == sev).count();
        if n > 0 {
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
        }
    }
    (parts.join(", "), findings.iter().map(|f| f.severity).max())
}

pub(crate) fn severity_class(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// One finding's content: severity, rule (its reason on hover), message, and where it was found.
pub(crate) fn finding_html(f: &Finding) -> Markup {
    let place = match (&f.cell, &f.run_id) {
        (Some(c), _) => format!("{c} in {}", f.file),
        (None, Some(run)) => format!("run {run} in {}", f.file),
        (None, None) => f.file.clone(),
    };
    html! {
        span.sev { (f.severity.label()) } " "
        code title=(f.rule.reason()) { (f.rule.as_str()) } " "
        (f.message) " "
        span.muted { "(" (place) ")" }
    }
}

/// Sort keys (numbers) of the cell row's columns, where a column is numeric.
fn sort_keys(c: &CellStats) -> [Option<f64>; CELL_HEADER.len()] {
    let decode = c.decode_tps.median.or(c.system_tps.median);
    [
        Some(f64::from(c.id.context_tokens)),
        None,
        None,
        Some(f64::from(c.id.batch_size)),
        Some(c.quality_ok as f64),
        c.ttft_ms.median,
        c.ttft_ms.p90,
        c.e2e_ms.median,
        c.ttft_speedup_vs_cold.as_ref().and_then(|r| r.ratio),
        c.itl_ms.median,
        c.tpot_ms.median,
        decode,
    ]
}

fn cell_body(i: usize, c: &CellStats, findings: &[&Finding]) -> Markup {
    let (summary, worst) = tally(findings);
    let id = &c.id;
    let rank = worst.map_or(0, |s| s as u8 + 1);
    html! {
        tbody class={ "cell " (worst.map_or("", severity_class)) } {
            tr.cell-row id={ "cell-" (i) } data-model=(id.model) data-scenario=(id.scenario.as_str())
                data-cache-state=(id.cache_state.as_str()) data-mode=(id.mode.as_str())
                data-context-tokens=(id.context_tokens) data-batch-size=(id.batch_size)
                // The key's optional parts: a dataset row, a load level.
                data-dataset-row=[id.dataset_row] data-concurrency=[id.concurrency]
                data-offered-rate-per-s=[id.offered_rate_per_s.map(|rate| rate.0)]
                title={ "scenario " (id.scenario.as_str()) } {
                @for (text, key) in table::cell_row(c).iter().zip(sort_keys(c)) {
                    @match key {
                        // A number that is not finite sorts last (the script reads "" as infinity).
                        Some(k) => td.num data-sort=(if k.is_finite() { k.to_string() } else { String::new() }) { (text) },
                        None => td { (text) },
                    }
                }
                td.verify data-sort=(3 - rank) { (summary) }
            }
            @for f in findings {
                tr class={ "finding " (severity_class(f.severity)) } data-cell={ "cell-" (i) } {
                    td colspan=(CELL_HEADER.len() + 1) { (finding_html(f)) }
                }
            }
        }
    }
}

/// One model's section: its cell table, its staggered table, its plots.
pub(crate) fn model_section(
    model: &str,
    cells: &[CellStats],
    attached: &Attached,
    plots: &[&Plot],
) -> Markup {
    let mine = || cells.iter().enumerate().filter(|(_, c)| c.id.model == model);
    let mut head: Vec<&str> = CELL_HEADER.to_vec();
    head.push("verify");
    let findings_of = |i: usize| attached.by_cell.get(&i).map_or(&[][..], Vec::as_slice);
    let staggered: Vec<(usize, &CellStats)> = mine().filter(|(_, c)| c.id.scenario.is_staggered()).collect();
    html! {
        section.model {
            h2 { (model) }
            table.cells.sortable {
                (thead(&head))
                @for (i, c) in mine().filter(|(_, c)| !c.id.scenario.is_staggered()) {
                    (cell_body(i, c, findings_of(i)))
                }
            }
            @if !staggered.is_empty() {
                h3 { (STAGGERED_TITLE) }
                table.staggered {
                    (thead(&STAGGERED_HEADER))
                    @for (i, c) in &staggered {
                        tbody.cell {
                            tr.cell-row id={ "cell-" (i) } {
                                // The pair's name, then numbers (right-aligned, as in the terminal table).
                                @for (k, text) in table::staggered_row(c).iter().enumerate() {
                                    @if k == 0 { td { (text) } } @else { td.num { (text) } }
                                }
                            }
                            @for f in findings_of(*i) {
                                tr class={ "finding " (severity_class(f.severity)) } data-cell={ "cell-" (i) } {
                                    td colspan=(STAGGERED_HEADER.len()) { (finding_html(f)) }
                                }
                            }
                        }
                    }
                }
            }
            @if !plots.is_empty() {
                div.plots {
                    @for p in plots {
                        figure.plot {
                            // PreEscaped: an SVG document bench drew itself (`report::plot`, the
                            // file `--plot` writes); plotters escapes the text it places in it (model
                            // names in titles and legends), so it is markup to embed, not text.
                            (PreEscaped(strip_prolog(&p.svg)))
                            figcaption { (p.file_name) }
                        }
                    }
                }
            }
        }
    }
}

/// An SVG document as an element to embed: anything before `<svg` (an XML declaration, which
/// has no place inside HTML) is dropped.
fn strip_prolog(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}
