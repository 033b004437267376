//! Storage: one contiguous byte buffer with one dtype and one device, shared by views.

use crate::data_ptr::DataPtr;
use crate::device::Device;
use crate::dtype::DType;

/// One storage of a checkpoint. Shared by its tensors through `Arc`; never cloned.
#[derive(Debug)]
pub struct Storage {
    id: usize,
    key: String,
    dtype: DType,
    nbytes: u64,
    location: String,
    device: Device,
    data_ptr: DataPtr,
}

impl Storage {
    /// A storage numbered `id` in its checkpoint, with its key and location as the file records them.
    pub fn new(
        id: usize,
        key: impl Into<String>,
        dtype: DType,
        nbytes: u64,
        location: impl Into<String>,
        data_ptr: DataPtr,
    ) -> Self {
        let location = location.into();
        Storage {
            id,
            key: key.into(),
            dtype,
            nbytes,
            device: Device::parse(&location),
            location,
            data_ptr,
        }
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
