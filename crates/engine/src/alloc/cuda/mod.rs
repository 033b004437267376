//! The GPU path's contact with CUDA: whether this machine can run it ([`gpu_status`]) and what
//! can go wrong on it ([`GpuError`]).
//!
//! With the `cuda` cargo feature (on by default) the driver is reached through cudarc, loaded
//! dynamically (`driver.rs`, whose items are re-exported here: `CudaDevice`, `CudaSegments`,
//! `CudaPinned`, `pointer_info`, `driver_present`). A build without it has neither cudarc nor
//! a GPU path: [`gpu_status`] answers [`GpuStatus::Unavailable`] with
//! [`GpuError::NoCudaSupport`]'s message, which the CLI reports as it reports a machine without
//! a driver, and [`load_to_device`](super::device_load::load_to_device) fails with that error.

#[cfg(feature = "cuda")]
mod driver;

#[cfg(feature = "cuda")]
pub use driver::{
    driver_present, gpu_status, pointer_info, CudaDevice, CudaPinned, CudaSegments, MemoryType,
    PointerInfo, NO_DRIVER,
};

use std::fmt;

/// What can go wrong on the GPU path. Every message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// No candidate name of the driver library could be loaded.
    #[error(
        "no CUDA driver (libcuda) found on this machine: install the NVIDIA driver or put \
         libcuda.so.1 on LD_LIBRARY_PATH"
    )]
    NoDriver,
    /// This build has no GPU path: tensorplay was compiled without its `cuda` feature.
    #[error(
        "this build of tensorplay has no CUDA support: it was compiled without the `cuda` feature"
    )]
    NoCudaSupport,
    /// The driver library loaded, but cudarc panicked using it (usually a missing symbol: the
    /// installed driver is older than the CUDA version tensorplay was built for).
    #[error("the CUDA driver library could not be used: {0}")]
    DriverUnusable(String),
    /// A driver call failed.
    #[cfg(feature = "cuda")]
    #[error("CUDA {op} failed: {message}")]
    Driver {
        /// The operation (driver function) that failed.
        op: &'static str,
        /// The driver's result code.
        code: cudarc::driver::sys::CUresult,
        /// Its name and the driver's description.
        message: String,
    },
    /// The ordinal names no device.
    #[error("CUDA device {ordinal} does not exist: the driver reports {count} device(s)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// A size does not fit this platform's address space (or the driver's limits).
    #[error("{bytes} bytes is too large for one CUDA allocation on this platform")]
    TooLarge {
        /// The size asked for.
        bytes: u64,
    },
    /// A copy range does not lie inside one segment.
    #[error("device range 0x{address:x}..+{len} does not lie inside one CUDA segment")]
    OutsideSegments {
        /// Start of the range.
        address: u64,
        /// Its length.
        len: u64,
    },
    /// A segment to free is not one this backend holds (or has another size).
    #[error("no CUDA segment of {size} bytes starts at 0x{address:x}")]
    UnknownSegment {
        /// The address given.
        address: u64,
        /// The size given.
        size: u64,
    },
    /// The caching allocator refused a storage (out of memory, or an inconsistency).
    #[error("device allocator failed for storage {storage}: {message}")]
    Allocator {
        /// The storage being loaded.
        storage: usize,
        /// The allocator's message.
        message: String,
    },
    /// Returning device memory after a load failed.
    #[error("releasing device memory failed: {0}")]
    Teardown(String),
    /// No staging buffer could be had, pinned or pageable.
    #[error("no host staging buffer for storage {storage}: {message}")]
    Staging {
        /// The storage being loaded.
        storage: usize,
        /// Why.
        message: String,
    },
}

/// Whether this machine can run the GPU path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// The driver loaded, initialised, and opened a context on device 0.
    Available {
        /// Devices the driver reports.
        devices: usize,
    },
    /// Why not, in one line.
    Unavailable(String),
}

impl fmt::Display for GpuStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuStatus::Available { devices } => write!(f, "CUDA available: {devices} device(s)"),
            GpuStatus::Unavailable(why) => write!(f, "CUDA unavailable: {why}"),
        }
    }
}

/// Whether this machine can run the GPU path: never, in a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub fn gpu_status() -> GpuStatus {
    GpuStatus::Unavailable(GpuError::NoCudaSupport.to_string())
}

#[cfg(all(test, not(feature = "cuda")))]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_the_gpu_path_is_unavailable_and_says_why() {
        let GpuStatus::Unavailable(why) = gpu_status() else {
            panic!("a build without the cuda feature reported a GPU");
        };
        assert_eq!(why, GpuError::NoCudaSupport.to_string());
        assert!(why.contains("no CUDA support"), "{why}");
        assert!(!why.contains('\n'));
    }
}
