//! Output for people: per file, findings grouped by rule with the tensors and the fix, then
//! a summary line. Sizes in binary units (the JSON report keeps exact bytes). Colour only
//! when `crate::color` says so.

use anstyle::{AnsiColor, Style as Paint};
use std::fmt::Write;
use tensorplay_audit::report::Report;
use tensorplay_audit::text::{human_bytes, plural};
use tensorplay_audit::Severity;

/// Beyond this many, skipped files are counted rather than listed.
const MAX_SKIPPED_LISTED: usize = 10;

/// How to paint.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    fn paint(self, paint: Paint, text: &str) -> String {
        if self.color {
            format!("{paint}{text}{paint:#}")
        } else {
            text.to_owned()
        }
    }

    fn severity(self, s: Severity) -> String {
        let color = match s {
            Severity::Error => AnsiColor::Red,
            Severity::Warning => AnsiColor::Yellow,
            Severity::Info => AnsiColor::Cyan,
        };
        self.paint(bold(Some(color)), s.name())
    }
}

fn bold(color: Option<AnsiColor>) -> Paint {
    Paint::new().bold().fg_color(color.map(Into::into))
}

pub fn render(report: &Report, style: Style) -> anyhow::Result<String> {
    let mut out = String::new();
    for file in &report.files {
        let what = match &file.format {
            Some(format) => format!(
                "{format}, {}, {}, {}",
                plural(file.tensors, "tensor"),
                plural(file.storages, "storage"),
                human_bytes(file.bytes)
            ),
            None => "unreadable".to_owned(),
        };
        writeln!(out, "{} ({what})", style.paint(bold(None), &file.path))?;
        if let (Some(device), Some(memory)) = (&file.device, &file.memory) {
            let verdict = if device.reserved_bytes == memory.reserved_bytes {
                "matches the simulation"
            } else {
                "differs from the simulation"
            };
            writeln!(
                out,
                "  GPU load on {}: {} checked, {} failed; reserved {} in {} (simulated {}): {verdict}{}",
                device.device,
                plural(device.storages_checked, "storage"),
                device.storages_failed,
                human_bytes(device.reserved_bytes),
                plural(device.segments, "segment"),
                human_bytes(memory.reserved_bytes),
                if device.pinned_staging { "" } else { "; pinned memory unavailable, staged through pageable memory" }
            )?;
        }
        if file.findings.is_empty() {
            writeln!(
                out,
                "  no findings ({} checked)",
                plural(file.checked.len(), "rule")
            )?;
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
        if !file.allowed_globals.is_empty() {
            writeln!(
                out,
                "  allowed by [pickle] allow_globals (never executed): {}",
                file.allowed_globals.join(", ")
            )?;
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
            "skipped {} that are not checkpoints or are shards of an audited index (the JSON report lists them)",
            plural(report.skipped.len(), "file")
        )?;
    }
    if !report.skipped.is_empty() {
        out.push('\n');
    }
    let sum = &report.summary;
    let verdict = if sum.passed {
        style.paint(bold(Some(AnsiColor::Green)), "passed")
    } else {
        style.paint(bold(Some(AnsiColor::Red)), "FAILED")
    };
    let level = format!("fail-on {}", super::fail_on_name(sum.fail_on));
    writeln!(
        out,
        "{}, {}, {}, {}: {}, {}, {}, {}{} skipped — {verdict} ({level})",
        plural(sum.files, "file"),
        plural(sum.tensors, "tensor"),
        plural(sum.storages, "storage"),
        human_bytes(sum.bytes),
        plural(sum.errors, "error"),
        plural(sum.warnings, "warning"),
        plural(sum.infos, "info"),
        if sum.suppressed > 0 {
            format!("{} suppressed, ", sum.suppressed)
        } else {
            String::new()
        },
        report.skipped.len()
    )?;
    Ok(out)
}
