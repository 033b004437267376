//! The safetensors reader.
//!
//! tensorplay first applies the format's rules itself, stricter than the `safetensors` crate
//! where the spec is (duplicate names, unknown entry fields, text before the opening brace),
//! so every rejection names the tensor and the bytes at fault. The crate then parses the same
//! header as the authority; its reading must agree with tensorplay's, entry for entry, or the
//! file is refused as a parser differential.

use super::limits::{Meter, CRATE_ENTRY_BYTES, HEADER_ENTRY_BYTES};
use super::Parts;
use crate::error::{Error, Result};
use crate::layout::Dims;
use crate::TensorImpl;
use crate::{DType, DataPtr, Device, Format, HostBuffer, Layout, Storage, Tensor};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The safetensors spec's cap on the header's length.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

const METADATA_KEY: &str = "__metadata__";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry<'a> {
    // Borrowed and inline: no allocation per entry for what is parsed and dropped.
    #[serde(borrow)]
    dtype: Cow<'a, str>,
    shape: Dims,
    data_offsets: (u64, u64),
}

/// One validated header entry.
struct Entry {
    name: Arc<str>,
    dtype: DType,
    layout: Layout,
    start: u64,
    end: u64,
}

/// Appends the file's tensors and storages (one storage per tensor, as PyTorch's loader
/// makes them, all pointing into the one buffer) and records its `__metadata__`.
///
/// The phases are ordered so their transient memory never adds up: the header's entries
/// as slices of it, then the crate's reading (the largest), then tensorplay's entries,
/// compared with the crate's before it is dropped, and only then the four layers. Each is
/// charged to the meter before it is taken.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let path = buffer.source();
    let bytes = buffer.bytes();
    let (header, data_start) = split_header(path, bytes)?;
    let raw = split_entries(path, header, &parts.meter)?;
    let crate_bytes = raw.iter().fold(0u64, |acc, (name, _)| {
        acc.saturating_add(CRATE_ENTRY_BYTES + 2 * name.len() as u64)
    });
    parts.meter.check(path, crate_bytes, || {
        "the safetensors crate's reading of the header".to_owned()
    })?;
    let crate_reading = std::panic::catch_unwind(|| safetensors::SafeTensors::deserialize(bytes));
    let (metadata, entries) = parse_entries(path, raw, &parts.meter)?;
    check_data_len(buffer, data_start, &entries)?;
    let crate_reading = crate_reading.map_err(|_| Error::SafetensorsRejected {
        path: path.to_owned(),
        detail: "the safetensors crate panicked".into(),
    })?;
    cross_check_with_crate(path, crate_reading, bytes, data_start, &entries)?;
    build_into(buffer, data_start, entries, parts)?;
    parts.metadata = metadata;
    Ok(Format::Safetensors)
}

/// The data region must end where the file does.
fn check_data_len(buffer: &HostBuffer, data_start: u64, entries: &[Entry]) -> Result<()> {
    let data_end = entries.last().map_or(0, |e| e.end);
    let file_end = data_start.checked_add(data_end).ok_or(Error::Overflow {
        what: "data end offset",
    })?;
    if file_end != buffer.len() {
        return Err(Error::DataLength {
            path: buffer.source().to_owned(),
            data_end: file_end,
            file_len: buffer.len(),
        });
    }
    Ok(())
}

/// The four layers of validated entries, appended to `parts`: one storage per tensor.
fn build_into(
    buffer: &Arc<HostBuffer>,
    data_start: u64,
    entries: Vec<Entry>,
    parts: &mut Parts,
) -> Result<()> {
    parts.storages.reserve(entries.len());
    parts.tensors.reserve(entries.len());
    for entry in entries {
        // Tiling and the data length put every offset inside the file: no sum here overflows.
        let range = (data_start + entry.start)..(data_start + entry.end);
        let data_ptr = DataPtr::host(Arc::clone(buffer), range)?;
        let nbytes = entry.end - entry.start;
        let storage = Arc::new(Storage::new(
            parts.storages.len(),
            Arc::clone(&entry.name),
            entry.dtype,
            nbytes,
            "cpu",
            data_ptr,
        ));
        parts.storages.push(Arc::clone(&storage));
        let imp = TensorImpl::new(
            entry.layout,
            entry.dtype,
            Device::Cpu,
            false,
            false,
            storage,
        );
        parts.tensors.push(Tensor::new(entry.name, Arc::new(imp)));
    }
    Ok(())
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

/// The header's keys, in file order, each with its value's text; a name without escapes
/// stays borrowed from the header. Every entry is charged to the meter as it is met, so a
/// header declaring more tensors than the budget holds is refused while it is read.
type RawEntries<'h> = Vec<(Cow<'h, str>, &'h RawValue)>;

fn split_entries<'h>(path: &Path, header: &'h str, meter: &Meter) -> Result<RawEntries<'h>> {
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
    let refused = RefCell::new(None);
    let seed = EntriesSeed {
        path,
        meter,
        refused: &refused,
    };
    let mut de = serde_json::Deserializer::from_str(header);
    let parsed = de
        .deserialize_map(seed)
        .and_then(|raw| de.end().map(|()| raw));
    if let Some(e) = refused.into_inner() {
        return Err(e);
    }
    parsed.map_err(|e| syntax(format!("invalid JSON: {e}")))
}

struct EntriesSeed<'p> {
    path: &'p Path,
    meter: &'p Meter,
    refused: &'p RefCell<Option<Error>>,
}

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = RawEntries<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            // The slices, a key copied when it held escapes, and its slot in the set that
            // finds duplicates.
            let copied = match &key {
                Cow::Owned(k) => k.len() as u64,
                Cow::Borrowed(_) => 0,
            };
            let bytes = HEADER_ENTRY_BYTES.saturating_add(copied);
            if let Err(e) = self
                .meter
                .hold(self.path, bytes, || "the header's entries".into())
            {
                *self.refused.borrow_mut() = Some(e);
                return Err(serde::de::Error::custom("memory budget"));
            }
            out.push((key, value));
        }
        Ok(out)
    }
}

/// A key, borrowed from the header unless it holds escapes (serde's own `Cow` always copies).
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Parses and validates the entries: metadata, then entries sorted by data offset (ties,
/// which only zero-size tensors can make, by name) that tile the data region exactly.
fn parse_entries(
    path: &Path,
    raw: RawEntries<'_>,
    meter: &Meter,
) -> Result<(BTreeMap<String, String>, Vec<Entry>)> {
    let syntax = |detail: String| Error::HeaderSyntax {
        path: path.to_owned(),
        detail,
    };
    let mut seen = HashSet::with_capacity(raw.len());
    if let Some((name, _)) = raw.iter().find(|(name, _)| !seen.insert(name.as_ref())) {
        return Err(Error::DuplicateTensor {
            path: path.to_owned(),
            name: name.clone().into_owned(),
        });
    }
    drop(seen);

    let mut metadata = BTreeMap::new();
    let mut entries = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        if name == METADATA_KEY {
            metadata = serde_json::from_str(value.get())
                .map_err(|e| syntax(format!("{METADATA_KEY} must map strings to strings: {e}")))?;
        } else {
            // Charged before it is built: the entry itself, and the layers it becomes.
            let beyond = std::mem::size_of::<Entry>() + name.len();
            meter.hold_tensor(path, beyond)?;
            entries.push(parse_entry(path, name, value.get())?);
        }
    }
    entries.sort_unstable_by(|a, b| (a.start, a.end, &a.name).cmp(&(b.start, b.end, &b.name)));
    check_tiling(path, &entries)?;
    Ok((metadata, entries))
}

/// One tensor's entry: a known dtype, a shape, and offsets spanning exactly its bytes.
fn parse_entry(path: &Path, name: Cow<'_, str>, json: &str) -> Result<Entry> {
    let invalid = |detail: String| Error::InvalidTensor {
        path: path.to_owned(),
        tensor: name.as_ref().to_owned(),
        detail,
    };
    let raw: RawEntry = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    let dtype = DType::from_safetensors_code(&raw.dtype)
        .ok_or_else(|| invalid(format!("unknown dtype '{}'", raw.dtype)))?;
    let layout = Layout::contiguous(&raw.shape).map_err(|e| invalid(e.to_string()))?;
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
        name: Arc::from(name.as_ref()),
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
            let other = previous.map_or("", |p| &*p.name);
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
            tensor: entry.name.to_string(),
            detail: problem,
        });
    }
    Ok(())
}

/// Demands that the `safetensors` crate's reading of the same bytes agrees, entry for entry.
/// The reading is dropped on return, before any tensor is built.
fn cross_check_with_crate(
    path: &Path,
    crate_reading: std::result::Result<safetensors::SafeTensors<'_>, safetensors::SafeTensorError>,
    bytes: &[u8],
    data_start: u64,
    entries: &[Entry],
) -> Result<()> {
    let rejected = |detail: String| Error::SafetensorsRejected {
        path: path.to_owned(),
        detail,
    };
    let reading = crate_reading.map_err(|e| rejected(format!("{e:?}")))?;
    if reading.len() != entries.len() {
        return Err(rejected(format!(
            "the crate reads {} tensors, tensorplay {}",
            reading.len(),
            entries.len()
        )));
    }
    let base = bytes.as_ptr() as u64;
    // Dtypes repeat: the crate's code is translated once per distinct dtype, not per tensor.
    let mut last: Option<(safetensors::Dtype, Option<DType>)> = None;
    for entry in entries {
        let agrees = reading.tensor(&entry.name).is_ok_and(|view| {
            let dtype = match last {
                Some((code, ours)) if code == view.dtype() => ours,
                _ => {
                    let ours = serde_json::to_value(view.dtype())
                        .ok()
                        .as_ref()
                        .and_then(|c| c.as_str())
                        .and_then(DType::from_safetensors_code);
                    last = Some((view.dtype(), ours));
                    ours
                }
            };
            // The view borrows the file's bytes: its place in them is the crate's offsets.
            let start = (view.data().as_ptr() as u64)
                .checked_sub(base)
                .and_then(|at| at.checked_sub(data_start));
            let offsets = start.map(|s| (s, s + view.data().len() as u64));
            dtype == Some(entry.dtype)
                && view
                    .shape()
                    .iter()
                    .map(|&s| s as u64)
                    .eq(entry.layout.sizes().iter().copied())
                && offsets == Some((entry.start, entry.end))
        });
        if !agrees {
            return Err(rejected(format!(
                "the crate reads tensor '{}' differently",
                entry.name
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
        crate::load::read_buffer_as(
            crate::load::Sniffed::Safetensors,
            &buffer,
            Default::default(),
        )
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
