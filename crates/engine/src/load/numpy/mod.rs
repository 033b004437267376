//! NumPy's own files: `.npy` (`np.save`: one array) and `.npz` (`np.savez`,
//! `np.savez_compressed`: a zip of `.npy` members), read as `np.load` reads them
//! (`numpy.lib.format.read_array`, `NpzFile`) without running anything.
//!
//! A `.npy` is the magic string `\x93NUMPY`, a version (1.0, 2.0 or 3.0), the header's length
//! (2 bytes, or 4 from 2.0 on), the header (a Python dict literal, latin-1 before 3.0 and
//! UTF-8 from it) and the data, C or Fortran order, right after it. The array is one tensor
//! viewing one storage: mapped in place, or on the heap, charged to the memory budget, when its
//! bytes are big-endian (swapped, as torch's big-endian archives are) or come from a deflated
//! member. Data after the array is ignored, as `np.load` ignores it; data short of it is
//! refused, as `np.load` refuses it. An object array's data is a pickle: its globals are
//! recorded and the file refused, as `np.load` refuses it without `allow_pickle=True`.

mod header;

use super::pickle_start::begins_pickle;
use super::table::{Accepts, FileReader, FileRule, Row, ZipKind};
use super::torch::archive::{flat_archive, Archive};
use super::torch::byteswap;
use super::Sniffed;
use super::{NewStorage, Sink, ROOT_NAME};
use crate::error::{Error, Result};
use crate::pickle::{unpickle, Loader};
use crate::{DataPtr, Device, Format, HostBuffer, Layout, TensorImpl};
pub(super) use header::{type_string, Descr};
use header::{Header, MAX_HEADER_CHARS};
use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// What every `.npy` begins with.
pub(crate) const MAGIC: &[u8] = b"\x93NUMPY";

/// The suffix of an `.npz` member; `NpzFile` names the array without it.
const NPY: &str = ".npy";

/// The member name a `.npy` file's pickled data is reported under; positions are file offsets.
const DATA: &str = "<npy data>";

/// `np.save`'s files: `np.load` reads one whenever it begins `\\x93NUMPY` (no tar header, zip,
/// pickle or JSON begins so: 0x93 is a pickle's STACK_GLOBAL, which fails on an empty stack).
pub(crate) const ROW: Row = Row {
    what: "a NumPy .npy array",
    loader: "np.load",
    extensions: &["npy"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::Numpy),
        accepts: |prefix| prefix.starts_with(MAGIC),
        read: Some(FileReader {
            read: read_into,
            index: Format::Numpy,
            reads_pickle: false,
        }),
    }),
};

/// `np.savez`'s archives: `np.load` opens any zip as an `NpzFile`, and one whose members are
/// all `.npy` is read as one here (no torch archive is); the `.npy` members of any other zip
/// are judged as `NpzFile` reads them (`torch::archive::audit_other_pickles`).
pub(crate) const NPZ: Row = Row {
    what: "a NumPy .npz archive",
    loader: "np.load",
    extensions: &["npz"],
    accepts: Accepts::Records(ZipKind {
        archive: flat_archive,
        claims: is_npz,
        read: read_archive,
    }),
};

/// Reads one `.npy` file through `sink`: one tensor, named [`ROOT_NAME`] as a tensor saved
/// whole by `torch.save` is (`np.load` returns the array itself, under no name).
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let source = Source {
        path: buffer.source(),
        member: None,
    };
    let mark = sink.global_mark();
    let bytes = match mapped_header(&source, buffer, 0..buffer.len())? {
        Some(head) => head,
        None => buffer.bytes(),
    };
    let len = buffer.len();
    let bytes = Cow::Borrowed(bytes);
    if let Err(e) = add_array(&source, ROOT_NAME, bytes, len, Some(0), buffer, sink) {
        return Err(e.with_unsafe_globals(sink.take_unsafe_globals(mark)));
    }
    Ok(Format::Numpy)
}

/// The header of the `.npy` bytes at `array` in `buffer`, when their array is mapped as it
/// lies, which is all a reading of them needs (of a remote object, only that is fetched);
/// `None` when the array is read otherwise, or its header is refused: then the whole bytes
/// are read.
fn mapped_header<'b>(
    source: &Source<'_>,
    buffer: &'b HostBuffer,
    array: Range<u64>,
) -> Result<Option<&'b [u8]>> {
    let head = header_bytes(buffer, array)?;
    let mapped = read_header(source, head)
        .is_ok_and(|(header, _)| matches!(header.descr, Descr::Plain { swap: false, .. }));
    Ok(mapped.then_some(head))
}

/// The magic string, version, header length and header of the `.npy` bytes at `array` in
/// `buffer` as their first bytes declare them (all of them when they declare none that numpy
/// reads).
fn header_bytes(buffer: &HostBuffer, array: Range<u64>) -> Result<&[u8]> {
    let at = |offset: u64| array.start.saturating_add(offset).min(array.end);
    let first = buffer.range(array.start..at(12))?;
    let width = match (first.get(6), first.get(7)) {
        (Some(&major), Some(&minor)) => length_field(major, minor).map(|(width, _)| width),
        _ => None,
    };
    let declared = width.and_then(|width| {
        let mut le = [0u8; 4];
        le.get_mut(..width)?
            .copy_from_slice(first.get(8..8 + width)?);
        Some(u64::from(u32::from_le_bytes(le)) + 8 + width as u64)
    });
    buffer.range(array.start..declared.map_or(array.end, at))
}

/// Whether a zip archive is an `.npz`: every member is named `*.npy` (what `np.savez`
/// writes). `np.load` takes any zip as one, but a `torch.save` archive holds none; what
/// `NpzFile` would unpickle from any other zip is judged beside its own reading
/// (`torch::archive::audit_other_pickles`, and `zip::globals_of_every_pickle` when it is
/// refused).
pub(crate) fn is_npz(archive: &Archive<'_>) -> Result<bool> {
    let entries = archive.zip.entries();
    Ok(!entries.is_empty() && entries.iter().all(|e| e.name.ends_with(NPY)))
}

/// Reads an `.npz` through `sink`: a tensor per member in directory order (`NpzFile.files`),
/// named as `NpzFile` keys it, the member's name without `.npy`. Every member is read, so a
/// refusal names the globals of every object array in the archive: `np.load(...,
/// allow_pickle=True)` runs each one that is asked for.
pub(crate) fn read_archive(archive: Archive<'_>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = archive.path();
    let names: HashSet<&str> = archive
        .zip
        .entries()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    let mark = sink.global_mark();
    let mut refused = None;
    for entry in archive.zip.entries() {
        let stripped = entry.name.strip_suffix(NPY);
        let key = stripped.unwrap_or(&entry.name);
        // `NpzFile[key]` looks for a member named `key` before `key + '.npy'`.
        if stripped.is_some() && names.contains(key) {
            return Err(Error::AmbiguousArchive {
                path: path.to_owned(),
                reason: format!(
                    "the array of '{}' is keyed '{key}', but np.load(...)['{key}'] returns the \
                     member '{key}' itself",
                    entry.name
                ),
            });
        }
        let source = Source {
            path,
            member: Some(&entry.name),
        };
        // A stored member whose array is mapped where it lies needs its header alone.
        let stored = entry.is_stored().then(|| entry.data_start());
        let head = match stored.and_then(|at| Some(at..at.checked_add(entry.size)?)) {
            Some(member) => mapped_header(&source, archive.buffer, member)?,
            None => None,
        };
        let read = match head {
            Some(head) => add_array(
                &source,
                key,
                Cow::Borrowed(head),
                entry.size,
                stored,
                archive.buffer,
                sink,
            ),
            None => archive.inflate(entry).and_then(|bytes| {
                let len = bytes.len() as u64;
                add_array(&source, key, bytes, len, stored, archive.buffer, sink)
            }),
        };
        if let Err(e) = read {
            refused.get_or_insert(e);
        }
    }
    match refused {
        Some(e) => Err(e.with_unsafe_globals(sink.take_unsafe_globals(mark))),
        None => Ok(Format::NumpyArchive),
    }
}

/// Records the globals of a member of any other archive that begins `\x93NUMPY`: `np.load`
/// opens every zip as an `NpzFile`, and its `[key]` unpickles such a member's object array
/// (with `allow_pickle=True`). Other arrays run nothing; a header that cannot be read is
/// refused, since what numpy would make of it is not known.
pub(crate) fn member_globals(
    path: &Path,
    member: &str,
    bytes: &[u8],
    sink: &mut Sink<'_>,
) -> Result<()> {
    let source = Source {
        path,
        member: Some(member),
    };
    let (header, start) = read_header(&source, bytes)?;
    let data = bytes.get(start..).unwrap_or_default();
    match header.descr {
        Descr::Objects(_) => add_pickle_globals(&source, data, start, true, sink),
        // Never pickled by numpy; should the data be a pickle anyway, its globals are named.
        Descr::NoTensor { .. } | Descr::Unsupported(_) => {
            add_pickle_globals(&source, data, start, false, sink)
        }
        Descr::Plain { .. } => Ok(()),
    }
}

/// Where the pickle of an `.npy` object array begins in `bytes`, and the pickle; `None` for
/// any other array, or bytes whose header cannot be read (for a caller that names what every
/// reading of a refused archive would run).
pub(crate) fn object_array_pickle(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let source = Source {
        path: Path::new(""),
        member: None,
    };
    let (header, start) = read_header(&source, bytes).ok()?;
    match header.descr {
        Descr::Objects(_) => Some((start, bytes.get(start..)?)),
        Descr::Plain { .. } | Descr::NoTensor { .. } | Descr::Unsupported(_) => None,
    }
}

/// Where an array's bytes are, for messages: the file, and the `.npz` member holding it.
struct Source<'a> {
    path: &'a Path,
    member: Option<&'a str>,
}

impl Source<'_> {
    fn err(&self, part: &str, detail: impl Into<String>) -> Error {
        let part = match self.member {
            Some(member) => format!("{member}: {part}"),
            None => part.to_owned(),
        };
        Error::Malformed {
            path: self.path.to_owned(),
            part,
            detail: detail.into(),
        }
    }

    /// The member name a pickle's globals are reported under.
    fn pickle_member(&self) -> &str {
        self.member.unwrap_or(DATA)
    }
}

/// The header's length field: its width for each format version numpy reads, and whether the
/// header is UTF-8 (3.0) rather than latin-1.
fn length_field(major: u8, minor: u8) -> Option<(usize, bool)> {
    match (major, minor) {
        (1, 0) => Some((2, false)),
        (2, 0) => Some((4, false)),
        (3, 0) => Some((4, true)),
        _ => None,
    }
}

/// Reads the magic string, version and header of the `.npy` bytes `bytes`; returns the
/// header, checked as numpy checks it, and where the data starts.
fn read_header(source: &Source<'_>, bytes: &[u8]) -> Result<(Header, usize)> {
    let len = bytes.len();
    if bytes.get(..MAGIC.len()) != Some(MAGIC) {
        return Err(source.err(
            "magic",
            "does not begin with \\x93NUMPY: np.load returns such a member's raw bytes, not an \
             array",
        ));
    }
    let (Some(&major), Some(&minor)) = (bytes.get(6), bytes.get(7)) else {
        return Err(source.err(
            "header",
            format!("{len} bytes end inside the magic string and version"),
        ));
    };
    let Some((width, utf8)) = length_field(major, minor) else {
        return Err(source.err(
            "header",
            format!("format version {major}.{minor} is not one numpy reads (1.0, 2.0, 3.0)"),
        ));
    };
    let field = bytes.get(8..8 + width).ok_or_else(|| {
        source.err(
            "header",
            format!("{len} bytes end inside the header's length"),
        )
    })?;
    let mut le = [0u8; 4];
    le.get_mut(..width)
        .unwrap_or_default()
        .copy_from_slice(field);
    // At most 2^32 - 1 past a 12-byte prefix: no overflow in usize on 64-bit targets, and
    // checked on others.
    let declared = u32::from_le_bytes(le) as usize;
    let start = 8 + width;
    let raw = start
        .checked_add(declared)
        .and_then(|end| bytes.get(start..end))
        .ok_or_else(|| {
            source.err(
                "header",
                format!(
                    "declared length {declared} bytes runs past the end of the {len}-byte {}",
                    if source.member.is_some() {
                        "member"
                    } else {
                        "file"
                    }
                ),
            )
        })?;
    let text: Cow<'_, str> = if utf8 {
        let text = std::str::from_utf8(raw).map_err(|e| {
            source.err(
                "header",
                format!("invalid UTF-8 at header byte {}", e.valid_up_to()),
            )
        })?;
        check_chars(source, text.chars().count())?;
        Cow::Borrowed(text)
    } else {
        // Latin-1: a character per byte.
        check_chars(source, raw.len())?;
        Cow::Owned(raw.iter().map(|&b| char::from(b)).collect())
    };
    let value = header::parse_literal(&text, !utf8)
        .map_err(|e| source.err("header", format!("cannot parse the header: {e}")))?;
    let header = header::check(value).map_err(|e| source.err("header", e))?;
    Ok((header, start + declared))
}

/// numpy refuses a header longer than [`MAX_HEADER_CHARS`] characters unless the file is
/// trusted (`allow_pickle=True`): `literal_eval` is not safe on large inputs.
fn check_chars(source: &Source<'_>, chars: usize) -> Result<()> {
    if chars > MAX_HEADER_CHARS {
        return Err(source.err(
            "header",
            format!(
                "{chars} characters exceed numpy's {MAX_HEADER_CHARS}-character limit \
                 (np.load refuses such a header unless allow_pickle=True)"
            ),
        ));
    }
    Ok(())
}

/// Adds the array of the `.npy` bytes `bytes` as the tensor `name` and its storage. `at` is
/// where `bytes` lie in `buffer`'s file when they are its own bytes (a `.npy` file, a stored
/// member), `None` when they were inflated; `len` is how long the array's bytes are in all
/// (`bytes` may be its header alone, when the data is mapped where it lies).
fn add_array(
    source: &Source<'_>,
    name: &str,
    bytes: Cow<'_, [u8]>,
    len: u64,
    at: Option<u64>,
    buffer: &Arc<HostBuffer>,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let path = source.path;
    let (header, start) = read_header(source, &bytes)?;
    let data = bytes.get(start..).unwrap_or_default();
    let (dtype, swap) = match header.descr {
        Descr::Plain { dtype, swap } => (dtype, swap),
        Descr::Objects(descr) => {
            add_pickle_globals(source, data, start, true, sink)?;
            return Err(source.err(
                "data",
                format!(
                    "an object array (descr {descr}): its data is a pickle, which np.load \
                     refuses without allow_pickle=True and runs with it"
                ),
            ));
        }
        // In an `.npz`, `np.load` returns such a member like any other (`NpzFile[key]`): the
        // numeric members are read, and this one is left out, named with its dtype and shape.
        Descr::NoTensor { descr, .. } if source.member.is_some() => {
            add_pickle_globals(source, data, start, false, sink)?;
            sink.add_left_out(
                1,
                vec![format!("{name} ({descr}, shape {:?})", header.shape)],
            );
            return Ok(());
        }
        Descr::NoTensor { why, .. } | Descr::Unsupported(why) => {
            // Never pickled by numpy; should the data be a pickle anyway, its globals are named.
            add_pickle_globals(source, data, start, false, sink)?;
            return Err(source.err(
                "header",
                format!("{why}; tensorplay reads bool, integer, float and complex arrays"),
            ));
        }
    };
    let shape = &header.shape;
    let itemsize = dtype.element_size().unwrap_or(1);
    let nbytes = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|count| count.checked_mul(itemsize))
        .ok_or_else(|| {
            source.err(
                "header",
                format!("shape {shape:?} of {itemsize}-byte elements overflows 64-bit arithmetic"),
            )
        })?;
    // The array's bytes may be its header alone: they are mapped where they lie, not read.
    let held = len.saturating_sub(start as u64);
    if held < nbytes {
        return Err(source.err(
            "data",
            format!(
                "the header describes {nbytes} bytes (shape {shape:?} of {dtype}) but {held} \
                 follow it"
            ),
        ));
    }
    let meter = sink.meter();
    meter.hold_tensors(path, 1, 0, name.len() as u64)?;
    // `nbytes` ≤ `held`, a length in memory: it fits in usize, and every sum below in u64.
    let end = start + nbytes as usize;
    let data_ptr = match at {
        Some(offset) if !swap => {
            let first = offset + start as u64;
            DataPtr::host(Arc::clone(buffer), first..first + nbytes)?
        }
        _ => {
            meter.hold(path, nbytes, || match source.member {
                Some(member) => format!("the array of {member}"),
                None => "the array's bytes, byte-swapped".to_owned(),
            })?;
            let mut own = match bytes {
                Cow::Owned(mut inflated) => {
                    // In place: the inflated member is not copied a second time.
                    inflated.truncate(end);
                    inflated.drain(..start);
                    inflated
                }
                Cow::Borrowed(file) => file.get(start..end).unwrap_or_default().to_vec(),
            };
            if swap {
                byteswap(&mut own, dtype);
            }
            DataPtr::heap(path, own)
        }
    };
    let layout = match header.fortran_order {
        false => Layout::contiguous(shape),
        true => fortran_layout(shape),
    }
    .map_err(|e| Error::InvalidTensor {
        path: path.to_owned(),
        tensor: name.to_owned(),
        detail: e.to_string(),
    })?;
    let storage = sink.add_storage(NewStorage {
        key: name.into(),
        dtype,
        nbytes,
        location: "cpu".into(),
        data_ptr,
        saved_alone: false,
    });
    let imp = TensorImpl::new(layout, dtype, Device::Cpu, false, false, storage);
    sink.add_tensor(name, Arc::new(imp));
    Ok(())
}

/// Column-major strides over one storage: the first index varies fastest (size-0 dimensions
/// count as 1, as for C order).
fn fortran_layout(shape: &[u64]) -> Result<Layout> {
    let mut strides = Vec::with_capacity(shape.len());
    let mut stride = 1u64;
    for &size in shape {
        strides.push(stride);
        stride = stride.checked_mul(size.max(1)).ok_or(Error::Overflow {
            what: "Fortran-order strides",
        })?;
    }
    Layout::new(shape, strides, 0)
}

/// Runs the pickle machine over an array's data (never executing it) and records the globals
/// it names through `sink`. An object array's pickle that the machine refuses is refused with
/// its own error; with `objects` false (a dtype numpy never pickles), data that is no pickle
/// is left alone.
fn add_pickle_globals(
    source: &Source<'_>,
    data: &[u8],
    start: usize,
    objects: bool,
    sink: &mut Sink<'_>,
) -> Result<()> {
    if !objects && !begins_pickle(data) {
        return Ok(());
    }
    let budget = sink.meter().pickle_budget();
    // Positions from the start of the file, or of the member.
    match unpickle(
        data,
        source.path,
        source.pickle_member(),
        start as u64,
        Loader::Python,
        &budget,
    ) {
        Ok(unpickled) => {
            sink.add_unsafe_globals(unpickled.unsafe_globals);
            Ok(())
        }
        Err(e) if objects => Err(e),
        Err(e) => {
            sink.add_unsafe_globals(e.unsafe_globals().iter().cloned());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::from_buffer;
    use crate::DType;

    fn npy(header: &str, data: &[u8]) -> Vec<u8> {
        let mut text = header.to_owned();
        while !(10 + text.len() + 1).is_multiple_of(64) {
            text.push(' ');
        }
        text.push('\n');
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(text.len() as u16).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn read(bytes: Vec<u8>) -> Result<crate::Checkpoint> {
        from_buffer(HostBuffer::from_vec("a.npy", bytes))
    }

    #[test]
    fn a_fortran_array_is_one_storage_viewed_column_major() {
        let data: Vec<u8> = (0..6u16).flat_map(|v| v.to_be_bytes()).collect();
        let bytes = npy(
            "{'descr': '>u2', 'fortran_order': True, 'shape': (2, 3), }",
            &data,
        );
        let ckpt = read(bytes).expect("reads");
        assert_eq!(ckpt.format, Format::Numpy);
        let t = &ckpt.tensors[0];
        assert_eq!(t.name(), ROOT_NAME);
        let imp = t.tensor_impl();
        assert_eq!(imp.dtype(), DType::UInt16);
        assert_eq!(imp.layout().sizes(), [2, 3]);
        assert_eq!(imp.layout().strides(), [1, 2]);
        // Swapped to little-endian on the heap.
        let little: Vec<u8> = (0..6u16).flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(imp.view_bytes(), Some(&little[..]));
    }

    #[test]
    fn short_data_is_refused_and_trailing_bytes_are_ignored_as_numpy_does() {
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let e = read(npy(header, &[0; 7])).expect_err("short");
        assert_eq!(
            e.to_string(),
            "a.npy: data: the header describes 8 bytes (shape [2] of float32) but 7 follow it"
        );
        let ckpt = read(npy(header, &[0; 12])).expect("trailing bytes");
        assert_eq!(ckpt.storages[0].nbytes(), 8);
    }

    #[test]
    fn every_refusal_names_the_part_at_fault() {
        let e = read(b"\x93NUMPY\x01".to_vec()).expect_err("cut");
        assert!(e.to_string().contains("header: 7 bytes end inside"), "{e}");
        let e = read(b"\x93NUMPY\x04\x00\x00\x00".to_vec()).expect_err("version");
        assert!(e.to_string().contains("format version 4.0"), "{e}");
        let e = read(b"\x93NUMPY\x02\x00\x10\x00".to_vec()).expect_err("length");
        assert!(e.to_string().contains("inside the header's length"), "{e}");
        let mut bytes = b"\x93NUMPY\x03\x00\x04\x00\x00\x00{\xff}\n".to_vec();
        let e = read(bytes.clone()).expect_err("utf-8");
        assert!(
            e.to_string().contains("invalid UTF-8 at header byte 1"),
            "{e}"
        );
        bytes[12..15].copy_from_slice(b"[ ]");
        let e = read(bytes).expect_err("not a header");
        assert!(
            e.to_string().contains("header: not a dictionary but []"),
            "{e}"
        );
        let e = read(npy(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
            &[],
        ))
        .expect_err("overflow");
        assert!(e.to_string().contains("overflows"), "{e}");
    }

    #[test]
    fn an_object_array_is_refused_naming_what_its_pickle_would_run() {
        let header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }";
        let e = read(npy(header, b"cos\nsystem\n(S'true'\ntR.")).expect_err("object");
        assert!(e.to_string().contains("an object array"), "{e}");
        let named: Vec<(&str, &str, &str, u64)> = e
            .unsafe_globals()
            .iter()
            .map(|g| {
                (
                    g.module.as_str(),
                    g.name.as_str(),
                    g.member.as_str(),
                    g.position,
                )
            })
            .collect();
        assert_eq!(named, [("os", "system", DATA, 128)]);
    }
}
