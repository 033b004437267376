//! The JSON report: the `Report` serialised as it is (`schema_version` 1).

use tensorplay_audit::report::Report;

pub fn render(report: &Report) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(report)?;
    text.push('\n');
    Ok(text)
}
