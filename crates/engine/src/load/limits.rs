//! One memory budget per read: every allocation sized from file contents (inflated zip
//! members, a zip's central directory, storages held on the heap, a pickle's values) is
//! accounted against it, so a file
//! that would take more is refused with [`Error::MemoryBudget`] instead of exhausting the
//! machine.

use crate::error::{Error, Result};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::memory::DEFAULT_MAX_MEMORY;

/// What one read may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Bytes allocated from file contents that the read may hold at once.
    pub max_memory: u64,
    /// Whether storage bytes are read at all. `true` without `hold_storages`: a deflated
    /// record is inflated once, in fixed-size pieces, to check it gives exactly its declared
    /// size, and stays compressed in the file ([`Owner::Deferred`](crate::Owner::Deferred))
    /// for a scan to inflate again piece by piece. `false` (`--metadata-only`): only where it
    /// is and its size are read.
    pub storage_bytes: bool,
    /// Whether deflated records are inflated whole onto the heap, charged to the budget, for
    /// a consumer that needs every byte in memory at once, as torch.load holds them (the
    /// default: `inspect`, a load onto a GPU). The audit sets it `false` and streams them.
    pub hold_storages: bool,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_memory: DEFAULT_MAX_MEMORY,
            storage_bytes: true,
            hold_storages: true,
        }
    }
}

/// The running account of one read against its [`ReadLimits`].
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub limits: ReadLimits,
    /// Bytes held for the rest of the read (storages on the heap).
    held: AtomicU64,
}

impl Meter {
    pub fn new(limits: ReadLimits) -> Self {
        Meter {
            limits,
            held: AtomicU64::new(0),
        }
    }

    /// Bytes held so far.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Refuses `bytes` more, taken only for a while (an inflated pickle), when they do not fit
    /// beside what is held; charges nothing.
    pub fn check(&self, path: &Path, bytes: u64, what: impl FnOnce() -> String) -> Result<()> {
        let needed = self.held().saturating_add(bytes);
        if needed > self.limits.max_memory {
            return Err(Error::MemoryBudget {
                path: path.to_owned(),
                needed,
                limit: self.limits.max_memory,
                what: what(),
            });
        }
        Ok(())
    }

    /// Charges `bytes` held for the rest of the read (a storage on the heap), or refuses them.
    pub fn hold(&self, path: &Path, bytes: u64, what: impl FnOnce() -> String) -> Result<()> {
        self.check(path, bytes, what)?;
        self.held.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back `bytes` charged for what is no longer held (a first reading given up).
    pub fn release(&self, bytes: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
    }

    /// The pickle budget for a stream read now: its values may take what is not yet held.
    pub fn pickle_budget(&self) -> crate::pickle::Budget {
        crate::pickle::Budget {
            max_memory: self.limits.max_memory,
            memory_held: self.held(),
            ..crate::pickle::Budget::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_until_the_budget_then_refuses_naming_it() {
        let meter = Meter::new(ReadLimits {
            max_memory: 100,
            ..ReadLimits::default()
        });
        let path = Path::new("f.pt");
        meter.hold(path, 60, || "a".into()).unwrap();
        meter.check(path, 40, || "b".into()).unwrap();
        let e = meter.hold(path, 41, || "c".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.pt: exceeds the memory budget (--max-memory): the read would hold 101 bytes, \
             more than the 100 bytes allowed, for c"
        );
        assert_eq!(meter.held(), 60);
        let huge = meter.check(path, u64::MAX, || "d".into()).unwrap_err();
        assert!(matches!(huge, Error::MemoryBudget { .. }), "{huge}");
    }
}

/// What one tensor's metadata holds for the rest of the read, beyond its name: the four
/// layers (a `Tensor` with its `Arc<TensorImpl>`, the `Storage` behind its `Arc`), the
/// checkpoint's slots for both, and the allocator's per-block overhead on the three
/// allocations. Charged per entry as it is read, so a file declaring more tensors than fit
/// is refused before they are built.
pub(crate) const TENSOR_METADATA_BYTES: u64 = (std::mem::size_of::<crate::Tensor>()
    + std::mem::size_of::<crate::TensorImpl>()
    + std::mem::size_of::<crate::Storage>()
    + std::mem::size_of::<std::sync::Arc<crate::Storage>>()
    + 2 * 16 // the two `Arc` counters
    + 3 * 16) as u64; // malloc's header and rounding, per allocation

/// What one safetensors header entry holds while the header is read: its key and value as
/// slices of the header (40 bytes) and its slot in the set that finds duplicate names.
pub(crate) const HEADER_ENTRY_BYTES: u64 = 64;

impl Meter {
    /// Charges `count` tensors' metadata, `each` bytes more per tensor (what reading it
    /// takes) and `beyond` bytes in all (their names), held for the rest of the read.
    pub fn hold_tensors(&self, path: &Path, count: u64, each: u64, beyond: u64) -> Result<()> {
        let bytes = count
            .saturating_mul(TENSOR_METADATA_BYTES.saturating_add(each))
            .saturating_add(beyond);
        self.hold(path, bytes, || "per-tensor metadata".to_owned())
    }
}

#[cfg(test)]
mod tensor_tests {
    use super::*;

    /// A million tensors are a million of each layer: with `Arc`'s two counters, a
    /// `TensorImpl` fits an 80-byte allocation size class (its layout holds two dimensions
    /// inline in 40 bytes, its device only where it is not its storage's), and a `Storage` a
    /// 96-byte one (its data pointer in 24 bytes, its device and location in 16); a handle is
    /// its name, its impl, its storage's index and what a TorchScript module holds it as.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn the_layers_fit_their_allocation_size_classes() {
        assert_eq!(std::mem::size_of::<crate::Layout>(), 40);
        assert!(std::mem::size_of::<crate::TensorImpl>() + 16 <= 80);
        assert!(std::mem::size_of::<crate::Storage>() + 16 <= 96);
        assert_eq!(std::mem::size_of::<crate::DataPtr>(), 24);
        assert_eq!(std::mem::size_of::<crate::Tensor>(), 32);
    }

    #[test]
    fn tensors_are_charged_until_they_no_longer_fit() {
        let per = TENSOR_METADATA_BYTES + 10;
        let meter = Meter::new(ReadLimits {
            max_memory: 3 * per,
            ..ReadLimits::default()
        });
        let path = Path::new("m.safetensors");
        meter.hold_tensors(path, 2, 10, 0).unwrap();
        meter.hold_tensors(path, 1, 0, 10).unwrap();
        let e = meter.hold_tensors(path, 1, 0, 0).unwrap_err();
        assert!(matches!(e, Error::MemoryBudget { .. }), "{e}");
        assert!(e.to_string().ends_with("per-tensor metadata"), "{e}");
        assert_eq!(meter.held(), 3 * per);
    }
}
