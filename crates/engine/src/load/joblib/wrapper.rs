//! A `NumpyArrayWrapper` and the array bytes after it, read as joblib 1.6.0's
//! `NumpyUnpickler.load_build` and `NumpyArrayWrapper.read_array` read them
//! (`joblib/numpy_pickle.py`).
//!
//! `joblib.dump` pickles each array as a wrapper object whose state holds `subclass`, `shape`,
//! `order` (`'F'` or else C), `dtype` (a pickled `numpy.dtype`), `allow_mmap` and, from joblib
//! 1.2, `numpy_array_alignment_bytes`; it ends the pickle's FRAME and writes the bytes right
//! after the wrapper's BUILD. When that attribute is not `None`, one byte gives a padding
//! length and that many padding bytes follow (the data then starts at a multiple of 16); the
//! elements follow, `count × itemsize` bytes in `order`. An array of an object dtype is written
//! as a nested protocol-5 pickle instead, which `joblib.load` runs with a fresh unpickler.
//! `joblib.load` swaps big-endian arrays to native order (`ensure_native_byte_order`).

use crate::error::{Error, Result};
use crate::load::numpy::{type_string, Descr};
use crate::pickle::{
    unpickle, Budget, Heap, Id, Inline, InlineArray, Inlined, Loader, Node, UnsafeGlobal,
};
use std::path::Path;

/// How deep a structured dtype's fields may nest before it is refused.
const MAX_DTYPE_DEPTH: u32 = 16;

/// The [`Inline`] of a joblib stream: the data after each `NumpyArrayWrapper`'s BUILD.
pub(crate) struct Arrays<'a> {
    pub path: &'a Path,
    /// The member name an object array's nested pickle reports its globals under.
    pub member: &'a str,
    pub budget: &'a Budget,
}

impl Inline for Arrays<'_> {
    fn after_build(
        &self,
        heap: &Heap,
        object: Id,
        rest: &[u8],
        at: u64,
    ) -> Result<Option<Inlined>> {
        let Node::Object(built) = heap.get(object) else {
            return Ok(None);
        };
        let err = |detail: String| Error::Malformed {
            path: self.path.to_owned(),
            part: format!("array at byte {at}"),
            detail,
        };
        match wrapper_class(heap, built.class, built.args) {
            None => Ok(None),
            Some(Wrapper::Separate(name)) => Err(err(format!(
                "a {name}, written by joblib before 0.10: its array lies in a file of its own \
                 beside this one, which tensorplay does not open"
            ))),
            Some(Wrapper::Inline) => {
                let state = built.state.unwrap_or(object);
                self.read(heap, state, rest, at).map(Some).map_err(err)
            }
        }
    }
}

/// What kind of joblib wrapper an object is.
enum Wrapper {
    /// `NumpyArrayWrapper`: the array's bytes follow in the stream.
    Inline,
    /// `NDArrayWrapper`, `ZNDArrayWrapper` (joblib < 0.10): the array is in another file.
    Separate(&'static str),
}

/// The wrapper class an object was made from, by its full dotted name (what the unpickler
/// resolves; protocol 4 walks a dotted name attribute by attribute), directly (NEWOBJ, INST,
/// OBJ) or through `copyreg._reconstructor` (protocols 0 and 1).
fn wrapper_class(heap: &Heap, class: Id, args: Id) -> Option<Wrapper> {
    let Node::Global(global) = heap.get(class) else {
        return None;
    };
    let full = format!("{}.{}", global.module, global.name);
    if full == "copyreg._reconstructor" {
        let first = *heap.seq(args)?.first()?;
        return wrapper_class(heap, first, first);
    }
    wrapper_named(&full)
}

/// The wrapper class a full dotted name is.
fn wrapper_named(full: &str) -> Option<Wrapper> {
    match full {
        "joblib.numpy_pickle.NumpyArrayWrapper" => Some(Wrapper::Inline),
        "joblib.numpy_pickle.NDArrayWrapper" | "joblib.numpy_pickle_compat.NDArrayWrapper" => {
            Some(Wrapper::Separate("NDArrayWrapper"))
        }
        "joblib.numpy_pickle.ZNDArrayWrapper" | "joblib.numpy_pickle_compat.ZNDArrayWrapper" => {
            Some(Wrapper::Separate("ZNDArrayWrapper"))
        }
        _ => None,
    }
}

/// Whether a reading that named `globals` met a joblib wrapper class: only after one's BUILD
/// does joblib's reading of a stream differ from `pickle.load`'s (the class is resolved, and
/// named, before it is built).
pub(crate) fn names_a_wrapper(globals: &[UnsafeGlobal]) -> bool {
    globals
        .iter()
        .any(|g| wrapper_named(&format!("{}.{}", g.module, g.name)).is_some())
}

/// A value of the wrapper's state dict (its `__dict__` after BUILD), by attribute name.
fn attribute(heap: &Heap, state: Id, name: &str) -> Option<Id> {
    let Node::Dict(pairs) = heap.get(state) else {
        return None;
    };
    // `__dict__.update`: the last value set wins.
    pairs
        .iter()
        .rev()
        .find(|(k, _)| heap.str(*k) == Some(name))
        .map(|&(_, v)| v)
}

/// What an array's dtype says about its bytes.
struct Elements {
    /// The tensor dtype and whether its bytes are big-endian; `None` when no tensor dtype
    /// holds the elements (strings, datetimes, records): the bytes are read past.
    plain: Option<(crate::DType, bool)>,
    /// Bytes per element.
    itemsize: u64,
    /// Python objects: the data is a nested pickle.
    objects: bool,
    /// The type string as pickled, for messages.
    shown: String,
}

impl Arrays<'_> {
    fn read(
        &self,
        heap: &Heap,
        state: Id,
        rest: &[u8],
        at: u64,
    ) -> std::result::Result<Inlined, String> {
        if !matches!(heap.get(state), Node::Dict(_)) {
            return Err("a NumpyArrayWrapper whose state is not a dict".into());
        }
        let get = |name: &str| {
            attribute(heap, state, name)
                .ok_or_else(|| format!("a NumpyArrayWrapper without '{name}' (joblib.load fails)"))
        };
        let shape: Vec<u64> = heap
            .u64s(get("shape")?)
            .ok_or("its shape is not a tuple of non-negative integers")?;
        let fortran = heap.str(get("order")?) == Some("F");
        let elements = elements(heap, get("dtype")?, 0)?;
        if elements.objects {
            // A nested pickle, run with a fresh unpickler: its globals are named.
            let nested = unpickle(
                rest,
                self.path,
                self.member,
                at,
                Loader::Python,
                self.budget,
            )
            .map_err(|e| format!("the object array's nested pickle: {e}"))?;
            return Ok(Inlined {
                len: nested.len,
                array: None,
                globals: nested.unsafe_globals,
            });
        }
        let count = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("shape {shape:?} overflows 64-bit arithmetic"))?;
        let nbytes = count.checked_mul(elements.itemsize).ok_or_else(|| {
            format!(
                "shape {shape:?} of {}-byte elements overflows 64-bit arithmetic",
                elements.itemsize
            )
        })?;
        // joblib >= 1.2: one byte of padding length, then the padding.
        let padded = attribute(heap, state, "numpy_array_alignment_bytes")
            .is_some_and(|v| !matches!(heap.get(v), Node::None));
        let skip = match padded {
            false => 0u64,
            true => {
                let &len = rest
                    .first()
                    .ok_or("the file ends before the array's padding byte")?;
                // joblib writes 1 to 16 bytes of 0xff after a length byte: none of those is
                // an opcode, so pickle.load of the file stops there. Other padding joblib.load
                // skips but pickle.load would run.
                let padding = rest.get(1..1 + usize::from(len));
                if len > 16 || !padding.is_some_and(|p| p.iter().all(|&b| b == 0xff)) {
                    return Err(format!(
                        "the array's padding ({len} bytes after its length byte) is not what \
                         joblib writes (1 to 16 bytes of 0xff): joblib.load skips it, but \
                         pickle.load reads it as opcodes"
                    ));
                }
                1 + u64::from(len)
            }
        };
        let held = rest.len() as u64;
        let end = skip
            .checked_add(nbytes)
            .filter(|&end| end <= held)
            .ok_or_else(|| {
                format!(
                    "the array's {nbytes} bytes (shape {shape:?} of {}) after {skip} bytes of \
                     padding run past the end of the stream, {held} bytes on (joblib.load \
                     fails: EOF reading array data)",
                    elements.shown
                )
            })?;
        let array = match elements.plain {
            None => None,
            Some((dtype, swap)) => Some(InlineArray {
                start: at + skip,
                nbytes,
                dtype,
                swap,
                strides: strides(&shape, fortran)?,
                sizes: shape,
            }),
        };
        Ok(Inlined {
            len: end,
            array,
            globals: Vec::new(),
        })
    }
}

/// Strides in elements, C order or Fortran order (size-0 dimensions count as 1).
fn strides(shape: &[u64], fortran: bool) -> std::result::Result<Vec<u64>, String> {
    let mut strides = vec![0u64; shape.len()];
    let mut stride = 1u64;
    let order: Box<dyn Iterator<Item = usize>> = match fortran {
        true => Box::new(0..shape.len()),
        false => Box::new((0..shape.len()).rev()),
    };
    for i in order {
        if let (Some(slot), Some(&size)) = (strides.get_mut(i), shape.get(i)) {
            *slot = stride;
            stride = stride
                .checked_mul(size.max(1))
                .ok_or("its strides overflow 64-bit arithmetic")?;
        }
    }
    Ok(strides)
}

/// Reads a pickled `numpy.dtype`: `dtype(descr, align, copy)` with the state
/// `(version, byteorder, subarray, names, fields, elsize, alignment, flags[, metadata])`.
fn elements(heap: &Heap, dtype: Id, depth: u32) -> std::result::Result<Elements, String> {
    if depth > MAX_DTYPE_DEPTH {
        return Err(format!("a dtype nested more than {MAX_DTYPE_DEPTH} deep"));
    }
    let Node::Object(object) = heap.get(dtype) else {
        return Err("its dtype is not a pickled numpy.dtype".into());
    };
    match heap.get(object.class) {
        Node::Global(g) if g.module == "numpy" && g.name == "dtype" => {}
        Node::Global(g) => {
            return Err(format!(
                "its dtype is made by {}.{}, not numpy.dtype",
                g.module, g.name
            ))
        }
        _ => return Err("its dtype is not a pickled numpy.dtype".into()),
    }
    let descr = heap
        .seq(object.args)
        .and_then(|args| args.first())
        .and_then(|&d| heap.str(d))
        .ok_or("its dtype's type string is not a string")?;
    let state = object.state.and_then(|s| heap.seq(s)).unwrap_or_default();
    let item = |i: usize| state.get(i).map(|&id| heap.get(id));
    let order = match item(1) {
        Some(Node::Str(order)) => order.to_string(),
        _ => "=".to_owned(),
    };
    let elsize = match item(5) {
        Some(Node::Int(n)) if *n > 0 => u64::try_from(*n).ok(),
        _ => None,
    };
    let shown = format!("'{order}{descr}'");
    let subarray = state
        .get(2)
        .filter(|&&id| !matches!(heap.get(id), Node::None));
    let fields = state
        .get(4)
        .filter(|&&id| !matches!(heap.get(id), Node::None));
    if subarray.is_some() || fields.is_some() {
        // A record or sub-array dtype: bytes unless a field holds objects.
        let mut objects = false;
        if let Some(&sub) = subarray {
            let base = heap.seq(sub).and_then(|s| s.first().copied());
            let base = base.ok_or("its sub-array dtype is not (dtype, shape)")?;
            objects |= elements(heap, base, depth + 1)?.objects;
        }
        if let Some(&fields) = fields {
            let Node::Dict(pairs) = heap.get(fields) else {
                return Err("its record dtype's fields are not a dict".into());
            };
            for &(_, field) in pairs.iter() {
                let base = heap.seq(field).and_then(|f| f.first().copied());
                let base = base.ok_or("a record field is not (dtype, offset)")?;
                objects |= elements(heap, base, depth + 1)?.objects;
            }
        }
        let itemsize = elsize.ok_or("its record dtype states no element size")?;
        return Ok(Elements {
            plain: None,
            itemsize,
            objects,
            shown,
        });
    }
    match type_string(&format!("{order}{descr}")) {
        Descr::Plain { dtype, swap } => {
            let itemsize = dtype.element_size().unwrap_or(1);
            if elsize.is_some_and(|e| e != itemsize) {
                return Err(format!(
                    "its dtype {shown} of {itemsize}-byte elements states an element size of \
                     {}",
                    elsize.unwrap_or_default()
                ));
            }
            Ok(Elements {
                plain: Some((dtype, swap)),
                itemsize,
                objects: false,
                shown,
            })
        }
        Descr::Objects(_) => Ok(Elements {
            plain: None,
            itemsize: 0,
            objects: true,
            shown,
        }),
        Descr::NoTensor { .. } | Descr::Unsupported(_) => {
            // Strings, raw bytes, datetimes: the size the state gives, or the type string's.
            let itemsize = elsize
                .or_else(|| flexible_itemsize(descr))
                .ok_or_else(|| format!("no element size for its dtype {shown}"))?;
            Ok(Elements {
                plain: None,
                itemsize,
                objects: false,
                shown,
            })
        }
    }
}

/// The element size a type string without a tensor dtype states: `U5` is 5 UCS-4 characters
/// (20 bytes), `S3`, `V8`, `M8`, `m8`, `f16` their width in bytes.
fn flexible_itemsize(descr: &str) -> Option<u64> {
    let mut chars = descr.chars();
    let kind = chars.next()?;
    let digits = chars.as_str();
    let digits = digits.split('[').next().unwrap_or(digits);
    let width: u64 = digits.parse().ok()?;
    match kind {
        'U' => width.checked_mul(4),
        _ => Some(width),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_are_c_or_fortran_order() {
        assert_eq!(strides(&[2, 3, 4], false), Ok(vec![12, 4, 1]));
        assert_eq!(strides(&[2, 3, 4], true), Ok(vec![1, 2, 6]));
        assert_eq!(strides(&[0, 3], false), Ok(vec![3, 1]));
        assert!(strides(&[u64::MAX, 3], false).is_err());
    }

    #[test]
    fn flexible_types_state_their_width() {
        assert_eq!(flexible_itemsize("U5"), Some(20));
        assert_eq!(flexible_itemsize("S3"), Some(3));
        assert_eq!(flexible_itemsize("M8[ns]"), Some(8));
        assert_eq!(flexible_itemsize("O"), None);
    }
}
