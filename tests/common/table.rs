//! Reads back the tables bench prints (`output::table`: box-drawn for a terminal, or markdown)
//! as header and row cells, so tests assert on columns and rows rather than on spacing.

/// One table: its column names and its rows, each cell trimmed.
#[derive(Debug)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The row whose first cell (the row's key) is `key`.
    pub fn row(&self, key: &str) -> Option<&Vec<String>> {
        self.rows.iter().find(|r| r.first().is_some_and(|c| c == key))
    }

    /// The first row that begins with the cells `prefix` ("4 users", "all").
    pub fn row_with(&self, prefix: &[&str]) -> Option<&Vec<String>> {
        self.rows.iter().find(|r| r.len() >= prefix.len() && r.iter().zip(prefix).all(|(c, p)| c == p))
    }

    /// The cell of row `key` in column `column`.
    pub fn cell(&self, key: &str, column: &str) -> Option<&str> {
        let i = self.header.iter().position(|h| h == column)?;
        self.row(key)?.get(i).map(String::as_str)
    }
}

fn cells(line: &str, edge: char, inner: char) -> Vec<String> {
    let inside = line.trim().trim_start_matches(edge).trim_end_matches(edge);
    inside.split(inner).map(|c| c.trim().to_string()).collect()
}

/// Joins a wrapped line's cells onto the ones above it, column by column.
fn join(into: &mut [String], more: Vec<String>) {
    for (cell, part) in into.iter_mut().zip(more) {
        if !part.is_empty() {
            if !cell.is_empty() {
                cell.push(' ');
            }
            cell.push_str(&part);
        }
    }
}

/// Every table in `text`, in order. A terminal table wraps cells over lines: header lines are
/// joined, and a body line with an empty first cell continues the row above (bench keeps the
/// key column whole, so a row's key is on its first line).
pub fn tables(text: &str) -> Vec<Table> {
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim_end).peekable();
    while let Some(line) = lines.next() {
        if line.starts_with('┌') {
            let mut header: Vec<String> = Vec::new();
            let mut rows: Vec<Vec<String>> = Vec::new();
            let mut in_header = true;
            for line in lines.by_ref() {
                if line.starts_with('└') {
                    break;
                }
                if line.starts_with('╞') {
                    in_header = false;
                    continue;
                }
                let c = cells(line, '│', '┆');
                if in_header {
                    if header.is_empty() { header = c } else { join(&mut header, c) }
                } else if c.first().is_some_and(String::is_empty)
                    && let Some(last) = rows.last_mut()
                {
                    join(last, c);
                } else {
                    rows.push(c);
                }
            }
            out.push(Table { header, rows });
        } else if line.starts_with('|') && lines.peek().is_some_and(|l| l.starts_with("|-")) {
            let header = cells(line, '|', '|');
            lines.next();
            let mut rows = Vec::new();
            while let Some(l) = lines.next_if(|l| l.starts_with('|')) {
                rows.push(cells(l, '|', '|'));
            }
            out.push(Table { header, rows });
        }
    }
    out
}

/// The table whose header begins with `first` (its key column's name).
pub fn find(text: &str, first: &str) -> Table {
    tables(text)
        .into_iter()
        .find(|t| t.header.first().is_some_and(|h| h == first))
        .unwrap_or_else(|| panic!("no table with a first column {first:?} in:\n{text}"))
}
