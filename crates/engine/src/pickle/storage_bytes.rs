//! `torch.storage._load_from_bytes(b)`: how `Storage.__reduce__` pickles a storage, so how
//! `pickle.dump(tensor)` (and skorch's nested pickle of its module) holds each tensor's data.
//! Python calls it with `b`, a legacy `torch.save` of that storage alone, and gets the storage
//! back (`torch.load(io.BytesIO(b), weights_only=False)`).
//!
//! The global stays unsafe (recorded like any other: torch's weights-only unpickler refuses
//! it, and `weights_only=False` would run any pickle `b` holds); only its value is read, as
//! data. In a pickle Python's unpickler reads, a call with one `bytes` argument becomes a
//! [`Node::Persistent`] whose id is those bytes, so a tensor rebuild takes it as its storage,
//! recorded as a [`BytesStorage`]: only this call makes one, never a persistent id the stream
//! loads. The machine parses nothing nested: the loader reads `b` as a legacy stream of one
//! storage, and refuses the file unless it is exactly that
//! (`load::torch::legacy::storage_alone`).

use super::allowlist::Loader;
use super::heap::{Id, Node};
use super::machine::Machine;
use crate::error::Result;

/// Where `torch.storage._load_from_bytes` is defined.
const MODULE: &str = "torch.storage";
const NAME: &str = "_load_from_bytes";

/// A storage `torch.storage._load_from_bytes` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesStorage {
    /// The [`Node::Persistent`] the tensors rebuilt over it name; its id is the bytes.
    pub node: Id,
    /// Where the call (its REDUCE) is, within the member: one storage per call.
    pub position: u64,
}

impl BytesStorage {
    /// The storage key it is recorded under: unique per call, as each call is a new storage.
    pub fn key(&self) -> String {
        format!("{NAME}@{}", self.position)
    }
}

impl Machine<'_> {
    /// The storage `callable(*args)` returns when `callable` is `_load_from_bytes` and `args`
    /// one byte string; `None` for any other call (kept opaque by the caller).
    pub(super) fn storage_from_bytes(&mut self, callable: Id, args: Id) -> Result<Option<Id>> {
        // TorchScript's unpickler resolves no such global: `torch.jit.load` refuses it.
        if self.loader != Loader::Python {
            return Ok(None);
        }
        let Node::Global(g) = self.heap.get(callable) else {
            return Ok(None);
        };
        if (g.module.as_str(), g.name.as_str()) != (MODULE, NAME) {
            return Ok(None);
        }
        let bytes = match self.heap.seq(args) {
            Some(&[bytes]) if matches!(self.heap.get(bytes), Node::Bytes(_)) => bytes,
            _ => return Ok(None),
        };
        let node = self.alloc(Node::Persistent(bytes))?;
        let position = self.position();
        self.charge(std::mem::size_of::<BytesStorage>() as u64)?;
        self.bytes_storages.push(BytesStorage { node, position });
        Ok(Some(node))
    }
}
