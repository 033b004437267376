//! Escaping for Markdown tables (the GitHub job summary, `diff --format markdown`). Cells
//! quote tensor names and paths from untrusted checkpoints, so every character that could
//! close the cell, start a link or an image, or open HTML is escaped, and control and
//! invisible characters are written out visibly.

use tensorplay_audit::text::printable;

/// `text` as one table cell.
pub fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in printable(text, false).chars() {
        if matches!(
            c,
            '\\' | '`'
                | '*'
                | '_'
                | '['
                | ']'
                | '('
                | ')'
                | '#'
                | '|'
                | '!'
                | '~'
                | '<'
                | '>'
                | '&'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn a_crafted_name_cannot_break_out_of_its_cell() {
        assert_eq!(cell("model.0.weight"), "model.0.weight");
        assert_eq!(cell("a|b"), "a\\|b");
        assert_eq!(cell("[x](http://e)"), "\\[x\\]\\(http://e\\)");
        assert_eq!(cell("<img src=x>"), "\\<img src=x\\>");
        assert_eq!(cell("w\nx"), "w\\\\u{a}x");
    }
}
