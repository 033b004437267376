use super::super::{human_bytes, names_in_storage};
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::Storage;

declare_rule!(StorageBloat {
    code: "TP104",
    name: "storage-bloat",
    severity: Warning,
    reads_bytes: false,
    tags: ["views"],
    summary: "Bytes of a storage that no tensor reaches (a saved slice drags its whole storage).",
    doc: "\
What it checks
  For every storage, the bytes no tensor's view reaches. It fires when they are at least
  `thresholds.storage_bloat_bytes` (default 1 MiB) and at least
  `thresholds.storage_bloat_fraction` (default 0.10) of the storage. A storage the file
  holds as an object of its own (`torch.save(t.untyped_storage())`) was saved whole on
  purpose and is not checked.

Why it matters
  torch.save keeps views: saving a slice writes its whole storage. A 10-element slice of a
  1000-element tensor ships all 1000, and every load pays for them in disk, network and RAM.

Example
  torch.save(torch.arange(1000.)[:10], 'small.pt')   # 4000-byte storage, 40 bytes used

How to fix
  Save a copy that owns only its bytes: `torch.save(t.clone(), ...)`.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let limits = &ctx.settings.thresholds;
    // No storage this large: none can leave the threshold's bytes unreached.
    if ctx.storage_facts.largest < limits.storage_bloat_bytes.max(1) {
        return;
    }
    // (storage, start, end) of every view, sorted: each storage's views side by side in
    // byte order, with no list per storage (files list tensors in storage order, which the
    // sort finds at once).
    let mut ranges: Vec<(usize, u64, u64)> = ctx
        .ckpt
        .tensors
        .iter()
        .filter_map(|t| {
            let imp = t.tensor_impl();
            // A storage smaller than the threshold cannot leave that much unreached: its
            // views are not measured (a million tiny tensors cost a filter, not a sort).
            if !could_fire(imp.storage(), limits.storage_bloat_bytes) {
                return None;
            }
            let r = imp.byte_range().ok().flatten()?;
            Some((imp.storage().id().index(), r.start, r.end))
        })
        .collect();
    ranges.sort_unstable();
    let mut views = ranges.chunk_by(|a, b| a.0 == b.0).peekable();
    for (index, storage) in ctx.ckpt.storages.iter().enumerate() {
        let list = views
            .next_if(|group| group.first().is_some_and(|&(id, ..)| id == index))
            .unwrap_or_default();
        let total = storage.nbytes();
        let (mut covered, mut reach) = (0u64, 0u64);
        for &(_, start, end) in list {
            let (start, end) = (start.min(total), end.min(total));
            if end > reach {
                covered += end - start.max(reach);
                reach = end;
            }
        }
        let unused = total - covered;
        if !could_fire(storage, limits.storage_bloat_bytes)
            || unused < limits.storage_bloat_bytes
            || (unused as f64) < limits.storage_bloat_fraction * total as f64
        {
            continue;
        }
        let names = names_in_storage(ctx, storage.id().index());
        out.push(Draft {
            message: format!(
                "storage {} holds {} but its tensors reach {}: {} ({:.1}%) are saved for nothing",
                storage.id().index(),
                human_bytes(total),
                human_bytes(covered),
                human_bytes(unused),
                unused as f64 * 100.0 / total as f64
            ),
            fix: match names.first() {
                Some(name) => {
                    format!("save `{name}.clone()` so the file holds only the bytes it uses")
                }
                None => "no tensor uses this storage: save only the tensors you need".into(),
            },
            tensors: names,
            storage: Some(storage.id().index()),
            ..Default::default()
        });
    }
}

/// Whether a storage's unreached bytes are judged at all: not one the file holds as itself
/// (saved whole on purpose), not an empty one, not one smaller than the bytes it takes to fire.
fn could_fire(storage: &Storage, threshold: u64) -> bool {
    !storage.is_saved_alone() && storage.nbytes() > 0 && storage.nbytes() >= threshold
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, found, storage, tensor};
    use tensorplay_engine::{Checkpoint, Device};

    /// A storage of `elements` float32 and one tensor 'head' over its first `used`.
    fn slice(elements: u64, used: u64) -> Checkpoint {
        let s = storage(0, elements, "cpu");
        checkpoint(
            vec![tensor("head", &s, &[used], &[1], 0, Device::Cpu)],
            vec![s],
        )
    }

    #[test]
    fn a_slice_leaving_a_mib_unreached_fires_naming_it() {
        // 2 MiB storage, 1 MiB viewed: 1 MiB (50%) unreached, exactly the byte threshold.
        assert_eq!(
            found(&slice(1 << 19, 1 << 18)),
            [("TP104".to_owned(), vec!["head".to_owned()], Some(0))]
        );
        // One more element viewed: 4 bytes under the threshold.
        assert!(codes(&slice(1 << 19, (1 << 18) + 1)).is_empty());
    }

    #[test]
    fn unreached_bytes_under_the_fraction_threshold_do_not_fire() {
        // 16 MiB storage with 1.5 MiB unreached: over 1 MiB but 9.4% of the storage.
        assert!(codes(&slice(1 << 22, (1 << 22) - (3 << 17))).is_empty());
        // 1.75 MiB unreached is 10.9%.
        assert_eq!(codes(&slice(1 << 22, (1 << 22) - (7 << 16))), ["TP104"]);
    }

    #[test]
    fn a_storage_saved_as_itself_does_not_fire_though_no_tensor_reaches_it() {
        use tensorplay_engine::{DType, DataPtr};
        let make = |alone: bool| {
            let s = tensorplay_engine::testing::storage(
                0,
                "0",
                DType::UInt8,
                2 << 20,
                "cpu",
                DataPtr::heap("mem", vec![0; 2 << 20]),
            );
            let s = if alone { s.saved_alone() } else { s };
            checkpoint(Vec::new(), vec![std::sync::Arc::new(s)])
        };
        assert_eq!(codes(&make(false)), ["TP104"]);
        assert!(codes(&make(true)).is_empty());
    }
}
