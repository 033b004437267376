//! Storage: one contiguous byte buffer with one dtype and one device, shared by views.

use crate::data_ptr::DataPtr;
use crate::device::Device;
use crate::dtype::DType;
use std::borrow::Cow;
use std::sync::Arc;

/// One storage of a checkpoint. Shared by its tensors through `Arc`; never cloned.
#[derive(Debug)]
pub struct Storage {
    id: usize,
    // Shared, not copied: a safetensors storage's key is its tensor's name.
    key: Arc<str>,
    dtype: DType,
    nbytes: u64,
    // Borrowed for the common locations, so a million storages hold no location strings.
    location: Cow<'static, str>,
    device: Device,
    data_ptr: DataPtr,
    saved_alone: bool,
}

impl Storage {
    /// A storage numbered `id` in its checkpoint, with its key and location as the file records them.
    pub fn new(
        id: usize,
        key: impl Into<Arc<str>>,
        dtype: DType,
        nbytes: u64,
        location: impl AsRef<str>,
        data_ptr: DataPtr,
    ) -> Self {
        let location = location.as_ref();
        Storage {
            id,
            key: key.into(),
            dtype,
            nbytes,
            device: Device::parse(location),
            location: intern_location(location),
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
    pub fn id(&self) -> usize {
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
        &self.location
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

/// The location as written, borrowed from a static string when it is a common one.
fn intern_location(location: &str) -> Cow<'static, str> {
    const COMMON: [&str; 11] = [
        "cpu", "meta", "cuda", "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5",
        "cuda:6", "cuda:7",
    ];
    match COMMON.iter().find(|&&c| c == location) {
        Some(&c) => Cow::Borrowed(c),
        None => Cow::Owned(location.to_owned()),
    }
}
