use super::super::{human_bytes, plural};
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(AllocatorOverhead {
    code: "TP302",
    name: "allocator-overhead",
    severity: Warning,
    reads_bytes: false,
    tags: ["memory", "performance"],
    summary: "Loading reserves far more GPU memory than the tensors request (default above 1.25×).",
    doc: "\
What it checks
  Loads the checkpoint through a simulation of PyTorch's CUDA caching allocator (512-byte
  rounding, 2 MiB small-pool segments, 20 MiB segments for requests under 10 MiB, 2 MiB
  rounding above, best-fit with splitting) and compares reserved bytes with requested bytes.
  It fires when reserved / requested is above `thresholds.allocator_overhead` (default 1.25)
  and the excess is at least `thresholds.allocator_overhead_bytes` (default 64 MiB, so tiny
  checkpoints, which always fit one 2 MiB segment, stay quiet). Allocator settings come from
  `[allocator] conf` in tensorplay.toml, written as PYTORCH_CUDA_ALLOC_CONF.

Why it matters
  Every reserved byte is GPU memory nothing else can use. Storages of a few MiB each get a
  20 MiB segment apiece until later ones fill the gaps; a checkpoint of many mid-sized
  storages can reserve far more than its size, and the difference decides whether a model
  fits on the serving GPU.

Example
  200 storages of 7 MiB: a 20 MiB segment holds two of them and keeps a 6 MiB tail no
  later one fits, so 2000 MiB are reserved for 1400 MiB requested (1.43×).

How to fix
  Pack small tensors into fewer, larger storages; load the largest first; or set
  `roundup_power2_divisions` / `max_split_size_mb` for the serving process.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let memory = &ctx.memory;
    let limits = &ctx.settings.thresholds;
    let stats = &memory.full.stats;
    let (requested, reserved) = (stats.requested_bytes.current, stats.reserved_bytes.current);
    let ratio = memory.full.overhead();
    if ratio <= limits.allocator_overhead
        || reserved.saturating_sub(requested) < limits.allocator_overhead_bytes
    {
        return;
    }
    out.push(Draft {
        tensors: Vec::new(),
        storage: None,
        message: format!(
            "loading reserves {} of GPU memory for {} requested ({ratio:.2}×, threshold {}) in {}",
            human_bytes(reserved),
            human_bytes(requested),
            limits.allocator_overhead,
            plural(stats.segment.current, "segment")
        ),
        fix: "pack small tensors into fewer storages, load the largest first, or tune roundup_power2_divisions / max_split_size_mb".into(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {

    use crate::testing::{checkpoint, codes, findings, tensor};
    use std::sync::Arc;
    use tensorplay_engine::{Checkpoint, DType, DataPtr, Device, Storage};

    /// `count` storages recorded as `mib` MiB each, each fully viewed by one tensor. Their
    /// DataPtrs hold no bytes: the simulated load reads only the recorded sizes, so hundreds
    /// of MiB cost nothing (the byte scan skips storages whose DataPtr disagrees with them).
    fn storages_of(count: usize, mib: u64) -> Checkpoint {
        let storages: Vec<Arc<Storage>> = (0..count)
            .map(|id| {
                Arc::new(tensorplay_engine::testing::storage(
                    id,
                    id.to_string(),
                    DType::Float32,
                    mib << 20,
                    "cpu",
                    DataPtr::heap("recorded size only", Vec::new()),
                ))
            })
            .collect();
        let tensors = storages
            .iter()
            .map(|s| {
                let name = format!("w{}", s.id().index());
                tensor(&name, s, &[(mib << 20) / 4], &[1], 0, Device::Cpu)
            })
            .collect();
        checkpoint(tensors, storages)
    }

    #[test]
    fn segment_tails_no_storage_fits_fire_past_both_thresholds() {
        // A 20 MiB segment holds two 7 MiB storages and keeps a 6 MiB tail no later one fits:
        // 24 of them reserve 240 MiB for 168 MiB requested (1.43×, 72 MiB more).
        let wasteful = storages_of(24, 7);
        assert_eq!(codes(&wasteful), ["TP302"]);
        let message = &findings(&wasteful)[0].message;
        assert!(
            message.contains("reserves 240.0 MiB") && message.contains("168.0 MiB requested"),
            "{message}"
        );

        // Twenty of them: the same 1.43×, but 60 MiB more is under the 64 MiB floor.
        assert!(codes(&storages_of(20, 7)).is_empty());
        // 10 MiB storages get segments of exactly their size.
        assert!(codes(&storages_of(24, 10)).is_empty());
    }
}
