use crate::finding::Draft;
use crate::passes;
use crate::rule::{declare_rule, Context};

declare_rule!(MetaTensor {
    code: "TP204",
    name: "meta-tensor",
    severity: Error,
    reads_bytes: false,
    tags: ["devices", "portability"],
    summary: "A tensor carries no data (meta device).",
    doc: "\
What it checks
  Tensors on the meta device, or over a meta storage: shape and dtype without any bytes.

Why it matters
  A model initialised on the meta device (deferred init, `init_empty_weights`) and saved
  before its weights were materialised ships parameters with no values; loading them
  leaves the model empty or fails with 'Cannot copy out of meta tensor'.

Example
  {'m': torch.empty(3, 4, device='meta')}

How to fix
  Materialise the weights (`model.to_empty(device='cpu')` then initialise or load real
  weights) before saving.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    if !ctx.tensor_facts.meta {
        return;
    }
    for t in &ctx.ckpt.tensors {
        let imp = t.tensor_impl();
        if !passes::on_meta(imp) {
            continue;
        }
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(imp.storage().id().index()),
            message: format!(
                "'{}' is on the meta device: {} holds no data for its {:?} {}",
                t.name(),
                ctx.holder(),
                imp.layout().sizes(),
                imp.dtype()
            ),
            fix: "materialise the weights (`to_empty` then initialise or load) before saving"
                .into(),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, found, storage, tensor};
    use std::sync::Arc;
    use tensorplay_engine::{DType, DataPtr, Device, Storage};

    /// A storage recorded on the meta device, without bytes, as the loaders build one.
    fn meta_storage(id: usize, nbytes: u64) -> Arc<Storage> {
        Arc::new(tensorplay_engine::testing::storage(
            id,
            id.to_string(),
            DType::Float32,
            nbytes,
            "meta",
            DataPtr::none(Device::Meta),
        ))
    }

    #[test]
    fn a_tensor_without_data_fires_and_a_materialised_one_does_not() {
        // {'m': torch.empty(3, 4, device='meta')}
        let m = meta_storage(0, 48);
        let empty = checkpoint(
            vec![tensor("m", &m, &[3, 4], &[4, 1], 0, Device::Meta)],
            vec![m.clone()],
        );
        let found: Vec<_> = found(&empty);
        assert_eq!(found, [("TP204".to_owned(), vec!["m".to_owned()], Some(0))]);

        // A tensor that claims another device over a meta storage holds no data either.
        let claims_cpu = checkpoint(
            vec![tensor("m", &m, &[3, 4], &[4, 1], 0, Device::Cpu)],
            vec![m],
        );
        assert!(codes(&claims_cpu).contains(&"TP204".to_owned()));

        let s = storage(0, 12, "cpu");
        let real = checkpoint(
            vec![tensor("m", &s, &[3, 4], &[4, 1], 0, Device::Cpu)],
            vec![s],
        );
        assert!(codes(&real).is_empty());
    }

    #[test]
    fn a_live_object_is_not_called_a_file() {
        let m = meta_storage(0, 48);
        let mut live = checkpoint(
            vec![tensor("m", &m, &[3, 4], &[4, 1], 0, Device::Meta)],
            vec![m],
        );
        let message = |ckpt: &tensorplay_engine::Checkpoint| {
            crate::testing::findings(ckpt)
                .into_iter()
                .find(|f| f.code.as_str() == "TP204")
                .map(|f| f.message)
                .expect("TP204")
        };
        assert!(message(&live).contains("the file holds no data"));
        live.format = tensorplay_engine::Format::Live;
        let said = message(&live);
        assert!(
            said.contains("the object holds no data") && !said.contains("file"),
            "{said}"
        );
    }
}
