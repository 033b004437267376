use crate::finding::Draft;
use crate::passes;
use crate::rule::{declare_rule, Context};

declare_rule!(NonContiguous {
    code: "TP105",
    name: "non-contiguous",
    severity: Info,
    reads_bytes: false,
    tags: ["views"],
    summary: "A tensor's layout is not C-contiguous.",
    doc: "\
What it checks
  Tensors whose strides are not row-major dense (size-1 dimensions ignored), as
  `tensor.is_contiguous()` would say.

Why it matters
  Consumers that need dense memory (safetensors, many kernels, mmap readers) must copy
  them, and a transposed weight often means a layout nobody intended to ship.

Example
  {'t': torch.arange(6.).reshape(2, 3).t()}   # shape [3, 2], strides [1, 3]

How to fix
  Save `t.contiguous()` if consumers need a dense layout.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    if !ctx.tensor_facts.non_contiguous {
        return;
    }
    for t in &ctx.ckpt.tensors {
        if !passes::non_contiguous(t.tensor_impl()) {
            continue;
        }
        let layout = t.tensor_impl().layout();
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(t.storage_index()),
            message: format!(
                "'{}' has shape {:?} with strides {:?}: not contiguous",
                t.name(),
                layout.sizes(),
                layout.strides()
            ),
            fix: format!(
                "save `{}.contiguous()` if consumers need a dense layout",
                t.name()
            ),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, found, storage, tensor};
    use tensorplay_engine::Device;

    #[test]
    fn a_transposed_tensor_fires_and_a_row_major_one_does_not() {
        // torch.arange(6.).reshape(2, 3).t(): shape [3, 2], strides [1, 3]
        let s = storage(0, 6, "cpu");
        let layout = |sizes: &[u64], strides: &[u64]| {
            checkpoint(
                vec![tensor("t", &s, sizes, strides, 0, Device::Cpu)],
                vec![s.clone()],
            )
        };
        let transposed = layout(&[3, 2], &[1, 3]);
        let found: Vec<_> = found(&transposed);
        assert_eq!(found, [("TP105".to_owned(), vec!["t".to_owned()], Some(0))]);

        assert!(codes(&layout(&[2, 3], &[3, 1])).is_empty());
        // The stride of a size-1 dimension does not matter.
        assert!(codes(&layout(&[1, 6], &[100, 1])).is_empty());
    }
}
