//! The values a pickle builds. Containers hold ids into one heap, so the memo shares
//! objects by reference exactly as Python's does, and nothing is ever deep-copied.

use super::allowlist::{classify, Class, Known};
use super::budget::{grown_by, grown_list, Growth};
use crate::DType;
use thin_vec::ThinVec;

/// Index of a value in its [`Heap`].
pub type Id = u32;

/// One value built by the machine. Every variant holds at most two words, so that a value
/// takes 24 bytes: a stream makes millions of them. Immutable values hold boxed slices;
/// containers that grow hold one-word vectors (an empty one allocates nothing, and
/// `torch.save` writes an empty `OrderedDict` per tensor).
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `None`
    None,
    /// `True` / `False`
    Bool(bool),
    /// An integer that fits 64 bits.
    Int(i64),
    /// A wider integer, as little-endian two's-complement bytes.
    BigInt(Box<[u8]>),
    /// A float.
    Float(f64),
    /// A text string.
    Str(Box<str>),
    /// A byte string.
    Bytes(Box<[u8]>),
    /// A list.
    List(ThinVec<Id>),
    /// A tuple.
    Tuple(Box<[Id]>),
    /// A dict (or `OrderedDict`), in insertion order.
    Dict(ThinVec<(Id, Id)>),
    /// A set or frozenset.
    Set(ThinVec<Id>),
    /// A name a pickle refers to: only a name. Boxed, like the object and tensor variants,
    /// for the size of every value.
    Global(Box<Global>),
    /// An object the stream asks to construct (by REDUCE, NEWOBJ, INST or OBJ) that
    /// tensorplay does not interpret: kept with its arguments and any state or items given to it.
    Object(Box<Object>),
    /// A persistent id (`BINPERSID`): the archive resolves it, usually to a storage.
    Persistent(Id),
    /// A tensor rebuilt by an allowlisted `torch._utils` function (boxed: it is the largest
    /// variant, and every other value would pay for its size).
    Tensor(Box<TensorSpec>),
    /// A tensor that is not one strided view (sparse, nested, a wrapper subclass): named by
    /// what the rebuild call says, made of component tensors.
    Composite(Box<CompositeSpec>),
}

impl Node {
    /// How its own list grows to take `more` items (a list's, a set's, a dict's pairs, an
    /// object's): nothing for a value that holds none.
    pub(super) fn filled_with(&self, more: usize) -> Growth {
        match self {
            Node::List(list) | Node::Set(list) => grown_by::<Id>(list.len(), list.capacity(), more),
            Node::Dict(pairs) => grown_by::<(Id, Id)>(pairs.len(), pairs.capacity(), more),
            Node::Object(object) => {
                grown_by::<(Option<Id>, Id)>(object.items.len(), object.items.capacity(), more)
            }
            _ => Growth::default(),
        }
    }
}

/// A name a pickle refers to ([`Node::Global`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Global {
    /// Module, after Python 2 → 3 mapping.
    pub module: String,
    /// Attribute.
    pub name: String,
    /// What the name is, looked up once: a stream names a global once and calls it for
    /// every tensor.
    class: Class,
}

impl Global {
    /// `module.name`, module already mapped.
    pub fn new(module: &str, name: &str) -> Self {
        Global {
            module: module.to_owned(),
            name: name.to_owned(),
            class: classify(module, name),
        }
    }

    /// What the name is, in any loader's table.
    pub fn class(&self) -> Class {
        self.class
    }

    /// The interpreted name it is, if any.
    pub fn known(&self) -> Option<Known> {
        match self.class {
            Class::Known(known) => Some(known),
            _ => None,
        }
    }
}

/// An object a pickle asks to construct ([`Node::Object`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The callable or class, a [`Node::Global`] or another object.
    pub class: Id,
    /// Its arguments.
    pub args: Id,
    /// State set by BUILD.
    pub state: Option<Id>,
    /// Items appended (key `None`) or set (key `Some`) on it.
    pub items: Vec<(Option<Id>, Id)>,
}

/// What a sparse, nested or wrapper-subclass rebuild said about a tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct CompositeSpec {
    /// `sparse_coo`, `sparse_csr`, `sparse_csc`, `sparse_bsr`, `sparse_bsc`, `nested`,
    /// `jagged` or `wrapper`.
    pub layout: &'static str,
    /// The logical sizes, where the call gives them (a nested tensor has none).
    pub sizes: Option<Vec<u64>>,
    /// The dtype, where the call names it (a wrapper subclass); otherwise the component
    /// named by `dtype_from` gives it.
    pub dtype: Option<DType>,
    /// The role of the component whose dtype is the tensor's (`values`, `buffer`).
    pub dtype_from: Option<&'static str>,
    /// The class of a wrapper subclass, as `module.name`.
    pub subclass: Option<String>,
    /// Whether autograd tracks it, where the call says.
    pub requires_grad: bool,
    /// Rebuilt through `_rebuild_parameter*`: an `nn.Parameter` around it.
    pub is_parameter: bool,
    /// The component values by role, in the call's order.
    pub components: Vec<(String, Id)>,
    /// A DTensor's placements as Python prints them (`Shard(dim=0)`, `Replicate()`), where
    /// its `_spec` reads as plain data; `None` otherwise.
    pub placements: Option<Vec<String>>,
    /// A wrapper subclass's BUILD state, whose attributes other than the components may hold
    /// tensors of their own (a DTensor's device mesh keeps its ranks in one).
    pub state: Option<Id>,
}

/// What a tensor rebuild call said about a tensor; its storage is still a persistent id.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// The [`Node::Persistent`] naming its storage; `None` for tensors saved without one (meta).
    pub storage: Option<Id>,
    /// Storage offset, in elements.
    pub offset: u64,
    /// Sizes, then strides in elements: one allocation per tensor (see [`Self::sizes`]).
    dims: Box<[u64]>,
    /// How many of `dims` are sizes.
    rank: u32,
    /// Whether autograd tracks it.
    pub requires_grad: bool,
    /// The dtype, when the call names it (`_rebuild_tensor_v3`, meta tensors); otherwise the
    /// storage class gives it.
    pub dtype: Option<DType>,
    /// Rebuilt through `_rebuild_parameter*` or as a `Parameter` type.
    pub is_parameter: bool,
    /// A device the call names for the tensor itself, apart from its storage's location.
    pub device: Option<Box<str>>,
    /// The conjugate bit of the call's metadata: the values read are the conjugates of those
    /// stored.
    pub is_conj: bool,
    /// The negative bit of the call's metadata: the values read are the negatives of those
    /// stored.
    pub is_neg: bool,
    /// A per-channel quantized tensor's scales and zero points, where the file saves them as
    /// tensors (`_rebuild_qtensor`'s quantizer parameters; torch's `q_per_channel_scales()`
    /// and `q_per_channel_zero_points()`).
    pub quantizer: Option<Box<[Id; 2]>>,
}

impl TensorSpec {
    /// A tensor of `sizes` and `strides` (of any lengths: a layout checks them later) at
    /// `offset` of the storage `storage` names, with every flag off.
    pub fn new(storage: Option<Id>, offset: u64, sizes: &[u64], strides: &[u64]) -> Option<Self> {
        let rank = u32::try_from(sizes.len()).ok()?;
        Some(TensorSpec {
            storage,
            offset,
            dims: [sizes, strides].concat().into_boxed_slice(),
            rank,
            requires_grad: false,
            dtype: None,
            is_parameter: false,
            device: None,
            is_conj: false,
            is_neg: false,
            quantizer: None,
        })
    }

    /// Sizes.
    pub fn sizes(&self) -> &[u64] {
        self.dims.get(..self.rank as usize).unwrap_or_default()
    }

    /// Strides, in elements.
    pub fn strides(&self) -> &[u64] {
        self.dims.get(self.rank as usize..).unwrap_or_default()
    }
}

/// Every value of one pickle stream.
#[derive(Debug, Default)]
pub struct Heap {
    nodes: Vec<Node>,
}

impl Heap {
    /// An empty heap with room for `capacity` values.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Heap {
            nodes: Vec::with_capacity(capacity),
        }
    }

    /// The value behind an id. Ids come from this heap, so the lookup cannot miss; a
    /// foreign id reads as `None`.
    pub fn get(&self, id: Id) -> &Node {
        self.nodes.get(id as usize).unwrap_or(&Node::None)
    }

    pub(super) fn get_mut(&mut self, id: Id) -> Option<&mut Node> {
        self.nodes.get_mut(id as usize)
    }

    /// Moves a rebuilt tensor's spec out of the values, leaving `None` in its place.
    pub(crate) fn take_tensor(&mut self, id: Id) -> Option<Box<TensorSpec>> {
        let node = self.nodes.get_mut(id as usize)?;
        match std::mem::replace(node, Node::None) {
            Node::Tensor(spec) => Some(spec),
            other => {
                *node = other;
                None
            }
        }
    }

    /// Moves a byte string out of the values (a nested archive, read apart), leaving `None`.
    pub(crate) fn take_bytes(&mut self, id: Id) -> Option<Box<[u8]>> {
        let node = self.nodes.get_mut(id as usize)?;
        match std::mem::replace(node, Node::None) {
            Node::Bytes(bytes) => Some(bytes),
            other => {
                *node = other;
                None
            }
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the heap is empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// What a push grows the list of values by, when it is full: [`grown_list`].
    pub(super) fn growth(&self) -> Growth {
        grown_list::<Node>(self.nodes.len(), self.nodes.capacity())
    }

    /// Adds a value; `None` past the ids a `u32` numbers.
    pub(super) fn push(&mut self, node: Node) -> Option<Id> {
        // Below `Id::MAX`, which the memo cannot store.
        let id = Id::try_from(self.nodes.len())
            .ok()
            .filter(|&id| id < Id::MAX)?;
        self.nodes.push(node);
        Some(id)
    }

    /// The items of a tuple or list.
    pub fn seq(&self, id: Id) -> Option<&[Id]> {
        match self.get(id) {
            Node::Tuple(items) => Some(items),
            Node::List(items) => Some(items),
            _ => None,
        }
    }

    /// The items of a tuple, list or set.
    pub fn items(&self, id: Id) -> Option<&[Id]> {
        match self.get(id) {
            Node::Set(items) => Some(items),
            _ => self.seq(id),
        }
    }

    /// The attributes a BUILD state sets: a `__dict__`, or `(__dict__, slots)` where either
    /// may be `None`; `(name, value)` pairs in order.
    pub fn state_attrs(&self, state: Id) -> impl Iterator<Item = (Id, Id)> + '_ {
        let (dict, slots) = match self.get(state) {
            Node::Tuple(parts) => (parts.first().copied(), parts.get(1).copied()),
            _ => (Some(state), None),
        };
        dict.into_iter()
            .chain(slots)
            .flat_map(|d| match self.get(d) {
                Node::Dict(pairs) => pairs.as_slice(),
                _ => &[],
            })
            .copied()
    }

    /// An integer value (bools count, as in Python).
    pub fn int(&self, id: Id) -> Option<i64> {
        match self.get(id) {
            Node::Int(v) => Some(*v),
            Node::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// A text value.
    pub fn str(&self, id: Id) -> Option<&str> {
        match self.get(id) {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A truth value: bools, and ints as Python would take them.
    pub fn truthy(&self, id: Id) -> Option<bool> {
        match self.get(id) {
            Node::Bool(b) => Some(*b),
            Node::Int(v) => Some(*v != 0),
            _ => None,
        }
    }

    /// A tuple or list of non-negative integers.
    pub fn u64s<C: FromIterator<u64>>(&self, id: Id) -> Option<C> {
        self.seq(id)?
            .iter()
            .map(|&i| self.int(i).and_then(|v| u64::try_from(v).ok()))
            .collect()
    }
}
