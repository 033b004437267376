//! What every PyTorch format shares once its pickle has run: persistent ids naming storages,
//! rebuilt tensors viewing them, and the names a user would give them.

use super::flatten::{named_tensors, Named, Stop};
use super::Parts;
use crate::error::{Error, Result};
use crate::pickle::{allowlist, Budget, Heap, Id, Node, TensorSpec, Unpickled};
use crate::{
    Component, CompositeTensor, DType, DataPtr, Device, Layout, Storage, Tensor, TensorImpl,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A storage as a persistent id describes it: `('storage', type, key, location, numel[, view])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StorageRecord {
    /// The key as recorded (`data/<key>` in a zip, a pointer value in legacy files).
    pub key: String,
    /// The storage class's dtype; `None` for `UntypedStorage`, whose numel counts bytes.
    pub class_dtype: Option<DType>,
    /// The location string as recorded.
    pub location: String,
    /// Elements (typed) or bytes (untyped).
    pub numel: u64,
}

impl StorageRecord {
    /// Bytes the storage holds once its dtype is known.
    pub fn nbytes(&self, dtype: DType) -> Option<u64> {
        match self.class_dtype {
            None => Some(self.numel),
            Some(_) => self.numel.checked_mul(dtype.element_size()?),
        }
    }
}

/// Where the named pickle member's storages live; readers implement it per format.
pub(crate) trait StorageSource {
    /// The bytes of storage `record` holding `nbytes`, or `None` when the file has no record
    /// for it and may lack one (meta storages).
    fn data_ptr(
        &mut self,
        record: &StorageRecord,
        dtype: DType,
        nbytes: u64,
    ) -> Result<Option<DataPtr>>;
}

/// A pickle member to turn into tensors.
pub(crate) struct Member<'a> {
    pub path: &'a Path,
    pub name: &'a str,
    pub unpickled: Unpickled,
    /// Prepended to keys so two pickles of one archive (TorchScript's `data.pkl` and
    /// `constants.pkl`) cannot collide.
    pub key_prefix: &'a str,
    /// Prepended to tensor names.
    pub name_prefix: &'a str,
}

impl Member<'_> {
    fn err(&self, position: Option<u64>, detail: impl Into<String>) -> Error {
        Error::Pickle {
            path: self.path.to_owned(),
            member: self.name.to_owned(),
            position: position.unwrap_or(self.unpickled.len),
            detail: detail.into(),
        }
    }
}

/// Parses a persistent id. `None` for ids that name no storage (legacy `'module'` ids).
pub(crate) fn storage_record(
    heap: &Heap,
    pid: Id,
    key_prefix: &str,
) -> std::result::Result<Option<StorageRecord>, String> {
    let Some(items) = heap.seq(pid) else {
        return Err("persistent id is not a tuple".into());
    };
    let (Some(&tag), Some(&class), Some(&key), Some(&location), Some(&numel)) = (
        items.first(),
        items.get(1),
        items.get(2),
        items.get(3),
        items.get(4),
    ) else {
        return match items.first().and_then(|&t| heap.str(t)) {
            Some("storage") => Err("storage persistent id has fewer than 5 fields".into()),
            _ => Ok(None),
        };
    };
    if heap.str(tag) != Some("storage") {
        return Ok(None);
    }
    if items
        .get(5)
        .is_some_and(|&v| !matches!(heap.get(v), Node::None))
    {
        return Err("storage views (files from torch before 0.4) are not supported".into());
    }
    let class_dtype = match heap.get(class) {
        Node::Global(g) => match allowlist::classify(&g.module, &g.name) {
            allowlist::Class::Known(allowlist::Known::Storage(dtype)) => dtype,
            _ => {
                return Err(format!(
                    "storage type {}.{} is not a storage class",
                    g.module, g.name
                ))
            }
        },
        _ => return Err("storage type is not a class name".into()),
    };
    let key = match heap.get(key) {
        Node::Str(s) => s.clone(),
        Node::Int(v) => v.to_string(),
        _ => return Err("storage key is not a string".into()),
    };
    let location = heap
        .str(location)
        .ok_or("storage location is not a string")?
        .to_owned();
    let numel = heap
        .int(numel)
        .and_then(|v| u64::try_from(v).ok())
        .ok_or("storage size is not a non-negative integer")?;
    Ok(Some(StorageRecord {
        key: format!("{key_prefix}{key}"),
        class_dtype,
        location,
        numel,
    }))
}

/// Adds the member's storages (in the order the stream loads them) and its named tensors.
pub(crate) fn add_member(
    member: Member<'_>,
    source: &mut dyn StorageSource,
    budget: &Budget,
    parts: &mut Parts,
) -> Result<()> {
    let heap = &member.unpickled.heap;
    let held = budget.memory_held.saturating_add(member.unpickled.bytes);
    let named =
        named_tensors(heap, member.unpickled.root, budget, held).map_err(|stop| match stop {
            Stop::Graph(detail) => member.err(None, detail),
            Stop::Memory { needed } => Error::MemoryBudget {
                path: member.path.to_owned(),
                needed,
                limit: budget.max_memory,
                what: format!("the tensor names of {}", member.name),
            },
        })?;
    let Named {
        tensors: mut names,
        mut composites,
        storages: saved_alone,
    } = named;
    if !member.name_prefix.is_empty() {
        for (name, _) in names.iter_mut().chain(composites.iter_mut()) {
            name.insert_str(0, member.name_prefix);
        }
    }
    // The names stay with the checkpoint: held for the rest of the read, so the next stream
    // or shard has that much less.
    let entry = std::mem::size_of::<(String, Id)>() as u64;
    let kept = names
        .iter()
        .chain(&composites)
        .fold(0u64, |acc, (name, _)| {
            acc.saturating_add(name.len() as u64).saturating_add(entry)
        });
    parts.meter.hold(member.path, kept, || {
        format!("the tensor names of {}", member.name)
    })?;
    let mut records = StorageRecords::collect(&member)?;
    records.learn_dtypes(heap, &names);
    records.mark_saved_alone(&saved_alone);
    let storages = records.storages(&member, source, parts)?;
    // The records are in their storages now: only the way from ids to them is kept.
    let StorageRecords { record_of, .. } = records;
    let first_tensor = parts.tensors.len();
    add_tensors(&member, names, &record_of, &storages, parts)?;
    add_composites(&member, &composites, first_tensor, parts)?;
    parts.unsafe_globals.extend(member.unpickled.unsafe_globals);
    Ok(())
}

/// The member's distinct storages by key, in stream order, each with the dtype of a tensor
/// that uses it (untyped storages learn theirs only from `_rebuild_tensor_v3`).
struct StorageRecords {
    records: Vec<(StorageRecord, Option<DType>)>,
    /// Per record: whether the object holds it as a storage of its own.
    saved_alone: Vec<bool>,
    /// Indexed by heap id: which record a persistent-id node names (records are fewer than
    /// heap ids, which are `u32`).
    record_of: Vec<Option<u32>>,
}

impl StorageRecords {
    fn collect(member: &Member<'_>) -> Result<Self> {
        let heap = &member.unpickled.heap;
        // Sized for one record per persistent id, the common case: neither regrows.
        let ids = member.unpickled.persistent.len();
        let mut records: Vec<(StorageRecord, Option<DType>)> = Vec::with_capacity(ids);
        let mut by_key: HashMap<String, usize, foldhash::quality::RandomState> =
            HashMap::with_capacity_and_hasher(ids, Default::default());
        let mut record_of = vec![None; heap.len()];
        for &node in &member.unpickled.persistent {
            let Node::Persistent(pid) = heap.get(node) else {
                continue;
            };
            let record =
                storage_record(heap, *pid, member.key_prefix).map_err(|e| member.err(None, e))?;
            let Some(record) = record else { continue };
            let index = match by_key.get(&record.key) {
                Some(&i) => {
                    if records.get(i).map(|(r, _)| r) != Some(&record) {
                        return Err(member.err(
                            None,
                            format!("storage '{}' is described twice, differently", record.key),
                        ));
                    }
                    i
                }
                None => {
                    by_key.insert(record.key.clone(), records.len());
                    records.push((record, None));
                    records.len() - 1
                }
            };
            if let Some(slot) = record_of.get_mut(node as usize) {
                *slot = u32::try_from(index).ok();
            }
        }
        Ok(StorageRecords {
            saved_alone: vec![false; records.len()],
            records,
            record_of,
        })
    }

    /// Gives each storage the dtype of the first tensor that views it.
    fn learn_dtypes(&mut self, heap: &Heap, names: &[(String, Id)]) {
        for (_, id) in names {
            let Node::Tensor(spec) = heap.get(*id) else {
                continue;
            };
            let Some(index) = spec
                .storage
                .and_then(|s| self.record_of.get(s as usize).copied().flatten())
                .map(|index| index as usize)
            else {
                continue;
            };
            if let Some((record, dtype)) = self.records.get_mut(index) {
                if dtype.is_none() {
                    *dtype = spec.dtype.or(record.class_dtype);
                }
            }
        }
    }

    /// Marks the records the object holds as storages of their own (`persistent` nodes).
    fn mark_saved_alone(&mut self, persistent: &[Id]) {
        for &node in persistent {
            if let Some(Some(index)) = self.record_of.get(node as usize) {
                if let Some(slot) = self.saved_alone.get_mut(*index as usize) {
                    *slot = true;
                }
            }
        }
    }

    /// One storage per record, its bytes from `source`, added to `parts` in record order.
    fn storages(
        &self,
        member: &Member<'_>,
        source: &mut dyn StorageSource,
        parts: &mut Parts,
    ) -> Result<Vec<Arc<Storage>>> {
        let mut storages = Vec::with_capacity(self.records.len());
        for ((record, dtype), &alone) in self.records.iter().zip(&self.saved_alone) {
            // An untyped storage saved as itself is bytes, as `UntypedStorage` reads.
            let bytes = alone.then_some(DType::UInt8);
            let dtype = dtype.or(record.class_dtype).or(bytes).ok_or_else(|| {
                member.err(
                    None,
                    format!(
                        "untyped storage '{}' is used by no tensor that names its dtype",
                        record.key
                    ),
                )
            })?;
            let nbytes = record.nbytes(dtype).ok_or_else(|| {
                member.err(None, format!("storage '{}': size overflows", record.key))
            })?;
            let data_ptr = match source.data_ptr(record, dtype, nbytes)? {
                Some(ptr) => ptr,
                None => DataPtr::none(Device::parse(&record.location)),
            };
            let mut storage = Storage::new(
                parts.storages.len(),
                record.key.as_str(),
                dtype,
                nbytes,
                &record.location,
                data_ptr,
            );
            if alone {
                storage = storage.saved_alone();
            }
            let storage = Arc::new(storage);
            parts.storages.push(Arc::clone(&storage));
            storages.push(storage);
        }
        Ok(storages)
    }
}

/// Adds a tensor per name; one TensorImpl per rebuilt tensor object, shared by every name
/// that reaches it.
fn add_tensors(
    member: &Member<'_>,
    names: Vec<(String, Id)>,
    record_of: &[Option<u32>],
    storages: &[Arc<Storage>],
    parts: &mut Parts,
) -> Result<()> {
    let heap = &member.unpickled.heap;
    parts.tensors.reserve(names.len());
    let mut impls: Vec<Option<Arc<TensorImpl>>> = vec![None; heap.len()];
    for (name, id) in names {
        let Node::Tensor(spec) = heap.get(id) else {
            continue;
        };
        if let Some(Some(imp)) = impls.get(id as usize) {
            parts.tensors.push(Tensor::new(name, Arc::clone(imp)));
            continue;
        }
        let invalid = |detail: String| Error::InvalidTensor {
            path: member.path.to_owned(),
            tensor: name.clone(),
            detail,
        };
        let storage = match spec.storage {
            Some(node) => record_of
                .get(node as usize)
                .copied()
                .flatten()
                .ok_or_else(|| invalid("its storage is not a storage persistent id".into()))
                .and_then(|index| {
                    storages
                        .get(index as usize)
                        .map(Arc::clone)
                        .ok_or_else(|| invalid("storage missing".into()))
                })?,
            None => meta_storage(spec, parts).map_err(invalid)?,
        };
        let dtype = spec.dtype.unwrap_or(storage.dtype());
        let layout = Layout::new(&spec.sizes, &spec.strides, spec.offset)
            .map_err(|e| invalid(e.to_string()))?;
        let device = spec
            .device
            .as_deref()
            .map_or_else(|| storage.device().clone(), Device::parse);
        let imp = Arc::new(
            TensorImpl::new(
                layout,
                dtype,
                device,
                spec.requires_grad,
                spec.is_parameter,
                storage,
            )
            .with_conj_neg(spec.is_conj, spec.is_neg),
        );
        if let Some(slot) = impls.get_mut(id as usize) {
            *slot = Some(Arc::clone(&imp));
        }
        parts.tensors.push(Tensor::new(name, imp));
    }
    Ok(())
}

/// Adds a composite tensor per name. Its components were added as tensors (from
/// `first_tensor` on) or composites under `name.role`; its dtype, where the call does not
/// name it, is that of the component the call says.
fn add_composites(
    member: &Member<'_>,
    composites: &[(String, Id)],
    first_tensor: usize,
    parts: &mut Parts,
) -> Result<()> {
    let heap = &member.unpickled.heap;
    if composites.is_empty() {
        return Ok(());
    }
    // Looked up by name once each: a file of many sparse tensors costs no quadratic search.
    let mut dtypes: HashMap<String, DType> = parts
        .tensors
        .get(first_tensor..)
        .unwrap_or_default()
        .iter()
        .map(|t| (t.name().to_owned(), t.tensor_impl().dtype()))
        .collect();
    for (name, id) in composites {
        let Node::Composite(spec) = heap.get(*id) else {
            continue;
        };
        let invalid = |detail: String| Error::InvalidTensor {
            path: member.path.to_owned(),
            tensor: name.clone(),
            detail,
        };
        let components: Vec<Component> = spec
            .components
            .iter()
            .map(|(role, _)| Component {
                role: role.clone(),
                tensor: format!("{name}.{role}"),
            })
            .collect();
        let dtype = match (spec.dtype, spec.dtype_from) {
            (Some(dtype), _) => dtype,
            (None, Some(role)) => dtypes
                .get(&format!("{name}.{role}"))
                .copied()
                .ok_or_else(|| invalid(format!("its {role} are not a tensor")))?,
            (None, None) => return Err(invalid("it names no dtype".into())),
        };
        dtypes.insert(name.clone(), dtype);
        parts.composites.push(CompositeTensor {
            name: name.clone(),
            layout: spec.layout,
            shape: spec.sizes.clone(),
            dtype,
            subclass: spec.subclass.clone(),
            requires_grad: spec.requires_grad,
            is_parameter: spec.is_parameter,
            components,
            placements: spec.placements.clone(),
        });
    }
    Ok(())
}

/// For a tensor saved without storage (meta): a storage of no bytes, sized for the view.
fn meta_storage(spec: &TensorSpec, parts: &mut Parts) -> std::result::Result<Arc<Storage>, String> {
    let dtype = spec.dtype.unwrap_or(DType::Float32);
    let layout = Layout::new(&spec.sizes, &spec.strides, spec.offset).map_err(|e| e.to_string())?;
    let nbytes = layout
        .byte_range(dtype)
        .map_err(|e| e.to_string())?
        .map_or(0, |r| r.end);
    let location = spec.device.clone().unwrap_or_else(|| "meta".into());
    let storage = Arc::new(Storage::new(
        parts.storages.len(),
        "",
        dtype,
        nbytes,
        location.clone(),
        DataPtr::none(Device::parse(&location)),
    ));
    parts.storages.push(Arc::clone(&storage));
    Ok(storage)
}

/// Reverses the byte order of each element in place (`byteorder` = `big`); complex
/// numbers swap each of their two parts.
pub(crate) fn byteswap(bytes: &mut [u8], dtype: DType) {
    let width = match (dtype.element_size(), dtype.kind()) {
        (Some(size), crate::DTypeKind::Complex) => size / 2,
        (Some(size), _) => size,
        (None, _) => 1,
    } as usize;
    if width > 1 {
        for element in bytes.chunks_exact_mut(width) {
            element.reverse();
        }
    }
}
