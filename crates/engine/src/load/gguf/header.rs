//! Everything of a GGUF file before its data section: the header, the metadata key/values and
//! the tensor infos, read as gguf-py's `GGUFReader` reads them. Every count and length is
//! checked against the bytes left before anything is read by it, and nothing is allocated
//! from a number in the file: what is kept (keys, value summaries, tensor infos) grows as it
//! is read, each entry charged to the read's memory budget.

use super::types::{ggml_type, GgmlType, ValueType};
use super::Problem;
use crate::chat_template::ChatTemplate;
use crate::error::clip;
use crate::load::limits::Meter;
use crate::HostBuffer;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// `GGUF_DEFAULT_ALIGNMENT`: the data section's alignment when `general.alignment` is absent.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;

/// The key that sets the alignment, a `uint32` power of two.
const ALIGNMENT_KEY: &str = "general.alignment";

/// Versions gguf-py reads (`READER_SUPPORTED_VERSIONS`); ggml reads the same two.
const VERSIONS: [u32; 2] = [2, 3];

/// The fewest bytes a key/value takes: its key's length, its value type and a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;

/// The fewest bytes a tensor info takes: its name's length, `n_dims`, type and offset.
const MIN_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// How deep arrays of arrays may nest. ggml reads none; gguf-py recurses once per level, so
/// Python's recursion limit refuses files near a thousand levels; no file nests past a few.
const MAX_NESTING: u32 = 64;

/// A string value shown whole in the metadata up to this many bytes; longer ones (a chat
/// template) by their size only.
const SHOWN_STRING_BYTES: usize = 64;

/// The key of the default chat template; named ones are `tokenizer.chat_template.<name>`
/// (gguf-py's `Keys.Tokenizer.CHAT_TEMPLATE` and `CHAT_TEMPLATE_N`, llama.cpp's
/// `LLM_KV_TOKENIZER_CHAT_TEMPLATE`).
const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// What each metadata entry holds beyond its key and summary: the map's node, and a slot in
/// nothing else (keys are found twice through the map itself).
const METADATA_ENTRY_BYTES: u64 = 96;

/// What each tensor info holds while the layers are built, beyond its name and dimensions,
/// with its slot in the set that finds duplicate names.
const INFO_BYTES: u64 = std::mem::size_of::<TensorInfo>() as u64 + 32;

/// One tensor info, as stored.
#[derive(Debug)]
pub(crate) struct TensorInfo {
    pub name: String,
    /// Innermost first, as GGUF stores them (gguf-py's `ReaderTensor.shape`).
    pub dims: Vec<u64>,
    pub ggml: GgmlType,
    /// From the start of the data section.
    pub offset: u64,
}

/// A file's header, metadata and tensor infos.
#[derive(Debug)]
pub(crate) struct Header {
    /// The file's numbers are big-endian (gguf-py's `byte_order == 'S'` on a little-endian host).
    pub big_endian: bool,
    pub alignment: u64,
    /// Where the data section starts: the end of the tensor infos, padded to `alignment`.
    pub data_start: u64,
    /// gguf-py's `fields`, by key: the header's three (`GGUF.version`, `GGUF.tensor_count`,
    /// `GGUF.kv_count`) and each key/value, summarised (`summary`).
    pub metadata: BTreeMap<String, String>,
    /// The string values of the chat-template keys, in file order, kept whole.
    pub chat_templates: Vec<ChatTemplate>,
    pub tensors: Vec<TensorInfo>,
}

/// One key/value as read: its key, its value's summary, the alignment it sets if it is
/// `general.alignment`, and its whole bytes if it is a chat template.
struct Kv<'a> {
    key: String,
    summary: String,
    alignment: Option<u64>,
    template: Option<&'a [u8]>,
}

/// Reads through a file's bytes in its byte order; every read is checked against the end.
struct Cursor<'a> {
    /// Asked for what is read (of a remote object, only that is fetched).
    bytes: &'a HostBuffer,
    pos: usize,
    big: bool,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        self.bytes.len().saturating_sub(self.pos as u64)
    }

    /// The next `n` bytes, or `None` when fewer are left.
    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.pos.checked_add(n)?;
        let taken = self.bytes.range(self.pos as u64..end as u64).ok()?;
        if taken.len() != n {
            return None;
        }
        self.pos = end;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64)?);
        if self.big {
            out.reverse();
        }
        Some(out)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Reads the header, metadata and tensor infos of `bytes`, charging what is kept to `meter`.
/// A byte a remote object could not fetch reads as the file's end; `files::checked` then
/// reports the fetch instead.
pub(crate) fn read(path: &Path, bytes: &HostBuffer, meter: &Meter) -> Result<Header, Problem> {
    let len = bytes.len();
    let short =
        |what: &str| Problem::new("header", format!("the {len}-byte file ends inside {what}"));
    if bytes.range(0..4).ok() != Some(super::MAGIC) {
        return Err(Problem::new("header", "does not begin with the magic GGUF"));
    }
    let mut cursor = Cursor {
        bytes,
        pos: 4,
        big: false,
    };
    let raw = cursor.u32().ok_or_else(|| short("the version"))?;
    // As gguf-py and ggml tell the byte order: a version read with its low 16 bits zero is
    // (probably) one written in the other order.
    let big_endian = raw & 0xffff == 0;
    let version = if big_endian { raw.swap_bytes() } else { raw };
    if !VERSIONS.contains(&version) {
        return Err(Problem::new(
            "header",
            format!("version {version} is not one gguf-py or ggml reads (2, 3)"),
        ));
    }
    cursor.big = big_endian;
    let tensor_count = cursor.u64().ok_or_else(|| short("the tensor count"))?;
    let kv_count = cursor.u64().ok_or_else(|| short("the key/value count"))?;
    check_count(&cursor, kv_count, MIN_KV_BYTES, "kv_count", "key/values")?;

    let mut metadata = BTreeMap::new();
    let header_fields = [
        ("GGUF.version", version.to_string()),
        ("GGUF.tensor_count", tensor_count.to_string()),
        ("GGUF.kv_count", kv_count.to_string()),
    ];
    for (key, value) in header_fields {
        hold_entry(path, meter, key, &value)?;
        metadata.insert(key.to_owned(), value);
    }
    let mut alignment = None;
    let mut chat_templates = Vec::new();
    for index in 0..kv_count {
        let Kv {
            key,
            summary,
            alignment: aligned,
            template,
        } = read_kv(&mut cursor, index)?;
        if metadata.contains_key(&key) {
            return Err(Problem::new(
                format!("metadata key '{}'", clip(&key)),
                "is set twice: gguf-py refuses the file (KeyError) and ggml too",
            ));
        }
        if aligned.is_some() {
            alignment = aligned;
        }
        hold_entry(path, meter, &key, &summary)?;
        if let Some(source) = template {
            meter
                .hold(path, source.len() as u64, || "a chat template".to_owned())
                .map_err(Problem::Budget)?;
            chat_templates.push(ChatTemplate {
                location: Some(key.clone()),
                source: source.to_vec(),
            });
        }
        metadata.insert(key, summary);
    }
    let alignment = alignment.unwrap_or(DEFAULT_ALIGNMENT);

    check_count(
        &cursor,
        tensor_count,
        MIN_INFO_BYTES,
        "tensor_count",
        "tensor infos",
    )?;
    let mut tensors = Vec::new();
    for index in 0..tensor_count {
        let info = read_info(&mut cursor, index)?;
        let held = INFO_BYTES
            .saturating_add(info.name.len() as u64)
            .saturating_add(8 * info.dims.len() as u64);
        meter
            .hold_tensors(path, 1, held, 0)
            .map_err(Problem::Budget)?;
        tensors.push(info);
    }
    let mut seen = HashSet::with_capacity(tensors.len());
    if let Some(twice) = tensors.iter().find(|t| !seen.insert(t.name.as_str())) {
        return Err(Problem::new(
            format!("tensor info '{}'", clip(&twice.name)),
            "the name is given to two tensors: gguf-py refuses the file and ggml too",
        ));
    }
    let end = cursor.pos as u64;
    let data_start = end
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| Problem::new("header", "the data section's start overflows 64 bits"))?;
    Ok(Header {
        big_endian,
        alignment,
        data_start,
        metadata,
        chat_templates,
        tensors,
    })
}

/// Refuses a count of entries of at least `min` bytes each that the bytes left cannot hold.
fn check_count(
    cursor: &Cursor<'_>,
    count: u64,
    min: u64,
    field: &str,
    what: &str,
) -> Result<(), Problem> {
    let left = cursor.left();
    if count.checked_mul(min).is_none_or(|needed| needed > left) {
        return Err(Problem::new(
            "header",
            format!(
                "{field} {count} is more {what} than the {left} bytes after it hold (each takes \
                 at least {min} bytes)"
            ),
        ));
    }
    Ok(())
}

fn hold_entry(path: &Path, meter: &Meter, key: &str, summary: &str) -> Result<(), Problem> {
    let bytes = METADATA_ENTRY_BYTES
        .saturating_add(key.len() as u64)
        .saturating_add(summary.len() as u64);
    meter
        .hold(path, bytes, || "the GGUF metadata".to_owned())
        .map_err(Problem::Budget)
}

/// A string: its length, then its bytes.
fn read_bytes<'a>(cursor: &mut Cursor<'a>) -> Result<&'a [u8], String> {
    let at = cursor.pos;
    let len = cursor
        .u64()
        .ok_or_else(|| format!("the file ends inside a string's length at byte {at}"))?;
    cursor.take(len).ok_or_else(|| {
        format!(
            "a string of {len} bytes at byte {at} runs past the end of the file ({} bytes \
             left)",
            cursor.left()
        )
    })
}

/// A key or tensor name: gguf-py decodes them as UTF-8, strictly.
fn read_name(cursor: &mut Cursor<'_>) -> Result<String, String> {
    let at = cursor.pos;
    let raw = read_bytes(cursor)?;
    std::str::from_utf8(raw).map(str::to_owned).map_err(|e| {
        format!(
            "the name at byte {at} is not UTF-8 (byte {} of it): gguf-py refuses it",
            e.valid_up_to()
        )
    })
}

/// Whether `key` holds a chat template: the default one or a named one.
fn is_chat_template(key: &str) -> bool {
    key.strip_prefix(CHAT_TEMPLATE_KEY)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// One key/value as read.
fn read_kv<'a>(cursor: &mut Cursor<'a>, index: u64) -> Result<Kv<'a>, Problem> {
    let key = read_name(cursor).map_err(|e| Problem::new(format!("metadata key {index}"), e))?;
    let part = || format!("metadata key '{}'", clip(&key));
    let raw = cursor
        .u32()
        .ok_or_else(|| Problem::new(part(), "the file ends inside its value type"))?;
    let ty = value_type(raw).map_err(|e| Problem::new(part(), e))?;
    let start = cursor.pos;
    let summary = read_value(cursor, ty, 0).map_err(|e| Problem::new(part(), e))?;
    let mut alignment = None;
    if key == ALIGNMENT_KEY {
        // gguf-py takes the alignment only from a uint32 (ggml asserts as much).
        if ty != ValueType::U32 {
            return Err(Problem::new(
                part(),
                format!(
                    "has type {}, not uint32: gguf-py refuses the file",
                    ty.name()
                ),
            ));
        }
        let mut value = Cursor {
            bytes: cursor.bytes,
            pos: start,
            big: cursor.big,
        };
        let align = value.u32().map(u64::from).unwrap_or(0);
        if !align.is_power_of_two() {
            return Err(Problem::new(
                part(),
                format!("{align} is not a power of two: gguf-py and ggml refuse the file"),
            ));
        }
        alignment = Some(align);
    }
    // Only a string is a template llama.cpp renders (it reads the key as a string); the value
    // was read once already, so reading it again from its start cannot fail.
    let template = match ty == ValueType::String && is_chat_template(&key) {
        true => read_bytes(&mut Cursor {
            bytes: cursor.bytes,
            pos: start,
            big: cursor.big,
        })
        .ok(),
        false => None,
    };
    Ok(Kv {
        key,
        summary,
        alignment,
        template,
    })
}

fn value_type(raw: u32) -> Result<ValueType, String> {
    ValueType::from_id(raw).ok_or_else(|| {
        format!("value type {raw} is not a GGUF value type (0 to 12): gguf-py and ggml refuse it")
    })
}

/// Reads one value of type `ty`; returns what the metadata shows of it: a number, a short
/// string quoted, a long string's size, an array's length and element type. Never a long
/// string itself: a chat template is data, shown by its size.
fn read_value(cursor: &mut Cursor<'_>, ty: ValueType, depth: u32) -> Result<String, String> {
    let at = cursor.pos;
    let ends = || format!("the file ends inside its {} value at byte {at}", ty.name());
    let shown = match ty {
        ValueType::U8 => cursor
            .array::<1>()
            .map(|b| u8::from_le_bytes(b).to_string()),
        ValueType::I8 => cursor
            .array::<1>()
            .map(|b| i8::from_le_bytes(b).to_string()),
        ValueType::Bool => cursor.array::<1>().map(|[b]| (b != 0).to_string()),
        ValueType::U16 => cursor.array().map(|b| u16::from_le_bytes(b).to_string()),
        ValueType::I16 => cursor.array().map(|b| i16::from_le_bytes(b).to_string()),
        ValueType::U32 => cursor.array().map(|b| u32::from_le_bytes(b).to_string()),
        ValueType::I32 => cursor.array().map(|b| i32::from_le_bytes(b).to_string()),
        ValueType::F32 => cursor.array().map(|b| f32::from_le_bytes(b).to_string()),
        ValueType::U64 => cursor.array().map(|b| u64::from_le_bytes(b).to_string()),
        ValueType::I64 => cursor.array().map(|b| i64::from_le_bytes(b).to_string()),
        ValueType::F64 => cursor.array().map(|b| f64::from_le_bytes(b).to_string()),
        ValueType::String => {
            let raw = read_bytes(cursor)?;
            return Ok(match std::str::from_utf8(raw) {
                Ok(text) if raw.len() <= SHOWN_STRING_BYTES => {
                    serde_json::to_string(text).unwrap_or_default()
                }
                _ => format!("string of {} bytes", raw.len()),
            });
        }
        ValueType::Array => {
            let (element, count) = skip_array(cursor, depth)?;
            return Ok(format!("array of {count} {}", element.name()));
        }
    };
    shown.ok_or_else(ends)
}

/// Reads past an array (element type, count, elements), its count checked against the bytes
/// left before any element is read; returns its element type and count.
fn skip_array(cursor: &mut Cursor<'_>, depth: u32) -> Result<(ValueType, u64), String> {
    let at = cursor.pos;
    if depth >= MAX_NESTING {
        return Err(format!(
            "arrays nest more than {MAX_NESTING} deep at byte {at}: refused unread"
        ));
    }
    let raw = cursor
        .u32()
        .ok_or_else(|| format!("the file ends inside an array's element type at byte {at}"))?;
    // Refused even in an empty array, which gguf-py never types but ggml refuses.
    let element = value_type(raw)?;
    let count = cursor
        .u64()
        .ok_or_else(|| format!("the file ends inside an array's length at byte {at}"))?;
    let left = cursor.left();
    if count
        .checked_mul(element.min_size())
        .is_none_or(|n| n > left)
    {
        return Err(format!(
            "an array of {count} {} at byte {at} is more than the {left} bytes left hold",
            element.name()
        ));
    }
    match element.size() {
        // Checked above: fixed-size elements take exactly count × size.
        Some(size) => {
            cursor.take(count * size);
        }
        None => {
            for _ in 0..count {
                match element {
                    ValueType::Array => {
                        skip_array(cursor, depth + 1)?;
                    }
                    _ => {
                        read_bytes(cursor)?;
                    }
                }
            }
        }
    }
    Ok((element, count))
}

/// One tensor info: name, `n_dims`, dims (innermost first), GGML type, offset.
fn read_info(cursor: &mut Cursor<'_>, index: u64) -> Result<TensorInfo, Problem> {
    let name = read_name(cursor).map_err(|e| Problem::new(format!("tensor info {index}"), e))?;
    let part = || format!("tensor info '{}'", clip(&name));
    let ends = |what: &str| Problem::new(part(), format!("the file ends inside its {what}"));
    let n_dims = cursor.u32().ok_or_else(|| ends("n_dims"))?;
    let raw = cursor
        .take(u64::from(n_dims) * 8)
        .ok_or_else(|| ends("dimensions"))?;
    let dims: Vec<u64> = raw
        .chunks_exact(8)
        .map(|d| {
            let mut b = [0u8; 8];
            b.copy_from_slice(d);
            if cursor.big {
                b.reverse();
            }
            u64::from_le_bytes(b)
        })
        .collect();
    let raw = cursor.u32().ok_or_else(|| ends("type"))?;
    let ggml = ggml_type(raw).ok_or_else(|| {
        Problem::new(
            part(),
            format!("GGML type {raw} is not one gguf-py 0.19 or ggml knows: its size is unknown"),
        )
    })?;
    let offset = cursor.u64().ok_or_else(|| ends("offset"))?;
    Ok(TensorInfo {
        name,
        dims,
        ggml,
        offset,
    })
}
