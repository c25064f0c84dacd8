//! The cell tables (the same rows as the terminal and markdown tables: `table::cell_row`), with
//! verify's findings as rows right under the cell they concern, and the plots of each model.
//!
//! A cell row is `<tr class="cell-row" id="cell-N" data-...>` carrying the cell's key; each of its
//! findings is `<tr class="finding SEVERITY" data-cell="cell-N">` in the same `<tbody>`.

use std::collections::BTreeMap;

use super::page::{el, esc, thead};
use crate::report::plot::Plot;
use crate::report::table::{self, CELL_HEADER, STAGGERED_HEADER, STAGGERED_TITLE};
use crate::report::{CellId, CellStats};
use crate::verify::{Finding, Severity};

/// Findings by the index (in `cells`) of the cell they concern; the rest concern no cell here (a
/// run, a file, or a cell merge set aside).
pub struct Attached<'a> {
    pub by_cell: BTreeMap<usize, Vec<&'a Finding>>,
    pub elsewhere: Vec<&'a Finding>,
}

/// Places every finding: a finding about a record (one run, one request) concerns the report's
/// cell that pools that record's runs.
pub fn attach<'a>(findings: &'a [Finding], cells: &[CellStats]) -> Attached<'a> {
    let index: BTreeMap<&CellId, usize> = cells.iter().enumerate().map(|(i, c)| (&c.id, i)).collect();
    // A load level is known by its runs: a finding names a record's key and run, not its level.
    let level_of = |key: &crate::record::CellKey| {
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

pub fn severity_class(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "info",
    }
}

/// One finding's content: severity, rule (its reason on hover), message, and where it was found.
pub fn finding_html(f: &Finding) -> String {
    let place = match (&f.cell, &f.run_id) {
        (Some(c), _) => format!("{c} in {}", f.file),
        (None, Some(run)) => format!("run {run} in {}", f.file),
        (None, None) => f.file.clone(),
    };
    format!(
        "<span class=\"sev\">{}</span> <code title=\"{}\">{}</code> {} <span class=\"muted\">({})</span>",
        f.severity.label(),
        esc(f.rule.reason()),
        esc(f.rule.as_str()),
        esc(&f.message),
        esc(&place)
    )
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

/// The key's optional parts as attributes: a dataset row, a load level.
fn key_extras(id: &CellId) -> String {
    let mut out = String::new();
    if let Some(row) = id.dataset_row {
        out.push_str(&format!(" data-dataset-row=\"{row}\""));
    }
    if let Some(users) = id.concurrency {
        out.push_str(&format!(" data-concurrency=\"{users}\""));
    }
    if let Some(rate) = id.offered_rate_per_s {
        out.push_str(&format!(" data-offered-rate-per-s=\"{}\"", rate.0));
    }
    out
}

fn cell_body(i: usize, c: &CellStats, findings: &[&Finding]) -> String {
    let (summary, worst) = tally(findings);
    let class = worst.map_or("", severity_class);
    let id = &c.id;
    let mut out = format!(
        "<tbody class=\"cell {class}\"><tr class=\"cell-row\" id=\"cell-{i}\" data-model=\"{}\" \
         data-scenario=\"{}\" data-cache-state=\"{}\" data-mode=\"{}\" data-context-tokens=\"{}\" \
         data-batch-size=\"{}\"{} title=\"{}\">",
        esc(&id.model),
        esc(id.scenario.as_str()),
        esc(id.cache_state.as_str()),
        esc(id.mode.as_str()),
        id.context_tokens,
        id.batch_size,
        key_extras(id),
        esc(&format!("scenario {}", id.scenario.as_str())),
    );
    for (text, key) in table::cell_row(c).iter().zip(sort_keys(c)) {
        match key {
            Some(k) if k.is_finite() => {
                out.push_str(&format!("<td class=\"num\" data-sort=\"{k}\">{}</td>", esc(text)));
            }
            Some(_) => out.push_str(&format!("<td class=\"num\" data-sort=\"\">{}</td>", esc(text))),
            None => out.push_str(&el("td", text)),
        }
    }
    let rank = worst.map_or(0, |s| s as u8 + 1);
    out.push_str(&format!("<td class=\"verify\" data-sort=\"{}\">{}</td></tr>\n", 3 - rank, esc(&summary)));
    for f in findings {
        out.push_str(&format!(
            "<tr class=\"finding {}\" data-cell=\"cell-{i}\"><td colspan=\"{}\">{}</td></tr>\n",
            severity_class(f.severity),
            CELL_HEADER.len() + 1,
            finding_html(f)
        ));
    }
    out.push_str("</tbody>\n");
    out
}

/// One model's section: its cell table, its staggered table, its plots.
pub fn model_section(model: &str, cells: &[CellStats], attached: &Attached, plots: &[&Plot]) -> String {
    let mut out = format!("<section class=\"model\">\n{}\n", el("h2", model));
    let mine = || cells.iter().enumerate().filter(|(_, c)| c.id.model == model);
    let mut head: Vec<&str> = CELL_HEADER.to_vec();
    head.push("verify");
    out.push_str("<table class=\"cells sortable\">\n");
    out.push_str(&thead(&head));
    for (i, c) in mine().filter(|(_, c)| !c.id.scenario.is_staggered()) {
        let findings = attached.by_cell.get(&i).map_or(&[][..], Vec::as_slice);
        out.push_str(&cell_body(i, c, findings));
    }
    out.push_str("</table>\n");
    let staggered: Vec<(usize, &CellStats)> = mine().filter(|(_, c)| c.id.scenario.is_staggered()).collect();
    if !staggered.is_empty() {
        out.push_str(&el("h3", STAGGERED_TITLE));
        out.push_str("\n<table class=\"staggered\">\n");
        out.push_str(&thead(&STAGGERED_HEADER));
        for (i, c) in staggered {
            // The pair's name, then numbers (right-aligned, as in the terminal table).
            let cols: String = table::staggered_row(c)
                .iter()
                .enumerate()
                .map(|(k, t)| if k == 0 { el("td", t) } else { format!("<td class=\"num\">{}</td>", esc(t)) })
                .collect();
            out.push_str(&format!(
                "<tbody class=\"cell\"><tr class=\"cell-row\" id=\"cell-{i}\">{cols}</tr>"
            ));
            for f in attached.by_cell.get(&i).map_or(&[][..], Vec::as_slice) {
                out.push_str(&format!(
                    "<tr class=\"finding {}\" data-cell=\"cell-{i}\"><td colspan=\"{}\">{}</td></tr>",
                    severity_class(f.severity),
                    STAGGERED_HEADER.len(),
                    finding_html(f)
                ));
            }
            out.push_str("</tbody>\n");
        }
        out.push_str("</table>\n");
    }
    if !plots.is_empty() {
        out.push_str("<div class=\"plots\">\n");
        for p in plots {
            out.push_str(&format!(
                "<figure class=\"plot\">{}<figcaption>{}</figcaption></figure>\n",
                strip_prolog(&p.svg),
                esc(&p.file_name)
            ));
        }
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
    out
}

/// An SVG document as an element to embed: anything before `<svg` (an XML declaration, which
/// has no place inside HTML) is dropped.
fn strip_prolog(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}
