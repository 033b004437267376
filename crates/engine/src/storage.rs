//! Storage: one contiguous byte buffer with one dtype and one device, shared by views.

use crate::data_ptr::DataPtr;
use crate::device::Device;
use crate::dtype::DType;
use std::sync::Arc;

/// A storage's position in its checkpoint's storage list, chosen by the reader's sink alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageId(usize);

impl StorageId {
    pub(crate) fn new(index: usize) -> Self {
        StorageId(index)
    }

    /// The position in [`Checkpoint::storages`](crate::Checkpoint::storages).
    pub fn index(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for StorageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One storage of a checkpoint. Shared by its tensors through `Arc`; never cloned.
#[derive(Debug)]
pub struct Storage {
    id: StorageId,
    // Shared, not copied: a safetensors storage's key is its tensor's name.
    key: Arc<str>,
    dtype: DType,
    nbytes: u64,
    // `None` when it is the common spelling of `device` (`cpu`, `cuda:0`…), so a million
    // storages hold no location strings and one pointer each.
    #[allow(clippy::box_collection)] // a `Box<str>` would be two pointers wide
    location: Option<Box<String>>,
    device: Device,
    data_ptr: DataPtr,
    saved_alone: bool,
}

impl Storage {
    /// A storage numbered `id` in its checkpoint, with its key and location as the file records them.
    pub(crate) fn new(
        id: StorageId,
        key: impl Into<Arc<str>>,
        dtype: DType,
        nbytes: u64,
        location: impl AsRef<str>,
        data_ptr: DataPtr,
    ) -> Self {
        let location = location.as_ref();
        // Nearly every storage's: not parsed and spelt again.
        let (device, location) = match location {
            "cpu" => (Device::Cpu, None),
            _ => {
                let device = Device::parse(location);
                let location = match common_spelling(&device) {
                    Some(common) if common == location => None,
                    _ => Some(Box::new(location.to_owned())),
                };
                (device, location)
            }
        };
        Storage {
            id,
            key: key.into(),
            dtype,
            nbytes,
            device,
            location,
            data_ptr,
            saved_alone: false,
        }
    }

    /// The same storage, marked as an object the file holds in its own right
    /// (`torch.save(t.untyped_storage())`), not only through tensors.
    pub fn saved_alone(mut self) -> Self {
        self.saved_alone = true;
        self
    }

    /// Whether the file holds it as an object of its own, so bytes no tensor reaches were
    /// saved on purpose.
    pub fn is_saved_alone(&self) -> bool {
        self.saved_alone
    }

    /// Position in the checkpoint's storage list.
    pub fn id(&self) -> StorageId {
        self.id
    }

    /// The key the file records (a safetensors tensor name, a PyTorch `data/<key>` record).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The dtype its bytes hold.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Its size in bytes, as recorded.
    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// The location string exactly as the file records it.
    pub fn location(&self) -> &str {
        match &self.location {
            Some(written) => written,
            None => common_spelling(&self.device).unwrap_or_default(),
        }
    }

    /// The device it claims, parsed from the location.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Where its bytes really are.
    pub fn data_ptr(&self) -> &DataPtr {
        &self.data_ptr
    }
}

/// `location` itself where it is the spelling PyTorch writes for its device (`cpu`,
/// `cuda:0`…): a static string to borrow rather than copy.
pub(crate) fn common_location(location: &str) -> Option<&'static str> {
    common_spelling(&Device::parse(location)).filter(|&common| common == location)
}

/// The spelling PyTorch writes for the common devices.
fn common_spelling(device: &Device) -> Option<&'static str> {
    const CUDA: [&str; 8] = [
        "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7",
    ];
    match device {
        Device::Cpu => Some("cpu"),
        Device::Meta => Some("meta"),
        Device::Cuda(None) => Some("cuda"),
        Device::Cuda(Some(n)) => usize::try_from(*n).ok().and_then(|n| CUDA.get(n).copied()),
        Device::Other(_) => None,
    }
}
