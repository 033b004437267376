//! Device consistency: where storages were saved from, and what tensors claim.

mod device_mismatch;
mod meta_tensor;
mod mixed_devices;
mod unexpected_device;

pub use device_mismatch::DeviceMismatch;
pub use meta_tensor::MetaTensor;
pub use mixed_devices::MixedDevices;
pub use unexpected_device::UnexpectedDevice;

use std::collections::BTreeMap;
use tensorplay_engine::Checkpoint;

/// Storage ids by recorded location, meta storages left out (they hold no data; TP204): read
/// once per audit, into [`Context::by_location`](crate::rule::Context::by_location).
pub(crate) fn storages_by_location(ckpt: &Checkpoint) -> BTreeMap<&str, Vec<usize>> {
    let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    // Runs of one location (nearly every file is one run) are gathered before the map is
    // searched.
    let mut run: Option<(&str, Vec<usize>)> = None;
    for s in &ckpt.storages {
        let location = s.location();
        if location == "meta" {
            continue;
        }
        match &mut run {
            // The same spelling is mostly the same static string: no bytes compared.
            Some((at, ids)) if std::ptr::eq(*at, location) || *at == location => {
                ids.push(s.id().index())
            }
            _ => {
                if let Some((at, ids)) = run.replace((location, vec![s.id().index()])) {
                    by.entry(at).or_default().extend(ids);
                }
            }
        }
    }
    if let Some((at, ids)) = run {
        by.entry(at).or_default().extend(ids);
    }
    by
}
