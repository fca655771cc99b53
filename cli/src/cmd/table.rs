//! Every table the CLI prints, through `comfy-table`: plain columns (no borders), header first,
//! numbers right-aligned, no trailing spaces, so the output reads like before and diffs cleanly.

use comfy_table::{CellAlignment, ContentArrangement, Table, presets::NOTHING};

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A table being filled row by row.
#[derive(Debug)]
pub struct Grid {
    table: Table,
    aligns: Vec<Align>,
}

impl Grid {
    /// A table with these column headers and alignments.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        let mut grid = Self::headless(&columns.iter().map(|(_, a)| *a).collect::<Vec<_>>());
        grid.table
            .set_header(columns.iter().map(|(h, _)| *h).collect::<Vec<_>>());
        grid
    }

    /// A table without a header line.
    pub fn headless(aligns: &[Align]) -> Self {
        let mut table = Table::new();
        table
            .load_style(NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled);
        Self {
            table,
            aligns: aligns.to_vec(),
        }
    }

    /// Appends a row (one cell per column).
    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.table
            .add_row(cells.into_iter().map(|c| c.to_string()).collect::<Vec<_>>());
        self
    }

    /// True when no row was added.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.table.row_count() == 0
    }

    /// The table's lines, each indented by `indent` spaces.
    pub fn lines_indented(&mut self, indent: usize) -> Vec<String> {
        for (column, align) in self.table.column_iter_mut().zip(&self.aligns) {
            column.set_cell_alignment(match align {
                Align::Left => CellAlignment::Left,
                Align::Right => CellAlignment::Right,
            });
            // One space between columns; the first one starts at the margin.
            column.set_padding((0, 1));
        }
        let pad = " ".repeat(indent);
        self.table
            .to_string()
            .lines()
            .map(|l| format!("{pad}{}", l.trim_end()))
            .collect()
    }

    /// The table's lines.
    pub fn lines(&mut self) -> Vec<String> {
        self.lines_indented(0)
    }

    /// Prints the table on stdout; stops quietly when stdout is closed (`| head`).
    pub fn print(&mut self) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for line in self.lines() {
            if writeln!(out, "{line}").is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_numbers_right_and_lines_have_no_trailing_space() {
        let mut g = Grid::new(&[("shard", Align::Right), ("name", Align::Left)]);
        g.row(["1", "a"]).row(["10", "long name"]);
        let lines = g.lines();
        assert_eq!(lines, ["shard name", "    1 a", "   10 long name"]);
        assert!(!g.is_empty());
        assert_eq!(
            Grid::headless(&[Align::Left]).row(["x"]).lines_indented(2),
            ["  x"]
        );
    }
}
