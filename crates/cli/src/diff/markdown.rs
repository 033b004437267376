//! The diff as a pull-request comment: a verdict line and one table row per change.

use super::{counts, describe, names_or_none, signed_bytes};
use crate::render::markdown::cell;
use std::fmt::Write;
use tensorplay_audit::diff::Diff;
use tensorplay_audit::text::{human_bytes, plural};

/// Rows past this are counted, not listed: a comment has a size limit (GitHub: 65 536
/// characters) and nobody reads ten thousand rows.
const MAX_ROWS: usize = 200;

pub fn render(d: &Diff) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(out, "### tensorplay diff: {}\n", cell(&d.new.path))?;
    let verdict = if d.same {
        "**same**".to_owned()
    } else {
        format!("**different**: {}", counts(d).join(", "))
    };
    writeln!(
        out,
        "{} ({}) → {} ({}): {verdict}; {} unchanged. Storage bytes {} → {} ({}).\n",
        cell(&d.old.path),
        d.old.format,
        cell(&d.new.path),
        d.new.format,
        plural(d.unchanged, "tensor"),
        human_bytes(d.old.storage_bytes),
        human_bytes(d.new.storage_bytes),
        signed_bytes(d.bytes_delta())
    )?;
    let mut rows: Vec<[String; 4]> = Vec::new();
    rows.extend(d.added.iter().map(|e| {
        [
            "added".into(),
            cell(&e.name),
            String::new(),
            cell(&describe(e)),
        ]
    }));
    rows.extend(d.removed.iter().map(|e| {
        [
            "removed".into(),
            cell(&e.name),
            cell(&describe(e)),
            String::new(),
        ]
    }));
    rows.extend(d.renamed.iter().map(|r| {
        [
            "renamed".into(),
            format!("{} → {}", cell(&r.from), cell(&r.to)),
            String::new(),
            String::new(),
        ]
    }));
    rows.extend(d.changed.iter().map(|c| {
        [
            c.field.name().into(),
            cell(&c.tensor),
            cell(&c.old),
            cell(&c.new),
        ]
    }));
    rows.extend(d.sharing.iter().map(|s| {
        [
            "shared with".into(),
            cell(&s.tensor),
            names_or_none(&s.old, cell),
            names_or_none(&s.new, cell),
        ]
    }));
    rows.extend(d.values.iter().map(|v| {
        let distance = v
            .max_abs_difference
            .map(|m| format!("max abs difference {m:e}"))
            .unwrap_or_else(|| "contents differ".into());
        ["values".into(), cell(&v.tensor), String::new(), distance]
    }));
    rows.extend(d.values_not_compared.iter().map(|n| {
        [
            "values not compared".into(),
            cell(n),
            String::new(),
            String::new(),
        ]
    }));
    if rows.is_empty() {
        return Ok(out);
    }
    writeln!(
        out,
        "| change | tensor | before | after |\n|---|---|---|---|"
    )?;
    for row in rows.iter().take(MAX_ROWS) {
        writeln!(out, "| {} |", row.join(" | "))?;
    }
    if rows.len() > MAX_ROWS {
        writeln!(
            out,
            "\n…and {} more; `tensorplay diff --format json` lists every change.",
            plural(rows.len() - MAX_ROWS, "row")
        )?;
    }
    Ok(out)
}
