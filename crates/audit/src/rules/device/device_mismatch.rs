use crate::finding::Draft;
use crate::passes;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::alloc::device_load::DeviceLoad;

declare_rule!(DeviceMismatch {
    code: "TP203",
    name: "device-mismatch",
    severity: Error,
    reads_bytes: false,
    tags: ["devices", "portability"],
    summary: "A tensor's device differs from its storage's device.",
    doc: "\
What it checks
  Every tensor's device equals the device of the storage it views: a tensor may not claim
  `cuda:0` over a storage the file records on `cpu`, or the other way round. With
  `--load-to cuda:N`, after each storage is copied to the GPU, it also checks that the
  DataPtr really lives there: the driver reports device memory on ordinal N, and the bytes
  read back match the bytes copied.

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
    recorded_devices(ctx, out);
    if let Some(load) = ctx.device_load {
        loaded_devices(load, out);
    }
}

/// Each tensor's device against its storage's, as the file records them.
fn recorded_devices(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    if !ctx.tensor_facts.device_mismatch {
        return;
    }
    for t in &ctx.ckpt.tensors {
        let imp = t.tensor_impl();
        let storage = imp.storage();
        if !passes::device_mismatch(imp) {
            continue;
        }
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(storage.id().index()),
            message: format!(
                "'{}' claims {} but its storage {} is on {}",
                t.name(),
                imp.device(),
                storage.id().index(),
                storage.location()
            ),
            fix: "load to CPU with map_location, then move the model; never patch a device field"
                .into(),
            ..Default::default()
        });
    }
}

/// Each storage's bytes after a real GPU load: not device memory, not the requested
/// ordinal, or not the bytes that were copied.
fn loaded_devices(load: &DeviceLoad, out: &mut Vec<Draft>) {
    for check in load.storages.iter().filter(|c| !c.ok()) {
        let mut problems = Vec::new();
        if !check.memory_type_device {
            problems.push("its memory is not device memory");
        }
        if !check.ordinal_matches {
            problems.push("it lives on another device");
        }
        if !check.checksum_matches {
            problems.push("the bytes read back differ from the bytes copied");
        }
        out.push(Draft {
            tensors: Vec::new(),
            storage: Some(check.storage),
            message: format!(
                "storage {} loaded to cuda:{} at {:#x}: {}",
                check.storage,
                load.ordinal,
                check.address,
                problems.join(", ")
            ),
            fix: "check the driver and device; load to CPU with map_location, then move the model"
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

    #[test]
    fn a_storage_whose_bytes_are_not_on_the_gpu_after_a_real_load_fires() {
        use crate::audit::audit;
        use crate::config::Config;
        use crate::options::Options;
        use tensorplay_engine::alloc::device_load::{DeviceLoad, StorageCheck};

        let s = storage(0, 4, "cpu");
        let ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        let check = |ordinal_matches| StorageCheck {
            storage: 0,
            address: 0x7f00_0000,
            nbytes: 16,
            memory_type_device: true,
            ordinal_matches,
            checksum_matches: true,
        };
        let load = |ordinal_matches| DeviceLoad {
            ordinal: 1,
            device_name: "hand-made".into(),
            stats: Default::default(),
            pinned: Default::default(),
            storages: vec![check(ordinal_matches)],
            pinned_available: true,
        };
        let run = |load: &DeviceLoad| {
            audit(
                &ckpt,
                "m.pt",
                &Config::default(),
                &Options::default(),
                Some(load),
            )
        };
        let report = run(&load(false));
        let found: Vec<_> = report
            .findings
            .iter()
            .map(|f| (f.code, f.storage))
            .collect();
        assert_eq!(found, [(super::DeviceMismatch::CODE, Some(0))]);
        assert!(report.findings[0]
            .message
            .contains("it lives on another device"));
        let device = report.device.expect("device facts");
        assert_eq!((device.storages_checked, device.storages_failed), (1, 1));
        assert!(run(&load(true)).findings.is_empty());
    }
}
