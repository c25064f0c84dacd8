//! Terminal (100 columns) and markdown tables: one table of cells per model, one of staggered pairs.

use comfy_table::presets::{ASCII_MARKDOWN, UTF8_FULL_CONDENSED};
use comfy_table::{CellAlignment, ContentArrangement, Table};

use super::{CellStats, QUANTILE_METHOD, is_staggered};
use crate::record::Mode;
use crate::stats::{self, Summary};

pub const TERMINAL_WIDTH: u16 = 100;

/// Few significant digits: the table is for reading; CSV and JSON carry full precision.
pub fn short(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        // Beyond any real time or rate (a corrupt file): keep the column narrow.
        Some(x) if x.abs() >= 1e9 => format!("{x:.2e}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

fn median_ci(s: &Summary) -> String {
    match (s.median, s.ci95_lo, s.ci95_hi) {
        (None, ..) => "-".into(),
        (m, Some(lo), Some(hi)) => format!("{} ({}..{})", short(m), short(Some(lo)), short(Some(hi))),
        (m, ..) => short(m),
    }
}

fn context(tokens: u32) -> String {
    if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}K", tokens / 1024)
    } else {
        tokens.to_string()
    }
}

fn new_table(width: Option<u16>, header: &[&str]) -> Table {
    let mut t = Table::new();
    match width {
        Some(w) => {
            t.load_preset(UTF8_FULL_CONDENSED)
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(w);
        }
        None => {
            t.load_preset(ASCII_MARKDOWN);
        }
    }
    t.set_header(header.to_vec());
    for i in 1..header.len() {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// Decode rate; for batches with no per-request data (origin imports), the system rate, labelled.
fn decode_or_system(c: &CellStats) -> String {
    match (c.decode_tps.median, c.system_tps.median) {
        (None, Some(sys)) => format!("sys {}", short(Some(sys))),
        (d, _) => short(d),
    }
}

/// The cell table's header; `cell_row` gives the matching row (terminal, markdown and HTML).
pub const CELL_HEADER: [&str; 9] =
    ["ctx", "state", "mode", "B", "ok/n", "TTFT ms median (CI)", "E2E ms med", "tok/s med", "x cold (CI)"];

/// One row of the cell table, as every format shows it.
pub fn cell_row(c: &CellStats) -> Vec<String> {
    let speed = c.ttft_speedup_vs_cold.as_ref().map_or("-".into(), |r| match (r.ci95_lo, r.ci95_hi) {
        (Some(lo), Some(hi)) => format!("{} ({}..{})", short(r.ratio), short(Some(lo)), short(Some(hi))),
        _ => short(r.ratio),
    });
    vec![
        context(c.id.context_tokens),
        c.id.cache_state.as_str().to_string(),
        if c.id.mode == Mode::Streaming { "stream" } else { "non-str" }.to_string(),
        c.id.batch_size.to_string(),
        format!("{}/{}", c.quality_ok, c.records),
        median_ci(&c.ttft_ms),
        short(c.e2e_ms.median),
        decode_or_system(c),
        speed,
    ]
}

pub const STAGGERED_TITLE: &str = "staggered: user B's first token, ms from user A's send";
pub const STAGGERED_HEADER: [&str; 5] = ["pair", "ctx", "ok/n", "B wait median (CI)", "B wait mean"];

/// One row of the staggered table.
pub fn staggered_row(c: &CellStats) -> Vec<String> {
    vec![
        c.id.scenario.as_str().trim_start_matches("staggered_").to_string(),
        context(c.id.context_tokens),
        format!("{}/{}", c.quality_ok, c.records),
        median_ci(&c.user_b_wait_ms),
        short(c.user_b_wait_ms.mean),
    ]
}

/// What the columns mean and how the statistics were made.
pub fn footnote() -> String {
    format!(
        "ok/n: records that passed quality and carry no error / records. Statistics use passing records only.\n\
         CI: {}. Quantiles: {QUANTILE_METHOD}.\nx cold: {}.\n",
        stats::CI_METHOD,
        stats::RATIO_METHOD
    )
}

/// `width`: Some(columns) for a terminal, None for markdown.
pub fn render(cells: &[CellStats], width: Option<u16>) -> String {
    let mut out = String::new();
    let mut models: Vec<&str> = cells.iter().map(|c| c.id.model.as_str()).collect();
    models.dedup();
    for model in models {
        let mine: Vec<&CellStats> = cells.iter().filter(|c| c.id.model == model).collect();
        out.push_str(&format!("\n{model}\n\n"));
        let mut t = new_table(width, &CELL_HEADER);
        for c in mine.iter().filter(|c| !is_staggered(&c.id)) {
            t.add_row(cell_row(c));
        }
        out.push_str(&t.to_string());
        out.push('\n');
        let staggered: Vec<&&CellStats> = mine.iter().filter(|c| is_staggered(&c.id)).collect();
        if !staggered.is_empty() {
            out.push_str(&format!("\n{STAGGERED_TITLE}\n\n"));
            let mut t = new_table(width, &STAGGERED_HEADER);
            for c in staggered {
                t.add_row(staggered_row(c));
            }
            out.push_str(&t.to_string());
            out.push('\n');
        }
    }
    out.push('\n');
    out.push_str(&footnote());
    out
}
