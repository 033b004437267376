//! GGUF, llama.cpp's model file, read as gguf-py's `GGUFReader` reads it (the `gguf` package,
//! 0.19.0), without running anything.
//!
//! A GGUF file is the magic `GGUF`, a version (2 or 3), a tensor count and a key/value count,
//! the key/values (typed metadata: numbers, strings, arrays of them, arrays of arrays), one
//! info per tensor (name, dimensions innermost first, GGML type, offset into the data
//! section), then the data section, which starts at the end of the infos padded to the
//! alignment (`general.alignment`, 32 by default). Every number is in the file's byte order:
//! big-endian files are told from the version, as gguf-py and ggml tell them.
//!
//! Each tensor is its bytes (its data offset, as many as its type's blocks take) viewed
//! contiguously, named as the file names it. Its shape is gguf-py's `data.shape`: the
//! dimensions outermost first, as PyTorch and NumPy order them (GGUF stores `ne[0]`, the
//! innermost, first). A float or integer type is a tensor of its dtype; a type stored in
//! blocks (Q4_0, Q8_0, the K-quants, IQ*, TQ*, MXFP4 …) is a `uint8` tensor of its blocks'
//! bytes, its last dimension in bytes as gguf-py's `data` has it, and a composite of layout
//! the GGML type's name holding the logical shape and the blocks. Each tensor has a storage
//! of its own, as gguf-py maps each one apart; one tensor given twice (the same bytes, the same
//! type) shares one, so the view rules see it (TP103). Float and integer elements of a
//! big-endian file are swapped onto the heap, charged to the budget; blocks stay as they lie.
//!
//! Refused, with the part at fault: what gguf-py refuses (bad magic or version, a count or
//! length past the bytes left, an unknown value or GGML type, a key or tensor name given
//! twice, a name that is not UTF-8, a `general.alignment` that is not a uint32 power of two,
//! rows that are not whole blocks, tensor data past the end of the file); and, where gguf-py
//! reads what ggml refuses, a tensor offset that is not a multiple of the alignment, and
//! tensors whose bytes overlap otherwise than as one tensor given twice (no writer makes them;
//! a loader reads one's bytes as the other's).

mod header;
mod types;

use super::table::{Accepts, FileReader, FileRule, Row};
use super::{NewStorage, Sink, Sniffed};
use crate::error::{clip, Error, Result};
use crate::load::torch::byteswap;
use crate::{
    Component, CompositeTensor, DType, DataPtr, Device, Format, HostBuffer, Layout, TensorImpl,
};
use header::{Header, TensorInfo};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// What every GGUF file begins with.
pub(crate) const MAGIC: &[u8] = b"GGUF";

/// Bytes of one block of the GGML type named `name`, as the reader sizes it: the numeric
/// scan's scale table is held to it.
#[cfg(test)]
pub(crate) fn block_bytes(name: &str) -> Option<u64> {
    types::GGML_TYPES
        .iter()
        .find(|t| t.name == name && t.is_blocks())
        .map(|t| t.bytes)
}

/// A refusal before it names the file: the part at fault and what is wrong, or a refusal of
/// the memory budget, which names the file itself.
#[derive(Debug)]
pub(crate) enum Problem {
    At { part: String, detail: String },
    Budget(Error),
}

impl Problem {
    fn new(part: impl Into<String>, detail: impl Into<String>) -> Problem {
        Problem::At {
            part: part.into(),
            detail: detail.into(),
        }
    }

    fn into_error(self, path: &Path) -> Error {
        match self {
            Problem::At { part, detail } => Error::Malformed {
                path: path.to_owned(),
                part,
                detail,
            },
            Problem::Budget(e) => e,
        }
    }
}

/// A tensor placed in the file: its info, its file bytes, and how it is held.
struct Placed {
    info: TensorInfo,
    bytes: Range<u64>,
    dtype: DType,
    /// Outermost first.
    shape: Vec<u64>,
    /// Elements to swap to little-endian.
    swap: bool,
}

/// llama.cpp's files, by their magic. `G` is a pickle's BINFLOAT, never the start of a
/// checkpoint torch.load reads, nor of a zip, tar or safetensors header.
pub(crate) const ROW: Row = Row {
    what: "a GGUF file",
    loader: "gguf.GGUFReader",
    extensions: &["gguf"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::Gguf),
        accepts: |prefix| prefix.starts_with(MAGIC),
        read: Some(FileReader {
            read: read_into,
            index: Format::Gguf,
            reads_pickle: false,
        }),
    }),
};

/// Reads one GGUF file through `sink`: its tensors in file order, its metadata summarised.
///
/// `torch.load` unpickles a file that is neither zip nor tar, and `GGUF` begins a pickle (`G`
/// is BINFLOAT, which takes the version and a byte of the tensor count): a file made to be a
/// pickle too (its counts, read as opcodes, in the tens of millions) would run it there. The
/// dispatch names such a reading's globals beside the file's tensors (`load::read_judged`); a
/// file CPython would not run as a pickle (every GGUF of fewer than 256 tensors: the next byte
/// is no opcode) has none.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = buffer.source();
    let Header {
        big_endian,
        alignment,
        data_start,
        metadata,
        chat_templates,
        tensors,
    } = header::read(path, buffer, sink.meter()).map_err(|p| p.into_error(path))?;
    // As many as the infos read, each charged to the budget as it was.
    let mut placed = Vec::with_capacity(tensors.len());
    for info in tensors {
        let at = Where {
            alignment,
            data_start,
            file_len: buffer.len(),
            big_endian,
        };
        placed.push(place(info, &at).map_err(|p| p.into_error(path))?);
    }
    build(buffer, placed, big_endian, sink)?;
    sink.set_metadata(metadata);
    for template in chat_templates {
        sink.add_chat_template(template);
    }
    Ok(Format::Gguf)
}

/// What places a tensor in its file.
struct Where {
    alignment: u64,
    data_start: u64,
    file_len: u64,
    big_endian: bool,
}

/// Where a tensor's bytes are and how many, as gguf-py counts them (its elements over the
/// block size, times the bytes per block), and the shape and dtype it is read as.
fn place(info: TensorInfo, at: &Where) -> Result<Placed, Problem> {
    let part = || format!("tensor '{}'", clip(&info.name));
    let ggml = info.ggml;
    let dims = &info.dims;
    let count = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Problem::new(
                part(),
                format!("dimensions {dims:?} hold more than 2^64 elements"),
            )
        })?;
    let mut shape: Vec<u64> = dims.iter().rev().copied().collect();
    if ggml.is_blocks() {
        // A row (the innermost dimension) is whole blocks, as gguf-py and ggml require; in
        // the array gguf-py reads it is the blocks' bytes.
        let row = match dims.first() {
            Some(&row) if row.is_multiple_of(ggml.block) => row,
            Some(row) => {
                return Err(Problem::new(
                    part(),
                    format!(
                        "rows of {row} elements are not whole {} blocks of {}: gguf-py and \
                         ggml refuse it",
                        ggml.name, ggml.block
                    ),
                ))
            }
            None => {
                return Err(Problem::new(
                    part(),
                    format!(
                        "a {} tensor without dimensions has no rows of blocks",
                        ggml.name
                    ),
                ))
            }
        };
        if let Some(last) = shape.last_mut() {
            *last = (row / ggml.block).checked_mul(ggml.bytes).ok_or_else(|| {
                Problem::new(
                    part(),
                    format!("rows of {row} elements overflow 64-bit bytes"),
                )
            })?;
        }
    }
    let nbytes = (count / ggml.block)
        .checked_mul(ggml.bytes)
        .ok_or_else(|| {
            Problem::new(
                part(),
                format!("{count} {} elements take more than 2^64 bytes", ggml.name),
            )
        })?;
    let offset = info.offset;
    if !offset.is_multiple_of(at.alignment) {
        return Err(Problem::new(
            part(),
            format!(
                "offset {offset} is not a multiple of the file's alignment {}: gguf-py reads it, \
                 ggml (llama.cpp) refuses the file",
                at.alignment
            ),
        ));
    }
    let past = || {
        Problem::new(
            part(),
            format!(
                "its {nbytes} bytes at offset {offset} of the data section (which starts at byte \
                 {}) run past the end of the {}-byte file",
                at.data_start, at.file_len
            ),
        )
    };
    let start = at.data_start.checked_add(offset).ok_or_else(past)?;
    let end = start.checked_add(nbytes).ok_or_else(past)?;
    // gguf-py reads an empty tensor anywhere; any other must lie in the file.
    if nbytes > 0 && end > at.file_len {
        return Err(past());
    }
    let dtype = ggml.dtype.unwrap_or(DType::UInt8);
    Ok(Placed {
        swap: at.big_endian && dtype.element_size().is_some_and(|size| size > 1),
        info,
        bytes: start..end,
        dtype,
        shape,
    })
}

/// Groups of tensors whose bytes overlap, by index: each a storage. Each group's indices are
/// in file order, and the groups in the file order of their first tensor.
fn overlapping(placed: &[Placed]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..placed.len()).collect();
    order.sort_by_key(|&i| placed.get(i).map(|p| (p.bytes.start, p.bytes.end)));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    // The group being gathered, and the end of its bytes.
    let mut current: Option<usize> = None;
    let mut reach = 0u64;
    for i in order {
        let Some(bytes) = placed.get(i).map(|p| p.bytes.clone()) else {
            continue;
        };
        if bytes.is_empty() {
            // No bytes to share: a storage of its own, which ends no group.
            groups.push(vec![i]);
            continue;
        }
        match current.and_then(|g| groups.get_mut(g)) {
            Some(group) if bytes.start < reach => {
                group.push(i);
                reach = reach.max(bytes.end);
            }
            _ => {
                current = Some(groups.len());
                groups.push(vec![i]);
                reach = bytes.end;
            }
        }
    }
    for group in &mut groups {
        group.sort_unstable();
    }
    groups.sort_unstable_by_key(|g| g.first().copied());
    groups
}

/// The four layers of the placed tensors, through `sink`: a storage per group of tensors
/// whose bytes overlap, then the tensors in file order; `big_endian` names the role of a
/// block type's bytes.
fn build(
    buffer: &Arc<HostBuffer>,
    placed: Vec<Placed>,
    big_endian: bool,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let path = buffer.source();
    let refuse = |name: &str, detail: String| Error::Malformed {
        path: path.to_owned(),
        part: format!("tensor '{}'", clip(name)),
        detail,
    };
    let mut views: Vec<Option<Arc<TensorImpl>>> = vec![None; placed.len()];
    for group in overlapping(&placed) {
        let members: Vec<&Placed> = group.iter().filter_map(|&i| placed.get(i)).collect();
        let Some(first) = members.first() else {
            continue;
        };
        // No GGUF writer overlaps two tensors, and a loader reads each one's bytes as its own
        // type: only one tensor given twice (the same bytes, the same type) is read as shared.
        if let Some(other) = members
            .iter()
            .find(|p| p.bytes != first.bytes || p.info.ggml != first.info.ggml)
        {
            return Err(refuse(
                &other.info.name,
                format!(
                    "its bytes [{}, {}) of the data section overlap '{}''s [{}, {}): no GGUF \
                     writer overlaps tensors, and a loader would read one's bytes as the other's",
                    other.info.offset,
                    other.info.offset + (other.bytes.end - other.bytes.start),
                    clip(&first.info.name),
                    first.info.offset,
                    first.info.offset + (first.bytes.end - first.bytes.start),
                ),
            ));
        }
        let (start, end, dtype) = (first.bytes.start, first.bytes.end, first.dtype);
        let swap = members.iter().any(|p| p.swap);
        if let (true, Some(other)) = (swap, members.get(1)) {
            return Err(refuse(
                &first.info.name,
                format!(
                    "shares bytes with '{}' in a big-endian file: no one byte order reads both",
                    clip(&other.info.name)
                ),
            ));
        }
        let data_ptr = if swap {
            let nbytes = end - start;
            sink.meter().hold(path, nbytes, || {
                format!("the bytes of '{}', byte-swapped", clip(&first.info.name))
            })?;
            // Placed inside the file: the range is in the buffer.
            let mut own = buffer.range(start..end)?.to_vec();
            byteswap(&mut own, dtype);
            DataPtr::heap(path, own)
        } else if start > buffer.len() {
            // An empty tensor past the end of the file: no bytes to point at.
            DataPtr::heap(path, Vec::new())
        } else {
            DataPtr::host(Arc::clone(buffer), start..end)?
        };
        let storage = sink.add_storage(NewStorage {
            key: first.info.name.as_str().into(),
            dtype,
            nbytes: end - start,
            location: "cpu".into(),
            data_ptr,
            saved_alone: false,
        });
        for (&i, p) in group.iter().zip(&members) {
            let layout =
                Layout::contiguous(&p.shape).map_err(|e| refuse(&p.info.name, e.to_string()))?;
            let imp = TensorImpl::new(
                layout,
                p.dtype,
                Device::Cpu,
                false,
                false,
                Arc::clone(&storage),
            );
            if let Some(slot) = views.get_mut(i) {
                *slot = Some(Arc::new(imp));
            }
        }
    }
    sink.reserve_tensors(placed.len());
    for (p, imp) in placed.into_iter().zip(views) {
        let Some(imp) = imp else {
            continue;
        };
        let ggml = p.info.ggml;
        if ggml.is_blocks() {
            // The tensor as ggml computes with it: its logical shape of values that its blocks
            // dequantise to float32 (as gguf-py's `dequantize` and ggml's `to_float` give them).
            sink.add_composite(CompositeTensor {
                name: p.info.name.clone(),
                layout: ggml.name,
                shape: Some(p.info.dims.iter().rev().copied().collect()),
                dtype: DType::Float32,
                subclass: None,
                requires_grad: false,
                is_parameter: false,
                components: vec![Component {
                    // The numeric scan reads the float16 scales of little-endian blocks only
                    // (`numeric/scales.rs`); the role tells it which these are.
                    role: match big_endian {
                        false => "blocks".into(),
                        true => "big-endian blocks".into(),
                    },
                    tensor: p.info.name.clone(),
                }],
                placements: None,
            });
        }
        sink.add_tensor(p.info.name, imp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::pickle_start::begins_pickle;
    use crate::load::{from_buffer, from_buffer_with, ReadLimits};

    /// A GGUF file's bytes, numbers in the chosen byte order.
    struct Builder {
        big: bool,
        out: Vec<u8>,
    }

    impl Builder {
        fn new(big: bool, tensors: u64, kvs: u64) -> Builder {
            let mut b = Builder {
                big,
                out: MAGIC.to_vec(),
            };
            b.u32(3).u64(tensors).u64(kvs);
            b
        }

        /// A number's little-endian bytes, in the file's order.
        fn num<const N: usize>(&mut self, mut bytes: [u8; N]) -> &mut Self {
            if self.big {
                bytes.reverse();
            }
            self.out.extend_from_slice(&bytes);
            self
        }

        fn u32(&mut self, v: u32) -> &mut Self {
            self.num(v.to_le_bytes())
        }

        fn u64(&mut self, v: u64) -> &mut Self {
            self.num(v.to_le_bytes())
        }

        fn str(&mut self, s: &str) -> &mut Self {
            self.u64(s.len() as u64);
            self.out.extend_from_slice(s.as_bytes());
            self
        }

        /// A tensor info: name, dims (innermost first), GGML type, offset.
        fn info(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
            self.str(name).u32(dims.len() as u32);
            for &d in dims {
                self.u64(d);
            }
            self.u32(ty).u64(offset)
        }

        /// Pads to `align`, then `data`.
        fn data(&mut self, align: usize, data: &[u8]) -> Vec<u8> {
            while !self.out.len().is_multiple_of(align) {
                self.out.push(0);
            }
            self.out.extend_from_slice(data);
            self.out.clone()
        }
    }

    fn read(bytes: Vec<u8>) -> Result<crate::Checkpoint> {
        from_buffer(HostBuffer::from_vec("m.gguf", bytes))
    }

    fn f32s(values: &[f32], big: bool) -> Vec<u8> {
        values
            .iter()
            .flat_map(|v| {
                if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
            })
            .collect()
    }

    #[test]
    fn a_big_endian_file_is_read_with_its_elements_swapped_onto_the_heap() {
        let mut b = Builder::new(true, 1, 0);
        b.info("w", &[2], 0, 0);
        let ckpt = read(b.data(32, &f32s(&[1.0, -2.0], true))).expect("reads");
        assert_eq!(ckpt.format, Format::Gguf);
        let imp = ckpt.tensors[0].tensor_impl();
        assert_eq!(imp.dtype(), DType::Float32);
        assert_eq!(imp.view_bytes(), Some(&f32s(&[1.0, -2.0], false)[..]));
        assert_eq!(ckpt.metadata["GGUF.version"], "3");
    }

    #[test]
    fn a_tensor_given_twice_shares_a_storage_and_an_empty_one_breaks_no_group() {
        let mut b = Builder::new(false, 3, 0);
        b.info("a", &[16], 0, 0)
            .info("e", &[0], 0, 0)
            .info("b", &[16], 0, 0);
        let ckpt = read(b.data(32, &[0; 64])).expect("reads");
        let storage = |i: usize| ckpt.tensors[i].storage_index();
        assert_eq!((storage(0), storage(1), storage(2)), (0, 1, 0));
        assert_eq!(ckpt.storages[0].nbytes(), 64);
        assert_eq!(ckpt.tensors[2].tensor_impl().layout().storage_offset(), 0);
    }

    #[test]
    fn overlapping_bytes_are_refused_unless_one_tensor_is_given_twice() {
        // Partly overlapping, one inside another, and the same bytes as another type.
        // (16 float32 elements take 64 bytes, 16 float16 32.)
        for (offset, ty, says) in [
            (
                32,
                0,
                "its bytes [32, 96) of the data section overlap 'a''s [0, 64)",
            ),
            (
                32,
                1,
                "its bytes [32, 64) of the data section overlap 'a''s [0, 64)",
            ),
            (
                0,
                1,
                "its bytes [0, 32) of the data section overlap 'a''s [0, 64)",
            ),
        ] {
            let mut b = Builder::new(false, 2, 0);
            b.info("a", &[16], 0, 0).info("b", &[16], ty, offset);
            let e = read(b.data(32, &[0; 96])).expect_err("overlap");
            assert!(
                e.to_string().contains(&format!("tensor 'b': {says}"))
                    && e.to_string().contains("no GGUF writer overlaps tensors"),
                "{e}"
            );
        }
    }

    #[test]
    fn shared_bytes_no_one_reading_holds_are_refused() {
        // Big-endian elements given twice: each tensor would swap them on its own.
        let mut b = Builder::new(true, 2, 0);
        b.info("a", &[16], 0, 0).info("b", &[16], 0, 0);
        let e = read(b.data(32, &[0; 64])).expect_err("shared, big-endian");
        assert_eq!(
            e.to_string(),
            "m.gguf: tensor 'a': shares bytes with 'b' in a big-endian file: no one byte order \
             reads both"
        );
    }

    #[test]
    fn an_empty_tensor_may_lie_anywhere_as_gguf_py_reads_it() {
        let mut b = Builder::new(false, 1, 0);
        b.info("e", &[32, 0], 8, 1 << 40);
        let ckpt = read(b.data(32, &[])).expect("reads");
        // Q8_0: no rows of one 34-byte block each.
        assert_eq!(ckpt.tensors[0].tensor_impl().layout().sizes(), [0, 34]);
        assert_eq!(ckpt.composites[0].shape, Some(vec![0, 32]));
    }

    #[test]
    fn nested_arrays_are_read_to_a_bounded_depth_and_every_value_type_is_known() {
        let nested = |depth: usize| {
            let mut b = Builder::new(false, 0, 1);
            b.str("k").u32(9);
            for _ in 0..depth {
                b.u32(9).u64(1);
            }
            b.u32(4).u64(1).u32(7);
            b.out.clone()
        };
        let ckpt = read(nested(3)).expect("3 deep");
        assert_eq!(ckpt.metadata["k"], "array of 1 array");
        let e = read(nested(64)).expect_err("65 deep");
        assert!(
            e.to_string().contains("arrays nest more than 64 deep"),
            "{e}"
        );
        // An empty array of no known type: gguf-py never types it, ggml refuses it.
        let mut b = Builder::new(false, 0, 1);
        b.str("k").u32(9).u32(13).u64(0);
        let e = read(b.out.clone()).expect_err("unknown element type");
        assert!(
            e.to_string().contains("metadata key 'k': value type 13"),
            "{e}"
        );
    }

    #[test]
    fn a_cut_header_and_a_long_string_are_named_as_such() {
        let e = read(b"GGUF\x03\x00".to_vec()).expect_err("cut");
        assert_eq!(
            e.to_string(),
            "m.gguf: header: the 6-byte file ends inside the version"
        );
        let mut b = Builder::new(false, 0, 2);
        b.str("short").u32(8).str("llama");
        b.str("tokenizer.chat_template").u32(8).str(&"x".repeat(65));
        let ckpt = read(b.out.clone()).expect("reads");
        assert_eq!(ckpt.metadata["short"], "\"llama\"");
        assert_eq!(
            ckpt.metadata["tokenizer.chat_template"],
            "string of 65 bytes"
        );
    }

    #[test]
    fn chat_templates_are_kept_whole_by_key_and_other_keys_are_not() {
        let mut b = Builder::new(false, 0, 5);
        b.str("tokenizer.chat_template").u32(8).str("{{ a }}");
        b.str("tokenizer.chat_templates").u32(8).str("not one");
        b.str("tokenizer.chat_template.tool_use")
            .u32(8)
            .str("{{ b }}");
        b.str("tokenizer.chat_templatex").u32(8).str("nor this");
        // Not a string: llama.cpp renders no template from it.
        b.str("tokenizer.chat_template.n").u32(4).u32(7);
        let ckpt = read(b.out.clone()).expect("reads");
        let found: Vec<(Option<&str>, &[u8])> = ckpt
            .chat_templates
            .iter()
            .map(|t| (t.location.as_deref(), t.source.as_slice()))
            .collect();
        assert_eq!(
            found,
            [
                (Some("tokenizer.chat_template"), &b"{{ a }}"[..]),
                (Some("tokenizer.chat_template.tool_use"), &b"{{ b }}"[..]),
            ]
        );
    }

    /// A GGUF whose tensor count's second byte is `.`: to CPython a float, then STOP. Read as
    /// GGUF, with nothing for the pickle reading to name; one whose count bytes go on to call
    /// `os.system` is refused (no file holds that many tensors) naming it.
    #[test]
    fn a_gguf_file_that_is_a_pickle_too_names_what_the_pickle_would_run() {
        let count = 0x2e00u64;
        let mut b = Builder::new(false, count, 0);
        for i in 0..count {
            b.info(&format!("t{i}"), &[0], 0, 0);
        }
        let bytes = b.data(32, &[]);
        assert!(begins_pickle(&bytes));
        let ckpt = read(bytes).expect("reads");
        assert_eq!(ckpt.tensors.len(), 0x2e00);
        assert!(ckpt.unsafe_globals.is_empty());
        let mut bytes = Builder::new(false, 0, 0).out;
        bytes.truncate(9);
        bytes.extend_from_slice(b"cos\nsystem\n(S'true'\ntR.");
        bytes.resize(64, 0);
        let e = read(bytes).expect_err("no such count");
        assert!(e.to_string().starts_with("m.gguf: header: kv_count"), "{e}");
        let named: Vec<String> = e
            .unsafe_globals()
            .iter()
            .map(|g| format!("{}.{}", g.module, g.name))
            .collect();
        assert_eq!(named, ["os.system"]);
    }

    #[test]
    fn metadata_and_tensor_infos_are_charged_to_the_budget() {
        let mut b = Builder::new(false, 0, 1);
        b.str(&"k".repeat(4096)).u32(0).out.push(1);
        let limits = ReadLimits {
            max_memory: 1024,
            ..ReadLimits::default()
        };
        let e = from_buffer_with(HostBuffer::from_vec("m.gguf", b.out.clone()), limits)
            .expect_err("over budget");
        assert!(e.over_budget(), "{e}");
    }
}
