//! The passes over a checkpoint's tensors and storages whose results several rules read,
//! made once per audit into the rules' `Context`: a million
//! tensors' layers are fetched from memory once, not once per rule.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use tensorplay_engine::{Checkpoint, Device, TensorImpl};

/// What the rules and the report read of every storage, found in one pass over them.
#[derive(Debug, Default)]
pub struct StorageFacts<'a> {
    /// Storage ids by recorded location, meta storages left out (they hold no data; TP204).
    pub by_location: BTreeMap<&'a str, StorageIds>,
    /// Every recorded location, meta included.
    pub locations: BTreeSet<&'a str>,
    /// Their bytes, summed (saturating).
    pub bytes: u64,
    /// Their bytes as floats, summed in storage order (the fragmentation score's mean).
    pub bytes_f64: f64,
    /// The largest storage's bytes.
    pub largest: u64,
}

impl<'a> StorageFacts<'a> {
    /// The facts of `ckpt`'s storages.
    pub(crate) fn of(ckpt: &'a Checkpoint) -> Self {
        let mut facts = StorageFacts::default();
        // Runs of one location (nearly every file is one run) are gathered before the map
        // and the set are searched.
        let mut run: Option<(&str, StorageIds)> = None;
        for s in &ckpt.storages {
            facts.bytes = facts.bytes.saturating_add(s.nbytes());
            facts.bytes_f64 += s.nbytes() as f64;
            facts.largest = facts.largest.max(s.nbytes());
            let location = s.location();
            match &mut run {
                // The same spelling is mostly the same static string: no bytes compared.
                Some((at, ids)) if std::ptr::eq(*at, location) || *at == location => {
                    ids.push(s.id().index())
                }
                _ => {
                    let mut ids = StorageIds::default();
                    ids.push(s.id().index());
                    if let Some((at, ids)) = run.replace((location, ids)) {
                        facts.add_run(at, ids);
                    }
                }
            }
        }
        if let Some((at, ids)) = run {
            facts.add_run(at, ids);
        }
        facts
    }

    fn add_run(&mut self, location: &'a str, ids: StorageIds) {
        self.locations.insert(location);
        if location != "meta" {
            self.by_location.entry(location).or_default().append(ids);
        }
    }
}

/// Storage ids in the order added, kept as runs of consecutive ids: the storages of one
/// location are nearly always one run, which a million ids listed one by one would spend
/// 8 MB of fresh pages on.
#[derive(Debug, Default)]
pub struct StorageIds {
    runs: Vec<Range<usize>>,
    len: usize,
}

impl StorageIds {
    fn push(&mut self, id: usize) {
        match self.runs.last_mut() {
            // `id` is a storage's index: below their number, so `id + 1` cannot overflow.
            Some(run) if run.end == id => run.end = id + 1,
            _ => self.runs.push(id..id + 1),
        }
        self.len += 1;
    }

    fn append(&mut self, other: StorageIds) {
        for run in other.runs {
            match self.runs.last_mut() {
                Some(last) if last.end == run.start => last.end = run.end,
                _ => self.runs.push(run),
            }
        }
        self.len += other.len;
    }

    /// How many ids.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first id added.
    pub(crate) fn first(&self) -> Option<usize> {
        self.runs.first().map(|run| run.start)
    }

    /// The ids, in the order added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.runs.iter().flat_map(Range::clone)
    }
}

/// What the rules and the report read of every tensor, found in one pass over them: per
/// rule that judges tensors one by one, whether some tensor fires it (a rule no tensor
/// fires returns at once; each rule asks its tensors the same question, below, so the pass
/// and the rule cannot disagree), and the dtypes.
#[derive(Debug, Default)]
pub struct TensorFacts {
    /// TP204 meta-tensor.
    pub meta: bool,
    /// TP203 device-mismatch, as the file records the devices.
    pub device_mismatch: bool,
    /// TP105 non-contiguous.
    pub non_contiguous: bool,
    /// TP107 view-out-of-bounds.
    pub out_of_bounds: bool,
    /// Every dtype a tensor has.
    pub dtypes: BTreeSet<&'static str>,
}

impl TensorFacts {
    /// The facts of `ckpt`'s tensors.
    pub(crate) fn of(ckpt: &Checkpoint) -> Self {
        let mut facts = TensorFacts::default();
        // Tensors come in runs of one dtype: the set is searched when the dtype changes.
        let mut last = None;
        for t in &ckpt.tensors {
            let imp = t.tensor_impl();
            facts.meta |= on_meta(imp);
            facts.device_mismatch |= device_mismatch(imp);
            facts.non_contiguous |= non_contiguous(imp);
            facts.out_of_bounds |= out_of_bounds(imp);
            if last != Some(imp.dtype()) {
                last = Some(imp.dtype());
                facts.dtypes.insert(imp.dtype().name());
            }
        }
        facts
    }
}

/// It or its storage is on the meta device.
pub(crate) fn on_meta(imp: &TensorImpl) -> bool {
    *imp.device() == Device::Meta || *imp.storage().device() == Device::Meta
}

/// It claims a device its storage, as the file records it, is not on.
pub(crate) fn device_mismatch(imp: &TensorImpl) -> bool {
    imp.device() != imp.storage().device()
}

/// Its layout is not contiguous.
pub(crate) fn non_contiguous(imp: &TensorImpl) -> bool {
    !imp.layout().is_contiguous()
}

/// Its bytes reach past its storage, or cannot be computed.
pub(crate) fn out_of_bounds(imp: &TensorImpl) -> bool {
    match imp.byte_range() {
        Ok(Some(r)) => r.end > imp.storage().nbytes(),
        Ok(None) => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::{StorageFacts, StorageIds, TensorFacts};
    use crate::testing::{checkpoint, storage, tensor};
    use tensorplay_engine::Device;

    /// Each fact of one pass against what it says: a meta storage among CPU ones (a location,
    /// but not one storages are loaded from) viewed by a tensor claiming the CPU, a
    /// transposed view, and a view past its storage.
    #[test]
    fn one_pass_finds_what_each_rule_and_the_report_read() {
        let (a, m, b) = (
            storage(0, 4, "cpu"),
            storage(1, 2, "meta"),
            storage(2, 6, "cpu"),
        );
        let ckpt = checkpoint(
            vec![
                tensor("a", &a, &[4], &[1], 0, Device::Cpu),
                tensor("m", &m, &[2], &[1], 0, Device::Cpu),
                tensor("b", &b, &[2, 3], &[1, 2], 0, Device::Cpu),
            ],
            vec![a.clone(), m.clone(), b.clone()],
        );
        let storages = StorageFacts::of(&ckpt);
        assert_eq!(
            storages.locations.iter().copied().collect::<Vec<_>>(),
            ["cpu", "meta"]
        );
        let cpu: Vec<_> = storages
            .by_location
            .iter()
            .map(|(l, ids)| (*l, ids.iter().collect::<Vec<_>>()))
            .collect();
        assert_eq!(cpu, [("cpu", vec![0, 2])]);
        assert_eq!(
            (storages.bytes, storages.bytes_f64, storages.largest),
            (48, 48.0, 24)
        );
        let tensors = TensorFacts::of(&ckpt);
        assert!(tensors.meta && tensors.device_mismatch && tensors.non_contiguous);
        assert!(!tensors.out_of_bounds);
        assert_eq!(
            tensors.dtypes.iter().copied().collect::<Vec<_>>(),
            ["float32"]
        );

        let past = checkpoint(vec![tensor("p", &a, &[5], &[1], 0, Device::Cpu)], vec![a]);
        let tensors = TensorFacts::of(&past);
        assert!(tensors.out_of_bounds && !tensors.meta && !tensors.device_mismatch);
        assert!(!tensors.non_contiguous);
    }

    #[test]
    fn storage_ids_keep_their_order_and_count_in_runs() {
        let mut ids = StorageIds::default();
        for id in [3, 4, 5, 9, 0, 1] {
            ids.push(id);
        }
        let mut more = StorageIds::default();
        more.push(2);
        more.push(10);
        ids.append(more);
        assert_eq!(ids.iter().collect::<Vec<_>>(), [3, 4, 5, 9, 0, 1, 2, 10]);
        assert_eq!((ids.len(), ids.first()), (8, Some(3)));
        assert_eq!(ids.runs, [3..6, 9..10, 0..3, 10..11]);
        assert_eq!(StorageIds::default().first(), None);
    }
}
