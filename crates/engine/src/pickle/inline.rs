//! Data a pickler writes into the stream itself, between opcodes, which its unpickler reads
//! in place of an object: joblib writes each NumPy array's bytes right after the BUILD of the
//! `NumpyArrayWrapper` standing for it, and `NumpyUnpickler.load_build` reads them there and
//! puts the array on the stack. A reader that knows such a format passes an [`Inline`] to
//! [`unpickle_inline`](super::unpickle_inline); the machine asks it after every BUILD.

use super::{Heap, Id, UnsafeGlobal};
use crate::error::Result;
use crate::DType;

/// What a format writes after an object's BUILD.
pub trait Inline {
    /// What follows the BUILD of `object` (its state just set), whose data would begin at
    /// `rest` (at `at`, an offset in the file): `None` when the object takes none; an error
    /// naming the file and the data when its data cannot be read.
    fn after_build(&self, heap: &Heap, object: Id, rest: &[u8], at: u64)
        -> Result<Option<Inlined>>;
}

/// The data after one BUILD.
#[derive(Debug)]
pub struct Inlined {
    /// Bytes it takes in the stream, padding included: the next opcode follows them.
    pub len: u64,
    /// The tensor the object becomes, when its elements are of a tensor dtype.
    pub array: Option<InlineArray>,
    /// Globals a pickle nested in the data names (an object array's elements).
    pub globals: Vec<UnsafeGlobal>,
}

/// An array whose bytes lie in the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct InlineArray {
    /// Offset of its first byte in the file.
    pub start: u64,
    /// Its bytes.
    pub nbytes: u64,
    /// Its elements' dtype.
    pub dtype: DType,
    /// Whether the bytes are big-endian (the engine reads little-endian ones).
    pub swap: bool,
    /// Its shape.
    pub sizes: Vec<u64>,
    /// In elements.
    pub strides: Vec<u64>,
}

impl InlineArray {
    /// The storage key the array's bytes are recorded under: where they start.
    pub fn key(&self) -> String {
        self.start.to_string()
    }
}
