//! What `tensorplay audit` prints on stdout: the human report (the default, so a CI job's
//! log always ends with the verdict), the JSON report (`--ci-mode`, kept for scripts that
//! read it), GitHub annotations followed by the human report, SARIF, or a CycloneDX BOM.

use super::{cyclonedx, human, json, sarif};
use clap::ValueEnum;
use tensorplay_audit::report::Report;

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Findings per file, then the verdict line.
    Human,
    /// The JSON report.
    Json,
    /// GitHub workflow annotations, then the human report; a job summary when the runner
    /// asks for one.
    Github,
    /// SARIF 2.1.0, for code scanning uploads and SARIF viewers reading a pipe.
    Sarif,
    /// A CycloneDX 1.6 bill of materials: the model, its files with their SHA-256, the
    /// verdict.
    Cyclonedx,
}

impl Format {
    /// The format asked for; without one, `github` inside GitHub Actions, else `human`.
    pub fn choose(asked: Option<Format>, ci_mode: bool) -> Format {
        match asked {
            Some(format) => format,
            None if ci_mode => Format::Json,
            None if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") => Format::Github,
            None => Format::Human,
        }
    }
}

pub fn render(report: &Report, format: Format, style: human::Style) -> anyhow::Result<String> {
    Ok(match format {
        Format::Human => human::render(report, style)?,
        Format::Json => json_printable(&json::render(report)?),
        // The annotations are commands, printed apart (`exit::print_commands`).
        Format::Github => human::render(report, style)?,
        Format::Sarif => json_printable(&sarif::render(report)?),
        Format::Cyclonedx => json_printable(&cyclonedx::render(report)?),
    })
}

/// A JSON document with the characters every report shows escaped (bidi controls,
/// zero-width characters, noncharacters) written as `\uXXXX`: the same document, whose
/// names a terminal showing it cannot reorder. serde_json escapes control characters inside
/// strings itself, so those left are the document's own whitespace; outside strings JSON is
/// ASCII, so every other such character is inside a string.
fn json_printable(text: &str) -> String {
    let escaped = |c: char| tensorplay_audit::text::hidden(c) && !c.is_control();
    if !text.chars().any(escaped) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if escaped(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::json_printable;

    #[test]
    fn json_keeps_its_strings_but_shows_hidden_characters_escaped() {
        let text = serde_json::to_string_pretty(&["a\u{202e}b\u{1fffe}\u{1b}"]).unwrap();
        let shown = json_printable(&text);
        assert_eq!(shown, "[\n  \"a\\u202eb\\ud83f\\udffe\\u001b\"\n]");
        let back: Vec<String> = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, ["a\u{202e}b\u{1fffe}\u{1b}"]);
    }
}
