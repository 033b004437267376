//! Tensors that are not one strided view — sparse, nested, wrapper subclasses, GGUF's
//! quantised blocks — as a user names them, each made of component tensors that are ordinary
//! strided [`Tensor`]s of the checkpoint (`adj.indices`, `adj.values`).
//!
//! [`Tensor`]: crate::Tensor

use crate::DType;

/// One sparse, nested or wrapper-subclass tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompositeTensor {
    /// The name a user would iterate it by.
    pub name: String,
    /// `sparse_coo`, `sparse_csr`, `sparse_csc`, `sparse_bsr`, `sparse_bsc`, `nested`
    /// (PyTorch's strided nested tensor), `jagged` (its jagged layout, `NestedTensor`),
    /// `wrapper` (a `__torch_dispatch__` subclass), or a
    /// GGML block type (`Q4_0`, `Q8_0`, `Q4_K`, …: a GGUF tensor stored in quantised blocks,
    /// its one component the blocks' bytes).
    pub layout: &'static str,
    /// Its logical sizes; `None` for a nested tensor (strided or jagged), whose parts have
    /// their own.
    pub shape: Option<Vec<u64>>,
    /// Its element type.
    pub dtype: DType,
    /// A wrapper subclass's class, as `module.name`.
    pub subclass: Option<String>,
    /// Whether autograd tracks it.
    pub requires_grad: bool,
    /// Whether it was saved as an `nn.Parameter`.
    pub is_parameter: bool,
    /// Its components in the rebuild call's order: role (`indices`, `values`, an inner
    /// tensor's attribute name; a GGML block type's `blocks`, or `big-endian blocks` from a
    /// big-endian GGUF, whose scales are not scanned) and the component tensor's name in the
    /// checkpoint.
    pub components: Vec<Component>,
    /// A DTensor's placements (`Shard(dim=0)`, `Replicate()`), where they read as plain data.
    pub placements: Option<Vec<String>>,
}

/// One part of a [`CompositeTensor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// What the part is to its tensor.
    pub role: String,
    /// The checkpoint tensor holding it (itself a composite for a nested wrapper).
    pub tensor: String,
}
