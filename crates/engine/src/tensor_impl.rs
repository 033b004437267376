//! TensorImpl: the control block a tensor forwards to — layout, dtype, device, autograd flags
//! and the storage it reads.

use crate::data_ptr::Owner;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::Storage;
use std::ops::Range;
use std::sync::Arc;

/// Layout, dtype, device and flags over one shared [`Storage`].
#[derive(Debug)]
pub struct TensorImpl {
    layout: Layout,
    dtype: DType,
    // `None` when it is the storage's, as nearly always: with the layout in 40 bytes, a
    // million impls take 80-byte blocks with `Arc`'s counters rather than 96-byte ones.
    device: Option<Box<Device>>,
    requires_grad: bool,
    is_parameter: bool,
    is_conj: bool,
    is_neg: bool,
    storage: Arc<Storage>,
}

impl TensorImpl {
    /// A view of `storage` with `layout`. The device is the tensor's own claim, which a
    /// consistent checkpoint keeps equal to the storage's.
    pub fn new(
        layout: Layout,
        dtype: DType,
        device: Device,
        requires_grad: bool,
        is_parameter: bool,
        storage: Arc<Storage>,
    ) -> Self {
        TensorImpl {
            layout,
            dtype,
            device: (device != *storage.device()).then(|| Box::new(device)),
            requires_grad,
            is_parameter,
            is_conj: false,
            is_neg: false,
            storage,
        }
    }

    /// The same view with PyTorch's lazy conjugate and negative bits: what it reads is the
    /// conjugate / negative of what its storage holds.
    pub fn with_conj_neg(mut self, is_conj: bool, is_neg: bool) -> Self {
        self.is_conj = is_conj;
        self.is_neg = is_neg;
        self
    }

    /// PyTorch's `is_conj()`.
    pub fn is_conj(&self) -> bool {
        self.is_conj
    }

    /// PyTorch's `is_neg()`.
    pub fn is_neg(&self) -> bool {
        self.is_neg
    }

    /// Sizes, strides and storage offset.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the tensor claims.
    pub fn device(&self) -> &Device {
        self.device
            .as_deref()
            .unwrap_or_else(|| self.storage.device())
    }

    /// Whether autograd tracks it.
    pub fn requires_grad(&self) -> bool {
        self.requires_grad
    }

    /// Whether it was saved as an `nn.Parameter`.
    pub fn is_parameter(&self) -> bool {
        self.is_parameter
    }

    /// The storage it views.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// Bytes its elements occupy.
    pub fn nbytes(&self) -> Result<u64> {
        self.layout.nbytes(self.dtype)
    }

    /// Bytes of the storage it touches; `None` when empty.
    pub fn byte_range(&self) -> Result<Option<Range<u64>>> {
        self.layout.byte_range(self.dtype)
    }

    /// Its data address: storage address + storage offset × element width.
    pub fn data_address(&self) -> Result<u64> {
        let offset_bits = self
            .layout
            .storage_offset()
            .checked_mul(self.dtype.packed_bits())
            .ok_or(Error::Overflow {
                what: "data address",
            })?;
        self.storage
            .data_ptr()
            .address()
            .checked_add(offset_bits / 8)
            .ok_or(Error::Overflow {
                what: "data address",
            })
    }

    /// The design's `verify_data_ptr_consistency`: the data address follows from the storage's
    /// and the offset, and every byte the view reaches lies inside the storage, whose DataPtr
    /// holds exactly the bytes it records. A view that is not is
    /// [`Error::DataPtrInconsistent`], naming the tensor as `name`.
    pub fn verify_data_ptr_consistency(&self, name: &str) -> Result<()> {
        match self.data_ptr_problem()? {
            Some(detail) => Err(Error::DataPtrInconsistent {
                tensor: name.to_owned(),
                detail,
            }),
            None => Ok(()),
        }
    }

    /// Whether [`verify_data_ptr_consistency`](Self::verify_data_ptr_consistency) passes, for
    /// a caller that only needs to know (and has no tensor name to give an error).
    pub fn is_data_ptr_consistent(&self) -> bool {
        matches!(self.data_ptr_problem(), Ok(None))
    }

    /// What makes the view inconsistent with its storage, `None` when nothing does; an error
    /// when its address or byte range overflows.
    fn data_ptr_problem(&self) -> Result<Option<String>> {
        let storage = &self.storage;
        let ptr = storage.data_ptr();
        let holds_bytes = matches!(ptr.owner(), Owner::Host { .. });
        if holds_bytes && ptr.len() != storage.nbytes() {
            return Ok(Some(format!(
                "storage records {} bytes but its DataPtr holds {}",
                storage.nbytes(),
                ptr.len()
            )));
        }
        if self.dtype != storage.dtype() {
            return Ok(Some(format!(
                "tensor dtype {} differs from storage dtype {}",
                self.dtype,
                storage.dtype()
            )));
        }
        let address = self.data_address()?;
        if let Some(range) = self.byte_range()? {
            if range.end > storage.nbytes() {
                return Ok(Some(format!(
                    "view reaches bytes {}..{} of a {}-byte storage",
                    range.start,
                    range.end,
                    storage.nbytes()
                )));
            }
            if address != ptr.address() + range.start {
                return Ok(Some(format!(
                    "data address {address:#x} is not storage address {:#x} + {}",
                    ptr.address(),
                    range.start
                )));
            }
        }
        Ok(None)
    }

    /// The storage bytes the view reaches, when they are in host memory.
    pub fn view_bytes(&self) -> Option<&[u8]> {
        let range = self.byte_range().ok()?.unwrap_or(0..0);
        let bytes = self.storage.data_ptr().bytes()?;
        bytes.get(usize::try_from(range.start).ok()?..usize::try_from(range.end).ok()?)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{DataPtr, HostBuffer};

    /// A storage of `dtype` holding `bytes` on the heap (shared by the engine's tests).
    pub(crate) fn storage_of(dtype: DType, bytes: Vec<u8>) -> Arc<Storage> {
        let n = bytes.len() as u64;
        Arc::new(crate::testing::storage(
            0,
            "0",
            dtype,
            n,
            "cpu",
            DataPtr::heap("mem", bytes),
        ))
    }

    fn storage(nbytes: u64, dtype: DType) -> Arc<Storage> {
        storage_of(dtype, (0..nbytes as u8).collect())
    }

    /// A view of `storage` with its dtype, on the CPU (shared by the engine's tests).
    pub(crate) fn view(
        storage: &Arc<Storage>,
        sizes: &[u64],
        strides: &[u64],
        offset: u64,
    ) -> TensorImpl {
        let layout = Layout::new(sizes, strides, offset).expect("layout");
        TensorImpl::new(
            layout,
            storage.dtype(),
            Device::Cpu,
            false,
            false,
            Arc::clone(storage),
        )
    }

    #[test]
    fn a_view_reads_from_storage_address_plus_offset() {
        // numbers[1::2] over nine float64s.
        let s = storage(72, DType::Float64);
        let v = view(&s, &[4], &[2], 1);
        v.verify_data_ptr_consistency("v").expect("consistent");
        assert!(v.is_data_ptr_consistent());
        assert_eq!(v.data_address().unwrap(), s.data_ptr().address() + 8);
        assert_eq!(v.view_bytes().unwrap(), &(8u8..64).collect::<Vec<_>>()[..]);
        assert_eq!(v.nbytes().unwrap(), 32);
    }

    #[test]
    fn a_view_past_its_storage_is_inconsistent() {
        let s = storage(16, DType::Float32);
        let w = view(&s, &[4], &[1], 1);
        assert!(!w.is_data_ptr_consistent());
        let err = w.verify_data_ptr_consistency("w").unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor 'w': data pointer inconsistent with its storage: view reaches bytes 4..20 of a 16-byte storage"
        );
    }

    #[test]
    fn a_tensor_must_share_its_storage_dtype() {
        let s = storage(16, DType::Float32);
        let layout = Layout::contiguous(vec![4]).unwrap();
        let t = TensorImpl::new(layout, DType::Int32, Device::Cpu, false, false, s);
        assert!(!t.is_data_ptr_consistent());
        let err = t.verify_data_ptr_consistency("t").unwrap_err().to_string();
        assert!(
            err.contains("tensor dtype int32 differs from storage dtype float32"),
            "{err}"
        );
    }

    #[test]
    fn a_storage_must_own_the_bytes_it_records() {
        let buffer = HostBuffer::from_vec("mem", vec![0; 8]);
        let ptr = DataPtr::host(buffer, 0..8).unwrap();
        let s = Arc::new(crate::testing::storage(
            0,
            "0",
            DType::Float32,
            16,
            "cpu",
            ptr,
        ));
        let t = view(&s, &[2], &[1], 0);
        assert!(!t.is_data_ptr_consistent());
        let err = t.verify_data_ptr_consistency("t").unwrap_err();
        assert!(
            err.to_string()
                .contains("storage records 16 bytes but its DataPtr holds 8"),
            "{err}"
        );
    }

    #[test]
    fn a_data_ptr_cannot_point_outside_its_buffer() {
        let buffer = HostBuffer::from_vec("mem", vec![0; 8]);
        let outside = DataPtr::host(Arc::clone(&buffer), 4..9).expect_err("past the end");
        assert!(
            matches!(
                outside,
                crate::Error::OutsideBuffer {
                    start: 4,
                    end: 9,
                    len: 8,
                    ..
                }
            ),
            "{outside}"
        );
        assert!(DataPtr::host(buffer, 0..8).is_ok());
    }

    #[test]
    fn a_storage_without_bytes_keeps_its_recorded_size() {
        let s = Arc::new(crate::testing::storage(
            0,
            "0",
            DType::Float32,
            16,
            "meta",
            DataPtr::none(Device::Meta),
        ));
        assert_eq!(s.device(), &Device::Meta);
        let t = view(&s, &[4], &[1], 0);
        t.verify_data_ptr_consistency("m")
            .expect("nothing to contradict");
        assert!(t.is_data_ptr_consistent());
        assert_eq!(t.view_bytes(), None);
    }
}
