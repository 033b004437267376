//! Plain-text tables with columns padded to their widest cell.

/// A table of text cells under a header row.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings.
    pub fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Appends a row. Cells hold names from untrusted files, so control and invisible
    /// characters are escaped: a crafted name cannot rewrite the terminal.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .iter()
                .map(|c| tensorplay_audit::text::printable(c, false))
                .collect(),
        );
    }

    /// Renders with two spaces between columns and no trailing spaces.
    pub fn render(&self, indent: &str) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (cell, width) in row.iter().zip(&widths) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}
