//! The GPU load path: every storage through pinned staging into caching-allocator blocks on a device, then checked.
//!
//! [`load_to_device`] does for real what the simulated allocator only counts: each
//! storage that holds bytes, in storage order, is copied into a page-locked staging buffer
//! (PyTorch's `pin_memory()` path, from a [`PinnedAllocator`]), given a block of its `nbytes`
//! by a [`CachingAllocator`] whose segments are real device allocations ([`CudaSegments`]),
//! copied host→device, and then checked: the driver must call the block's address device
//! memory on the chosen device, and a sample of the bytes read back must equal the host bytes.
//! Nothing is freed until every storage is placed (a loaded model holds all its weights), so
//! the allocator statistics are those of the loaded model; afterwards all device memory is
//! returned.

use super::cuda::GpuError;
#[cfg(feature = "cuda")]
use super::cuda::{pointer_info, CudaDevice, CudaPinned, CudaSegments};
use super::pinned::PinnedStats;
#[cfg(feature = "cuda")]
use super::pinned::{HostBackend, Pageable, PinnedAllocator, PinnedError};
#[cfg(feature = "cuda")]
use super::{AllocError, CachingAllocator};
use super::{AllocatorConfig, Stats};
use crate::Checkpoint;
use serde::Serialize;
use std::ops::Range;

/// Bytes compared at each end of a storage.
pub const SAMPLE_BYTES: u64 = 4096;

/// The byte ranges of an `nbytes`-byte storage whose round trip is compared: the first and
/// the last [`SAMPLE_BYTES`], as one range when they meet or overlap; none for 0 bytes.
pub fn sample_ranges(nbytes: u64) -> Vec<Range<u64>> {
    if nbytes == 0 {
        Vec::new()
    } else if nbytes <= 2 * SAMPLE_BYTES {
        std::iter::once(0..nbytes).collect()
    } else {
        vec![0..SAMPLE_BYTES, nbytes - SAMPLE_BYTES..nbytes]
    }
}

/// What the checks found for one storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageCheck {
    /// The storage's id in its checkpoint.
    pub storage: usize,
    /// The device address of its block.
    pub address: u64,
    /// Bytes allocated for it (its recorded `nbytes`).
    pub nbytes: u64,
    /// The driver calls the address device memory.
    pub memory_type_device: bool,
    /// The driver puts the address on the device the load targeted.
    pub ordinal_matches: bool,
    /// The sampled bytes read back equal the host bytes.
    pub checksum_matches: bool,
}

impl StorageCheck {
    /// Whether every check passed.
    pub fn ok(&self) -> bool {
        self.memory_type_device && self.ordinal_matches && self.checksum_matches
    }
}

/// The outcome of loading a checkpoint onto a device.
#[derive(Debug, Clone)]
pub struct DeviceLoad {
    /// The device.
    pub ordinal: usize,
    /// Its name, as the driver reports it.
    pub device_name: String,
    /// The caching allocator's statistics with every storage placed.
    pub stats: Stats,
    /// The staging allocator's statistics at the end of the load (before its cache was
    /// emptied): the pinned one, or the pageable one after a fallback.
    pub pinned: PinnedStats,
    /// One check per storage that holds bytes, in storage order.
    pub storages: Vec<StorageCheck>,
    /// Whether every staging buffer was page-locked; `false` once a pinned allocation failed
    /// and staging fell back to pageable memory.
    pub pinned_available: bool,
}

impl DeviceLoad {
    /// Whether every storage passed every check.
    pub fn ok(&self) -> bool {
        self.storages.iter().all(StorageCheck::ok)
    }
}

/// Pinned staging while it works, pageable staging after the first pinned failure.
#[cfg(feature = "cuda")]
struct Staging {
    pinned: Option<PinnedAllocator<CudaPinned>>,
    pageable: PinnedAllocator<Pageable>,
}

/// Copies `bytes` into a staging buffer from `staging`, then to `address` on the device.
/// The outer error is the staging allocation's; the inner result is the copy's.
#[cfg(feature = "cuda")]
fn stage<H: HostBackend>(
    staging: &mut PinnedAllocator<H>,
    bytes: &[u8],
    segments: &mut CudaSegments,
    address: u64,
) -> Result<Result<(), GpuError>, PinnedError<H::Error>> {
    let mut buffer = staging.allocate(bytes.len() as u64)?;
    buffer.as_mut_slice().copy_from_slice(bytes);
    let copied = segments.copy_in(address, buffer.as_slice());
    staging.free(buffer);
    Ok(copied)
}

#[cfg(feature = "cuda")]
impl Staging {
    fn copy_in(
        &mut self,
        storage: usize,
        bytes: &[u8],
        segments: &mut CudaSegments,
        address: u64,
    ) -> Result<(), GpuError> {
        if let Some(pinned) = self.pinned.as_mut() {
            match stage(pinned, bytes, segments, address) {
                Ok(copied) => return copied,
                // Dropping the pinned allocator returns its cached blocks to the driver.
                Err(_) => self.pinned = None,
            }
        }
        stage(&mut self.pageable, bytes, segments, address).unwrap_or_else(|e| {
            Err(GpuError::Staging {
                storage,
                message: e.to_string(),
            })
        })
    }
}

#[cfg(feature = "cuda")]
fn allocator_error(storage: usize, e: AllocError<GpuError>) -> GpuError {
    match e {
        AllocError::Backend(e) => e,
        e => GpuError::Allocator {
            storage,
            message: e.to_string(),
        },
    }
}

/// Loads every storage of `ckpt` that holds bytes onto device `ordinal`, in storage order,
/// through pinned staging buffers and a caching allocator with `config`, and checks each one
/// (see [`StorageCheck`]). Storages without bytes (meta) or of 0 bytes are skipped, as PyTorch
/// allocates nothing for them. A storage whose data holds fewer bytes than its `nbytes` gets a
/// block of `nbytes` and has the bytes it holds copied and sampled.
///
/// Fails with a [`GpuError`], never a panic, when there is no driver or device, when the
/// device runs out of memory (the allocator's message), or when a driver call fails. All
/// device and pinned memory is returned before it returns.
#[cfg(feature = "cuda")]
pub fn load_to_device(
    ckpt: &Checkpoint,
    ordinal: usize,
    config: AllocatorConfig,
) -> Result<DeviceLoad, GpuError> {
    let device = CudaDevice::open(ordinal)?;
    let device_name = device.name()?;
    let mut allocator = CachingAllocator::new(device.segments(), config);
    let mut staging = Staging {
        pinned: Some(PinnedAllocator::new(device.pinned_backend())),
        pageable: PinnedAllocator::new(Pageable),
    };
    let mut storages = Vec::new();
    let mut blocks = Vec::new();
    for storage in &ckpt.storages {
        let Some(bytes) = storage.data_ptr().bytes() else {
            continue;
        };
        let nbytes = storage.nbytes();
        if nbytes == 0 {
            continue;
        }
        let id = storage.id().index();
        // `copied <= bytes.len()`, a usize.
        let copied = nbytes.min(bytes.len() as u64);
        let bytes = &bytes[..copied as usize];
        let block = allocator
            .malloc(nbytes)
            .map_err(|e| allocator_error(id, e))?;
        blocks.push((id, block.id));
        staging.copy_in(id, bytes, allocator.backend_mut(), block.address)?;
        let info = pointer_info(block.address)?;
        let mut checksum_matches = true;
        for range in sample_ranges(copied) {
            let back = allocator
                .backend()
                .copy_out(block.address + range.start, range.end - range.start)?;
            checksum_matches &= back[..] == bytes[range.start as usize..range.end as usize];
        }
        storages.push(StorageCheck {
            storage: id,
            address: block.address,
            nbytes,
            memory_type_device: info.memory_type == super::cuda::MemoryType::Device,
            ordinal_matches: info.device_ordinal.and_then(|o| usize::try_from(o).ok())
                == Some(ordinal),
            checksum_matches,
        });
    }
    let stats = allocator.stats().clone();
    let (pinned, pinned_available) = match &staging.pinned {
        Some(p) => (p.stats().clone(), true),
        None => (staging.pageable.stats().clone(), false),
    };
    drop(staging);
    for (id, block) in blocks {
        allocator
            .free(block)
            .map_err(|e| GpuError::Teardown(format!("storage {id}: {e}")))?;
    }
    allocator
        .empty_cache()
        .map_err(|e| GpuError::Teardown(e.to_string()))?;
    if allocator.backend().segment_count() != 0 {
        return Err(GpuError::Teardown(format!(
            "{} segment(s) still held after emptying the cache",
            allocator.backend().segment_count()
        )));
    }
    Ok(DeviceLoad {
        ordinal,
        device_name,
        stats,
        pinned,
        storages,
        pinned_available,
    })
}

/// The GPU load in a build without the `cuda` feature: always
/// [`GpuError::NoCudaSupport`], as this build cannot reach a device.
#[cfg(not(feature = "cuda"))]
pub fn load_to_device(
    _ckpt: &Checkpoint,
    _ordinal: usize,
    _config: AllocatorConfig,
) -> Result<DeviceLoad, GpuError> {
    Err(GpuError::NoCudaSupport)
}

#[cfg(test)]
// Expected sample lists are written as literals, one range or two.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    #[cfg(feature = "cuda")]
    use crate::alloc::cuda::driver_present;
    #[cfg(feature = "cuda")]
    use crate::alloc::Simulated;
    use crate::{DType, DataPtr, Device, Format, HostBuffer, Layout, Tensor, TensorImpl};

    use std::path::PathBuf;
    use std::sync::Arc;

    /// One uint8 tensor per size, each in its own storage with patterned bytes, then one meta
    /// storage.
    fn tiny_checkpoint(sizes: &[u64]) -> Checkpoint {
        let mut storages = Vec::new();
        let mut tensors = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let bytes: Vec<u8> = (0..n)
                .map(|j| (j.wrapping_mul(2_654_435_761).wrapping_add(i as u64) >> 7) as u8)
                .collect();
            let buffer = HostBuffer::from_vec(format!("tiny-{i}"), bytes);
            let ptr = DataPtr::host(buffer, 0..n).unwrap();
            let storage = Arc::new(crate::testing::storage(
                i,
                i.to_string(),
                DType::UInt8,
                n,
                "cpu",
                ptr,
            ));
            let imp = TensorImpl::new(
                Layout::contiguous(vec![n]).unwrap(),
                DType::UInt8,
                Device::Cpu,
                false,
                false,
                storage.clone(),
            );
            tensors.push(Tensor::new(format!("t{i}"), Arc::new(imp)));
            storages.push(storage);
        }
        let id = storages.len();
        storages.push(Arc::new(crate::testing::storage(
            id,
            "meta",
            DType::UInt8,
            1 << 20,
            "meta",
            DataPtr::none(Device::Meta),
        )));
        crate::testing::checkpoint(
            PathBuf::from("tiny.pt"),
            Format::PytorchZip,
            tensors,
            storages,
        )
    }

    #[test]
    fn samples_both_ends() {
        assert!(sample_ranges(0).is_empty());
        assert_eq!(sample_ranges(1), vec![0..1]);
        assert_eq!(sample_ranges(4096), vec![0..4096]);
        assert_eq!(sample_ranges(8192), vec![0..8192]);
        assert_eq!(sample_ranges(8193), vec![0..4096, 4097..8193]);
        assert_eq!(
            sample_ranges(1 << 30),
            vec![0..4096, (1 << 30) - 4096..1 << 30]
        );
    }

    #[test]
    fn storage_check_needs_every_check() {
        let good = StorageCheck {
            storage: 0,
            address: 0x7000_0000,
            nbytes: 8,
            memory_type_device: true,
            ordinal_matches: true,
            checksum_matches: true,
        };
        assert!(good.ok());
        for bad in [
            StorageCheck {
                memory_type_device: false,
                ..good.clone()
            },
            StorageCheck {
                ordinal_matches: false,
                ..good.clone()
            },
            StorageCheck {
                checksum_matches: false,
                ..good.clone()
            },
        ] {
            assert!(!bad.ok());
        }
    }

    #[test]
    #[cfg(feature = "cuda")]
    fn load_without_a_gpu_is_an_error_not_a_panic() {
        let ckpt = tiny_checkpoint(&[100, 5000]);
        match load_to_device(&ckpt, 0, AllocatorConfig::default()) {
            Err(e) => {
                if !driver_present() {
                    assert_eq!(e, GpuError::NoDriver);
                }
                assert!(!e.to_string().is_empty());
            }
            Ok(load) => assert!(driver_present() && load.ok(), "{load:?}"),
        }
        // No device has this ordinal, driver or not: refused where the device is opened, as
        // opening it is.
        let e =
            load_to_device(&ckpt, 1 << 20, AllocatorConfig::default()).expect_err("no such device");
        assert_eq!(Some(&e), CudaDevice::open(1 << 20).err().as_ref());
        if !driver_present() {
            assert_eq!(e, GpuError::NoDriver);
        } else if CudaDevice::open(0).is_ok() {
            assert!(
                matches!(e, GpuError::NoDevice { ordinal, .. } if ordinal == 1 << 20),
                "{e}"
            );
        }
    }

    #[test]
    #[cfg(not(feature = "cuda"))]
    fn load_without_the_cuda_feature_is_a_typed_error() {
        let ckpt = tiny_checkpoint(&[100, 5000]);
        let e = load_to_device(&ckpt, 0, AllocatorConfig::default()).unwrap_err();
        assert_eq!(e, GpuError::NoCudaSupport);
        assert!(e.to_string().contains("no CUDA support"), "{e}");
    }

    #[test]
    #[cfg(feature = "cuda")]
    #[ignore = "needs an NVIDIA GPU; run with TENSORPLAY_GPU_TESTS=1 cargo test -- --ignored"]
    fn loads_to_device_0_and_matches_the_simulation() {
        if std::env::var_os("TENSORPLAY_GPU_TESTS").is_none() {
            return;
        }
        // Small pool, large pool below 10 MiB, large pool above, an odd size, a repeat that
        // reuses a staging bucket.
        let sizes = [100, 5000, 700_000, 3 << 20, (12 << 20) + 7, 5000];
        let ckpt = tiny_checkpoint(&sizes);
        let config = AllocatorConfig::default();
        let load = load_to_device(&ckpt, 0, config.clone()).unwrap();
        assert_eq!(load.ordinal, 0);
        assert!(!load.device_name.is_empty());
        assert_eq!(
            load.storages.len(),
            sizes.len(),
            "the meta storage is skipped"
        );
        for check in &load.storages {
            assert!(check.ok(), "{check:?}");
        }
        assert!(load.ok());
        assert!(
            load.pinned_available,
            "pinned staging fell back to pageable"
        );
        assert!(load.pinned.hits >= 1, "{:?}", load.pinned);

        let mut sim = CachingAllocator::new(Simulated::new(1 << 40), config);
        for &n in &sizes {
            sim.malloc(n).unwrap();
        }
        assert_eq!(
            load.stats.reserved_bytes.current,
            sim.stats().reserved_bytes.current
        );
        assert_eq!(load.stats.segment.current, sim.stats().segment.current);
        assert_eq!(
            load.stats.allocated_bytes.current,
            sim.stats().allocated_bytes.current
        );
    }
}
