//! A `torch.distributed.checkpoint` `.metadata` file: a plain pickle (`pickle.dump`) of the
//! `Metadata` dataclass, run by the non-executing machine and read as data.
//!
//! `dcp.load` reads it with plain `pickle.load`, which imports every global it names. The
//! dataclasses DCP itself writes there ([`DCP_GLOBALS`]) only hold fields, so they are data
//! here and not findings; any other global is recorded as unsafe like in any pickle.

use crate::error::{Error, Result};
use crate::pickle::{allowlist, unpickle, Budget, Heap, Id, Loader, Node, UnsafeGlobal};
use crate::DType;
use std::path::{Path, PathBuf};

/// The globals torch 2.9.1's `dcp.save` writes in `.metadata`
/// (`torch/distributed/checkpoint/{metadata,filesystem}.py`): the dataclasses of the
/// metadata tree, the memory-format enum `TensorProperties` pickles in place of
/// `torch.memory_format`, and the `pathlib` class of `StorageMeta.checkpoint_id`
/// (`FileSystemWriter` turns the id into a path). `torch.Size`, dtypes and
/// `torch.serialization._get_layout` are in `torch.load`'s own table already.
pub const DCP_GLOBALS: &[&str] = &[
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta",
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
];

/// Whether `module.name` is one of [`DCP_GLOBALS`], split where DCP splits it: a name that
/// walks attributes (`checkpoint` + `metadata.Metadata`) is not what DCP writes.
fn is_dcp_global(module: &str, name: &str) -> bool {
    DCP_GLOBALS
        .iter()
        .filter_map(|full| full.rsplit_once('.'))
        .any(|(m, n)| m == module && n == name)
}

/// One chunk of a tensor, as `ChunkStorageMetadata` places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkMeta {
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
}

/// A tensor of the state dict, as `TensorStorageMetadata` describes it.
#[derive(Debug, Clone)]
pub struct TensorMeta {
    pub fqn: String,
    pub dtype: DType,
    pub size: Vec<u64>,
    pub chunks: Vec<ChunkMeta>,
}

/// Where one item lies, as `_StorageInfo` says.
#[derive(Debug, Clone)]
pub struct StorageInfo {
    /// Its `MetadataIndex`: fully qualified name, and a chunk's offsets (`None` for bytes).
    pub fqn: String,
    pub offset_key: Option<Vec<u64>>,
    pub relative_path: String,
    pub offset: u64,
    pub length: u64,
    /// The extension transforms applied to the item's bytes, as `transform_descriptors`
    /// names them (`stream.zstd/1`), in the order a load undoes them; empty when none.
    pub transforms: Vec<String>,
}

/// What `.metadata` holds.
#[derive(Debug, Default)]
pub struct Metadata {
    /// Tensors, in the metadata's order.
    pub tensors: Vec<TensorMeta>,
    /// Fully qualified names of the non-tensor items (`BytesStorageMetadata`).
    pub bytes: Vec<String>,
    /// Every item's location, in the metadata's order.
    pub items: Vec<StorageInfo>,
    /// Globals outside `torch.load`'s table and [`DCP_GLOBALS`].
    pub unsafe_globals: Vec<UnsafeGlobal>,
}

impl Metadata {
    /// Roughly the bytes these values take: names, dimensions and one record each.
    pub fn held_bytes(&self) -> u64 {
        let dims = |v: &[u64]| (v.len() as u64).saturating_mul(8);
        let record = 64u64;
        let tensors = self.tensors.iter().fold(0u64, |acc, t| {
            let chunks = t.chunks.iter().fold(0u64, |acc, c| {
                acc.saturating_add(record + dims(&c.offsets) + dims(&c.sizes))
            });
            acc.saturating_add(record + t.fqn.len() as u64 + dims(&t.size))
                .saturating_add(chunks)
        });
        let items = self.items.iter().fold(0u64, |acc, i| {
            let offsets = i.offset_key.as_deref().map_or(0, dims);
            let transforms = i
                .transforms
                .iter()
                .fold(0u64, |acc, t| acc.saturating_add(record + t.len() as u64));
            acc.saturating_add(record + (i.fqn.len() + i.relative_path.len()) as u64 + offsets)
                .saturating_add(transforms)
        });
        let bytes = self
            .bytes
            .iter()
            .fold(0u64, |acc, b| acc.saturating_add(record + b.len() as u64));
        tensors.saturating_add(items).saturating_add(bytes)
    }
}

/// The member name `.metadata` positions are reported under.
const MEMBER: &str = ".metadata";

/// Reads `.metadata` (its bytes, from `path`).
pub fn parse(bytes: &[u8], path: &Path, budget: &Budget) -> Result<Metadata> {
    let unpickled =
        unpickle(bytes, path, MEMBER, 0, Loader::Python, budget).map_err(without_dcp_globals)?;
    if unpickled.len != bytes.len() as u64 {
        return Err(err(path, "bytes follow the pickle's STOP"));
    }
    if !unpickled.persistent.is_empty() {
        return Err(err(path, "persistent ids, which plain pickle.load refuses"));
    }
    let unsafe_globals: Vec<UnsafeGlobal> = unpickled
        .unsafe_globals
        .into_iter()
        .filter(|g| !is_dcp_global(&g.module, &g.name))
        .collect();
    let reader = Reader {
        heap: &unpickled.heap,
        path,
    };
    reader
        .metadata(unpickled.root)
        .map(|mut metadata| {
            metadata.unsafe_globals = unsafe_globals.clone();
            metadata
        })
        .map_err(|e| e.with_unsafe_globals(unsafe_globals))
}

/// A refusal of `.metadata` names the globals read before it, DCP's own left out.
fn without_dcp_globals(error: Error) -> Error {
    match error {
        Error::RefusedWithUnsafeGlobals { source, globals } => {
            let globals: Vec<UnsafeGlobal> = globals
                .into_iter()
                .filter(|g| !is_dcp_global(&g.module, &g.name))
                .collect();
            source.with_unsafe_globals(globals)
        }
        other => other,
    }
}

fn err(path: &Path, detail: impl Into<String>) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        part: MEMBER.into(),
        detail: detail.into(),
    }
}

struct Reader<'a> {
    heap: &'a Heap,
    path: &'a Path,
}

impl Reader<'_> {
    fn err(&self, detail: impl Into<String>) -> Error {
        err(self.path, detail)
    }

    /// The fields of a dataclass instance `class` (NEWOBJ, then BUILD with a dict).
    fn fields(&self, id: Id, class: &str) -> Result<Vec<(&str, Id)>> {
        let state = self.object(id, class)?;
        match state.map(|s| self.heap.get(s)) {
            None => Ok(Vec::new()),
            Some(Node::Dict(pairs)) => pairs
                .iter()
                .map(|&(k, v)| {
                    self.heap
                        .str(k)
                        .map(|k| (k, v))
                        .ok_or_else(|| self.err(format!("a {class} field name is not a string")))
                })
                .collect(),
            Some(_) => Err(self.err(format!("{class} state is not a dict"))),
        }
    }

    /// The state of an instance of `class` (a name in [`DCP_GLOBALS`]'s metadata module or
    /// filesystem module), made with no arguments.
    fn object(&self, id: Id, class: &str) -> Result<Option<Id>> {
        let Node::Object(object) = self.heap.get(id) else {
            return Err(self.err(format!("expected a {class}")));
        };
        let (c, args, state, items) = (&object.class, &object.args, &object.state, &object.items);
        let named = match self.heap.get(*c) {
            Node::Global(g) => g.name == class && is_dcp_global(&g.module, &g.name),
            _ => false,
        };
        let no_args = self.heap.seq(*args).is_some_and(<[Id]>::is_empty);
        if !named || !no_args || !items.is_empty() {
            return Err(self.err(format!("expected a {class} made with no arguments")));
        }
        Ok(*state)
    }

    fn field(&self, fields: &[(&str, Id)], name: &str, class: &str) -> Result<Id> {
        fields
            .iter()
            .find(|(k, _)| *k == name)
            .map(|&(_, v)| v)
            .ok_or_else(|| self.err(format!("{class} has no '{name}'")))
    }

    fn dims(&self, id: Id, what: &str) -> Result<Vec<u64>> {
        self.heap
            .u64s(id)
            .ok_or_else(|| self.err(format!("{what} is not a tuple of non-negative integers")))
    }

    fn metadata(&self, root: Id) -> Result<Metadata> {
        let fields = self.fields(root, "Metadata")?;
        let sd = self.field(&fields, "state_dict_metadata", "Metadata")?;
        let storage = self.field(&fields, "storage_data", "Metadata")?;
        let mut out = Metadata::default();
        let Node::Dict(entries) = self.heap.get(sd) else {
            return Err(self.err("state_dict_metadata is not a dict"));
        };
        for &(k, v) in entries {
            let fqn = self
                .heap
                .str(k)
                .ok_or_else(|| self.err("a state_dict_metadata key is not a string"))?
                .to_owned();
            match self.heap.get(v) {
                Node::Object(o) if self.class_name(o.class) == "BytesStorageMetadata" => {
                    self.object(v, "BytesStorageMetadata")?;
                    out.bytes.push(fqn);
                }
                _ => out.tensors.push(self.tensor(fqn, v)?),
            }
        }
        let Node::Dict(items) = self.heap.get(storage) else {
            return Err(self.err("storage_data is not a dict"));
        };
        for &(k, v) in items {
            out.items.push(self.storage_info(k, v)?);
        }
        Ok(out)
    }

    fn class_name(&self, class: Id) -> &str {
        match self.heap.get(class) {
            Node::Global(g) => &g.name,
            _ => "",
        }
    }

    fn tensor(&self, fqn: String, id: Id) -> Result<TensorMeta> {
        const CLASS: &str = "TensorStorageMetadata";
        let fields = self.fields(id, CLASS)?;
        let properties = self.field(&fields, "properties", CLASS)?;
        let size = self.dims(self.field(&fields, "size", CLASS)?, "a tensor's size")?;
        let chunks = self.field(&fields, "chunks", CLASS)?;
        let dtype = self.dtype(&fqn, properties)?;
        let chunk_ids = self
            .heap
            .seq(chunks)
            .ok_or_else(|| self.err(format!("'{fqn}': chunks is not a list")))?;
        let mut out = Vec::with_capacity(chunk_ids.len());
        for &chunk in chunk_ids {
            let fields = self.fields(chunk, "ChunkStorageMetadata")?;
            let get = |name| self.field(&fields, name, "ChunkStorageMetadata");
            out.push(ChunkMeta {
                offsets: self.dims(get("offsets")?, "a chunk's offsets")?,
                sizes: self.dims(get("sizes")?, "a chunk's sizes")?,
            });
        }
        Ok(TensorMeta {
            fqn,
            dtype,
            size,
            chunks: out,
        })
    }

    /// `TensorProperties` pickles its state as a tuple (`__getstate__`), the dtype first.
    fn dtype(&self, fqn: &str, properties: Id) -> Result<DType> {
        let state = self.object(properties, "TensorProperties")?;
        let first = state
            .and_then(|s| self.heap.seq(s))
            .and_then(|s| s.first().copied());
        let dtype = first.and_then(|d| match self.heap.get(d) {
            Node::Global(g) => match g.known() {
                Some(allowlist::Known::Dtype(dtype)) => Some(dtype),
                _ => None,
            },
            _ => None,
        });
        dtype.ok_or_else(|| self.err(format!("'{fqn}': TensorProperties names no dtype")))
    }

    fn storage_info(&self, key: Id, value: Id) -> Result<StorageInfo> {
        let index = self.fields(key, "MetadataIndex")?;
        let fqn = self.field(&index, "fqn", "MetadataIndex")?;
        let fqn = self
            .heap
            .str(fqn)
            .ok_or_else(|| self.err("a MetadataIndex fqn is not a string"))?
            .to_owned();
        let offset_key = match self.field(&index, "offset", "MetadataIndex") {
            Ok(id) if !matches!(self.heap.get(id), Node::None) => {
                Some(self.dims(id, "a MetadataIndex offset")?)
            }
            _ => None,
        };
        const CLASS: &str = "_StorageInfo";
        let info = self.fields(value, CLASS)?;
        let get = |name| self.field(&info, name, CLASS);
        let relative_path = self
            .heap
            .str(get("relative_path")?)
            .ok_or_else(|| self.err(format!("'{fqn}': relative_path is not a string")))?
            .to_owned();
        let number = |name| {
            get(name).and_then(|id| {
                self.heap
                    .int(id)
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(|| self.err(format!("'{fqn}': {name} is not a non-negative int")))
            })
        };
        // Left out when the writer applied no extension (`_StorageInfo.__getstate__` drops a
        // `None`); otherwise a list of descriptor strings.
        let transforms = match info.iter().find(|(k, _)| *k == "transform_descriptors") {
            None => Vec::new(),
            Some(&(_, v)) if matches!(self.heap.get(v), Node::None) => Vec::new(),
            Some(&(_, v)) => {
                let not_strings = || {
                    self.err(format!(
                        "'{fqn}': transform_descriptors is not a list of strings"
                    ))
                };
                let items = self.heap.seq(v).ok_or_else(not_strings)?;
                items
                    .iter()
                    .map(|&d| self.heap.str(d).map(str::to_owned).ok_or_else(not_strings))
                    .collect::<Result<Vec<String>>>()?
            }
        };
        Ok(StorageInfo {
            offset: number("offset")?,
            length: number("length")?,
            fqn,
            offset_key,
            relative_path,
            transforms,
        })
    }
}

/// `.metadata` beside the items, for messages.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(MEMBER)
}

#[cfg(test)]
mod tests {
    use super::is_dcp_global;

    #[test]
    fn only_the_exact_dcp_names_are_data() {
        assert!(is_dcp_global(
            "torch.distributed.checkpoint.metadata",
            "Metadata"
        ));
        assert!(is_dcp_global("pathlib", "PosixPath"));
        assert!(!is_dcp_global(
            "torch.distributed.checkpoint",
            "metadata.Metadata"
        ));
        assert!(!is_dcp_global(
            "torch.distributed.checkpoint.metadata",
            "Metadata.x"
        ));
        assert!(!is_dcp_global("pathlib", "Path"));
        assert!(!is_dcp_global("posix", "system"));
    }
}
