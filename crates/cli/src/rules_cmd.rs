//! `tensorplay rules` and `tensorplay explain`: the registry, printed.

use crate::exit::ExitStatus;
use crate::table::Table;
use anyhow::bail;
use clap::{Args, ValueEnum};
use tensorplay_audit::registry::{self, RULES};
use tensorplay_audit::suggest;
use tensorplay_audit::text::printable;

#[derive(Debug, Args)]
pub struct RulesArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = RulesFormat::Text)]
    format: RulesFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RulesFormat {
    /// A table for people.
    Text,
    /// A Markdown table, as docs/rules.md holds it.
    Markdown,
    /// One object per rule: code, name, default severity, summary, doc, whether it reads
    /// tensor bytes and may be configured, its tags and security severity.
    Json,
}

pub fn list(args: &RulesArgs) -> anyhow::Result<ExitStatus> {
    match args.format {
        RulesFormat::Text => print(&text_table()),
        RulesFormat::Markdown => print(&markdown_table()),
        RulesFormat::Json => print(&json_list()?),
    }
}

fn json_list() -> anyhow::Result<String> {
    let rules: Vec<serde_json::Value> = RULES
        .iter()
        .map(|rule| {
            serde_json::json!({
                "code": rule.code(),
                "name": rule.name(),
                "severity": rule.default_severity(),
                "summary": rule.summary(),
                "doc": rule.doc(),
                "reads_bytes": rule.reads_bytes(),
                "configurable": rule.configurable(),
                "tags": rule.tags(),
                "security_severity": crate::render::sarif::security_severity(*rule),
            })
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&serde_json::json!({ "rules": rules }))?;
    text.push('\n');
    Ok(text)
}

fn text_table() -> String {
    let mut table = Table::new(&["CODE", "NAME", "SEVERITY", "SUMMARY"]);
    for rule in RULES {
        table.row(vec![
            rule.code().to_string(),
            rule.name().to_owned(),
            rule.default_severity().to_string(),
            rule.summary().to_owned(),
        ]);
    }
    table.render("")
}

fn markdown_table() -> String {
    let mut out = String::from("| code | name | severity | summary |\n|---|---|---|---|\n");
    for rule in RULES {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            markdown_cell(rule.code().as_str()),
            markdown_cell(rule.name()),
            markdown_cell(&rule.default_severity().to_string()),
            markdown_cell(rule.summary()),
        ));
    }
    out
}

/// `text` as one cell of a Markdown table. Only what could end the cell or the row is
/// escaped, so the summaries' code spans still render: a `|` gets a backslash (which GitHub
/// honours inside code spans too) and line breaks and other control characters are written
/// out visibly.
fn markdown_cell(text: &str) -> String {
    printable(text, false).replace('|', "\\|")
}

pub fn explain(rule: &str) -> anyhow::Result<ExitStatus> {
    let Some(rule) = registry::find(rule) else {
        bail!("{}", suggest::unknown_rule(rule));
    };
    let text = format!(
        "{} {} (default severity: {}{})\n\n{}\n",
        rule.code(),
        rule.name(),
        rule.default_severity(),
        if rule.reads_bytes() {
            "; reads tensor bytes"
        } else {
            ""
        },
        rule.doc()
    );
    print(&text)
}

fn print(text: &str) -> anyhow::Result<ExitStatus> {
    crate::exit::print(text)?;
    Ok(ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::{markdown_cell, markdown_table};
    use tensorplay_audit::registry::RULES;

    #[test]
    fn a_cell_cannot_end_its_cell_or_row() {
        assert_eq!(markdown_cell("plain `code` text"), "plain `code` text");
        assert_eq!(markdown_cell("a|b"), "a\\|b");
        assert_eq!(markdown_cell("a\nb\r"), "a\\u{a}b\\u{d}");
    }

    #[test]
    fn the_markdown_table_has_a_row_per_rule() {
        let table = markdown_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), RULES.len() + 2);
        assert_eq!(lines[0], "| code | name | severity | summary |");
        assert!(
            lines[2].starts_with("| TP101 | view-overlap | error | "),
            "{}",
            lines[2]
        );
    }
}
