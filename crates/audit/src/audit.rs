//! The runner: which rules apply to a checkpoint, with what severity, and what they find.
//! It names no rule: each rule says when it applies and what it reports.

use crate::config::Config;
use crate::finding::{Draft, Finding};
use crate::options::Options;
use crate::registry::RULES;
use crate::report::{DeviceFacts, FileReport, MemoryFacts};
use crate::rule::{Context, Memory, Rule};
use crate::Severity;
use rayon::prelude::*;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use tensorplay_engine::alloc::device_load::DeviceLoad;
use tensorplay_engine::alloc::simulate::simulate_load;
use tensorplay_engine::{numeric, views, Checkpoint, Error as ReadError, Owner, TensorImpl};

/// The rules that run on the checkpoint at `path`, each with its final severity.
pub fn enabled(
    config: &Config,
    options: &Options,
    path: &str,
) -> Vec<(&'static dyn Rule, Severity)> {
    RULES
        .iter()
        .copied()
        .filter(|r| options.selects(r.code()))
        .filter(|r| !(options.metadata_only && r.reads_bytes()))
        .filter(|r| r.applies(options))
        .filter(|r| !config.ignored(path, r.code()))
        .filter_map(|r| match config.level(r.code()) {
            None => Some((r, r.default_severity())),
            Some(level) => level.severity().map(|s| (r, s)),
        })
        .collect()
}

/// Audits one checkpoint that was read; `device_load` is its real GPU load, when one ran.
pub fn audit(
    ckpt: &Checkpoint,
    path: &str,
    config: &Config,
    options: &Options,
    device_load: Option<&DeviceLoad>,
) -> FileReport {
    let rules = enabled(config, options, path);
    let reads_bytes = rules.iter().any(|(r, _)| r.reads_bytes());
    // The byte scan, the simulated load and the view analysis are independent.
    let (scans, (memory, shared)) = rayon::join(
        || reads_bytes.then(|| scan(ckpt, options.progress.as_deref())),
        || {
            rayon::join(
                || simulate(ckpt, config, options.gpu_budget),
                || views::shared_storages(ckpt),
            )
        },
    );
    let ctx = Context {
        ckpt,
        settings: &config.settings,
        shared,
        scans,
        memory,
        device_load,
    };
    let mut findings = Vec::new();
    for (rule, severity) in &rules {
        let mut drafts = Vec::new();
        rule.check(&ctx, &mut drafts);
        let severity = rule.at_least(&ctx).map_or(*severity, |s| s.max(*severity));
        findings.extend(drafts.into_iter().map(|d| finding(*rule, severity, d)));
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
        checked: rules.iter().map(|(r, _)| r.code()).collect(),
        findings,
        memory: Some(memory_facts(&ctx.memory)),
        device: device_load.map(device_facts),
    }
}

fn device_facts(load: &DeviceLoad) -> DeviceFacts {
    let stats = &load.stats;
    DeviceFacts {
        device: format!("cuda:{}", load.ordinal),
        reserved_bytes: stats.reserved_bytes.current,
        allocated_bytes: stats.allocated_bytes.current,
        segments: stats.segment.current,
        storages_checked: load.storages.len(),
        storages_failed: load.storages.iter().filter(|c| !c.ok()).count(),
        pinned_staging: load.pinned_available,
    }
}

/// The load on an unbounded device, and on one of the budget's size when there is one.
fn simulate(ckpt: &Checkpoint, config: &Config, budget: Option<u64>) -> Memory {
    Memory {
        full: simulate_load(ckpt, &config.allocator, u64::MAX, false),
        budget,
        within_budget: budget.map(|b| simulate_load(ckpt, &config.allocator, b, false)),
    }
}

fn memory_facts(memory: &Memory) -> MemoryFacts {
    let stats = &memory.full.stats;
    MemoryFacts {
        requested_bytes: stats.requested_bytes.current,
        allocated_bytes: stats.allocated_bytes.current,
        reserved_bytes: stats.reserved_bytes.current,
        segments: stats.segment.current,
        fragmentation: memory.full.fragmentation(),
        budget_bytes: memory.budget,
        fits_budget: memory.within_budget.as_ref().map(|w| w.oom.is_none()),
    }
}

/// The report of a checkpoint the readers refused, from the rule that reports that kind of
/// failure, always at its default severity: configuration cannot change those rules, so an
/// unreadable checkpoint never passes. `None` when no rule claims the failure (a path that
/// cannot be opened is a usage problem, not a finding).
pub fn read_failure(path: &str, error: &ReadError) -> Option<FileReport> {
    let (rule, draft) = RULES
        .iter()
        .find_map(|r| r.read_failure(error).map(|d| (*r, d)))?;
    Some(FileReport {
        path: path.to_owned(),
        format: None,
        tensors: 0,
        storages: 0,
        bytes: 0,
        devices: Vec::new(),
        dtypes: Vec::new(),
        checked: vec![rule.code()],
        findings: vec![finding(rule, rule.default_severity(), draft)],
        memory: None,
        device: None,
    })
}

fn finding(rule: &dyn Rule, severity: Severity, draft: Draft) -> Finding {
    Finding {
        code: rule.code(),
        severity,
        tensors: draft.tensors,
        storage: draft.storage,
        message: draft.message,
        fix: draft.fix,
    }
}

/// Bytes of a contiguous tensor scanned as one unit of parallel work. A multiple of every
/// element size, so chunks split no element.
const SCAN_CHUNK: u64 = 8 << 20;

/// Chunks at least this large have their mapped pages released once scanned.
const RELEASE_MIN: u64 = 256 << 10;

/// Scans every floating tensor's bytes once, in parallel over tensors and over chunks of
/// large contiguous ones. Pages of a mapped file are released once scanned, so resident
/// memory stays bounded whatever the checkpoint's size.
fn scan(ckpt: &Checkpoint, progress: Option<&AtomicU64>) -> HashMap<usize, numeric::NonFinite> {
    let work: Vec<(usize, u64)> = ckpt
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| numeric::scannable(t.tensor_impl().dtype()))
        .flat_map(|(i, t)| {
            let imp = t.tensor_impl();
            let chunks = if imp.layout().is_contiguous() {
                imp.nbytes().unwrap_or(0).div_ceil(SCAN_CHUNK).max(1)
            } else {
                1
            };
            (0..chunks).map(move |c| (i, c))
        })
        .collect();
    let mut parts: Vec<(usize, u64, numeric::NonFinite)> = work
        .par_iter()
        .filter_map(|&(i, chunk)| {
            let imp = ckpt.tensors.get(i)?.tensor_impl();
            let found = if imp.layout().is_contiguous() {
                scan_chunk(imp, chunk, progress)?
            } else {
                scan_one(imp)?
            };
            Some((i, chunk, found))
        })
        .collect();
    parts.sort_unstable_by_key(|&(i, chunk, _)| (i, chunk));
    let mut merged: HashMap<usize, numeric::NonFinite> = HashMap::new();
    for (i, chunk, found) in parts {
        let element_bits = ckpt
            .tensors
            .get(i)
            .map_or(8, |t| t.tensor_impl().dtype().bits().max(1));
        let offset = chunk.saturating_mul(SCAN_CHUNK).saturating_mul(8) / element_bits;
        let total = merged.remove(&i).unwrap_or_default();
        merged.insert(i, total.merge(found, offset));
    }
    merged
}

/// Chunk `chunk` of a contiguous tensor; its pages are released afterwards.
fn scan_chunk(
    imp: &TensorImpl,
    chunk: u64,
    progress: Option<&AtomicU64>,
) -> Option<numeric::NonFinite> {
    imp.verify_data_ptr_consistency("").ok()?;
    let bytes = imp.view_bytes()?;
    let start = chunk.checked_mul(SCAN_CHUNK)?;
    let end = start.saturating_add(SCAN_CHUNK).min(bytes.len() as u64);
    let part = bytes.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)?;
    let found = numeric::scan_bytes(imp.dtype(), part);
    // A release is a system call: worth it for large chunks, not for every small tensor.
    if end - start >= RELEASE_MIN {
        if let (Owner::Host { buffer, range }, Ok(Some(view))) =
            (imp.storage().data_ptr().owner(), imp.byte_range())
        {
            let at = range.start + view.start + start;
            buffer.release(at..at + (end - start));
        }
    }
    if let Some(counter) = progress {
        counter.fetch_add(end - start, Ordering::Relaxed);
    }
    Some(found)
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
    use crate::testing::{checkpoint, storage_of, tensor};
    use tensorplay_engine::Device;

    fn float32s(n: usize, special: &[(usize, f32)]) -> Vec<u8> {
        let mut bytes = vec![0u8; n * 4];
        for &(i, v) in special {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn chunks_of_a_large_tensor_merge_to_the_whole_tensor_counts() {
        // 12 MB of float32 spans two 8 MiB chunks; NaN in the second, +Inf in the first.
        let n = 3_000_000;
        let bytes = float32s(
            n,
            &[
                (2_500_000, f32::NAN),
                (2_999_999, f32::NAN),
                (2_097_151, f32::INFINITY),
            ],
        );
        let s = storage_of(0, bytes, "cpu");
        let ckpt = checkpoint(
            vec![tensor("w", &s, &[n as u64], &[1], 0, Device::Cpu)],
            vec![s],
        );
        let progress = AtomicU64::new(0);
        let found = scan(&ckpt, Some(&progress))[&0];
        assert_eq!(
            (found.nan, found.pos_inf, found.first),
            (2, 1, Some(2_097_151))
        );
        assert_eq!(progress.load(Ordering::Relaxed), n as u64 * 4);
    }

    #[test]
    fn a_view_reaching_its_elements_many_times_is_scanned_once_per_element() {
        // 101 000 float32, one NaN; a [100 000, 1 000] view with strides [1, 1] reaches
        // each element up to a thousand times: 10^8 logical elements.
        let s = storage_of(0, float32s(101_000, &[(5, f32::NAN)]), "cpu");
        let t = tensor("w", &s, &[100_000, 1_000], &[1, 1], 0, Device::Cpu);
        let found = scan_one(t.tensor_impl()).expect("scannable");
        assert_eq!((found.nan, found.first), (1, None));
    }
}
