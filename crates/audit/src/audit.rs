//! The runner: which rules apply to a checkpoint, with what severity, and what they find.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::finding::{Draft, Finding};
use crate::registry::{self, RULES};
use crate::report::FileReport;
use crate::rule::{Context, Rule};
use crate::Severity;
use rayon::prelude::*;
use std::collections::{BTreeSet, HashMap};
use tensorplay_engine::{numeric, views, Checkpoint, Error as ReadError, TensorImpl};

/// Command-line choices that shape a run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only these rule codes (empty: all).
    pub select: Vec<&'static str>,
    /// Never these rule codes.
    pub ignore: Vec<&'static str>,
    /// Skip rules that read tensor bytes.
    pub metadata_only: bool,
}

impl Options {
    /// Resolves `--select`/`--ignore` values (codes or names).
    pub fn new(select: &[String], ignore: &[String], metadata_only: bool) -> Result<Options> {
        let resolve = |names: &[String]| {
            names
                .iter()
                .map(|n| {
                    registry::find(n)
                        .map(|r| r.code())
                        .ok_or_else(|| Error::UnknownRule(n.clone()))
                })
                .collect::<Result<Vec<_>>>()
        };
        Ok(Options {
            select: resolve(select)?,
            ignore: resolve(ignore)?,
            metadata_only,
        })
    }
}

/// The rules that run on the checkpoint at `path`, each with its final severity.
pub fn enabled(
    config: &Config,
    options: &Options,
    path: &str,
) -> Vec<(&'static dyn Rule, Severity)> {
    RULES
        .iter()
        .copied()
        .filter(|r| options.select.is_empty() || options.select.contains(&r.code()))
        .filter(|r| !options.ignore.contains(&r.code()))
        .filter(|r| !(options.metadata_only && r.reads_bytes()))
        .filter(|r| !config.ignored(path, r.code()))
        .filter_map(|r| match config.level(r.code()) {
            None => Some((r, r.default_severity())),
            Some(level) => level.severity().map(|s| (r, s)),
        })
        .collect()
}

/// Audits one checkpoint that was read.
pub fn audit(ckpt: &Checkpoint, path: &str, config: &Config, options: &Options) -> FileReport {
    let rules = enabled(config, options, path);
    let scans = rules
        .iter()
        .any(|(r, _)| r.reads_bytes())
        .then(|| scan(ckpt));
    let ctx = Context {
        ckpt,
        config,
        shared: views::shared_storages(ckpt),
        scans,
    };
    let mut findings = Vec::new();
    for (rule, severity) in &rules {
        let mut drafts = Vec::new();
        rule.check(&ctx, &mut drafts);
        findings.extend(drafts.into_iter().map(|d| finding(*rule, *severity, d)));
    }
    let devices: BTreeSet<String> = ckpt
        .storages
        .iter()
        .map(|s| s.location().to_owned())
        .collect();
    let dtypes: BTreeSet<String> = ckpt
        .tensors
        .iter()
        .map(|t| t.tensor_impl().dtype().name().to_owned())
        .collect();
    FileReport {
        path: path.to_owned(),
        format: Some(ckpt.format.name().to_owned()),
        tensors: ckpt.tensors.len(),
        storages: ckpt.storages.len(),
        bytes: ckpt.storage_bytes(),
        devices: devices.into_iter().collect(),
        dtypes: dtypes.into_iter().collect(),
        checked: rules.iter().map(|(r, _)| r.code().to_owned()).collect(),
        findings,
    }
}

/// The report of a checkpoint the readers refused: TP503 when an index and its shards
/// disagree, TP502 otherwise, always as an error — configuration cannot turn them off,
/// so an unreadable checkpoint never passes. `None` when the file itself could not be
/// opened (a missing path is a usage problem, not a finding).
pub fn read_failure(path: &str, error: &ReadError) -> Option<FileReport> {
    let rule = match error {
        ReadError::Io { .. } => return None,
        e if is_index_mismatch(e) => registry::find("TP503"),
        _ => registry::find("TP502"),
    }?;
    let draft = Draft {
        tensors: Vec::new(),
        storage: None,
        message: error.to_string(),
        fix: if rule.code() == "TP503" {
            "regenerate the index with the tool that wrote the shards (`save_pretrained`)".into()
        } else {
            "re-upload or re-save the checkpoint from its source".into()
        },
    };
    Some(FileReport {
        path: path.to_owned(),
        format: None,
        tensors: 0,
        storages: 0,
        bytes: 0,
        devices: Vec::new(),
        dtypes: Vec::new(),
        checked: vec![rule.code().to_owned()],
        findings: vec![finding(rule, Severity::Error, draft)],
    })
}

fn is_index_mismatch(error: &ReadError) -> bool {
    match error {
        ReadError::IndexShardPath { .. }
        | ReadError::IndexEmpty { .. }
        | ReadError::IndexTensorAbsent { .. }
        | ReadError::IndexTensorInTwoShards { .. }
        | ReadError::IndexUnlistedTensor { .. }
        | ReadError::IndexMixedFormats { .. } => true,
        // A shard that is missing is the index's fault; a shard that is damaged is corrupt.
        ReadError::Shard { source, .. } => {
            matches!(**source, ReadError::Io { .. }) || is_index_mismatch(source)
        }
        _ => false,
    }
}

fn finding(rule: &dyn Rule, severity: Severity, draft: Draft) -> Finding {
    Finding {
        code: rule.code().to_owned(),
        rule: rule.name().to_owned(),
        severity,
        tensors: draft.tensors,
        storage: draft.storage,
        message: draft.message,
        fix: draft.fix,
    }
}

/// Scans every floating tensor's bytes, in parallel.
fn scan(ckpt: &Checkpoint) -> HashMap<usize, numeric::NonFinite> {
    ckpt.tensors
        .par_iter()
        .enumerate()
        .filter_map(|(i, t)| scan_one(t.tensor_impl()).map(|found| (i, found)))
        .collect()
}

/// A view whose strides make it reach the same elements many times (only a crafted file
/// has one: broadcasts are handled by the scanner) would cost time in its logical element
/// count; its distinct bytes are scanned instead, and no first index is given.
fn scan_one(imp: &TensorImpl) -> Option<numeric::NonFinite> {
    let range = imp.byte_range().ok()??;
    let distinct = (range.end - range.start).saturating_mul(8) / imp.dtype().bits().max(1);
    let repeats = imp.layout().numel() > distinct && !imp.layout().strides().contains(&0);
    if repeats && numeric::scannable(imp.dtype()) && imp.verify_data_ptr_consistency("").is_ok() {
        let bytes = imp.storage().data_ptr().bytes()?;
        let start = usize::try_from(range.start).ok()?;
        let end = usize::try_from(range.end).ok()?;
        let mut found = numeric::scan_bytes(imp.dtype(), bytes.get(start..end)?);
        found.first = None;
        return Some(found);
    }
    numeric::scan_tensor(imp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tensorplay_engine::{DType, DataPtr, Device, HostBuffer, Layout, Storage};

    #[test]
    fn a_view_reaching_its_elements_many_times_is_scanned_once_per_element() {
        // 101 000 float32, one NaN; a [100 000, 1 000] view with strides [1, 1] reaches
        // each element up to a thousand times: 10^8 logical elements.
        let mut bytes = vec![0u8; 101_000 * 4];
        bytes[20..24].copy_from_slice(&f32::NAN.to_le_bytes());
        let buffer = HostBuffer::from_vec("hand-made", bytes);
        let ptr = DataPtr::host(buffer, 0..404_000).unwrap();
        let storage = Arc::new(Storage::new(0, "0", DType::Float32, 404_000, "cpu", ptr));
        let layout = Layout::new(vec![100_000, 1_000], vec![1, 1], 0).unwrap();
        let imp = TensorImpl::new(layout, DType::Float32, Device::Cpu, false, false, storage);
        let found = scan_one(&imp).expect("scannable");
        assert_eq!((found.nan, found.first), (1, None));
    }
}
