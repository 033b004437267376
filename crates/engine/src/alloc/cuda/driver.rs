//! The CUDA driver through cudarc, loaded dynamically (the `cuda` feature): detection, device
//! segments, pointer checks.
//!
//! Nothing here needs CUDA at build time, and nothing panics when it is absent at run time.
//! cudarc loads `libcuda` lazily and **panics** the first time any driver function is called
//! without it, so every entry point first asks [`driver_present`] (cudarc's non-panicking
//! `cudarc::driver::sys::is_culib_present()`, which only tries to `dlopen` the candidate library
//! names) and then runs the driver calls under [`std::panic::catch_unwind`] as a backstop for
//! the panics cudarc can still raise with a library present (a symbol the installed driver
//! lacks). Such a panic becomes [`GpuError::DriverUnusable`].
//!
//! - [`gpu_status`]: whether this machine can run the GPU path, and if not, why.
//! - [`CudaDevice`]: one device's primary context and default stream.
//! - [`CudaSegments`]: a [`SegmentBackend`] whose segments are real device allocations.
//! - [`pointer_info`]: what the driver says an address is (`cuPointerGetAttribute`).
//! - [`CudaPinned`]: a [`HostBackend`] of page-locked host memory for staging copies.

use super::{GpuError, GpuStatus};
use crate::alloc::pinned::{HostBackend, HostBlock, HostBytes};
use crate::alloc::SegmentBackend;
use cudarc::driver::{
    sys, CudaContext, CudaSlice, CudaStream, DevicePtr, DriverError, PinnedHostSlice,
};
use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

/// Why the GPU path cannot run on a machine without the driver library.
pub const NO_DRIVER: &str = "no CUDA driver (libcuda) found on this machine";

/// The error's name and the driver's description, e.g.
/// `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`. Only called with the library loaded.
fn describe(e: &DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{:?} ({})", e.0, s.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

/// Maps a driver error from `op` into a [`GpuError::Driver`].
fn driver(op: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Driver {
        op,
        code: e.0,
        message: describe(&e),
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "cudarc panicked".to_owned()
    }
}

/// Whether the CUDA driver library can be loaded, asked once per process.
///
/// Calls `cudarc::driver::sys::is_culib_present()`, which tries `dlopen` on every candidate
/// name (`libcuda.so`, `libcuda.so.1`, versioned names, then `nvcuda`) and never resolves a
/// symbol, so it cannot panic on a missing library.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: loading the driver library runs its initialisers, which is what every CUDA
        // program does; the handle is closed again at once.
        catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
    })
}

/// Runs driver calls, turning a cudarc panic into [`GpuError::DriverUnusable`].
fn guard<T>(f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|payload| Err(GpuError::DriverUnusable(panic_message(payload))))
}

/// [`guard`], after checking that the driver library is there at all.
fn with_driver<T>(f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    guard(f)
}

/// Probes the driver without ever panicking: `is_culib_present()` first, then, under
/// `catch_unwind`, `CudaContext::device_count()` (cuInit + cuDeviceGetCount) and
/// `CudaContext::new(0)` (the primary context of device 0).
pub fn gpu_status() -> GpuStatus {
    if !driver_present() {
        return GpuStatus::Unavailable(format!(
            "{NO_DRIVER} (none of libcuda.so, libcuda.so.1 or their versioned names could be loaded)"
        ));
    }
    let probe = guard(|| {
        let count = CudaContext::device_count().map_err(driver("cuInit/cuDeviceGetCount"))?;
        let count = usize::try_from(count).unwrap_or(0);
        if count == 0 {
            return Err(GpuError::NoDevice { ordinal: 0, count });
        }
        CudaContext::new(0).map_err(driver("context creation on device 0"))?;
        Ok(count)
    });
    match probe {
        Ok(devices) => GpuStatus::Available { devices },
        Err(e) => GpuStatus::Unavailable(format!("the CUDA driver is present but unusable: {e}")),
    }
}

/// One CUDA device: its primary context and default stream.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl CudaDevice {
    /// Opens device `ordinal` (retains its primary context and binds it to this thread).
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        with_driver(|| {
            let count = CudaContext::device_count().map_err(driver("cuInit/cuDeviceGetCount"))?;
            let count = usize::try_from(count).unwrap_or(0);
            if ordinal >= count {
                return Err(GpuError::NoDevice { ordinal, count });
            }
            let ctx = CudaContext::new(ordinal).map_err(driver("context creation"))?;
            let stream = ctx.default_stream();
            Ok(CudaDevice { ctx, stream })
        })
    }

    /// Its ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The device's name, as the driver reports it.
    pub fn name(&self) -> Result<String, GpuError> {
        guard(|| self.ctx.name().map_err(driver("cuDeviceGetName")))
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> Result<u64, GpuError> {
        guard(|| {
            self.ctx
                .total_mem()
                .map(|n| n as u64)
                .map_err(driver("cuDeviceTotalMem"))
        })
    }

    /// Free device memory in bytes now.
    pub fn free_memory(&self) -> Result<u64, GpuError> {
        guard(|| {
            self.ctx
                .mem_get_info()
                .map(|(free, _)| free as u64)
                .map_err(driver("cuMemGetInfo"))
        })
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The context's default stream, on which every copy here runs.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A segment backend allocating on this device's default stream.
    pub fn segments(&self) -> CudaSegments {
        CudaSegments::new(self.stream.clone())
    }

    /// A host backend of page-locked memory registered with this context.
    pub fn pinned_backend(&self) -> CudaPinned {
        CudaPinned {
            ctx: self.ctx.clone(),
        }
    }
}

/// Device segments from the driver: one `CudaSlice<u8>` per segment, keyed by address.
///
/// cudarc's `CudaStream::alloc` calls `cuMemAllocAsync` (the device's default memory pool) on
/// devices that report memory-pool support, and `cuMemAlloc` otherwise; either way each
/// segment is one driver allocation, freed when the caching allocator releases it.
/// Out-of-memory (`CUDA_ERROR_OUT_OF_MEMORY`) is `Ok(None)`, as [`SegmentBackend`] asks.
#[derive(Debug)]
pub struct CudaSegments {
    stream: Arc<CudaStream>,
    segments: BTreeMap<u64, CudaSlice<u8>>,
}

impl CudaSegments {
    /// No segments yet; allocations go on `stream`.
    pub fn new(stream: Arc<CudaStream>) -> Self {
        CudaSegments {
            stream,
            segments: BTreeMap::new(),
        }
    }

    /// Bytes held in segments.
    pub fn reserved_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.len() as u64).sum()
    }

    /// Number of segments held.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The segment containing `address..address + len`, and the offset of `address` in it.
    fn locate(&self, address: u64, len: u64) -> Result<(u64, usize, usize), GpuError> {
        let outside = || GpuError::OutsideSegments { address, len };
        let (&base, slice) = self
            .segments
            .range(..=address)
            .next_back()
            .ok_or_else(outside)?;
        let start = address - base;
        let end = start.checked_add(len).ok_or_else(outside)?;
        if end > slice.len() as u64 {
            return Err(outside());
        }
        // Both are ≤ slice.len(), a usize.
        Ok((base, start as usize, end as usize))
    }

    /// Copies `bytes` host→device to `address`, which with its length must lie inside one
    /// segment, and waits for the copy to finish.
    pub fn copy_in(&mut self, address: u64, bytes: &[u8]) -> Result<(), GpuError> {
        let (base, start, end) = self.locate(address, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(());
        }
        let stream = self.stream.clone();
        let slice = self
            .segments
            .get_mut(&base)
            .ok_or(GpuError::OutsideSegments {
                address,
                len: bytes.len() as u64,
            })?;
        guard(|| {
            let mut view = slice
                .try_slice_mut(start..end)
                .ok_or(GpuError::OutsideSegments {
                    address,
                    len: bytes.len() as u64,
                })?;
            stream
                .memcpy_htod(bytes, &mut view)
                .map_err(driver("cuMemcpyHtoDAsync"))?;
            // `bytes` may be pinned, making the copy truly asynchronous: wait before returning.
            stream.synchronize().map_err(driver("cuStreamSynchronize"))
        })
    }

    /// Copies `len` bytes device→host from `address`, which with `len` must lie inside one
    /// segment.
    pub fn copy_out(&self, address: u64, len: u64) -> Result<Vec<u8>, GpuError> {
        let (base, start, end) = self.locate(address, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let slice = self
            .segments
            .get(&base)
            .ok_or(GpuError::OutsideSegments { address, len })?;
        guard(|| {
            let view = slice
                .try_slice(start..end)
                .ok_or(GpuError::OutsideSegments { address, len })?;
            let out = self
                .stream
                .clone_dtoh(&view)
                .map_err(driver("cuMemcpyDtoHAsync"))?;
            self.stream
                .synchronize()
                .map_err(driver("cuStreamSynchronize"))?;
            Ok(out)
        })
    }
}

impl SegmentBackend for CudaSegments {
    type Error = GpuError;

    fn alloc_segment(&mut self, size: u64) -> Result<Option<u64>, GpuError> {
        let n = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0 && n < isize::MAX as usize)
            .ok_or(GpuError::TooLarge { bytes: size })?;
        let stream = self.stream.clone();
        let allocated = guard(|| {
            // SAFETY: the bytes are uninitialised device memory; nothing reads them before a
            // copy writes them (the allocator hands out blocks only to be copied into).
            let slice = match unsafe { stream.alloc::<u8>(n) } {
                Ok(slice) => slice,
                Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => return Ok(None),
                Err(e) => return Err(driver("cuMemAlloc")(e)),
            };
            let address = {
                let (ptr, _record) = slice.device_ptr(&stream);
                ptr
            };
            Ok(Some((address, slice)))
        })?;
        let Some((address, slice)) = allocated else {
            return Ok(None);
        };
        self.segments.insert(address, slice);
        Ok(Some(address))
    }

    fn free_segment(&mut self, address: u64, size: u64) -> Result<(), GpuError> {
        match self.segments.get(&address) {
            Some(slice) if slice.len() as u64 == size => {}
            _ => return Err(GpuError::UnknownSegment { address, size }),
        }
        let Some(slice) = self.segments.remove(&address) else {
            return Err(GpuError::UnknownSegment { address, size });
        };
        guard(|| {
            let ctx = slice.context().clone();
            // Dropping frees (cuMemFreeAsync or cuMemFree); cudarc records a failure in the
            // context, from which it is read back here.
            drop(slice);
            ctx.check_err().map_err(driver("cuMemFree"))
        })
    }
}

/// What the driver says an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryType {
    /// Host memory the driver knows (pinned or registered).
    Host,
    /// Device memory.
    Device,
    /// A CUDA array.
    Array,
    /// Unified (managed) memory.
    Unified,
    /// Memory the driver does not know: plain host memory, or nothing at all
    /// (`cuPointerGetAttribute` answered `CUDA_ERROR_INVALID_VALUE`).
    Unknown,
    /// A memory type code this build does not name.
    Other(u32),
}

/// The driver's pointer attributes for one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// The address asked about.
    pub address: u64,
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
    pub memory_type: MemoryType,
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`, when the driver gives one.
    pub device_ordinal: Option<i32>,
}

impl PointerInfo {
    /// Whether the address is device memory on device `ordinal`.
    pub fn is_on_device(&self, ordinal: usize) -> bool {
        self.memory_type == MemoryType::Device
            && self.device_ordinal.and_then(|o| usize::try_from(o).ok()) == Some(ordinal)
    }
}

/// One `cuPointerGetAttribute` query for a 4-byte attribute; `None` for `INVALID_VALUE`.
fn pointer_attribute(
    attribute: sys::CUpointer_attribute,
    address: u64,
    op: &'static str,
) -> Result<Option<u32>, GpuError> {
    let mut value: u32 = 0;
    // SAFETY: both attributes queried here (MEMORY_TYPE: a `CUmemorytype`, a 32-bit enum;
    // DEVICE_ORDINAL: an `int`) write exactly 4 bytes, and `value` has 4.
    let result = unsafe {
        sys::cuPointerGetAttribute(
            (&mut value as *mut u32).cast::<c_void>(),
            attribute,
            address,
        )
    };
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(Some(value)),
        sys::CUresult::CUDA_ERROR_INVALID_VALUE => Ok(None),
        code => Err(driver(op)(DriverError(code))),
    }
}

/// What the driver says `address` is, through `cuPointerGetAttribute` (memory type, then
/// device ordinal). An address the driver does not know (plain host memory) is not an error:
/// the driver answers `CUDA_ERROR_INVALID_VALUE`, reported as [`MemoryType::Unknown`].
pub fn pointer_info(address: u64) -> Result<PointerInfo, GpuError> {
    with_driver(|| {
        cudarc::driver::result::init().map_err(driver("cuInit"))?;
        let memory_type = match pointer_attribute(
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            address,
            "cuPointerGetAttribute(MEMORY_TYPE)",
        )? {
            None => {
                return Ok(PointerInfo {
                    address,
                    memory_type: MemoryType::Unknown,
                    device_ordinal: None,
                })
            }
            Some(1) => MemoryType::Host,
            Some(2) => MemoryType::Device,
            Some(3) => MemoryType::Array,
            Some(4) => MemoryType::Unified,
            Some(other) => MemoryType::Other(other),
        };
        let device_ordinal = pointer_attribute(
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            address,
            "cuPointerGetAttribute(DEVICE_ORDINAL)",
        )?
        .map(|v| v as i32);
        Ok(PointerInfo {
            address,
            memory_type,
            device_ordinal,
        })
    })
}

/// Page-locked host memory from the driver (`cuMemHostAlloc`), for staging copies.
///
/// cudarc's `CudaContext::alloc_pinned` allocates with `CU_MEMHOSTALLOC_WRITECOMBINED`:
/// write-combined memory is fast to fill and to copy to the device, but very slow for the CPU
/// to read, so staging buffers are written and never read back on the host. Each block is
/// zero-filled once on allocation (the driver leaves it uninitialised).
#[derive(Debug, Clone)]
pub struct CudaPinned {
    ctx: Arc<CudaContext>,
}

/// One pinned slice and the host pointer to its bytes.
struct PinnedBytes {
    /// Owns the memory; dropping it calls `cuMemFreeHost`.
    _slice: PinnedHostSlice<u8>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `ptr` points into the memory `_slice` owns, and `PinnedHostSlice<u8>` is `Send`.
unsafe impl Send for PinnedBytes {}

impl HostBytes for PinnedBytes {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is the slice's allocation, initialised at creation, alive
        // while `self` is; copies from it are synchronised before the buffer is reused.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn is_pinned(&self) -> bool {
        true
    }
}

impl HostBackend for CudaPinned {
    type Error = GpuError;

    fn alloc_host(&mut self, size: u64) -> Result<HostBlock, GpuError> {
        let len = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0 && n < isize::MAX as usize)
            .ok_or(GpuError::TooLarge { bytes: size })?;
        guard(|| {
            // SAFETY: the memory is uninitialised; it is zeroed below before any use.
            let mut slice =
                unsafe { self.ctx.alloc_pinned::<u8>(len) }.map_err(driver("cuMemHostAlloc"))?;
            let ptr = slice.as_mut_ptr().map_err(driver("cuEventSynchronize"))?;
            // SAFETY: `ptr` is the start of a `len`-byte allocation owned by `slice`.
            unsafe { std::ptr::write_bytes(ptr, 0, len) };
            Ok(HostBlock::foreign(Box::new(PinnedBytes {
                _slice: slice,
                ptr,
                len,
            })))
        })
    }

    fn free_host(&mut self, block: HostBlock) {
        // cudarc records a failing cuMemFreeHost in the context; nothing else to do with it.
        let _ = guard(|| {
            drop(block);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_never_panics_and_says_why() {
        match gpu_status() {
            GpuStatus::Available { devices } => assert!(devices > 0),
            GpuStatus::Unavailable(why) => {
                assert!(why.contains("driver"), "{why}");
                if !driver_present() {
                    assert!(why.contains(NO_DRIVER), "{why}");
                }
            }
        }
        if !driver_present() {
            assert!(matches!(gpu_status(), GpuStatus::Unavailable(_)));
        }
    }

    #[test]
    fn without_a_driver_everything_is_a_clean_error() {
        if driver_present() {
            return;
        }
        let e = CudaDevice::open(0).unwrap_err();
        assert_eq!(e, GpuError::NoDriver);
        assert!(e.to_string().contains("libcuda"), "{e}");
        assert!(!e.to_string().contains('\n'));
        let host = [0u8; 16];
        let e = pointer_info(host.as_ptr() as u64).unwrap_err();
        assert_eq!(e, GpuError::NoDriver);
    }

    #[test]
    fn pointer_info_of_host_memory_is_unknown_or_an_error() {
        let host = [7u8; 64];
        match pointer_info(host.as_ptr() as u64) {
            Ok(info) => assert_ne!(info.memory_type, MemoryType::Device),
            Err(e) => assert!(e.to_string().contains("CUDA"), "{e}"),
        }
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU; run with TENSORPLAY_GPU_TESTS=1 cargo test -- --ignored"]
    fn segments_round_trip_on_device_0() {
        if std::env::var_os("TENSORPLAY_GPU_TESTS").is_none() {
            return;
        }
        assert!(
            matches!(gpu_status(), GpuStatus::Available { .. }),
            "{}",
            gpu_status()
        );
        let device = CudaDevice::open(0).unwrap();
        assert!(!device.name().unwrap().is_empty());
        assert!(device.total_memory().unwrap() >= device.free_memory().unwrap());
        let mut segs = device.segments();
        let base = segs.alloc_segment(2 << 20).unwrap().unwrap();
        assert_eq!(segs.reserved_bytes(), 2 << 20);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        segs.copy_in(base + 4096, &data).unwrap();
        assert_eq!(segs.copy_out(base + 4096, data.len() as u64).unwrap(), data);
        assert_eq!(segs.copy_out(base + 5000, 10).unwrap(), data[904..914]);
        assert!(matches!(
            segs.copy_in(base + (2 << 20) - 4, &data),
            Err(GpuError::OutsideSegments { .. })
        ));
        let info = pointer_info(base + 4096).unwrap();
        assert!(info.is_on_device(0), "{info:?}");
        // Plain heap memory: INVALID_VALUE (Unknown) expected; with HMM a driver may know it.
        let info = pointer_info(data.as_ptr() as u64).unwrap();
        assert_ne!(info.memory_type, MemoryType::Device, "{info:?}");
        // Pinned host memory is known to the driver as host memory.
        let mut pinned = device.pinned_backend();
        let mut block = pinned.alloc_host(4096).unwrap();
        assert!(block.is_pinned());
        block.as_mut_slice()[..4].copy_from_slice(b"pin!");
        let info = pointer_info(block.as_slice().as_ptr() as u64).unwrap();
        assert_eq!(info.memory_type, MemoryType::Host);
        pinned.free_host(block);
        assert!(matches!(
            segs.free_segment(base, 1),
            Err(GpuError::UnknownSegment { .. })
        ));
        segs.free_segment(base, 2 << 20).unwrap();
        assert_eq!(segs.segment_count(), 0);
        // Far more than any device holds: out of memory is Ok(None), not an error.
        assert_eq!(segs.alloc_segment(1 << 50).unwrap(), None);
    }
}
