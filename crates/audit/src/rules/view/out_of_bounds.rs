use crate::finding::Draft;
use crate::passes;
use crate::rule::{declare_rule, Context};

declare_rule!(ViewOutOfBounds {
    code: "TP107",
    name: "view-out-of-bounds",
    severity: Error,
    reads_bytes: false,
    tags: ["views"],
    summary: "A view reaches outside its storage.",
    doc: "\
What it checks
  Every tensor's byte range (storage offset, sizes and strides times the element size) lies
  inside the bytes its storage records. A layout whose byte range cannot even be computed
  (its extent overflows) is reported too.

Why it matters
  torch.load would refuse the file or, worse, read past the storage into whatever memory
  follows. Only a damaged or crafted file has such a view.

Example
  A pickle that rebuilds a [10] tensor at offset 5 over a 12-element storage.

How to fix
  Do not use the file; re-save it from the source model.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    if !ctx.tensor_facts.out_of_bounds {
        return;
    }
    for t in &ctx.ckpt.tensors {
        let imp = t.tensor_impl();
        if !passes::out_of_bounds(imp) {
            continue;
        }
        let storage = imp.storage();
        let problem = match imp.byte_range() {
            Ok(Some(r)) => format!(
                "'{}' reaches bytes [{}, {}) of a {}-byte storage",
                t.name(),
                r.start,
                r.end,
                storage.nbytes()
            ),
            Err(e) => format!("'{}': {e}", t.name()),
            Ok(None) => continue,
        };
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(storage.id().index()),
            message: problem,
            fix: "the file is inconsistent: do not load it; re-save it from the source model"
                .into(),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, storage, tensor};
    use tensorplay_engine::Device;

    #[test]
    fn a_view_past_its_storage_fires_and_one_inside_does_not() {
        let s = storage(0, 12, "cpu");
        let outside = checkpoint(
            vec![tensor("w", &s, &[10], &[1], 5, Device::Cpu)],
            vec![s.clone()],
        );
        assert!(codes(&outside).contains(&"TP107".to_owned()));
        let inside = checkpoint(vec![tensor("w", &s, &[7], &[1], 5, Device::Cpu)], vec![s]);
        assert!(!codes(&inside).contains(&"TP107".to_owned()));
    }
}
