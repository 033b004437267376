//! Output for people: per file, findings grouped by rule with the tensors and the fix, then
//! a summary line. Sizes in binary units (the JSON report keeps exact bytes). Colour only
//! when `crate::color` says so.

use anstyle::{AnsiColor, Style as Paint};
use std::fmt::Write;
use tensorplay_audit::report::Report;
use tensorplay_audit::text::{human_bytes, plural, printable};
use tensorplay_audit::Severity;

/// Beyond this many, skipped files are counted rather than listed.
const MAX_SKIPPED_LISTED: usize = 10;

/// Beyond this many, a finding's tensors are cut to the first few and counted (`--verbose`
/// lists them all; the JSON report always does), so a finding over a million tensors stays
/// one readable line.
const MAX_TENSORS_LISTED: usize = 10;

/// How to paint, and how much to list.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    /// Every tensor of every finding, however many.
    pub verbose: bool,
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

/// The names joined, cut to [`MAX_TENSORS_LISTED`] unless `all`.
/// Text from a file (paths, tensor names, messages that quote them) as the log may show it:
/// a crafted name cannot rewrite the line that reports it.
fn shown(text: &str) -> String {
    printable(text, false)
}

fn tensor_list(names: &[String], all: bool) -> String {
    if all || names.len() <= MAX_TENSORS_LISTED {
        return names.join(", ");
    }
    let shown = names.get(..MAX_TENSORS_LISTED).unwrap_or(names);
    format!(
        "{} … and {} more (--verbose lists all)",
        shown.join(", "),
        names.len() - shown.len()
    )
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
        writeln!(
            out,
            "{} ({what})",
            style.paint(bold(None), &shown(&file.path))
        )?;
        if let (Some(device), Some(memory)) = (&file.device, &file.memory) {
            let verdict = if device.reserved_bytes == memory.reserved_bytes {
                "matches the simulation"
            } else {
                "differs from the simulation"
            };
            writeln!(
                out,
                "  GPU load on {}: {} checked, {} failed; reserved {} in {} (simulated {}): {verdict}{}",
                shown(&device.device),
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
                    shown(&f.message)
                )?;
                if !f.tensors.is_empty() {
                    writeln!(
                        out,
                        "    tensors: {}",
                        shown(&tensor_list(&f.tensors, style.verbose))
                    )?;
                }
                writeln!(out, "    fix: {}", shown(&f.fix))?;
            }
        }
        if !file.allowed_globals.is_empty() {
            writeln!(
                out,
                "  allowed by [pickle] allow_globals (never executed): {}",
                shown(&file.allowed_globals.join(", "))
            )?;
        }
        for f in &file.suppressed {
            writeln!(
                out,
                "  suppressed by the baseline: {}[{}] {}: {}",
                f.severity,
                f.code,
                f.code.name(),
                shown(&f.message)
            )?;
        }
        out.push('\n');
    }
    if report.skipped.len() <= MAX_SKIPPED_LISTED {
        for s in &report.skipped {
            writeln!(out, "skipped {}: {}", shown(&s.path), shown(&s.reason))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tensorplay_audit::finding::Finding;
    use tensorplay_audit::registry::RULES;
    use tensorplay_audit::report::{FailOn, FileReport};

    fn report(tensors: usize) -> Report {
        let code = RULES[0].code();
        let names: Vec<String> = (0..tensors).map(|i| format!("layers.{i}.weight")).collect();
        let file = FileReport {
            remote: None,
            path: "many.safetensors".into(),
            format: Some("safetensors".into()),
            tensors,
            storages: tensors,
            bytes: 4 * tensors as u64,
            devices: vec!["cpu".into()],
            dtypes: vec!["float32".into()],
            checked: vec![code],
            findings: vec![Finding {
                code,
                severity: Severity::Warning,
                tensors: names,
                storage: None,
                message: "a finding over many tensors".into(),
                fix: "fix them".into(),
                global: None,
                template: None,
                payload: String::new(),
                fingerprint: String::new(),
            }],
            suppressed: Vec::new(),
            allowed_globals: Vec::new(),
            memory: None,
            device: None,
            layout: None,
        };
        Report::new(vec![file], Vec::new(), FailOn::Error)
    }

    fn plain(verbose: bool) -> Style {
        Style {
            color: false,
            verbose,
        }
    }

    #[test]
    fn many_tensors_are_cut_to_the_first_ten_and_counted() {
        let text = render(&report(25), plain(false)).unwrap();
        insta::assert_snapshot!("human_many_tensors_cut", text);
        assert!(text.contains("layers.9.weight … and 15 more"), "{text}");
        assert!(!text.contains("layers.10.weight"), "{text}");
    }

    #[test]
    fn verbose_lists_every_tensor() {
        let text = render(&report(25), plain(true)).unwrap();
        insta::assert_snapshot!("human_many_tensors_verbose", text);
        assert!(
            text.contains("layers.23.weight, layers.24.weight\n"),
            "{text}"
        );
        assert!(!text.contains("more"), "{text}");
    }

    #[test]
    fn ten_tensors_are_listed_without_a_count() {
        let text = render(&report(10), plain(false)).unwrap();
        assert!(text.contains("layers.9.weight\n"), "{text}");
        assert!(!text.contains("more"), "{text}");
    }
}
