//! What every PyTorch format shares once its pickle has run: persistent ids naming storages,
//! rebuilt tensors viewing them, and the names a user would give them.

pub(super) mod archive;
pub(super) mod legacy;
pub(super) mod tar;
pub(super) mod torchscript;

use super::flatten::{named_tensors, Named, Stop};
use super::{NewStorage, Sink};
use crate::error::{Error, Result};
use crate::pickle::{allowlist, Budget, CompositeSpec, Heap, Id, Node, TensorSpec, Unpickled};
use crate::{
    Component, CompositeTensor, DType, DataPtr, Device, HeldAs, HostBuffer, Layout, Storage,
    TensorImpl,
};
use hashbrown::HashTable;
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::Arc;
pub(crate) use torchscript::Declared;

/// A storage as a persistent id describes it: `('storage', type, key, location, numel[, view])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StorageRecord {
    /// The key as recorded (`data/<key>` in a zip, a pointer value in legacy files): its
    /// storage's key, shared.
    pub key: Arc<str>,
    /// The storage class's dtype; `None` for `UntypedStorage`, whose numel counts bytes.
    pub class_dtype: Option<DType>,
    /// The location string as recorded.
    pub location: Cow<'static, str>,
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
    /// A TorchScript archive's classes: what its objects hold their tensors as.
    pub declared: Option<&'a Declared>,
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

/// A location as recorded, borrowed where it is one torch writes for most storages.
fn location_text(location: &str) -> Cow<'static, str> {
    match crate::storage::common_location(location) {
        Some(common) => Cow::Borrowed(common),
        None => Cow::Owned(location.to_owned()),
    }
}

/// Parses a persistent id. `None` for ids that name no storage (legacy `'module'` ids).
pub(crate) fn storage_record(
    heap: &Heap,
    pid: Id,
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
        Node::Global(g) => match g.known() {
            Some(allowlist::Known::Storage(dtype)) => dtype,
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
        Node::Str(s) => Arc::from(&**s),
        Node::Int(v) => v.to_string().into(),
        _ => return Err("storage key is not a string".into()),
    };
    let location = location_text(
        heap.str(location)
            .ok_or("storage location is not a string")?,
    );
    let numel = heap
        .int(numel)
        .and_then(|v| u64::try_from(v).ok())
        .ok_or("storage size is not a non-negative integer")?;
    Ok(Some(StorageRecord {
        key,
        class_dtype,
        location,
        numel,
    }))
}

/// Adds the member's storages (in the order the stream loads them) and its named tensors.
pub(crate) fn add_member(
    mut member: Member<'_>,
    source: &mut dyn StorageSource,
    budget: &Budget,
    sink: &mut Sink<'_>,
) -> Result<()> {
    // A member refused after its pickle ran still names what the pickle references. Taken,
    // not copied: a pickle can name thousands of long globals.
    let globals = std::mem::take(&mut member.unpickled.unsafe_globals);
    match add_unpickled(member, source, budget, sink) {
        Ok(()) => {
            sink.add_unsafe_globals(globals);
            Ok(())
        }
        Err(e) => Err(e.with_unsafe_globals(globals)),
    }
}

fn add_unpickled(
    mut member: Member<'_>,
    source: &mut dyn StorageSource,
    budget: &Budget,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let heap = &member.unpickled.heap;
    let held = budget.memory_held.saturating_add(member.unpickled.bytes);
    let named = named_tensors(heap, member.unpickled.root, budget, held, member.declared).map_err(
        |stop| match stop {
            // A fixed limit of the reader, not a fault of the file: not judged (TP506).
            Stop::Graph(what) => Error::PickleLimit {
                path: member.path.to_owned(),
                member: member.name.to_owned(),
                position: member.unpickled.len,
                what,
            },
            Stop::Memory { needed } => Error::MemoryBudget {
                path: member.path.to_owned(),
                needed,
                limit: budget.max_memory,
                what: format!("the tensor names of {}", member.name),
            },
        },
    )?;
    let Named {
        tensors: names,
        composites,
        storages: saved_alone,
        left_out,
        nested,
    } = named;
    sink.add_left_out(left_out.count, left_out.names);
    // The names stay with the checkpoint: held for the rest of the read, so the next stream
    // or shard has that much less.
    let entry = std::mem::size_of::<(String, Id, Option<HeldAs>)>() as u64;
    let kept = names
        .iter()
        .map(|(name, ..)| name)
        .chain(composites.iter().map(|(name, _)| name))
        .fold(0u64, |acc, name| {
            acc.saturating_add(name.len() as u64).saturating_add(entry)
        });
    sink.meter().hold(member.path, kept, || {
        format!("the tensor names of {}", member.name)
    })?;
    let from_bytes = storages_from_bytes(&mut member, sink)?;
    let mut records = StorageRecords::collect(&member, from_bytes)?;
    records.mark_saved_alone(&saved_alone);
    // What the layers need is taken out of the stream's values, and the values freed before
    // the layers are made: a hundred thousand tensors' worth of both need not be held at once.
    let heap = &mut member.unpickled.heap;
    let specs = Specs::take(heap, names, &records);
    records.learn_dtypes(&specs);
    let composites = composite_specs(heap, composites);
    // A byte string reached under two names is read once, under the first.
    let nested: Vec<(String, Box<[u8]>)> = nested
        .into_iter()
        .filter_map(|(name, id)| Some((name, heap.take_bytes(id)?)))
        .collect();
    drop(std::mem::take(heap));
    let storages = records.storages(&member, source, sink)?;
    let dtypes = add_tensors(&member, specs, &storages, !composites.is_empty(), sink)?;
    add_composites(&member, composites, dtypes, sink)?;
    for (name, bytes) in nested {
        super::nested::read(member.path, member.name, &name, bytes, sink)?;
    }
    Ok(())
}

/// A storage `torch.storage._load_from_bytes` returns ([`BytesStorage`]): the node tensors
/// name, its record (keyed by the call) and its bytes.
///
/// [`BytesStorage`]: crate::pickle::BytesStorage
type FromBytes = (Id, StorageRecord, DataPtr);

/// The storages the member's `torch.storage._load_from_bytes` calls return, each read from the
/// byte string it is called with as a legacy stream of one storage alone
/// ([`legacy::storage_alone`]), never run; the file is refused unless every one is that. The
/// bytes leave the stream's values and are held for the rest of the read (their storage views
/// them). A byte string many calls are given is read once, each call its own storage.
fn storages_from_bytes(member: &mut Member<'_>, sink: &mut Sink<'_>) -> Result<Vec<FromBytes>> {
    let calls = std::mem::take(&mut member.unpickled.bytes_storages);
    let mut read: IdMap<(StorageRecord, DataPtr)> = IdMap::default();
    let mut storages = Vec::with_capacity(calls.len());
    for call in calls {
        let key = call.key();
        let Node::Persistent(bytes) = member.unpickled.heap.get(call.node) else {
            return Err(member.err(Some(call.position), format!("{key} is not a storage")));
        };
        let bytes = *bytes;
        let (mut record, data) = match read.get(&bytes) {
            Some(done) => done.clone(),
            None => {
                let place = format!("{}:{key}", member.name);
                let data = member.unpickled.heap.take_bytes(bytes).ok_or_else(|| {
                    member.err(Some(call.position), format!("{key}: no byte string"))
                })?;
                sink.meter().hold(member.path, data.len() as u64, || {
                    format!("the bytes of {place}")
                })?;
                let buffer = HostBuffer::from_vec(member.path.join(&place), data.into_vec());
                let budget = sink.meter().pickle_budget();
                let done = legacy::storage_alone(&buffer, &budget)
                    .map_err(|e| e.map_unsafe_globals(|g| g.nest_under(&place)))?;
                read.insert(bytes, done.clone());
                done
            }
        };
        // Keyed by the call: each is a storage of its own, whatever key the bytes record.
        record.key = key.into();
        storages.push((call.node, record, data));
    }
    Ok(storages)
}

/// The member's distinct storages by key, in stream order, each with the dtype of a tensor
/// that uses it (untyped storages learn theirs only from `_rebuild_tensor_v3`).
struct StorageRecords {
    records: Vec<(StorageRecord, Option<DType>)>,
    /// Per record: the bytes of a storage `_load_from_bytes` returns, which no format's
    /// source holds.
    from_bytes: Vec<Option<DataPtr>>,
    /// Per record: whether the object holds it as a storage of its own.
    saved_alone: Vec<bool>,
    /// Which record each storage persistent-id node names (records are fewer than heap
    /// ids, which are `u32`).
    record_of: IdMap<u32>,
}

/// A map keyed by heap id, sized for the few ids of one kind rather than the whole heap.
type IdMap<T> = HashMap<Id, T, foldhash::fast::RandomState>;

impl StorageRecords {
    fn collect(member: &Member<'_>, from_bytes: Vec<FromBytes>) -> Result<Self> {
        let heap = &member.unpickled.heap;
        // Sized for one record per persistent id, the common case: none regrows.
        let ids = member.unpickled.persistent.len();
        let mut records: Vec<(StorageRecord, Option<DType>)> = Vec::with_capacity(ids);
        // Record indices by key, hashed from the records' own keys: no second copy of them.
        let keys = foldhash::quality::RandomState::default();
        let key_hash = |records: &[(StorageRecord, Option<DType>)], i: u32| {
            records
                .get(i as usize)
                .map_or(0, |(r, _)| keys.hash_one(&*r.key))
        };
        let mut by_key: HashTable<u32> = HashTable::with_capacity(ids);
        let mut record_of = IdMap::with_capacity_and_hasher(ids, Default::default());
        for &node in &member.unpickled.persistent {
            let Node::Persistent(pid) = heap.get(node) else {
                continue;
            };
            let record = storage_record(heap, *pid).map_err(|e| member.err(None, e))?;
            let Some(record) = record else { continue };
            let hash = keys.hash_one(&*record.key);
            let same_key = |&i: &u32| {
                records
                    .get(i as usize)
                    .is_some_and(|(r, _)| r.key == record.key)
            };
            let index = match by_key.find(hash, same_key) {
                Some(&i) => {
                    if records.get(i as usize).map(|(r, _)| r) != Some(&record) {
                        return Err(member.err(
                            None,
                            format!("storage '{}' is described twice, differently", record.key),
                        ));
                    }
                    i
                }
                None => {
                    // Records are fewer than the heap's values, whose ids are `u32`.
                    let i = u32::try_from(records.len())
                        .map_err(|_| member.err(None, "too many storages"))?;
                    by_key.insert_unique(hash, i, |&j| key_hash(&records, j));
                    records.push((record, None));
                    i
                }
            };
            record_of.insert(node, index);
        }
        // `_load_from_bytes`'s storages follow the stream's own, each keyed by its call.
        let mut data = vec![None; records.len()];
        for (node, record, ptr) in from_bytes {
            // A key of the stream's own ids would be two storages under one key.
            let hash = keys.hash_one(&*record.key);
            let same_key = |&i: &u32| {
                records
                    .get(i as usize)
                    .is_some_and(|(r, _)| r.key == record.key)
            };
            if by_key.find(hash, same_key).is_some() {
                return Err(
                    member.err(None, format!("storage '{}' is described twice", record.key))
                );
            }
            let i =
                u32::try_from(records.len()).map_err(|_| member.err(None, "too many storages"))?;
            by_key.insert_unique(hash, i, |&j| key_hash(&records, j));
            records.push((record, None));
            data.push(Some(ptr));
            record_of.insert(node, i);
        }
        Ok(StorageRecords {
            saved_alone: vec![false; records.len()],
            from_bytes: data,
            records,
            record_of,
        })
    }

    /// Gives each storage the dtype of the first tensor, in name order, that views it.
    fn learn_dtypes(&mut self, specs: &Specs) {
        for (_, slot, _) in &specs.names {
            let Some(Slot::Spec(spec, StorageRef::Record(index))) = specs.slots.get(*slot as usize)
            else {
                continue;
            };
            if let Some((record, dtype)) = self.records.get_mut(*index as usize) {
                if dtype.is_none() {
                    *dtype = spec.dtype.or(record.class_dtype);
                }
            }
        }
    }

    /// Marks the records the object holds as storages of their own (`persistent` nodes).
    fn mark_saved_alone(&mut self, persistent: &[Id]) {
        for node in persistent {
            if let Some(&index) = self.record_of.get(node) {
                if let Some(slot) = self.saved_alone.get_mut(index as usize) {
                    *slot = true;
                }
            }
        }
    }

    /// One storage per record, its bytes from `source`, added through `sink` in record order.
    fn storages(
        self,
        member: &Member<'_>,
        source: &mut dyn StorageSource,
        sink: &mut Sink<'_>,
    ) -> Result<Vec<Arc<Storage>>> {
        let mut storages = Vec::with_capacity(self.records.len());
        let records = self.records.into_iter().zip(self.saved_alone);
        for (((record, dtype), alone), from_bytes) in records.zip(self.from_bytes) {
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
            let data_ptr = match from_bytes {
                // Its tensors may read its elements as another dtype (`_rebuild_tensor_v3`),
                // never past the bytes there are.
                Some(ptr) if ptr.len() == nbytes => ptr,
                Some(ptr) => {
                    return Err(member.err(
                        None,
                        format!(
                            "storage '{}' holds {} bytes, read as {nbytes}",
                            record.key,
                            ptr.len()
                        ),
                    ))
                }
                None => match source.data_ptr(&record, dtype, nbytes)? {
                    Some(ptr) => ptr,
                    None => DataPtr::none(Device::parse(&record.location)),
                },
            };
            storages.push(sink.add_storage(NewStorage {
                key: record.key,
                dtype,
                nbytes,
                location: record.location,
                data_ptr,
                saved_alone: alone,
            }));
        }
        Ok(storages)
    }
}

/// Where a rebuilt tensor's storage comes from.
#[derive(Clone, Copy)]
enum StorageRef {
    /// The storage record at this index.
    Record(u32),
    /// None: the tensor was saved without one (meta).
    Meta,
    /// Its persistent id names no storage record.
    NotAStorage,
}

/// A tensor object the names reach: what its rebuild call said, until its layers are made.
enum Slot {
    Spec(Box<TensorSpec>, StorageRef),
    Built(Arc<TensorImpl>),
}

/// The member's named tensors, taken out of its values: one slot per tensor object, so the
/// names that reach one object share its layers.
struct Specs {
    /// In name order: each name, the slot of its tensor and what it is held as.
    names: Vec<(String, u32, Option<HeldAs>)>,
    slots: Vec<Slot>,
}

impl Specs {
    fn take(
        heap: &mut Heap,
        names: Vec<(String, Id, Option<HeldAs>)>,
        records: &StorageRecords,
    ) -> Self {
        let mut slot_of: IdMap<u32> =
            IdMap::with_capacity_and_hasher(names.len(), Default::default());
        let mut slots = Vec::with_capacity(names.len());
        // Collected in place of `names`, as the values are of one size.
        let names = names
            .into_iter()
            .filter_map(|(name, id, held_as)| {
                let slot = match slot_of.get(&id) {
                    Some(&slot) => slot,
                    None => {
                        let spec = heap.take_tensor(id)?;
                        // One slot per distinct heap id: fewer than `u32::MAX`, never refused.
                        let slot = u32::try_from(slots.len()).ok()?;
                        let storage = match spec.storage {
                            None => StorageRef::Meta,
                            Some(node) => records
                                .record_of
                                .get(&node)
                                .map_or(StorageRef::NotAStorage, |&i| StorageRef::Record(i)),
                        };
                        slots.push(Slot::Spec(spec, storage));
                        slot_of.insert(id, slot);
                        slot
                    }
                };
                Some((name, slot, held_as))
            })
            .collect();
        Specs { names, slots }
    }
}

/// Adds a tensor per name; one TensorImpl per rebuilt tensor object, shared by every name
/// that reaches it. With `dtypes`, returns each name's dtype, by its name in the stream.
fn add_tensors(
    member: &Member<'_>,
    specs: Specs,
    storages: &[Arc<Storage>],
    dtypes: bool,
    sink: &mut Sink<'_>,
) -> Result<HashMap<String, DType>> {
    let Specs { names, mut slots } = specs;
    sink.reserve_tensors(names.len());
    let mut by_name = HashMap::new();
    for (name, index, held_as) in names {
        let Some(slot) = slots.get_mut(index as usize) else {
            continue;
        };
        let (spec, storage) = match slot {
            Slot::Built(imp) => {
                if dtypes {
                    by_name.insert(name.clone(), imp.dtype());
                }
                sink.add_held_tensor(name, Arc::clone(imp), held_as);
                continue;
            }
            Slot::Spec(spec, storage) => (spec, *storage),
        };
        let invalid = |detail: String| Error::InvalidTensor {
            path: member.path.to_owned(),
            tensor: name.clone(),
            detail,
        };
        let storage = match storage {
            StorageRef::Record(index) => storages
                .get(index as usize)
                .map(Arc::clone)
                .ok_or_else(|| invalid("storage missing".into()))?,
            StorageRef::NotAStorage => {
                return Err(invalid("its storage is not a storage persistent id".into()))
            }
            StorageRef::Meta => meta_storage(spec, sink).map_err(invalid)?,
        };
        let dtype = spec.dtype.unwrap_or(storage.dtype());
        let layout = Layout::new(spec.sizes(), spec.strides(), spec.offset)
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
        *slot = Slot::Built(Arc::clone(&imp));
        if dtypes {
            by_name.insert(name.clone(), imp.dtype());
        }
        sink.add_held_tensor(name, imp, held_as);
    }
    Ok(by_name)
}

/// The composite tensors' specs by name, copied out of the values (they are few).
fn composite_specs(heap: &Heap, composites: Vec<(String, Id)>) -> Vec<(String, CompositeSpec)> {
    composites
        .into_iter()
        .filter_map(|(name, id)| match heap.get(id) {
            Node::Composite(spec) => Some((name, CompositeSpec::clone(spec))),
            _ => None,
        })
        .collect()
}

/// Adds a composite tensor per name. Its components were added as tensors or composites
/// under `name.role`; its dtype, where the call does not name it, is that of the component
/// the call says.
fn add_composites(
    member: &Member<'_>,
    composites: Vec<(String, CompositeSpec)>,
    mut dtypes: HashMap<String, DType>,
    sink: &mut Sink<'_>,
) -> Result<()> {
    for (name, spec) in composites {
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
        sink.add_composite(CompositeTensor {
            name,
            layout: spec.layout,
            shape: spec.sizes,
            dtype,
            subclass: spec.subclass,
            requires_grad: spec.requires_grad,
            is_parameter: spec.is_parameter,
            components,
            placements: spec.placements,
        });
    }
    Ok(())
}

/// For a tensor saved without storage (meta): a storage of no bytes, sized for the view.
fn meta_storage(
    spec: &TensorSpec,
    sink: &mut Sink<'_>,
) -> std::result::Result<Arc<Storage>, String> {
    let dtype = spec.dtype.unwrap_or(DType::Float32);
    let layout =
        Layout::new(spec.sizes(), spec.strides(), spec.offset).map_err(|e| e.to_string())?;
    let nbytes = layout
        .byte_range(dtype)
        .map_err(|e| e.to_string())?
        .map_or(0, |r| r.end);
    let location = spec.device.as_deref().unwrap_or("meta");
    Ok(sink.add_storage(NewStorage {
        key: "".into(),
        dtype,
        nbytes,
        location: location_text(location),
        data_ptr: DataPtr::none(Device::parse(location)),
        saved_alone: false,
    }))
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
