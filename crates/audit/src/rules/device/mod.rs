//! Device consistency: where storages were saved from, and what tensors claim.

mod device_mismatch;
mod meta_tensor;
mod mixed_devices;
mod unexpected_device;

pub use device_mismatch::DeviceMismatch;
pub use meta_tensor::MetaTensor;
pub use mixed_devices::MixedDevices;
pub use unexpected_device::UnexpectedDevice;
