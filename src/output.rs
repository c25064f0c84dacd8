//! Primary output (tables, JSON, paths) goes through here, not `println!`.
//!
//! `println!` panics when stdout is closed early (`bench verify | head -1`). A closed pipe means
//! the reader has what it wanted: bench stops writing to it, but the verb's verdict stands. The
//! exit code is the verb's own (findings stay 1), never 0 for having lost its reader: under
//! `set -o pipefail` a CI gate would otherwise pass a run with errors. No writer here ends the
//! process; `main` maps every verb's result to its code.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use comfy_table::presets::{ASCII_MARKDOWN, UTF8_FULL_CONDENSED};
use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Table, Width};

/// Set once a write found stdout closed; later writes are skipped.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout, every registered secret masked (`secrets::redact`). A broken pipe
/// (the reader went away) is not an error: the text is dropped, as is everything printed after it
/// (`closed` says so); any other failure is returned.
pub(crate) fn print(text: &str) -> io::Result<()> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let text = ttft_model::secrets::redact(text);
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other,
    }
}

/// `print` with a trailing newline.
pub fn println(text: &str) -> io::Result<()> {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    print(&line)
}

/// The width terminal tables are laid out for: a terminal's, wide enough for every column.
pub(crate) const TERMINAL_WIDTH: u16 = 100;

/// How a table is drawn: for people at a terminal (box lines, cells wrapped to fit
/// `TERMINAL_WIDTH`), or as markdown for pasting (one line per row, never wrapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableStyle {
    Terminal,
    Markdown,
}

/// The one way bench builds a table: `header` in the house style, the columns from `right_from`
/// on right-aligned (numbers line up by their units digit; the key columns before them read left
/// to right). Every verb's tables come from here, so they look alike and change together.
///
/// A terminal table wraps cells to fit, between words only (`table_text`), except the first
/// column: it holds the row's key ("PASS 12/12 ...", "4 (stopped)", a model), by which people and
/// `grep` find the row, so it stays on one line and the other columns wrap instead. Where the key
/// and the longest words cannot fit `TERMINAL_WIDTH`, the table runs wider rather than split them.
pub(crate) fn table(style: TableStyle, header: &[&str], right_from: usize) -> Table {
    let mut t = Table::new();
    match style {
        TableStyle::Terminal => {
            t.load_preset(UTF8_FULL_CONDENSED)
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(TERMINAL_WIDTH);
        }
        TableStyle::Markdown => {
            t.load_preset(ASCII_MARKDOWN);
        }
    }
    t.set_header(header.to_vec());
    if style == TableStyle::Terminal
        && let Some(key) = t.column_mut(0)
    {
        key.set_constraint(ColumnConstraint::ContentWidth);
    }
    for i in right_from..header.len() {
        if let Some(col) = t.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// A table as text, ending in a newline (comfy-table's own text has none). No column is narrower
/// than its longest word, so wrapping breaks cells between words ("Output / mismatches"), never
/// inside one ("mismatc / hes").
pub(crate) fn table_text(mut t: Table) -> String {
    let mut longest: Vec<usize> = Vec::new();
    for row in t.header().into_iter().chain(t.row_iter()) {
        for (i, cell) in row.cell_iter().enumerate() {
            let word = cell.content().split_whitespace().map(|w| w.chars().count()).max().unwrap_or(0);
            if longest.len() <= i {
                longest.resize(i + 1, 0);
            }
            longest[i] = longest[i].max(word);
        }
    }
    for (col, word) in t.column_iter_mut().zip(longest) {
        // comfy-table's bounds count the cell's padding too.
        let width = u16::try_from(word).unwrap_or(u16::MAX).saturating_add(col.padding_width());
        if col.constraint().is_none() {
            col.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(width)));
        }
    }
    let mut s = t.to_string();
    s.push('\n');
    s
}

/// A number for a table cell, in few significant digits: tables are for reading; CSV and JSON carry
/// full precision.
pub(crate) fn short(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        // Beyond any real time or rate (a corrupt file): keep the column narrow.
        Some(x) if x.abs() >= 1e9 => format!("{x:.2e}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

/// The rows of the terminal tables in `text` (header rows too), each cell trimmed; a wrapped row's
/// lines are joined back into one (its key, the first cell, is on its first line only). The unit
/// tests of every module that prints a table read it back through this.
#[cfg(test)]
pub(crate) fn table_rows(text: &str) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('│')) {
        let cells: Vec<String> = line.trim_matches('│').split('┆').map(|c| c.trim().to_string()).collect();
        match rows.last_mut() {
            Some(last) if cells[0].is_empty() && last.len() == cells.len() => {
                for (cell, more) in last.iter_mut().zip(cells).filter(|(_, m)| !m.is_empty()) {
                    if !cell.is_empty() {
                        cell.push(' ');
                    }
                    cell.push_str(&more);
                }
            }
            _ => rows.push(cells),
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words stay whole: a column is never narrower than its longest word, and the key column
    /// never wraps, even where the table then runs past `TERMINAL_WIDTH`.
    #[test]
    fn a_terminal_table_wraps_between_words_and_keeps_its_key_whole() {
        let header = ["Key", "Requests passed", "Output mismatches", "Efficiency", "x8 vs one stream"];
        let mut t = table(TableStyle::Terminal, &header, 1);
        t.add_row(vec![
            "PASS 400/400 (50 iterations x 8) and more words to fill the width",
            "1",
            "2",
            "3",
            "4",
        ]);
        let text = table_text(t);
        let rows = table_rows(&text);
        assert_eq!(rows[0], header, "{text}");
        assert_eq!(rows[1][0], "PASS 400/400 (50 iterations x 8) and more words to fill the width", "{text}");
        for word in ["Requests", "mismatches", "Efficiency", "stream"] {
            assert!(text.lines().any(|l| l.contains(&format!(" {word} "))), "{word} split:\n{text}");
        }
    }
}
