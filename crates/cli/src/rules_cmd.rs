//! `tensorplay rules` and `tensorplay explain`: the registry, printed.

use crate::exit::ExitStatus;
use crate::table::Table;
use anyhow::bail;
use tensorplay_audit::registry::{self, RULES};
use tensorplay_audit::suggest;

pub fn list() -> anyhow::Result<ExitStatus> {
    let mut table = Table::new(&["CODE", "NAME", "SEVERITY", "SUMMARY"]);
    for rule in RULES {
        table.row(vec![
            rule.code().to_string(),
            rule.name().to_owned(),
            rule.default_severity().to_string(),
            rule.summary().to_owned(),
        ]);
    }
    print(&table.render(""))
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
