//! Plain-text tables with columns padded to their widest cell, measured in terminal columns
//! (`unicode-width`: a CJK character takes two).

use unicode_width::UnicodeWidthStr;

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
                    .map(|cell| cell.width())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (cell, width) in row.iter().zip(&widths) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.width() + 2));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn wide_characters_keep_columns_aligned() {
        let mut table = Table::new(&["NAME", "DTYPE"]);
        table.row(vec!["模型.权重".into(), "float16".into()]);
        table.row(vec!["w".into(), "int8".into()]);
        let text = table.render("");
        let columns: Vec<usize> = text
            .lines()
            .map(|l| {
                let at = l.find(['D', 'f', 'i']).expect("second column");
                unicode_width::UnicodeWidthStr::width(&l[..at])
            })
            .collect();
        assert_eq!(columns, [11, 11, 11], "{text}");
    }
}
