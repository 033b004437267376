//! The layout facts the HTML report draws: how storage sizes spread (TP301's view) and the
//! simulated allocator's segment map (which storage each block holds).

use crate::report::{BlockMap, LayoutFacts, SegmentMap, SizeBin};
use crate::rules::memory::fragmentation_score;
use std::collections::{BTreeMap, HashMap};
use tensorplay_engine::alloc::simulate::LoadSimulation;
use tensorplay_engine::alloc::Pool;
use tensorplay_engine::Checkpoint;

/// The facts of `ckpt`, whose full load (with its map) is `sim`.
pub fn layout(ckpt: &Checkpoint, sim: &LoadSimulation, threshold: f64) -> LayoutFacts {
    let sizes: Vec<u64> = ckpt.storages.iter().map(|s| s.nbytes()).collect();
    let as_f64 = sizes.iter().map(|&s| s as f64);
    LayoutFacts {
        size_bins: size_bins(&sizes),
        fragmentation_score: fragmentation_score(sizes.len(), as_f64.clone().sum(), as_f64)
            .map(|(score, _)| score),
        fragmentation_threshold: threshold,
        segments: segments(sim),
        storage_tensors: storage_tensors(ckpt),
    }
}

/// Per storage id, its first tensor's name and how many more view it.
pub fn storage_tensors(ckpt: &Checkpoint) -> Vec<String> {
    let mut seen: Vec<(Option<&str>, usize)> = vec![(None, 0); ckpt.storages.len()];
    for t in &ckpt.tensors {
        if let Some((first, more)) = seen.get_mut(t.storage_index()) {
            match first {
                None => *first = Some(t.name()),
                Some(_) => *more += 1,
            }
        }
    }
    seen.iter()
        .map(|&(name, more)| match (name, more) {
            (None, _) => String::new(),
            (Some(name), 0) => crate::text::bounded_name(name).into_owned(),
            (Some(name), n) => format!("{} and {n} more", crate::text::bounded_name(name)),
        })
        .collect()
}

/// Sizes counted per power of two; empty storages in a bin of their own.
pub fn size_bins(sizes: &[u64]) -> Vec<SizeBin> {
    let mut bins: BTreeMap<Option<u32>, usize> = BTreeMap::new();
    for &size in sizes {
        let log2 = (size > 0).then(|| size.ilog2());
        *bins.entry(log2).or_default() += 1;
    }
    bins.into_iter()
        .map(|(log2, count)| SizeBin { log2, count })
        .collect()
}

fn segments(sim: &LoadSimulation) -> Vec<SegmentMap> {
    // Addresses are unique among live blocks: one lookup per block, not a scan.
    let owners: HashMap<u64, usize> = sim
        .placements
        .iter()
        .map(|(id, block)| (block.address, *id))
        .collect();
    sim.segments
        .iter()
        .map(|seg| SegmentMap {
            size: seg.size,
            pool: match seg.pool {
                Pool::Small => "small",
                Pool::Large => "large",
            },
            blocks: seg
                .blocks
                .iter()
                .map(|b| BlockMap {
                    offset: b.address - seg.address,
                    size: b.size,
                    storage: if b.allocated {
                        owners.get(&b.address).copied()
                    } else {
                        None
                    },
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::size_bins;
    use crate::report::SizeBin;

    #[test]
    fn sizes_fall_in_power_of_two_bins() {
        let bins = size_bins(&[0, 1, 3, 2, 4096, 8191]);
        let bin = |log2, count| SizeBin { log2, count };
        assert_eq!(
            bins,
            [
                bin(None, 1),
                bin(Some(0), 1),
                bin(Some(1), 2),
                bin(Some(12), 2)
            ]
        );
    }
}
