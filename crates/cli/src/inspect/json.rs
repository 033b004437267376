//! The JSON renderer of `inspect`. Field names and order are a stable interface:
//! add fields, never rename or remove them.

use super::Snapshot;
use serde::Serialize;
use std::collections::BTreeMap;
use tensorplay_engine::{Checkpoint, ChunkedTensor, HeldAs, Owner, Storage, Tensor, WeightsOnly};

#[derive(Serialize)]
struct Document<'a> {
    path: String,
    format: &'static str,
    metadata: &'a BTreeMap<String, String>,
    tensors: Vec<TensorJson<'a>>,
    storages: Vec<StorageJson<'a>>,
    unsafe_globals: Vec<UnsafeGlobalJson<'a>>,
    /// A distributed checkpoint's tensors as chunks; absent for every other format.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    chunked_tensors: Vec<ChunkedJson<'a>>,
    // Only where the file has some: documents of plain checkpoints stay as they were.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    composites: Vec<CompositeJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alloc: Option<super::alloc::AllocJson>,
    /// What `torch.load` (weights-only by default) would do; absent where torch.load is not
    /// the file's loader.
    #[serde(skip_serializing_if = "Option::is_none")]
    weights_only: Option<WeightsOnlyJson<'a>>,
}

#[derive(Serialize)]
struct WeightsOnlyJson<'a> {
    loads: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    member: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

#[derive(Serialize)]
struct UnsafeGlobalJson<'a> {
    module: &'a str,
    name: &'a str,
    member: &'a str,
    position: u64,
}

#[derive(Serialize)]
struct ChunkedJson<'a> {
    name: &'a str,
    dtype: &'static str,
    shape: &'a [u64],
    chunks: Vec<ChunkJson<'a>>,
}

/// One chunk: where it lies in the whole tensor, and its own tensor and storage.
#[derive(Serialize)]
struct ChunkJson<'a> {
    offsets: &'a [u64],
    sizes: &'a [u64],
    tensor: &'a str,
    storage: usize,
}

#[derive(Serialize)]
struct TensorJson<'a> {
    name: &'a str,
    dtype: &'static str,
    shape: &'a [u64],
    strides: &'a [u64],
    storage_offset: u64,
    storage: usize,
    device: String,
    requires_grad: bool,
    contiguous: bool,
    nbytes: u64,
    is_parameter: bool,
    // PyTorch's lazy bits, present only when set.
    #[serde(skip_serializing_if = "is_false")]
    is_conj: bool,
    #[serde(skip_serializing_if = "is_false")]
    is_neg: bool,
    /// What a TorchScript module holds it as; absent for every other format.
    #[serde(skip_serializing_if = "Option::is_none")]
    held_as: Option<&'static str>,
}

fn is_false(value: &bool) -> bool {
    !value
}

/// A sparse, nested or wrapper-subclass tensor; its components are entries of `tensors`.
#[derive(Serialize)]
struct CompositeJson<'a> {
    name: &'a str,
    layout: &'static str,
    dtype: &'static str,
    shape: Option<&'a [u64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subclass: Option<&'a str>,
    requires_grad: bool,
    is_parameter: bool,
    components: Vec<ComponentJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placements: Option<&'a [String]>,
}

#[derive(Serialize)]
struct ComponentJson<'a> {
    role: &'a str,
    tensor: &'a str,
}

#[derive(Serialize)]
struct StorageJson<'a> {
    id: usize,
    key: &'a str,
    device: &'a str,
    dtype: &'static str,
    nbytes: u64,
    tensors: Vec<&'a str>,
    data_ptr: DataPtrJson,
    #[serde(skip_serializing_if = "is_false")]
    saved_alone: bool,
}

/// Where the bytes are; the process address is left out, being different on every run.
#[derive(Serialize)]
struct DataPtrJson {
    backend: &'static str,
    file: Option<String>,
    offset: Option<u64>,
    device: String,
}

pub fn render(
    snapshot: &Snapshot<'_>,
    alloc: Option<super::alloc::AllocJson>,
) -> anyhow::Result<String> {
    let ckpt = snapshot.checkpoint;
    let by_storage = ckpt.tensors_by_storage();
    let tensors = snapshot
        .tensors
        .iter()
        .map(|t| tensor_json(t))
        .collect::<anyhow::Result<_>>()?;
    let storages = snapshot
        .storages
        .iter()
        .map(|s| {
            storage_json(
                s,
                by_storage.get(s.id().index()).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let doc = Document {
        path: ckpt.path.display().to_string(),
        format: ckpt.format.name(),
        metadata: &ckpt.metadata,
        tensors,
        storages,
        unsafe_globals: ckpt
            .unsafe_globals
            .iter()
            .map(|g| UnsafeGlobalJson {
                module: &g.module,
                name: &g.name,
                member: &g.member,
                position: g.position,
            })
            .collect(),
        chunked_tensors: ckpt.chunked.iter().map(|t| chunked_json(ckpt, t)).collect(),
        composites: snapshot
            .composites
            .iter()
            .map(|c| CompositeJson {
                name: &c.name,
                layout: c.layout,
                dtype: c.dtype.name(),
                shape: c.shape.as_deref(),
                subclass: c.subclass.as_deref(),
                requires_grad: c.requires_grad,
                is_parameter: c.is_parameter,
                placements: c.placements.as_deref(),
                components: c
                    .components
                    .iter()
                    .map(|p| ComponentJson {
                        role: &p.role,
                        tensor: &p.tensor,
                    })
                    .collect(),
            })
            .collect(),
        alloc,
        weights_only: ckpt.weights_only.as_ref().map(|w| match w {
            WeightsOnly::Loads => WeightsOnlyJson {
                loads: true,
                member: None,
                reason: None,
            },
            WeightsOnly::Refuses { member, reason } => WeightsOnlyJson {
                loads: false,
                member: Some(member),
                reason: Some(reason),
            },
        }),
    };
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}

fn chunked_json<'a>(ckpt: &'a Checkpoint, tensor: &'a ChunkedTensor) -> ChunkedJson<'a> {
    let chunks = tensor
        .chunks
        .iter()
        .map(|chunk| {
            let own = ckpt.tensors.get(chunk.tensor);
            ChunkJson {
                offsets: &chunk.offsets,
                sizes: &chunk.sizes,
                tensor: own.map_or("", |t| t.name()),
                storage: own.map_or(0, |t| t.storage_index()),
            }
        })
        .collect();
    ChunkedJson {
        name: &tensor.name,
        dtype: tensor.dtype.name(),
        shape: &tensor.shape,
        chunks,
    }
}

fn tensor_json(tensor: &Tensor) -> anyhow::Result<TensorJson<'_>> {
    let imp = tensor.tensor_impl();
    let layout = imp.layout();
    Ok(TensorJson {
        name: tensor.name(),
        dtype: imp.dtype().name(),
        shape: layout.sizes(),
        strides: layout.strides(),
        storage_offset: layout.storage_offset(),
        storage: imp.storage().id().index(),
        device: imp.device().to_string(),
        requires_grad: imp.requires_grad(),
        contiguous: layout.is_contiguous(),
        nbytes: imp.nbytes()?,
        is_parameter: imp.is_parameter(),
        is_conj: imp.is_conj(),
        is_neg: imp.is_neg(),
        held_as: tensor.held_as().map(HeldAs::name),
    })
}

fn storage_json<'a>(storage: &'a Storage, tensors: Vec<&'a str>) -> StorageJson<'a> {
    let ptr = storage.data_ptr();
    let data_ptr = match ptr.owner() {
        Owner::Host { buffer, range } => DataPtrJson {
            backend: buffer.backend().name(),
            file: Some(buffer.source().display().to_string()),
            offset: Some(buffer.file_offset().saturating_add(range.start)),
            device: ptr.device().to_string(),
        },
        Owner::Deferred(d) => DataPtrJson {
            backend: "deflated",
            file: Some(d.buffer.source().display().to_string()),
            offset: Some(d.buffer.file_offset().saturating_add(d.compressed.start)),
            device: ptr.device().to_string(),
        },
        Owner::None(_) => DataPtrJson {
            backend: "none",
            file: None,
            offset: None,
            device: ptr.device().to_string(),
        },
    };
    StorageJson {
        id: storage.id().index(),
        key: storage.key(),
        device: storage.location(),
        dtype: storage.dtype().name(),
        nbytes: storage.nbytes(),
        tensors,
        data_ptr,
        saved_alone: storage.is_saved_alone(),
    }
}
