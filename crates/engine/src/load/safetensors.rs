//! The safetensors reader.
//!
//! tensorplay first applies the format's rules itself, stricter than the `safetensors` crate
//! where the spec is (duplicate names, unknown entry fields, text before the opening brace),
//! so every rejection names the tensor and the bytes at fault. The crate then parses the same
//! header as the authority; its reading must agree with tensorplay's, entry for entry, or the
//! file is refused as a parser differential.

use super::json::Entries;
use super::Parts;
use crate::error::{Error, Result};
use crate::{DType, DataPtr, Device, Format, HostBuffer, Layout, Storage, Tensor};
use crate::{Owner, TensorImpl};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The safetensors spec's cap on the header's length.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

const METADATA_KEY: &str = "__metadata__";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// One validated header entry.
struct Entry {
    name: String,
    dtype: DType,
    layout: Layout,
    start: u64,
    end: u64,
}

/// Appends the file's tensors and storages (one storage per tensor, as PyTorch's loader
/// makes them, all pointing into the one buffer) and records its `__metadata__`.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let path = buffer.source();
    let bytes = buffer.bytes();
    let (header, data_start) = split_header(path, bytes)?;
    let first_id = parts.storages.len();
    // The crate parses the same header on a second thread while tensorplay parses it and
    // builds the tensors here; nothing is handed out before both readings agree.
    let (built, crate_reading) = std::thread::scope(|scope| {
        let crate_reading = scope.spawn(|| safetensors::SafeTensors::read_metadata(bytes));
        let built = parse_header(path, header).and_then(|(metadata, entries)| {
            build(buffer, data_start, first_id, entries).map(|t| (metadata, t))
        });
        (built, crate_reading.join())
    });
    let (metadata, tensors) = built?;
    let crate_reading = crate_reading.map_err(|_| Error::SafetensorsRejected {
        path: path.to_owned(),
        detail: "the safetensors crate panicked".into(),
    })?;
    cross_check_with_crate(path, crate_reading, data_start, &tensors)?;
    for tensor in tensors {
        parts
            .storages
            .push(Arc::clone(tensor.tensor_impl().storage()));
        parts.tensors.push(tensor);
    }
    parts.metadata = metadata;
    Ok(Format::Safetensors)
}

/// The four layers of validated entries: one storage per tensor, ids from `first_id`.
fn build(
    buffer: &Arc<HostBuffer>,
    data_start: u64,
    first_id: usize,
    entries: Vec<Entry>,
) -> Result<Vec<Tensor>> {
    let path = buffer.source();
    let data_end = entries.last().map_or(0, |e| e.end);
    let file_end = data_start.checked_add(data_end).ok_or(Error::Overflow {
        what: "data end offset",
    })?;
    if file_end != buffer.len() {
        return Err(Error::DataLength {
            path: path.to_owned(),
            data_end: file_end,
            file_len: buffer.len(),
        });
    }
    let mut tensors = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        // Tiling puts every offset at or below `data_end`, so no sum here passes `file_end`.
        let range = (data_start + entry.start)..(data_start + entry.end);
        let data_ptr = DataPtr::host(Arc::clone(buffer), range)?;
        let nbytes = entry.end - entry.start;
        let storage = Arc::new(Storage::new(
            first_id + i,
            entry.name.clone(),
            entry.dtype,
            nbytes,
            "cpu",
            data_ptr,
        ));
        let imp = TensorImpl::new(
            entry.layout,
            entry.dtype,
            Device::Cpu,
            false,
            false,
            storage,
        );
        tensors.push(Tensor::new(entry.name, Arc::new(imp)));
    }
    Ok(tensors)
}

/// The header text and the file offset where tensor data begins.
fn split_header<'a>(path: &Path, bytes: &'a [u8]) -> Result<(&'a str, u64)> {
    let file_len = bytes.len() as u64;
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(Error::HeaderTooSmall {
            path: path.to_owned(),
            len: file_len,
        });
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len_bytes);
    let declared = u64::from_le_bytes(le);
    if declared > MAX_HEADER_LEN {
        return Err(Error::HeaderTooLarge {
            path: path.to_owned(),
            declared,
            max: MAX_HEADER_LEN,
        });
    }
    let data_start = declared + 8; // declared ≤ 1e8: no overflow.
    let header = usize::try_from(data_start)
        .ok()
        .and_then(|end| bytes.get(8..end))
        .ok_or(Error::HeaderBeyondFile {
            path: path.to_owned(),
            declared,
            file_len,
        })?;
    let header = std::str::from_utf8(header).map_err(|e| Error::HeaderNotUtf8 {
        path: path.to_owned(),
        position: e.valid_up_to() as u64,
    })?;
    Ok((header, data_start))
}

/// Parses and validates the header: metadata, then entries sorted by data offset (ties,
/// which only zero-size tensors can make, by name) that tile the data region exactly.
fn parse_header(path: &Path, header: &str) -> Result<(BTreeMap<String, String>, Vec<Entry>)> {
    let syntax = |detail: String| Error::HeaderSyntax {
        path: path.to_owned(),
        detail,
    };
    if !header.starts_with('{') {
        let found = header
            .chars()
            .next()
            .map_or("nothing".into(), |c| format!("{c:?}"));
        return Err(syntax(format!(
            "must begin with '{{' but begins with {found}"
        )));
    }
    // Entries stay borrowed slices of the header until each is parsed on its own.
    let raw: Entries<&serde_json::value::RawValue> =
        serde_json::from_str(header).map_err(|e| syntax(format!("invalid JSON: {e}")))?;
    if let Some(name) = raw.first_duplicate() {
        return Err(Error::DuplicateTensor {
            path: path.to_owned(),
            name: name.to_owned(),
        });
    }

    let mut metadata = BTreeMap::new();
    let mut entries = Vec::with_capacity(raw.0.len());
    for (name, value) in raw.0 {
        if name == METADATA_KEY {
            metadata = serde_json::from_str(value.get())
                .map_err(|e| syntax(format!("{METADATA_KEY} must map strings to strings: {e}")))?;
        } else {
            entries.push(parse_entry(path, name, value.get())?);
        }
    }
    entries.sort_by(|a, b| (a.start, a.end, &a.name).cmp(&(b.start, b.end, &b.name)));
    check_tiling(path, &entries)?;
    Ok((metadata, entries))
}

/// One tensor's entry: a known dtype, a shape, and offsets spanning exactly its bytes.
fn parse_entry(path: &Path, name: String, json: &str) -> Result<Entry> {
    let invalid = |detail: String| Error::InvalidTensor {
        path: path.to_owned(),
        tensor: name.clone(),
        detail,
    };
    let raw: RawEntry = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    let dtype = DType::from_safetensors_code(&raw.dtype)
        .ok_or_else(|| invalid(format!("unknown dtype '{}'", raw.dtype)))?;
    let layout = Layout::contiguous(raw.shape).map_err(|e| invalid(e.to_string()))?;
    let (start, end) = raw.data_offsets;
    let Some(span) = end.checked_sub(start) else {
        return Err(invalid(format!(
            "data_offsets [{start}, {end}] end before they start"
        )));
    };
    let bits = layout
        .numel()
        .checked_mul(dtype.bits())
        .ok_or_else(|| invalid("element count × dtype width overflows".into()))?;
    if !bits.is_multiple_of(8) {
        return Err(invalid(format!(
            "{} {dtype} elements take {bits} bits, not a whole number of bytes",
            layout.numel()
        )));
    }
    if span != bits / 8 {
        return Err(invalid(format!(
            "dtype {dtype} × shape {:?} = {} bytes, but data_offsets [{start}, {end}] span {span}",
            layout.sizes(),
            bits / 8,
        )));
    }
    Ok(Entry {
        name,
        dtype,
        layout,
        start,
        end,
    })
}

/// Entries sorted by offset must follow one another with neither gap nor overlap.
fn check_tiling(path: &Path, entries: &[Entry]) -> Result<()> {
    let mut previous: Option<&Entry> = None;
    for entry in entries {
        let expected = previous.map_or(0, |p| p.end);
        let problem = if entry.start > expected {
            format!(
                "data_offsets start at {} but the previous tensor ends at {expected}: a gap of {} bytes",
                entry.start,
                entry.start - expected
            )
        } else if entry.start < expected {
            let other = previous.map_or("", |p| p.name.as_str());
            format!(
                "data_offsets [{}, {}] overlap tensor '{other}', which ends at {expected}",
                entry.start, entry.end
            )
        } else {
            previous = Some(entry);
            continue;
        };
        return Err(Error::InvalidTensor {
            path: path.to_owned(),
            tensor: entry.name.clone(),
            detail: problem,
        });
    }
    Ok(())
}

/// Demands that the `safetensors` crate's reading of the same bytes agrees, tensor for tensor.
fn cross_check_with_crate(
    path: &Path,
    crate_reading: std::result::Result<
        (usize, safetensors::tensor::Metadata),
        safetensors::SafeTensorError,
    >,
    data_start: u64,
    tensors: &[Tensor],
) -> Result<()> {
    let rejected = |detail: String| Error::SafetensorsRejected {
        path: path.to_owned(),
        detail,
    };
    let (_, metadata) = crate_reading.map_err(|e| rejected(format!("{e:?}")))?;
    let infos = metadata.tensors();
    if infos.len() != tensors.len() {
        return Err(rejected(format!(
            "the crate reads {} tensors, tensorplay {}",
            infos.len(),
            tensors.len()
        )));
    }
    for tensor in tensors {
        let imp = tensor.tensor_impl();
        let offsets = match imp.storage().data_ptr().owner() {
            Owner::Host { range, .. } => Some((range.start - data_start, range.end - data_start)),
            Owner::None | Owner::Deferred { .. } => None,
        };
        let agrees = infos.get(tensor.name()).is_some_and(|info| {
            let code = serde_json::to_value(info.dtype).ok();
            let dtype = code
                .as_ref()
                .and_then(|c| c.as_str())
                .and_then(DType::from_safetensors_code);
            dtype == Some(imp.dtype())
                && info
                    .shape
                    .iter()
                    .map(|&s| s as u64)
                    .eq(imp.layout().sizes().iter().copied())
                && Some((info.data_offsets.0 as u64, info.data_offsets.1 as u64)) == offsets
        });
        if !agrees {
            return Err(rejected(format!(
                "the crate reads tensor '{}' differently",
                tensor.name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Checkpoint;

    fn from_buffer(buffer: Arc<HostBuffer>) -> Result<Checkpoint> {
        crate::load::read_file(read_into, &buffer)
    }

    fn file(header: &str, data_len: usize) -> Arc<HostBuffer> {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data_len));
        HostBuffer::from_vec("t.safetensors", bytes)
    }

    fn err(header: &str, data_len: usize) -> String {
        from_buffer(file(header, data_len)).unwrap_err().to_string()
    }

    #[test]
    fn too_short_for_the_length_prefix() {
        let e = from_buffer(HostBuffer::from_vec("t.safetensors", vec![1, 0, 0])).unwrap_err();
        assert!(matches!(e, Error::HeaderTooSmall { len: 3, .. }), "{e}");
    }

    #[test]
    fn zero_size_tensors_at_one_offset_are_ordered_by_name() {
        let ckpt = from_buffer(file(
            r#"{"b":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"I8","shape":[2,0],"data_offsets":[0,0]},"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
            1,
        ))
        .unwrap();
        let names: Vec<&str> = ckpt.tensors.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(ckpt.tensors[0].tensor_impl().layout().strides(), &[1, 1]);
    }

    #[test]
    fn metadata_must_be_strings() {
        let e = err(r#"{"__metadata__":{"n":1}}"#, 0);
        assert!(
            e.contains("header: __metadata__ must map strings to strings"),
            "{e}"
        );
        let ok = from_buffer(file(r#"{"__metadata__":{"n":"1"}}"#, 0)).unwrap();
        assert_eq!(ok.metadata.get("n").map(String::as_str), Some("1"));
        assert!(ok.tensors.is_empty());
    }

    #[test]
    fn sub_byte_tensors_must_fill_whole_bytes() {
        let e = err(
            r#"{"x":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
            2,
        );
        assert!(
            e.contains("3 float4_e2m1fn elements take 12 bits, not a whole number of bytes"),
            "{e}"
        );
        let ok = from_buffer(file(
            r#"{"x":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}}"#,
            3,
        ));
        assert_eq!(ok.unwrap().tensors[0].tensor_impl().nbytes().unwrap(), 3);
    }

    #[test]
    fn reversed_and_oversized_entries_are_refused() {
        let e = err(
            r#"{"x":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}"#,
            4,
        );
        assert!(
            e.contains("tensor 'x': data_offsets [4, 0] end before they start"),
            "{e}"
        );
        let e = err(
            r#"{"x":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#,
            8,
        );
        assert!(
            e.contains("tensor 'x': element count overflows 64-bit arithmetic"),
            "{e}"
        );
        let e = err(
            r#"{"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}"#,
            1,
        );
        assert!(e.contains("tensor 'x': invalid value: integer `-1`"), "{e}");
    }

    #[test]
    fn a_tensor_named_like_the_metadata_key_is_refused() {
        let e = err(
            r#"{"__metadata__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
            1,
        );
        assert!(
            e.contains("__metadata__ must map strings to strings"),
            "{e}"
        );
    }
}
