use super::super::human_bytes;
use crate::finding::Draft;
use crate::options::Options;
use crate::rule::{declare_rule, Context};

declare_rule!(MemoryBudget {
    code: "TP303",
    name: "memory-budget",
    severity: Error,
    reads_bytes: false,
    tags: ["memory", "performance"],
    summary: "The simulated load does not fit the GPU memory budget (`--gpu-budget`).",
    doc: "\
What it checks
  With `--gpu-budget SIZE` (e.g. 24GiB), loads every storage through the simulated CUDA
  caching allocator on a device of exactly that size. The allocator's own out-of-memory
  decision is the verdict, after it has released cached segments and retried as PyTorch
  does, so rounding, segment sizes and splitting all count, not just the sum of tensor sizes.

Why it matters
  'Trains fine, OOMs in production': a checkpoint that fits a 40 GB training GPU can fail
  to load on a 24 GB serving GPU. Finding out in CI costs seconds; in production, an outage.

Example
  tensorplay audit --gpu-budget 24GiB model/   # a 23.5 GB checkpoint of 11 MiB storages does not fit

How to fix
  Quantize or shard the model, load it across devices, or serve it on a larger GPU.",
    check: check,
    applies: applies,
});

/// Without a budget there is nothing to judge, and a pass would be a pass never judged.
fn applies(options: &Options) -> bool {
    options.gpu_budget.is_some()
}

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let memory = &ctx.memory;
    let (Some(budget), Some(within)) = (memory.budget, &memory.within_budget) else {
        return;
    };
    let Some((storage, reason)) = &within.oom else {
        return;
    };
    out.push(Draft {
        tensors: Vec::new(),
        storage: Some(*storage),
        message: format!(
            "does not fit a {} GPU: loading needs {} reserved at peak; the allocator ran out of memory at storage {storage} ({reason})",
            human_bytes(budget),
            human_bytes(memory.full.stats.reserved_bytes.peak),
        ),
        fix: "quantize or shard the model, load it across devices, or serve it on a larger GPU".into(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use crate::audit::audit;
    use crate::config::Config;
    use crate::options::Options;
    use crate::testing::{checkpoint, storage, tensor};
    use tensorplay_engine::Device;

    #[test]
    fn a_load_past_the_budget_fires_naming_the_storage_and_one_that_fits_does_not() {
        // 4 MiB of float32: the allocator gives it a 20 MiB segment.
        let s = storage(0, 1 << 20, "cpu");
        let ckpt = checkpoint(
            vec![tensor("w", &s, &[1 << 20], &[1], 0, Device::Cpu)],
            vec![s],
        );
        let run = |gpu_budget| {
            let options = Options {
                gpu_budget,
                ..Default::default()
            };
            audit(&ckpt, "hand-made.pt", &Config::default(), &options, None)
        };
        // 16 MiB holds the bytes but not the segment.
        let over: Vec<_> = run(Some(16 << 20))
            .findings
            .into_iter()
            .map(|f| (f.code.as_str().to_owned(), f.storage))
            .collect();
        assert_eq!(over, [("TP303".to_owned(), Some(0))]);
        assert!(run(Some(20 << 20)).findings.is_empty());
        // Without a budget the rule does not run at all.
        assert!(!run(None).checked.contains(&super::MemoryBudget::CODE));
    }
}
