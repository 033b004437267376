use super::super::human_bytes;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(AllocatorOverhead {
    code: "TP302",
    name: "allocator-overhead",
    severity: Warning,
    reads_bytes: false,
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
  200 storages of 11 MiB: each rounds to 12 MiB, reserved 2.4 GB for 2.2 GB requested.

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
            "loading reserves {} of GPU memory for {} requested ({ratio:.2}×, threshold {}) in {} segments",
            human_bytes(reserved),
            human_bytes(requested),
            limits.allocator_overhead,
            stats.segment.current
        ),
        fix: "pack small tensors into fewer storages, load the largest first, or tune roundup_power2_divisions / max_split_size_mb".into(),
    });
}
