//! Where a config problem is, and the source line with a caret under it, as compilers show
//! (a leaf: the config reader finds problems, errors print them):
//!
//! ```text
//!   3 | TP999 = "error"
//!     | ^^^^^
//! ```

use std::ops::Range;

/// A place in the file: 1-based line and column (in characters), and how many characters
/// to underline on that line (at least one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Spot {
    /// 1-based line.
    pub line: usize,
    /// 1-based column in characters; 0 when only the line is known.
    pub column: usize,
    /// Characters to underline, within the line.
    pub width: usize,
}

impl Spot {
    /// The spot of a byte span of `text` (a span past the end points after the last character).
    pub fn of(text: &str, span: Range<usize>) -> Spot {
        let start = floor_char(text, span.start);
        let before = &text[..start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let rest = &text[start..];
        let line_rest = rest.split('\n').next().unwrap_or_default();
        let end = floor_char(text, span.end.max(start)) - start;
        let width = line_rest
            .get(..end.min(line_rest.len()))
            .map_or(0, |s| s.trim_end_matches('\r').chars().count());
        Spot {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            width: width.max(1),
        }
    }
}

/// One thing wrong in a config file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// 1-based column in characters; 0 when only the line is known.
    pub column: usize,
    /// Characters the problem covers from `column`, on its line.
    pub width: usize,
    /// What is wrong there.
    pub detail: String,
}

impl Problem {
    /// A problem at a spot.
    pub fn new(spot: Spot, detail: impl Into<String>) -> Problem {
        Problem {
            line: spot.line,
            column: spot.column,
            width: spot.width,
            detail: detail.into(),
        }
    }

    /// Where it is.
    pub fn spot(&self) -> Spot {
        Spot {
            line: self.line,
            column: self.column,
            width: self.width,
        }
    }
}

/// The diagram under a problem: the source line, numbered, and carets under the spot; empty
/// when the line is not in `text` or the column is unknown. Each line starts with two spaces
/// so that the CLI prints it as it is, under its `error:` line.
pub fn diagram(text: &str, spot: Spot) -> Vec<String> {
    let Some(source) = text.lines().nth(spot.line.wrapping_sub(1)) else {
        return Vec::new();
    };
    if spot.column == 0 {
        return Vec::new();
    }
    let number = spot.line.to_string();
    let gutter = " ".repeat(number.len());
    // Tabs are kept in the padding so the caret lines up however the terminal expands them.
    let pad: String = source
        .chars()
        .take(spot.column - 1)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    vec![
        format!("  {number} | {source}"),
        format!("  {gutter} | {pad}{}", "^".repeat(spot.width)),
    ]
}

/// The largest char boundary at or before `at`, within the text.
fn floor_char(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::{diagram, Spot};

    #[test]
    fn spots_count_lines_and_characters() {
        let text = "a = 1\n[rules]\nTP999 = \"error\"\n";
        let at = text.find("TP999").unwrap_or(0);
        let spot = Spot::of(text, at..at + 5);
        assert_eq!(
            spot,
            Spot {
                line: 3,
                column: 1,
                width: 5
            }
        );
        assert_eq!(
            diagram(text, spot),
            ["  3 | TP999 = \"error\"", "    | ^^^^^"]
        );
        let at = text.find("\"error\"").unwrap_or(0);
        assert_eq!(
            diagram(text, Spot::of(text, at..at + 7)),
            ["  3 | TP999 = \"error\"", "    |         ^^^^^^^"]
        );
    }

    #[test]
    fn odd_spans_stay_on_their_line() {
        let text = "é = [\n  1,\n]\n";
        // A multi-line span underlines to the end of its first line.
        assert_eq!(
            Spot::of(text, 5..text.len()),
            Spot {
                line: 1,
                column: 5,
                width: 1
            }
        );
        // Past the end, and inside a character: still a spot, never a panic.
        assert_eq!(Spot::of(text, 100..200).line, 4);
        assert_eq!(Spot::of(text, 1..1).column, 1);
        assert!(diagram(text, Spot::default()).is_empty());
    }
}
