use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(DeviceMismatch {
    code: "TP203",
    name: "device-mismatch",
    severity: Error,
    reads_bytes: false,
    summary: "A tensor's device differs from its storage's device.",
    doc: "\
What it checks
  Every tensor's device equals the device of the storage it views: a tensor may not claim
  `cuda:0` over a storage the file records on `cpu`, or the other way round. (On the GPU
  load path, it also checks that each DataPtr really lives where its storage says.)

Why it matters
  A weight that claims `cuda:0` while its storage holds host bytes makes the model read
  garbage or fail deep inside a kernel; checking `tensor.device` alone never finds it.

Example
  A pickle that rebuilds a tensor with `_rebuild_device_tensor_from_cpu_tensor(..., 'cuda:0')`
  over a storage recorded on 'cpu'.

How to fix
  Load to CPU, then move (`model.load_state_dict(torch.load(f, map_location='cpu'))`,
  then `model.to(device)`); never patch a device field.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for t in &ctx.ckpt.tensors {
        let imp = t.tensor_impl();
        let storage = imp.storage();
        if imp.device() == storage.device() {
            continue;
        }
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(storage.id()),
            message: format!(
                "'{}' claims {} but its storage {} is on {}",
                t.name(),
                imp.device(),
                storage.id(),
                storage.location()
            ),
            fix: "load to CPU with map_location, then move the model; never patch a device field"
                .into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, storage, tensor};
    use tensorplay_engine::Device;

    #[test]
    fn a_tensor_claiming_another_device_than_its_storage_fires() {
        let s = storage(0, 4, "cpu");
        let lying = checkpoint(
            vec![tensor("w", &s, &[4], &[1], 0, Device::Cuda(Some(0)))],
            vec![s.clone()],
        );
        assert_eq!(codes(&lying), ["TP203"]);
        let honest = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        assert!(codes(&honest).is_empty());
    }
}
