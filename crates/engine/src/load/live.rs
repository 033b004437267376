//! A checkpoint of tensors that live in a running process, described by the process itself
//! (the Python module's `tensorplay.audit(model)`): the same four layers a reader rebuilds
//! from a file, so the same rules judge them.

use super::sink::{gather, NewStorage};
use super::ReadLimits;
use crate::{Checkpoint, DType, DataPtr, Device, Error, Format, HostBuffer, Layout, Owner, Result};
use crate::{Storage, TensorImpl};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// One storage as the process holds it.
#[derive(Debug)]
pub struct LiveStorage {
    /// Its name in reports: what identifies it in the process.
    pub key: String,
    /// The dtype of the first tensor viewing it, as `torch.save` records an untyped storage.
    pub dtype: DType,
    /// Its size in bytes.
    pub nbytes: u64,
    /// Its device as PyTorch spells it (`cpu`, `cuda:0`, `meta`).
    pub location: String,
    /// Its bytes, where they can be read in place (host memory); `None` reads no values.
    pub bytes: Option<Arc<HostBuffer>>,
}

/// One named tensor as the process holds it.
#[derive(Debug)]
pub struct LiveTensor {
    /// Its qualified name (`encoder.layer.0.weight`).
    pub name: String,
    /// Its storage: an index into the storages given with it.
    pub storage: usize,
    /// Sizes, in elements.
    pub sizes: Vec<u64>,
    /// Strides, in elements.
    pub strides: Vec<u64>,
    /// Offset into the storage, in elements.
    pub storage_offset: u64,
    /// Its dtype.
    pub dtype: DType,
    /// Its own device, as PyTorch spells it.
    pub device: String,
    /// `requires_grad`.
    pub requires_grad: bool,
    /// Whether it is an `nn.Parameter`.
    pub is_parameter: bool,
    /// The address the process reports for its first element (`tensor.data_ptr()`): checked
    /// against its storage's address plus its offset where the storage's bytes are in host
    /// memory, a check only a live process can make.
    pub data_ptr: u64,
    /// The tensor object it is (Python's `id(tensor)`): names given one object are one tensor,
    /// as a pickle that refers back to an object makes them; `None` is a tensor of its own.
    pub object: Option<u64>,
}

/// The checkpoint these tensors and storages make, named `label` in reports. Fails on a tensor
/// whose storage index is out of range or whose layout PyTorch could not have (a rank
/// mismatch, an extent past `u64`), on bytes that are not the storage's size, and on one
/// object given twice with different layers.
pub fn checkpoint(
    label: &Path,
    storages: Vec<LiveStorage>,
    tensors: Vec<LiveTensor>,
) -> Result<Checkpoint> {
    let invalid = |tensor: &str, detail: String| Error::InvalidTensor {
        path: label.to_owned(),
        tensor: tensor.to_owned(),
        detail,
    };
    gather(label, ReadLimits::default(), |sink| {
        let mut added: Vec<Arc<Storage>> = Vec::with_capacity(storages.len());
        for storage in storages {
            let data_ptr = match storage.bytes {
                Some(bytes) if bytes.len() != storage.nbytes => {
                    return Err(Error::Internal {
                        path: label.to_owned(),
                        detail: format!(
                            "storage {}: {} bytes given for {} declared",
                            storage.key,
                            bytes.len(),
                            storage.nbytes
                        ),
                    })
                }
                Some(bytes) => DataPtr::host(bytes, 0..storage.nbytes)?,
                None => DataPtr::none(Device::parse(&storage.location)),
            };
            added.push(sink.add_storage(NewStorage {
                key: storage.key.into(),
                dtype: storage.dtype,
                nbytes: storage.nbytes,
                location: storage.location.into(),
                data_ptr,
                saved_alone: false,
            }));
        }
        sink.reserve_tensors(tensors.len());
        // The TensorImpl of each object given so far, with the storage index it was given.
        let mut objects: HashMap<u64, (usize, Arc<TensorImpl>)> = HashMap::new();
        for tensor in tensors {
            let storage = added.get(tensor.storage).ok_or_else(|| {
                invalid(
                    &tensor.name,
                    format!("storage {} of {}", tensor.storage, added.len()),
                )
            })?;
            let layout = Layout::new(&tensor.sizes, &tensor.strides, tensor.storage_offset)
                .map_err(|e| invalid(&tensor.name, e.to_string()))?;
            let imp = Arc::new(TensorImpl::new(
                layout,
                tensor.dtype,
                Device::parse(&tensor.device),
                tensor.requires_grad,
                tensor.is_parameter,
                Arc::clone(storage),
            ));
            if matches!(imp.storage().data_ptr().owner(), Owner::Host { .. }) {
                imp.verify_data_ptr_consistency(&tensor.name)?;
                let expected = imp.data_address()?;
                if tensor.data_ptr != expected {
                    return Err(Error::DataPtrInconsistent {
                        tensor: tensor.name,
                        detail: format!(
                            "data_ptr 0x{:x} is not its storage's 0x{:x} + offset {} × {} \
                             (0x{expected:x})",
                            tensor.data_ptr,
                            imp.storage().data_ptr().address(),
                            imp.layout().storage_offset(),
                            imp.dtype().name(),
                        ),
                    });
                }
            }
            let imp = match tensor.object.map(|id| (id, objects.get(&id))) {
                // The same object under another name: its one TensorImpl.
                Some((_, Some((index, first)))) => {
                    let same = *index == tensor.storage
                        && first.layout() == imp.layout()
                        && first.dtype() == imp.dtype()
                        && first.device() == imp.device()
                        && first.requires_grad() == imp.requires_grad()
                        && first.is_parameter() == imp.is_parameter();
                    if !same {
                        return Err(Error::Internal {
                            path: label.to_owned(),
                            detail: format!(
                                "tensor {}: object given before with other layers",
                                tensor.name
                            ),
                        });
                    }
                    Arc::clone(first)
                }
                Some((id, None)) => {
                    objects.insert(id, (tensor.storage, Arc::clone(&imp)));
                    imp
                }
                None => imp,
            };
            sink.add_tensor(tensor.name, imp);
        }
        Ok(Format::Live)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(bytes: Option<Arc<HostBuffer>>, nbytes: u64) -> LiveStorage {
        LiveStorage {
            key: "0x10".into(),
            dtype: DType::Float32,
            nbytes,
            location: "cpu".into(),
            bytes,
        }
    }

    fn tensor(name: &str, storage: usize, offset: u64) -> LiveTensor {
        LiveTensor {
            data_ptr: 0,
            name: name.into(),
            storage,
            sizes: vec![2],
            strides: vec![1],
            storage_offset: offset,
            dtype: DType::Float32,
            device: "cpu".into(),
            requires_grad: true,
            is_parameter: true,
            object: None,
        }
    }

    /// Two views of one borrowed buffer read its bytes in place, at its own address.
    #[test]
    fn views_of_one_storage_share_it_and_read_in_place() {
        let values: Arc<Vec<u8>> = Arc::new((0..16).collect());
        // SAFETY: the bytes are an `Arc`'s, held by the buffer as its owner and never written.
        let buffer = unsafe {
            HostBuffer::borrowed(
                "live",
                values.as_ptr(),
                values.len(),
                Box::new(values.clone()),
            )
        };
        let at = |name, offset: u64| LiveTensor {
            data_ptr: values.as_ptr() as u64 + offset * 4,
            ..tensor(name, 0, offset)
        };
        let ckpt = checkpoint(
            Path::new("<live>"),
            vec![storage(Some(buffer.clone()), 16)],
            vec![at("a", 0), at("b", 1)],
        )
        .expect("a checkpoint");
        assert_eq!(ckpt.format, Format::Live);
        assert_eq!(ckpt.storages.len(), 1);
        let (a, b) = (ckpt.tensors[0].tensor_impl(), ckpt.tensors[1].tensor_impl());
        assert!(Arc::ptr_eq(a.storage(), b.storage()));
        assert_eq!(a.storage().data_ptr().address(), values.as_ptr() as u64);
        assert_eq!(b.view_bytes(), Some(&values[4..12]));
        assert!(a.requires_grad() && a.is_parameter());

        // A tensor whose reported address is not its storage's plus its offset.
        let elsewhere = LiveTensor {
            data_ptr: values.as_ptr() as u64 + 8,
            ..tensor("c", 0, 1)
        };
        let err = checkpoint(
            Path::new("<live>"),
            vec![storage(Some(buffer), 16)],
            vec![elsewhere],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("'c'") && err.contains("+ offset 1 × float32"),
            "{err}"
        );
    }

    #[test]
    fn a_tensor_past_the_storages_or_bytes_of_another_size_are_refused() {
        let past = checkpoint(
            Path::new("<live>"),
            vec![storage(None, 8)],
            vec![tensor("a", 1, 0)],
        );
        assert!(past
            .unwrap_err()
            .to_string()
            .contains("tensor 'a': storage 1 of 1"));
        let short = checkpoint(
            Path::new("<live>"),
            vec![storage(Some(HostBuffer::from_vec("m", vec![0; 4])), 8)],
            Vec::new(),
        );
        assert!(short
            .unwrap_err()
            .to_string()
            .contains("4 bytes given for 8"));
    }

    /// Names of one object (a Parameter a module registers twice) share its TensorImpl, as a
    /// pickle's memo makes them; another object over the same view has its own.
    #[test]
    fn names_of_one_object_are_one_tensor() {
        let of = |name: &str, offset: u64, object: u64| LiveTensor {
            object: Some(object),
            ..tensor(name, 0, offset)
        };
        let ckpt = checkpoint(
            Path::new("<live>"),
            vec![storage(None, 16)],
            vec![
                of("enc.weight", 0, 7),
                of("dec.weight", 0, 7),
                of("other", 0, 8),
            ],
        )
        .expect("a checkpoint");
        let imp = |i: usize| ckpt.tensors[i].tensor_impl();
        assert!(Arc::ptr_eq(imp(0), imp(1)));
        assert!(!Arc::ptr_eq(imp(0), imp(2)));
        // One object cannot have two layouts.
        let moved = checkpoint(
            Path::new("<live>"),
            vec![storage(None, 16)],
            vec![of("a", 0, 7), of("b", 1, 7)],
        );
        assert!(moved
            .unwrap_err()
            .to_string()
            .contains("tensor b: object given before with other layers"));
    }
}
