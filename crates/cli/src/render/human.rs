//! Output for people: per file, findings grouped by rule with the tensors and the fix, then
//! a summary line. Colour only when asked (a terminal, and `NO_COLOR` unset).

use std::fmt::Write;
use tensorplay_audit::report::Report;
use tensorplay_audit::Severity;

/// Beyond this many, skipped files are counted rather than listed.
const MAX_SKIPPED_LISTED: usize = 10;

/// How to paint.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn severity(self, s: Severity) -> String {
        let code = match s {
            Severity::Error => "1;31",
            Severity::Warning => "1;33",
            Severity::Info => "1;36",
        };
        self.paint(code, s.name())
    }
}

pub fn render(report: &Report, style: Style) -> anyhow::Result<String> {
    let mut out = String::new();
    for file in &report.files {
        let what = match &file.format {
            Some(format) => format!(
                "{format}, {} tensors, {} storages, {} bytes",
                file.tensors, file.storages, file.bytes
            ),
            None => "unreadable".to_owned(),
        };
        writeln!(out, "{} ({what})", style.paint("1", &file.path))?;
        if let (Some(device), Some(memory)) = (&file.device, &file.memory) {
            let verdict = if device.reserved_bytes == memory.reserved_bytes {
                "matches the simulation"
            } else {
                "differs from the simulation"
            };
            writeln!(
                out,
                "  GPU load on {}: {} storages checked, {} failed; reserved {} bytes in {} segments (simulated {}): {verdict}{}",
                device.device,
                device.storages_checked,
                device.storages_failed,
                device.reserved_bytes,
                device.segments,
                memory.reserved_bytes,
                if device.pinned_staging { "" } else { "; pinned memory unavailable, staged through pageable memory" }
            )?;
        }
        if file.findings.is_empty() {
            writeln!(out, "  no findings ({} rules checked)", file.checked.len())?;
        }
        for code in &file.checked {
            for f in file.findings.iter().filter(|f| f.code == *code) {
                writeln!(
                    out,
                    "  {}[{}] {}: {}",
                    style.severity(f.severity),
                    f.code,
                    f.code.name(),
                    f.message
                )?;
                if !f.tensors.is_empty() {
                    writeln!(out, "    tensors: {}", f.tensors.join(", "))?;
                }
                writeln!(out, "    fix: {}", f.fix)?;
            }
        }
        for f in &file.suppressed {
            writeln!(
                out,
                "  suppressed by the baseline: {}[{}] {}: {}",
                f.severity,
                f.code,
                f.code.name(),
                f.message
            )?;
        }
        out.push('\n');
    }
    if report.skipped.len() <= MAX_SKIPPED_LISTED {
        for s in &report.skipped {
            writeln!(out, "skipped {}: {}", s.path, s.reason)?;
        }
    } else {
        writeln!(
            out,
            "skipped {} files that are not checkpoints or are shards of an audited index (the JSON report lists them)",
            report.skipped.len()
        )?;
    }
    if !report.skipped.is_empty() {
        out.push('\n');
    }
    let sum = &report.summary;
    let verdict = if sum.passed {
        style.paint("1;32", "passed")
    } else {
        style.paint("1;31", "FAILED")
    };
    let level = format!("fail-on {}", super::fail_on_name(sum.fail_on));
    writeln!(
        out,
        "{} files, {} tensors, {} storages, {} bytes: {} errors, {} warnings, {} infos, {}{} skipped — {verdict} ({level})",
        sum.files,
        sum.tensors,
        sum.storages,
        sum.bytes,
        sum.errors,
        sum.warnings,
        sum.infos,
        if sum.suppressed > 0 {
            format!("{} suppressed, ", sum.suppressed)
        } else {
            String::new()
        },
        report.skipped.len()
    )?;
    Ok(out)
}
