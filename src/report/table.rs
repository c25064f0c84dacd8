//! Terminal (100 columns) and markdown tables: one table of cells per model, one of staggered pairs.

use super::{CellId, CellStats, QUANTILE_METHOD};
use crate::output::{TableStyle, table, table_text};
use ttft_model::stats::{self, Summary};

pub(crate) use crate::output::short;

/// The median with its interval: "200 (150..260)"; the interval's coverage where it is below 95%
/// ("200 (100..300 75%)", n = 3 to 5); "n<3" where there are too few values for one.
pub(crate) fn median_ci(s: &Summary) -> String {
    match (s.median, s.median_ci_lo, s.median_ci_hi, s.median_ci_level) {
        (None, ..) => "-".into(),
        (m, Some(lo), Some(hi), Some(level)) if level < 0.95 => {
            format!("{} ({}..{} {}%)", short(m), short(Some(lo)), short(Some(hi)), percent(level))
        }
        (m, Some(lo), Some(hi), _) => format!("{} ({}..{})", short(m), short(Some(lo)), short(Some(hi))),
        (m, ..) => format!("{} (n<{})", short(m), stats::MEDIAN_CI_MIN_N),
    }
}

/// 0.75 -> "75", 0.9375 -> "93.8".
fn percent(level: f64) -> String {
    let p = level * 100.0;
    if (p - p.round()).abs() < 0.05 { format!("{p:.0}") } else { format!("{p:.1}") }
}

/// " (n=3)" where a summary's p90 and p99 come from fewer than `stats::TAIL_MIN_N` values: they
/// are then (nearly) its largest value, not a tail, and say so.
fn tail_n(s: &Summary) -> String {
    if s.n < stats::TAIL_MIN_N { format!(" (n={})", s.n) } else { String::new() }
}

/// "p90/p99" of a summary ("-" where there is none), with its n when too few for a tail.
fn tail(s: &Summary) -> String {
    match s.p90 {
        None => "-".into(),
        p90 => format!("{}/{}{}", short(p90), short(s.p99), tail_n(s)),
    }
}

/// "p50/p99", with its n when too few for a tail.
fn p50_p99(s: &Summary) -> String {
    match s.median {
        None => "-".into(),
        m => format!("{}/{}{}", short(m), short(s.p99), tail_n(s)),
    }
}

/// A cell's point in a table, the row's key: its context ("4K", "300"), a dataset row's number
/// ("300 row 2": two rows of one length are two cells), and under `bench load` the level its
/// records were sent at ("4K at 4 users", "4K at 2.5/s": each level is a cell of its own).
pub(crate) fn point(id: &CellId) -> String {
    let mut out = context(id.context_tokens);
    if let Some(row) = id.dataset_row {
        out.push_str(&format!(" row {row}"));
    }
    if let Some(level) = id.level_label() {
        out.push_str(&format!(" at {level}"));
    }
    out
}

/// The speed-up over cold with its interval; "(n<3)" where a side has too few values for one.
fn speedup(c: &CellStats) -> String {
    c.ttft_speedup_vs_cold.as_ref().map_or("-".into(), |r| match (r.ci95_lo, r.ci95_hi) {
        (Some(lo), Some(hi)) => format!("{} ({}..{})", short(r.ratio), short(Some(lo)), short(Some(hi))),
        (..) if r.ratio.is_some() => format!("{} (n<{})", short(r.ratio), stats::RATIO_CI_MIN_N),
        _ => short(r.ratio),
    })
}

/// A context in a table: "4K" for whole multiples of 1024 tokens, "1000" otherwise.
pub(crate) fn context(tokens: u32) -> String {
    if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}K", tokens / 1024)
    } else {
        tokens.to_string()
    }
}

/// Decode rate; for batches with no per-request data (origin imports), the system rate, labelled.
fn decode_or_system(c: &CellStats) -> String {
    match (c.decode_tps.median, c.system_tps.median) {
        (None, Some(sys)) => format!("sys {}", short(Some(sys))),
        (d, _) => short(d),
    }
}

/// The numbers a sweep ends with, one line per cell (staggered pairs left to the report): cache
/// state, context, mode and batch, then TTFT p50/p99, ITL p50/p99 and decode tok/s, each as the
/// report's table shows it (the same `CellStats`), and how many records passed.
pub(crate) fn compact(cells: &[CellStats]) -> String {
    let rows: Vec<[String; 6]> = cells
        .iter()
        .filter(|c| !c.id.scenario.is_staggered())
        .map(|c| {
            [
                c.id.cache_state.as_str().to_string(),
                point(&c.id),
                c.id.mode.short_label().to_string(),
                format!("b{}", c.id.batch_size),
                format!(
                    "TTFT ms p50/p99 {}  ITL ms p50/p99 {}  decode tok/s {}",
                    p50_p99(&c.ttft_ms),
                    p50_p99(&c.itl_ms),
                    decode_or_system(c)
                ),
                format!("{}/{} ok", c.quality_ok, c.records),
            ]
        })
        .collect();
    let width = |i: usize| rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..4).map(width).collect();
    let mut out = String::new();
    for r in &rows {
        out.push_str(&format!(
            "  {:<w0$} {:>w1$} {:<w2$} {:<w3$}  {}  ({})\n",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        ));
    }
    out
}

/// The cell table's header; `cell_row` gives the matching row (markdown and HTML show every
/// column in one table; a terminal's 100 columns cannot hold them, so it shows TTFT and the
/// speed-up, then E2E and the per-token columns, as two tables: `TERMINAL_FIRST`, `TERMINAL_SECOND`).
pub(crate) const CELL_HEADER: [&str; 12] = [
    "ctx",
    "state",
    "mode",
    "B",
    "ok/n",
    "TTFT ms p50 (CI)",
    "TTFT p90/p99",
    "E2E ms p50",
    "x cold (CI)",
    "ITL ms p50/p99",
    "TPOT ms p50",
    "tok/s p50",
];

/// The cell's key columns (ctx .. ok/n), which both terminal tables repeat.
const KEY_COLUMNS: usize = 5;
/// The terminal's first table after the key: TTFT (median, tails) and the speed-up over cold.
const TERMINAL_FIRST: [usize; 3] = [5, 6, 8];
/// The terminal's second table after the key: E2E, then per token (ITL, TPOT, decode rate).
const TERMINAL_SECOND: [usize; 4] = [7, 9, 10, 11];
pub(crate) const PER_TOKEN_TITLE: &str =
    "per request: E2E; per token: ITL (gaps between streamed tokens), TPOT, decode rate";

/// One row of the cell table, as every format shows it.
pub(crate) fn cell_row(c: &CellStats) -> Vec<String> {
    vec![
        point(&c.id),
        c.id.cache_state.as_str().to_string(),
        c.id.mode.short_label().to_string(),
        c.id.batch_size.to_string(),
        format!("{}/{}", c.quality_ok, c.records),
        median_ci(&c.ttft_ms),
        tail(&c.ttft_ms),
        short(c.e2e_ms.median),
        speedup(c),
        p50_p99(&c.itl_ms),
        short(c.tpot_ms.median),
        decode_or_system(c),
    ]
}

pub(crate) const STAGGERED_TITLE: &str = "staggered: user B's first token, ms from user A's send";
pub(crate) const STAGGERED_HEADER: [&str; 6] =
    ["pair", "ctx", "ok/n", "B wait p50 (CI)", "B wait p90/p99", "B wait mean"];

/// One row of the staggered table.
pub(crate) fn staggered_row(c: &CellStats) -> Vec<String> {
    vec![
        c.id.scenario.as_str().trim_start_matches("staggered_").to_string(),
        point(&c.id),
        format!("{}/{}", c.quality_ok, c.records),
        median_ci(&c.user_b_wait_ms),
        tail(&c.user_b_wait_ms),
        short(c.user_b_wait_ms.mean),
    ]
}

/// What the columns mean and how the statistics were made (lines within 100 columns).
pub(crate) fn footnote() -> String {
    format!(
        "ok/n: records that passed quality and carry no error / records. Statistics use passing records only.\n\
         p50 (CI): the median and its distribution-free interval (two order statistics, exact binomial\n\
         coverage >= 95%; n = 3 to 5: min..max with its coverage shown; n<3: none).\n\
         Quantiles (p50, p90, p99): {QUANTILE_METHOD}.\n\
         (n=N) after p90/p99: from fewer than {} values, so (nearly) the largest value, not a tail.\n\
         ITL: gaps between consecutive streamed tokens, all records pooled.\n\
         TPOT: (e2e - ttft) / (output tokens - 1), one value per record.\n\
         x cold: {}; n<{}: no interval\n\
         (fewer values than that on a side).\n",
        stats::TAIL_MIN_N,
        stats::RATIO_METHOD,
        stats::RATIO_CI_MIN_N
    )
}

pub(crate) fn render(cells: &[CellStats], style: TableStyle) -> String {
    let mut out = String::new();
    let mut models: Vec<&str> = cells.iter().map(|c| c.id.model.as_str()).collect();
    models.dedup();
    for model in models {
        let mine: Vec<&CellStats> = cells.iter().filter(|c| c.id.model == model).collect();
        out.push_str(&format!("\n{model}\n\n"));
        let rows: Vec<Vec<String>> =
            mine.iter().filter(|c| !c.id.scenario.is_staggered()).map(|c| cell_row(c)).collect();
        let groups: Vec<Vec<usize>> = match style {
            TableStyle::Markdown => vec![(0..CELL_HEADER.len()).collect()],
            // Each within 100 columns with room for a tail's "(n=3)" and an interval.
            TableStyle::Terminal => vec![
                (0..KEY_COLUMNS).chain(TERMINAL_FIRST).collect(),
                (0..KEY_COLUMNS).chain(TERMINAL_SECOND).collect(),
            ],
        };
        for (i, columns) in groups.iter().enumerate() {
            if i > 0 {
                out.push_str(&format!("\n{PER_TOKEN_TITLE}\n\n"));
            }
            let header: Vec<&str> = columns.iter().map(|&j| CELL_HEADER[j]).collect();
            let mut t = table(style, &header, 1);
            for row in &rows {
                t.add_row(columns.iter().map(|&j| row[j].clone()).collect::<Vec<String>>());
            }
            out.push_str(&table_text(t));
        }
        let staggered: Vec<&&CellStats> = mine.iter().filter(|c| c.id.scenario.is_staggered()).collect();
        if !staggered.is_empty() {
            out.push_str(&format!("\n{STAGGERED_TITLE}\n\n"));
            let mut t = table(style, &STAGGERED_HEADER, 1);
            for c in staggered {
                t.add_row(staggered_row(c));
            }
            out.push_str(&table_text(t));
        }
    }
    out.push('\n');
    out.push_str(&footnote());
    out
}
