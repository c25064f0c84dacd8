//! What a board shows, as text: a few lines, then a table whose columns are padded to their
//! widest cell. The same text is drawn on the terminal and printed when the view ends, so what a
//! user (or a test reading the terminal) sees is what the board computed, cell for cell.

/// A board's frame.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Sheet {
    /// Lines above the table (where the run is, its counts).
    pub lines: Vec<String>,
    pub table: Option<Table>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// The table as lines: the header, then one line per row, columns two spaces apart.
    pub(crate) fn text(&self) -> Vec<String> {
        let columns = self.header.len().max(self.rows.iter().map(Vec::len).max().unwrap_or(0));
        let width = |i: usize| {
            std::iter::once(&self.header)
                .chain(&self.rows)
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..columns).map(width).collect();
        let line = |row: &Vec<String>| {
            let cells: Vec<String> = (0..columns)
                .map(|i| {
                    let c = row.get(i).map_or("", String::as_str);
                    format!("{c:<w$}", w = widths[i])
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        };
        std::iter::once(&self.header).chain(&self.rows).map(line).collect()
    }
}

impl Sheet {
    pub(crate) fn text(&self) -> Vec<String> {
        let mut out = self.lines.clone();
        if let Some(t) = &self.table {
            out.extend(t.text());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let mut t = Table::new(&["state", "n"]);
        t.rows.push(vec!["cold".into(), "12".into()]);
        t.rows.push(vec!["warm".into(), "3".into()]);
        assert_eq!(t.text(), vec!["state  n", "cold   12", "warm   3"]);
    }
}
