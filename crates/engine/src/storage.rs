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
    place: Place,
    data_ptr: DataPtr,
    saved_alone: bool,
}

/// A storage's device and how the file spells its location, in the 16 bytes of a device: a
/// million storages hold no location strings.
#[derive(Debug)]
enum Place {
    /// Spelt as PyTorch writes the device (`cpu`, `cuda:0`…), or kept verbatim by the device
    /// itself (`mps`, a private-use name).
    Spelt(Device),
    /// Spelt some other way (`cuda:08`, `cuda:+1`, an ordinal past 7): the spelling beside.
    Written(Box<(Device, String)>),
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
        let place = match location {
            "cpu" => Place::Spelt(Device::Cpu),
            _ => match Device::parse(location) {
                device @ Device::Other(_) => Place::Spelt(device),
                device => match common_spelling(&device) {
                    Some(common) if common == location => Place::Spelt(device),
                    _ => Place::Written(Box::new((device, location.to_owned()))),
                },
            },
        };
        Storage {
            id,
            key: key.into(),
            dtype,
            nbytes,
            place,
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
        match &self.place {
            Place::Spelt(Device::Other(verbatim)) => verbatim,
            Place::Spelt(device) => common_spelling(device).unwrap_or_default(),
            Place::Written(written) => &written.1,
        }
    }

    /// The device it claims, parsed from the location.
    pub fn device(&self) -> &Device {
        match &self.place {
            Place::Spelt(device) => device,
            Place::Written(written) => &written.0,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every location reads back as the file spelt it, beside the device it names, whichever
    /// way it is kept.
    #[test]
    fn locations_read_back_as_written_beside_their_devices() {
        let cases = [
            ("cpu", Device::Cpu),
            ("meta", Device::Meta),
            ("cuda", Device::Cuda(None)),
            ("cuda:0", Device::Cuda(Some(0))),
            ("cuda:7", Device::Cuda(Some(7))),
            ("cuda:8", Device::Cuda(Some(8))),
            ("cuda:08", Device::Cuda(Some(8))),
            ("cuda:+1", Device::Cuda(Some(1))),
            ("mps", Device::Other(Box::new("mps".into()))),
            ("xpu:1", Device::Other(Box::new("xpu:1".into()))),
            ("CPU", Device::Other(Box::new("CPU".into()))),
            ("", Device::Other(Box::default())),
        ];
        for (location, device) in cases {
            let ptr = DataPtr::none(Device::Meta);
            let storage = Storage::new(StorageId::new(0), "0", DType::Float32, 4, location, ptr);
            assert_eq!(storage.location(), location);
            assert_eq!(storage.device(), &device, "{location}");
        }
    }
}
