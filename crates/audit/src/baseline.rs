//! Baselines: record today's findings, then fail only on new ones.

use crate::error::{Error, Result};
pub use crate::fingerprint::Fingerprint;
use crate::report::Report;
use crate::Finding;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// A baseline file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Baseline {
    /// Format version.
    pub schema_version: u32,
    /// Known findings.
    pub findings: Vec<Fingerprint>,
}

impl Baseline {
    /// Every finding of a report.
    pub fn from_report(report: &Report) -> Baseline {
        let mut findings: Vec<Fingerprint> = report
            .files
            .iter()
            .flat_map(|f| f.findings.iter().map(|x| Fingerprint::of(&f.path, x)))
            .collect();
        findings.sort_by(|a, b| {
            (&a.path, &a.code, &a.tensors, &a.message)
                .cmp(&(&b.path, &b.code, &b.tensors, &b.message))
        });
        findings.dedup();
        Baseline {
            schema_version: 1,
            findings,
        }
    }

    /// Reads a baseline file.
    pub fn load(path: &Path) -> Result<Baseline> {
        let fail = |detail: String| Error::Baseline {
            path: path.to_owned(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let baseline: Baseline = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        if baseline.schema_version != 1 {
            return Err(fail(format!(
                "unsupported schema_version {}",
                baseline.schema_version
            )));
        }
        Ok(baseline)
    }

    /// The file's JSON text.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Moves every finding the baseline knows into its file's `suppressed` list; returns how
    /// many, and how many of the baseline's findings occurred nowhere in the report (fixed,
    /// or recorded under another path). A file that could not be read keeps its findings: a
    /// baseline judges findings of files that were read, and never makes an unreadable
    /// checkpoint pass.
    pub fn suppress(&self, report: &mut Report) -> (usize, usize) {
        let known: HashSet<&Fingerprint> = self.findings.iter().collect();
        let mut met: HashSet<Fingerprint> = HashSet::new();
        let mut moved = 0;
        for file in report.files.iter_mut().filter(|f| f.format.is_some()) {
            let (old, new): (Vec<Finding>, Vec<Finding>) = std::mem::take(&mut file.findings)
                .into_iter()
                .partition(|f| {
                    let print = Fingerprint::of(&file.path, f);
                    let known = known.contains(&print);
                    if known {
                        met.insert(print);
                    }
                    known
                });
            moved += old.len();
            file.findings = new;
            file.suppressed.extend(old);
        }
        report.recount();
        (moved, known.len() - met.len())
    }
}
