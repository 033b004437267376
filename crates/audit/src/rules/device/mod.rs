//! Device consistency: where storages were saved from, and what tensors claim.

mod device_mismatch;
mod meta_tensor;
mod mixed_devices;
mod unexpected_device;

pub use device_mismatch::DeviceMismatch;
pub use meta_tensor::MetaTensor;
pub use mixed_devices::MixedDevices;
pub use unexpected_device::UnexpectedDevice;

use crate::rule::Context;
use std::collections::BTreeMap;

/// Storage ids by recorded location, meta storages left out (they hold no data; TP204).
pub(crate) fn storages_by_location<'a>(ctx: &'a Context<'_>) -> BTreeMap<&'a str, Vec<usize>> {
    let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for s in &ctx.ckpt.storages {
        if s.location() != "meta" {
            by.entry(s.location()).or_default().push(s.id().index());
        }
    }
    by
}
