//! The diff for people: one line per change, the verdict last.

use super::{counts, describe, names_or_none, signed_bytes};
use std::fmt::Write;
use tensorplay_audit::diff::Diff;
use tensorplay_audit::manifest::TensorEntry;
use tensorplay_audit::text::{human_bytes, plural, printable};

fn shown(name: &str) -> String {
    printable(name, false)
}

pub fn render(d: &Diff) -> anyhow::Result<String> {
    let mut out = String::new();
    for (word, side) in [("old", &d.old), ("new", &d.new)] {
        writeln!(
            out,
            "{word}: {} ({}, {}, {}, {})",
            shown(&side.path),
            side.format,
            plural(side.tensors, "tensor"),
            plural(side.storages, "storage"),
            human_bytes(side.storage_bytes)
        )?;
    }
    let section = |out: &mut String, title: &str, lines: Vec<String>| -> std::fmt::Result {
        if lines.is_empty() {
            return Ok(());
        }
        writeln!(out, "\n{title} ({}):", lines.len())?;
        for line in lines {
            writeln!(out, "  {line}")?;
        }
        Ok(())
    };
    let entry =
        |sign: char, e: &TensorEntry| format!("{sign} {} {}", shown(&e.name), shown(&describe(e)));
    section(
        &mut out,
        "added",
        d.added.iter().map(|e| entry('+', e)).collect(),
    )?;
    section(
        &mut out,
        "removed",
        d.removed.iter().map(|e| entry('-', e)).collect(),
    )?;
    section(
        &mut out,
        "renamed (same dtype, shape and values)",
        d.renamed
            .iter()
            .map(|r| format!("{} -> {}", shown(&r.from), shown(&r.to)))
            .collect(),
    )?;
    section(
        &mut out,
        "changed",
        d.changed
            .iter()
            .map(|c| {
                format!(
                    "{}: {} {} -> {}",
                    shown(&c.tensor),
                    c.field.name(),
                    shown(&c.old),
                    shown(&c.new)
                )
            })
            .collect(),
    )?;
    section(
        &mut out,
        "storage sharing",
        d.sharing
            .iter()
            .map(|s| {
                format!(
                    "{}: shared with {} -> {}",
                    shown(&s.tensor),
                    names_or_none(&s.old, shown),
                    names_or_none(&s.new, shown)
                )
            })
            .collect(),
    )?;
    section(
        &mut out,
        "values",
        d.values
            .iter()
            .map(|v| {
                let distance = v
                    .max_abs_difference
                    .map(|m| format!("max |difference| {m:e}"))
                    .unwrap_or_else(|| "contents differ".to_owned());
                format!("{}: {distance}", shown(&v.tensor))
            })
            .collect(),
    )?;
    section(
        &mut out,
        "values not compared (bytes not in memory or packed dtype)",
        d.values_not_compared.iter().map(|n| shown(n)).collect(),
    )?;
    writeln!(
        out,
        "\nstorage bytes: {} -> {} ({})",
        human_bytes(d.old.storage_bytes),
        human_bytes(d.new.storage_bytes),
        signed_bytes(d.bytes_delta())
    )?;
    let compared = if d.values_compared {
        "metadata and values"
    } else {
        "metadata only; --values compares contents"
    };
    if d.same {
        writeln!(
            out,
            "same: {} unchanged ({compared})",
            plural(d.unchanged, "tensor")
        )?;
    } else {
        writeln!(
            out,
            "different: {}; {} unchanged ({compared})",
            counts(d).join(", "),
            plural(d.unchanged, "tensor")
        )?;
    }
    Ok(out)
}
