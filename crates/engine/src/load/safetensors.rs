//! The safetensors reader.
//!
//! tensorplay first applies the format's rules itself, stricter than the `safetensors` crate
//! where the spec is (duplicate names, unknown entry fields, text before the opening brace),
//! so every rejection names the tensor and the bytes at fault. The crate is the authority on
//! what it shares with tensorplay's reading: each entry's dtype is read by the crate's own
//! `Dtype` and must be the dtype tensorplay reads, with the crate's bit width. Its validation
//! (`Metadata::validate`: offsets contiguous from zero, element count × bit width in whole
//! bytes, checked, matching the span) is then implied by tensorplay's own tiling and size
//! checks, the same arithmetic over the same widths, so it is not run again per file: a
//! property test holds the crate's whole-file reading to accepting whatever tensorplay
//! accepts, and a test breaks each shared rule for both to refuse. The rest of an entry the
//! crate reads with the same serde derivation over the same JSON (`shape` as `Vec<usize>`,
//! `data_offsets` as `(usize, usize)`, which are tensorplay's `u64` on the 64-bit targets it
//! builds for; unknown fields the crate skips, tensorplay refuses), so reading the text twice
//! would find nothing.
//! What the crate checks on the whole file only — the length prefix, UTF-8, the JSON object
//! around the entries, `__metadata__` as a map of strings, the data length — tensorplay
//! checks itself, with the same limits.
//!
//! A header is read in one pass, each entry validated as it is met: by a scanner of the
//! plain spelling (`scan.rs`), or by serde_json where the scanner leaves the text to it. Where
//! that pass finds anything amiss it gives up, and the careful reading (the entries split
//! first, then each parsed) names the fault with one precedence whatever the file's order.

mod entries;
mod scan;

use entries::Entries;

use super::in_order;
use super::limits::{Meter, HEADER_ENTRY_BYTES};
use super::sniff::Prefix;
use super::table::{Accepts, FileReader, FileRule, Row};
use super::{NewStorage, Sink, Sniffed};
use crate::error::{Error, Result};
use crate::layout::Dims;
use crate::TensorImpl;
use crate::{DType, DataPtr, Device, Format, HostBuffer, Layout, Tensor};
use hashbrown::HashTable;
use rayon::prelude::*;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::BuildHasher;
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
#[derive(Debug)]
struct Entry {
    name: Arc<str>,
    dtype: DType,
    // The shape alone: the layout (strides and extents, twice the size) is built with the
    // tensor, so a million entries and their tensors never hold both.
    shape: Dims,
    start: u64,
    end: u64,
}

/// `safe_open`'s files, by their header.
pub(crate) const ROW: Row = Row {
    what: "safetensors",
    loader: "safetensors.safe_open",
    extensions: &["safetensors"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::Safetensors),
        accepts: looks_like_safetensors_in,
        read: Some(FileReader {
            read: read_into,
            index: Format::SafetensorsIndex,
            reads_pickle: false,
        }),
    }),
};

/// A plausible header length (below 2^40, so JSON text in those bytes never qualifies)
/// followed by JSON: `{`, or whitespace the reader will then reject with a precise message.
/// Given a file's first bytes: `None` when only more of it can tell.
pub(crate) fn looks_like_safetensors_in(prefix: Prefix<'_>) -> Option<bool> {
    let Some(len_bytes) = prefix.bytes.get(..8) else {
        return prefix.given(8, |_| false);
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(le);
    if n == 0 || n >= 1 << 40 {
        return Some(false);
    }
    Some(prefix.first_non_space(8)? == Some(b'{'))
}

/// Appends the file's tensors and storages (one storage per tensor, as PyTorch's loader
/// makes them, all pointing into the one buffer) and records its `__metadata__`.
///
/// The phases are ordered so their transient memory never adds up: the header's entries
/// as slices of it, then tensorplay's entries, and only then the four layers, a chunk of
/// entries at a time. Each is charged to the meter before it is taken.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = buffer.source();
    let meter = sink.meter();
    let (header, data_start) = split_header(path, buffer)?;
    let (metadata, entries) = match read_at_once(path, header, meter)? {
        Some(parsed) => parsed,
        None => parse_entries(path, split_entries(path, header, meter)?, meter)?,
    };
    check_data_len(buffer, data_start, &entries)?;
    // Read through: its pages (87 MB for a million entries) need not stay resident beside the
    // layers built next; a later read faults them back in from the file.
    buffer.release(0..data_start);
    build_into(buffer, data_start, entries, sink)?;
    sink.set_metadata(metadata);
    Ok(Format::Safetensors)
}

/// The data region must end where the file does.
fn check_data_len(buffer: &HostBuffer, data_start: u64, entries: &Entries) -> Result<()> {
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

/// The four layers of validated entries, written through `sink`: one storage per tensor,
/// built in parallel (each tensor's layers stand alone), a chunk of entries at a time, each
/// chunk freed once its layers are made.
fn build_into(
    buffer: &Arc<HostBuffer>,
    data_start: u64,
    entries: Entries,
    sink: &mut Sink<'_>,
) -> Result<()> {
    sink.reserve_tensors(entries.len());
    sink.reserve_storages(entries.len());
    for chunk in entries.into_chunks() {
        build_chunk(buffer, data_start, chunk, sink)?;
    }
    Ok(())
}

/// One chunk's layers.
fn build_chunk(
    buffer: &Arc<HostBuffer>,
    data_start: u64,
    entries: Vec<Entry>,
    sink: &mut Sink<'_>,
) -> Result<()> {
    // Every storage holds the file's buffer: its count is taken here, on one thread, where
    // two threads taking it at once contend for one cache line (a million storages: a fifth
    // of the audit's CPU).
    let mut data_ptrs = Vec::with_capacity(entries.len());
    for entry in &entries {
        // Tiling and the data length put every offset inside the file: no sum overflows.
        let range = (data_start + entry.start)..(data_start + entry.end);
        data_ptrs.push(DataPtr::host(Arc::clone(buffer), range)?);
    }
    let storages = sink.add_storages(entries.par_iter().zip(data_ptrs), |(entry, data_ptr)| {
        Ok(NewStorage {
            key: Arc::clone(&entry.name),
            dtype: torch_dtype(entry.dtype),
            nbytes: entry.end - entry.start,
            location: "cpu".into(),
            data_ptr,
            saved_alone: false,
        })
    })?;
    let tensors = in_order::try_map(entries.into_par_iter().zip(storages), |(entry, storage)| {
        let (dtype, shape) = as_torch_reads(entry.dtype, entry.shape);
        let layout = Layout::contiguous(&shape).map_err(|e| Error::InvalidTensor {
            path: buffer.source().to_owned(),
            tensor: entry.name.to_string(),
            detail: e.to_string(),
        })?;
        let imp = TensorImpl::new(layout, dtype, Device::Cpu, false, false, storage);
        Ok(Tensor::new(entry.name, Arc::new(imp)))
    })?;
    sink.add_tensors(tensors);
    Ok(())
}

/// An entry's dtype and shape as `safe_open(framework="pt")` gives them: F4 as torch's
/// `float4_e2m1fn_x2`, two values a byte, so the last dimension halves (checked even when the
/// entry was parsed). Every other code is read as written.
fn as_torch_reads(dtype: DType, mut shape: Dims) -> (DType, Dims) {
    if dtype == DType::Float4E2m1fn {
        if let Some(last) = shape.last_mut() {
            *last /= 2;
        }
    }
    (torch_dtype(dtype), shape)
}

/// The dtype torch reads a safetensors dtype as: `F4` packs two values a byte.
fn torch_dtype(dtype: DType) -> DType {
    match dtype {
        DType::Float4E2m1fn => DType::Float4E2m1fnX2,
        other => other,
    }
}

/// The header text and the file offset where tensor data begins.
/// The header's text and where the data begins: only these bytes are read (of a remote
/// object, fetched).
fn split_header<'a>(path: &Path, buffer: &'a HostBuffer) -> Result<(&'a str, u64)> {
    let file_len = buffer.len();
    let Some(len_bytes) = buffer.range(0..8)?.get(..8) else {
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
    if data_start > file_len {
        return Err(Error::HeaderBeyondFile {
            path: path.to_owned(),
            declared,
            file_len,
        });
    }
    let header = buffer.range(8..data_start)?;
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
    let seed = EntriesSeed(Charge::new(path, meter, header, &refused));
    walk_header(header, seed, &refused)?.map_err(|e| syntax(format!("invalid JSON: {e}")))
}

/// What both readings of a header share: each key charged to the meter as it is met, and the
/// room to reserve for the entries.
struct Charge<'p> {
    path: &'p Path,
    meter: &'p Meter,
    refused: &'p RefCell<Option<Error>>,
    room: usize,
}

impl<'p> Charge<'p> {
    fn new(
        path: &'p Path,
        meter: &'p Meter,
        header: &str,
        refused: &'p RefCell<Option<Error>>,
    ) -> Self {
        // Room for the entries the header can hold (the shortest is over 50 bytes), within
        // what the budget lets entries take: the list is not regrown and copied a million
        // times over.
        let room = (meter.limits.max_memory.saturating_sub(meter.held()) / HEADER_ENTRY_BYTES)
            .min(header.len() as u64 / 50);
        Charge {
            path,
            meter,
            refused,
            room: usize::try_from(room).unwrap_or(0),
        }
    }

    /// Charges one entry: its slices, a key copied when it held escapes, and its slot in the
    /// set that finds duplicates. A refusal is kept for [`walk_header`] to return.
    #[allow(clippy::ptr_arg)] // owned or borrowed is what is charged
    fn key<E: serde::de::Error>(&self, key: &Cow<'_, str>) -> std::result::Result<(), E> {
        self.hold(key).map_err(|e| {
            *self.refused.borrow_mut() = Some(e);
            E::custom("memory budget")
        })
    }

    /// [`Charge::key`], the refusal returned.
    #[allow(clippy::ptr_arg)] // owned or borrowed is what is charged
    fn hold(&self, key: &Cow<'_, str>) -> Result<()> {
        let copied = match key {
            Cow::Owned(k) => k.len() as u64,
            Cow::Borrowed(_) => 0,
        };
        let bytes = HEADER_ENTRY_BYTES.saturating_add(copied);
        self.meter
            .hold(self.path, bytes, || "the header's entries".into())
    }
}

/// The header deserialised as one JSON object by `seed`, with nothing but whitespace after
/// it; a refusal over the budget (kept in `refused` by the seed's [`Charge`]) is the error,
/// anything else the JSON's.
fn walk_header<'h, V: Visitor<'h>>(
    header: &'h str,
    seed: V,
    refused: &RefCell<Option<Error>>,
) -> Result<std::result::Result<V::Value, serde_json::Error>> {
    let mut de = serde_json::Deserializer::from_str(header);
    let parsed = de
        .deserialize_map(seed)
        .and_then(|value| de.end().map(|()| value));
    match refused.take() {
        Some(e) => Err(e),
        None => Ok(parsed),
    }
}

/// The careful reading's first step: the entries as slices of the header.
struct EntriesSeed<'p>(Charge<'p>);

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = RawEntries<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(self.0.room);
        while let Some(Key(key)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            self.0.key(&key)?;
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

/// The `__metadata__` map and the entries.
type Parsed = (BTreeMap<String, String>, Entries);

/// The header in one pass, each entry validated as it is met and charged as the careful
/// reading charges it; `None` when anything is amiss, for the careful reading to name (what
/// this pass charged given back first). Only a refusal over the budget is returned as found.
fn read_at_once(path: &Path, header: &str, meter: &Meter) -> Result<Option<Parsed>> {
    // serde_json steps over leading whitespace, which the format refuses.
    if !header.starts_with('{') {
        return Ok(None);
    }
    let held = meter.held();
    let given_up = || meter.release(meter.held().saturating_sub(held));
    let refused = RefCell::new(None);
    let charge = Charge::new(path, meter, header, &refused);
    let read = match scan_header(header, &charge)? {
        Some(read) => read,
        None => {
            // A spelling the scanner leaves to serde_json: still read in one pass.
            given_up();
            let Ok(read) = walk_header(header, OnePass(charge), &refused)? else {
                given_up();
                return Ok(None);
            };
            read
        }
    };
    let (metadata, mut entries) = read;
    let names = entries
        .iter()
        .fold(0u64, |acc, e| acc.saturating_add(e.name.len() as u64));
    let each = std::mem::size_of::<Entry>() as u64;
    meter.hold_tensors(path, entries.len() as u64, each, names)?;
    let name_at = |i: u32| entries.get(i as usize).map(|e| &*e.name);
    let names = entries.iter().map(|e| &*e.name);
    if let Some(name) = first_duplicate(path, entries.len(), names, name_at)? {
        return Err(Error::DuplicateTensor {
            path: path.to_owned(),
            name: name.to_owned(),
        });
    }
    entries.sort_by_offset();
    check_tiling(path, entries.iter())?;
    Ok(Some((metadata.unwrap_or_default(), entries)))
}

/// The one-pass reading: each entry validated as it is met.
struct OnePass<'p>(Charge<'p>);

/// What the one-pass reading finds: the `__metadata__` map if any, and the entries.
type OnePassRead = (Option<BTreeMap<String, String>>, Entries);

impl<'de> Visitor<'de> for OnePass<'_> {
    type Value = OnePassRead;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let amiss = || serde::de::Error::custom("for the careful reading");
        let mut metadata = None;
        let mut entries = Entries::with_room(self.0.room);
        let mut reader = EntryReader::default();
        while let Some(Key(key)) = map.next_key()? {
            self.0.key(&key)?;
            if key == METADATA_KEY {
                if metadata.is_some() {
                    return Err(amiss());
                }
                metadata = Some(map.next_value::<BTreeMap<String, String>>()?);
                continue;
            }
            let raw: RawEntry<'de> = map.next_value()?;
            let entry = reader.read(self.0.path, &key, raw).ok_or_else(amiss)?;
            entries.push(entry);
        }
        Ok((metadata, entries))
    }
}

/// The one-pass reading through [`scan::Scanner`]: `None` where the scanner gives up or an
/// entry is amiss (what was charged is then given back by the caller). Only a refusal over
/// the budget is returned as found.
fn scan_header(header: &str, charge: &Charge<'_>) -> Result<Option<OnePassRead>> {
    let Ok(mut scanner) = scan::Scanner::new(header) else {
        return Ok(None);
    };
    let mut metadata = None;
    let mut entries = Entries::with_room(charge.room);
    let mut reader = EntryReader::default();
    loop {
        let key = match scanner.next_key() {
            Ok(Some(key)) => key,
            Ok(None) => return Ok(Some((metadata, entries))),
            Err(scan::GiveUp) => return Ok(None),
        };
        charge.hold(&Cow::Borrowed(key))?;
        if key == METADATA_KEY {
            if metadata.is_some() {
                return Ok(None);
            }
            let Ok(map) = scanner.metadata() else {
                return Ok(None);
            };
            metadata = Some(map);
            continue;
        }
        let Ok(raw) = scanner.entry() else {
            return Ok(None);
        };
        let Some(entry) = reader.read(charge.path, key, raw) else {
            return Ok(None);
        };
        entries.push(entry);
    }
}

/// Validates the one-pass reading's entries as they are met; dtype codes repeat, so each
/// distinct one is looked up once.
#[derive(Default)]
struct EntryReader<'h> {
    last: Option<(&'h str, DType)>,
}

impl<'h> EntryReader<'h> {
    /// The entry, or `None` when anything is amiss.
    fn read(&mut self, path: &Path, key: &str, raw: RawEntry<'h>) -> Option<Entry> {
        let dtype = match (self.last, &raw.dtype) {
            (Some((code, ours)), Cow::Borrowed(now)) if code == *now => Ok(ours),
            _ => dtype_of(path, key, &raw.dtype),
        };
        let dtype = dtype.ok()?;
        if let Cow::Borrowed(code) = raw.dtype {
            self.last = Some((code, dtype));
        }
        validate(path, key, raw, dtype).ok()
    }
}

/// Parses and validates the entries: metadata, then entries sorted by data offset (ties,
/// which only zero-size tensors can make, by name) that tile the data region exactly.
///
/// Every entry is charged before any is parsed; then the entries are parsed in parallel
/// while the names are checked for duplicates. Errors keep one precedence whatever the
/// timing: a duplicate name, the metadata, then the first bad entry in file order.
fn parse_entries(path: &Path, raw: RawEntries<'_>, meter: &Meter) -> Result<Parsed> {
    let syntax = |detail: String| Error::HeaderSyntax {
        path: path.to_owned(),
        detail,
    };
    // The tensors' entries: all but the metadata's (a second one is a duplicate name).
    let meta_at = raw.iter().position(|(name, _)| name == METADATA_KEY);
    let (before, after) = match meta_at {
        Some(i) => (
            raw.get(..i).unwrap_or_default(),
            raw.get(i + 1..).unwrap_or_default(),
        ),
        None => (&raw[..], &[][..]),
    };
    // Charged before they are built: each entry itself, and the layers it becomes.
    let names = before
        .iter()
        .chain(after)
        .fold(0u64, |acc, (name, _)| acc.saturating_add(name.len() as u64));
    let count = (before.len() + after.len()) as u64;
    meter.hold_tensors(path, count, std::mem::size_of::<Entry>() as u64, names)?;

    // In order and indexed, so the list is written in place, not joined from pieces.
    let (duplicate, parsed) = rayon::join(
        || {
            let names = raw.iter().map(|(name, _)| name.as_ref());
            first_duplicate(path, raw.len(), names, |i| {
                raw.get(i as usize).map(|(name, _)| name.as_ref())
            })
        },
        || {
            before
                .par_iter()
                .chain(after)
                .map(|(name, value)| parse_entry(path, name, value.get()).ok())
                .collect::<Vec<_>>()
        },
    );
    if let Some(name) = duplicate? {
        return Err(Error::DuplicateTensor {
            path: path.to_owned(),
            name: name.to_owned(),
        });
    }
    let mut metadata = BTreeMap::new();
    if let Some((_, value)) = meta_at.and_then(|i| raw.get(i)) {
        metadata = serde_json::from_str(value.get())
            .map_err(|e| syntax(format!("{METADATA_KEY} must map strings to strings: {e}")))?;
    }
    if parsed.iter().any(Option::is_none) {
        // The first bad entry in file order is the one reported.
        let first = before
            .iter()
            .chain(after)
            .find_map(|(name, value)| parse_entry(path, name, value.get()).err());
        return Err(first.unwrap_or_else(|| syntax("an entry could not be read".into())));
    }
    let mut entries = Entries::from(in_order::somes(parsed));
    drop(raw);
    entries.sort_by_offset();
    check_tiling(path, entries.iter())?;
    Ok((metadata, entries))
}

/// The first name met twice, in order, of `count` names; `name_at` gives each by its index.
///
/// The set holds each name's index (4 bytes), not the name (16): a million names' set is
/// 10 MB of fresh pages rather than 34. `name_at` is asked only where two hashes agree.
fn first_duplicate<'n>(
    path: &Path,
    count: usize,
    names: impl Iterator<Item = &'n str>,
    name_at: impl Fn(u32) -> Option<&'n str>,
) -> Result<Option<&'n str>> {
    // A header is at most 100 MB (`MAX_HEADER_LEN`) and an entry over 50 bytes, so more
    // names than a `u32` counts would be tensorplay's bug: refused, not left unchecked.
    if u32::try_from(count).is_err() {
        return Err(Error::Internal {
            path: path.to_owned(),
            detail: format!("{count} tensor names are more than a header can hold"),
        });
    }
    let hasher = foldhash::quality::RandomState::default();
    let mut seen: HashTable<u32> = HashTable::with_capacity(count);
    let rehash = |&i: &u32| name_at(i).map_or(0, |name| hasher.hash_one(name));
    for (i, name) in (0..=u32::MAX).zip(names.take(count)) {
        let hash = hasher.hash_one(name);
        if seen.find(hash, |&j| name_at(j) == Some(name)).is_some() {
            return Ok(Some(name));
        }
        seen.insert_unique(hash, i, rehash);
    }
    Ok(None)
}

/// One tensor's entry: a known dtype, a shape, and offsets spanning exactly its bytes.
fn parse_entry(path: &Path, name: &str, json: &str) -> Result<Entry> {
    let raw: RawEntry = serde_json::from_str(json).map_err(|e| Error::InvalidTensor {
        path: path.to_owned(),
        tensor: name.to_owned(),
        detail: e.to_string(),
    })?;
    let dtype = dtype_of(path, name, &raw.dtype)?;
    validate(path, name, raw, dtype)
}

/// A dtype code as tensorplay reads it: a code tensorplay or the crate's `Dtype` does not
/// know is refused, and the two readings must name one dtype of one bit width (what makes
/// tensorplay's size checks the crate's).
fn dtype_of(path: &Path, name: &str, code: &str) -> Result<DType> {
    let ours = DType::from_safetensors_code(code).ok_or_else(|| Error::InvalidTensor {
        path: path.to_owned(),
        tensor: name.to_owned(),
        detail: format!("unknown dtype '{code}'"),
    })?;
    let rejected = |detail: String| Error::SafetensorsRejected {
        path: path.to_owned(),
        detail: format!("tensor '{name}': {detail}"),
    };
    let theirs = safetensors::Dtype::deserialize(serde::de::value::StrDeserializer::<
        serde::de::value::Error,
    >::new(code))
    .map_err(|e| rejected(e.to_string()))?;
    let named = serde_json::to_value(theirs)
        .ok()
        .as_ref()
        .and_then(|c| c.as_str())
        .and_then(DType::from_safetensors_code);
    if named != Some(ours) || theirs.bitsize() as u64 != ours.bits() {
        return Err(rejected("the crate reads its dtype differently".into()));
    }
    Ok(ours)
}

/// The rest of an entry's rules, its dtype read: a shape, and offsets spanning exactly its
/// bytes.
fn validate(path: &Path, name: &str, raw: RawEntry<'_>, dtype: DType) -> Result<Entry> {
    let invalid = |detail: String| Error::InvalidTensor {
        path: path.to_owned(),
        tensor: name.to_owned(),
        detail,
    };
    let numel = Layout::contiguous_numel(&raw.shape).map_err(|e| invalid(e.to_string()))?;
    let (start, end) = raw.data_offsets;
    let Some(span) = end.checked_sub(start) else {
        return Err(invalid(format!(
            "data_offsets [{start}, {end}] end before they start"
        )));
    };
    let bits = numel
        .checked_mul(dtype.bits())
        .ok_or_else(|| invalid("element count × dtype width overflows".into()))?;
    if !bits.is_multiple_of(8) {
        return Err(invalid(format!(
            "{numel} {dtype} elements take {bits} bits, not a whole number of bytes"
        )));
    }
    if span != bits / 8 {
        return Err(invalid(format!(
            "dtype {dtype} × shape {:?} = {} bytes, but data_offsets [{start}, {end}] span {span}",
            &raw.shape[..],
            bits / 8,
        )));
    }
    if dtype == DType::Float4E2m1fn && raw.shape.last().is_none_or(|d| d % 2 != 0) {
        return Err(invalid(format!(
            "F4 shape {:?}: torch reads F4 as float4_e2m1fn_x2, two values a byte, \
             and needs the last dimension to be even",
            &raw.shape[..]
        )));
    }
    Ok(Entry {
        name: Arc::from(name),
        dtype,
        shape: raw.shape,
        start,
        end,
    })
}

/// Entries sorted by offset must follow one another with neither gap nor overlap.
fn check_tiling<'e>(path: &Path, entries: impl Iterator<Item = &'e Entry>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Checkpoint;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

    fn from_buffer(buffer: Arc<HostBuffer>) -> Result<Checkpoint> {
        crate::load::read_buffer_as(
            crate::load::Sniffed::Format(Format::Safetensors),
            &buffer,
            Default::default(),
        )
    }

    fn file_bytes(header: &str, data_len: usize) -> Vec<u8> {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data_len));
        bytes
    }

    fn file(header: &str, data_len: usize) -> Arc<HostBuffer> {
        HostBuffer::from_vec("t.safetensors", file_bytes(header, data_len))
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
    fn f4_is_read_as_torch_reads_it_two_values_a_byte() {
        let ckpt = from_buffer(file(
            r#"{"x":{"dtype":"F4","shape":[3,4],"data_offsets":[0,6]}}"#,
            6,
        ))
        .unwrap();
        let imp = ckpt.tensors[0].tensor_impl();
        assert_eq!(imp.dtype(), DType::Float4E2m1fnX2);
        assert_eq!(imp.layout().sizes(), [3, 2]);
        assert_eq!(imp.nbytes().unwrap(), 6);
        let e = err(
            r#"{"x":{"dtype":"F4","shape":[0,3],"data_offsets":[0,0]}}"#,
            0,
        );
        assert!(
            e.contains("F4 shape [0, 3]") && e.contains("last dimension"),
            "{e}"
        );
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
    fn the_crate_reads_a_code_as_tensorplay_does_or_the_code_is_refused() {
        // Every code's mapping is dtype.rs's test; here, that the check runs through it.
        let path = Path::new("t.safetensors");
        let codes = ["BOOL", "BF16", "F8_E4M3FNUZ", "F4", "F6_E3M2"];
        for code in codes {
            let ours = dtype_of(path, "x", code).unwrap();
            assert_eq!(Some(ours), DType::from_safetensors_code(code), "{code}");
        }
        let e = dtype_of(path, "x", "F17").unwrap_err().to_string();
        assert!(e.contains("tensor 'x': unknown dtype 'F17'"), "{e}");
    }

    /// Entries of codes both readers know, with shapes from empty to overflowing, tiled by
    /// their sizes, now and then a start or end off by one (a gap, an overlap, a size that
    /// does not match); the file's data ends where the last entry does, or a byte off. A
    /// claim too large to write is given a small span (refused by both, for its size).
    fn tiled_file() -> impl Strategy<Value = Vec<u8>> {
        let code = prop::sample::select(vec![
            "F32", "F16", "BF16", "BOOL", "I64", "U8", "F4", "F6_E3M2",
        ]);
        let dim = prop::sample::select(vec![0u64, 1, 2, 3, 4, 5, 7, 1 << 31, 1 << 62, u64::MAX]);
        let off = prop_oneof![12 => Just(0i64), 1 => Just(-1i64), 1 => Just(1i64)];
        let entry = (
            code,
            prop::collection::vec(dim, 0..4),
            off.clone(),
            off.clone(),
        );
        (prop::collection::vec(entry, 0..6), off).prop_map(|(entries, tail)| {
            let mut header = String::from("{");
            let mut at = 0u64;
            for (i, (code, shape, start_off, end_off)) in entries.iter().enumerate() {
                let bits = DType::from_safetensors_code(code).map_or(8, DType::bits);
                let size = shape
                    .iter()
                    .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                    .and_then(|n| n.checked_mul(bits))
                    .map(|b| b.div_ceil(8))
                    .filter(|&size| size <= 64)
                    .unwrap_or(3);
                let start = at.saturating_add_signed(*start_off);
                let end = (start + size).saturating_add_signed(*end_off);
                at = end;
                let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
                if i > 0 {
                    header.push(',');
                }
                header.push_str(&format!(
                    r#""t{i}":{{"dtype":"{code}","shape":[{}],"data_offsets":[{start},{end}]}}"#,
                    shape.join(",")
                ));
            }
            header.push('}');
            let data = usize::try_from(at.saturating_add_signed(tail)).unwrap_or(0);
            file_bytes(&header, data)
        })
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// What tensorplay accepts the crate's own reading of the whole file accepts (so its
        /// validation need not run again per file), and what the crate refuses tensorplay
        /// refuses.
        #[test]
        fn the_crate_accepts_whatever_tensorplay_accepts(bytes in tiled_file()) {
            let ours = from_buffer(HostBuffer::from_vec("t.safetensors", bytes.clone()));
            let theirs = safetensors::SafeTensors::read_metadata(&bytes);
            if let Err(e) = &theirs {
                prop_assert!(ours.is_err(), "the crate refuses ({e}) what tensorplay accepts");
            }
        }
    }

    /// A header of more entries than one chunk, listed out of offset order: read whole, in
    /// offset order, each tensor over its own storage, numbered in that order across chunks.
    #[test]
    fn a_header_past_one_chunk_is_read_whole_in_offset_order() {
        let n = entries::CHUNK + 3;
        let mut header = String::from(r#"{"__metadata__":{"format":"pt"}"#);
        for i in (0..n).rev() {
            header.push_str(&format!(
                r#","t{i}":{{"dtype":"I16","shape":[1],"data_offsets":[{},{}]}}"#,
                2 * i,
                2 * i + 2
            ));
        }
        header.push('}');
        let ckpt = from_buffer(file(&header, 2 * n)).unwrap();
        assert_eq!((ckpt.tensors.len(), ckpt.storages.len()), (n, n));
        for (i, tensor) in ckpt.tensors.iter().enumerate() {
            let storage = tensor.tensor_impl().storage();
            assert_eq!(tensor.name(), format!("t{i}"));
            assert_eq!(storage.id().index(), i);
            assert!(Arc::ptr_eq(storage, &ckpt.storages[i]), "t{i}");
            let at = (8 + header.len() + 2 * i) as u64;
            match storage.data_ptr().owner() {
                crate::data_ptr::Owner::Host { range, .. } => assert_eq!(range, at..at + 2),
                other => panic!("t{i}: {other:?}"),
            }
        }
    }

    /// A name met again past the first chunk of entries is refused, the first name met twice
    /// named: by the one-pass reading, and by the careful one (which an entry of an unknown
    /// dtype sends the header to, and which reports a duplicate before a bad entry).
    #[test]
    fn a_name_met_again_chunks_later_is_refused_by_either_reading() {
        let n = entries::CHUNK + 3;
        for first_dtype in ["I8", "Q9"] {
            let mut header = String::from("{");
            for i in 0..n {
                // Entry n-2 repeats entry 5's name, entry n-1 entry 7's: entry 5's is named.
                let name = match i {
                    _ if i == n - 2 => 5,
                    _ if i == n - 1 => 7,
                    _ => i,
                };
                let dtype = if i == 0 { first_dtype } else { "I8" };
                header.push_str(&format!(
                    r#"{}"t{name}":{{"dtype":"{dtype}","shape":[1],"data_offsets":[{i},{}]}}"#,
                    if i == 0 { "" } else { "," },
                    i + 1
                ));
            }
            header.push('}');
            let e = err(&header, n);
            assert!(
                e.contains("'t5' is declared more than once"),
                "{first_dtype}: {e}"
            );
        }
    }

    /// More names than the duplicate check's set can index is refused as tensorplay's own
    /// failure, never checked in part and passed.
    #[test]
    fn more_names_than_the_set_indexes_are_refused_not_skipped() {
        let count = u32::MAX as usize + 1;
        let got = first_duplicate(
            Path::new("big.safetensors"),
            count,
            std::iter::empty(),
            |_| None,
        );
        let e = got.expect_err("refused").to_string();
        assert!(
            e.contains("internal error") && e.contains("4294967296 tensor names"),
            "{e}"
        );
    }

    /// The cases the property above must meet both ways: each rule the crate's validation
    /// shares with tensorplay's, broken, is refused by both; kept, accepted by both.
    #[test]
    fn tensorplay_and_the_crate_refuse_the_same_broken_tiling() {
        let entry = |name: &str, code: &str, shape: &str, start: u64, end: u64| {
            format!(
                r#""{name}":{{"dtype":"{code}","shape":[{shape}],"data_offsets":[{start},{end}]}}"#
            )
        };
        let cases = [
            (
                format!(
                    "{{{},{}}}",
                    entry("x", "F16", "2", 0, 4),
                    entry("y", "U8", "1", 4, 5)
                ),
                5,
                true,
            ),
            (
                format!(
                    "{{{},{}}}",
                    entry("x", "F16", "2", 0, 4),
                    entry("y", "U8", "1", 5, 6)
                ),
                6,
                false,
            ),
            (
                format!(
                    "{{{},{}}}",
                    entry("x", "F16", "2", 0, 4),
                    entry("y", "U8", "1", 3, 4)
                ),
                4,
                false,
            ),
            (format!("{{{}}}", entry("x", "F16", "3", 0, 4)), 4, false),
            (
                format!("{{{}}}", entry("x", "F6_E3M2", "3", 0, 3)),
                3,
                false,
            ),
            (format!("{{{}}}", entry("x", "F6_E3M2", "4", 0, 3)), 3, true),
            (
                format!("{{{}}}", entry("x", "I64", "4611686018427387904", 0, 8)),
                8,
                false,
            ),
            (format!("{{{}}}", entry("x", "U8", "0,2,3", 0, 0)), 0, true),
        ];
        for (header, data, valid) in cases {
            let bytes = file_bytes(&header, data);
            let ours = from_buffer(HostBuffer::from_vec("t.safetensors", bytes.clone()));
            let theirs = safetensors::SafeTensors::read_metadata(&bytes);
            assert_eq!(ours.is_ok(), valid, "{header}: {:?}", ours.err());
            assert_eq!(theirs.is_ok(), valid, "{header}: {:?}", theirs.err());
        }
    }

    /// The one-pass reading accepts only what the careful reading accepts, reads it the
    /// same, and gives up on the rest (charging nothing) or names the fault as it does.
    #[test]
    fn one_pass_and_the_careful_reading_agree() {
        let entry = |name: &str, dtype: &str, shape: &str, start: u64, end: u64| {
            format!(
                r#""{name}":{{"dtype":"{dtype}","shape":[{shape}],"data_offsets":[{start},{end}]}}"#
            )
        };
        let headers = [
            format!("{{{}}}", entry("a", "F32", "2", 0, 8)),
            format!(
                r#"{{"__metadata__":{{"k":"v"}},{},{}}}"#,
                entry("b", "I8", "1", 8, 9),
                entry("a", "F32", "2", 0, 8)
            ),
            format!(
                r#"{{{},"__metadata__":{{"k":"v"}}}}"#,
                entry(r"a\u0041", "U8", "1,0", 0, 0)
            ),
            format!(
                "{{{},{}}}",
                entry("a", "F32", "2", 0, 8),
                entry("a", "F32", "2", 8, 16)
            ),
            format!(
                "{{{},{}}}",
                entry("a", "F32", "2", 0, 8),
                entry("b", "F32", "2", 4, 12)
            ),
            format!(
                "{{{},{}}}",
                entry("a", "F32", "2", 0, 8),
                entry("b", "F17", "2", 8, 16)
            ),
            format!(
                "{{{},{}}}",
                entry("a", "F32", "3", 0, 8),
                entry("a", "F32", "2", 8, 16)
            ),
            format!(
                r#"{{"__metadata__":{{"k":1}},{}}}"#,
                entry("a", "F32", "2", 0, 8)
            ),
            format!(
                r#"{{"__metadata__":{{}},"__metadata__":{{}},{}}}"#,
                entry("a", "F32", "2", 0, 8)
            ),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x"#.to_owned(),
            r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#.to_owned(),
            "{}".to_owned(),
            format!(" {{{}}}", entry("a", "F32", "2", 0, 8)),
            format!("{{{}}}\n ", entry("a", "F32", "2", 0, 8)),
            // Spellings the scanner reads, or leaves to serde_json: read alike or refused alike.
            "{ \"a\" :\t{ \"shape\" : [ 2 ] ,\"data_offsets\":[0 , 8],\r\n\"dtype\" : \"F32\" } }\n"
                .to_owned(),
            r#"{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[ ],"data_offsets":[0,4]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[-0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[00,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,16]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2,],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},}"#.to_owned(),
            r#"{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2]}}"#.to_owned(),
            r#"{"a":["F32",[2],[0,8]]}"#.to_owned(),
            r#"{"a":{"dt\u0079pe":"F32","shape":[2],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F\u0033\u0032","shape":[2],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a\"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#.to_owned(),
            "{\"a\tb\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}".to_owned(),
            r#"{"é":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}}"#
                .to_owned(),
            r#"{"a":{"dtype":"U8","shape":[18446744073709551615,0],"data_offsets":[0,0]}}"#
                .to_owned(),
            r#"{"a":{"dtype":"U8","shape":[12345678901234567890],"data_offsets":[0,0]}}"#
                .to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}}"#.to_owned(),
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]} "b":{}}"#.to_owned(),
            r#"{"__metadata__":{"k":"v\"w","k":"x"} , "a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#
                .to_owned(),
            r#"{"__metadata__":[],"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#
                .to_owned(),
            r#"{"__metadata__":{"k":"v"}"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#
                .to_owned(),
            r#"{"__metadata__":{"k":"v"}}"#.to_owned(),
            "{ }".to_owned(),
            "{".to_owned(),
        ];
        let path = Path::new("t.safetensors");
        let view = |(metadata, entries): &Parsed| {
            let entries: Vec<_> = entries
                .iter()
                .map(|e| (e.name.to_string(), e.dtype, e.shape.clone(), e.start, e.end))
                .collect();
            format!("{metadata:?} {entries:?}")
        };
        for header in &headers {
            let meter = Meter::default();
            let careful = split_entries(path, header, &meter)
                .and_then(|raw| parse_entries(path, raw, &meter));
            let meter = Meter::default();
            match (read_at_once(path, header, &meter), &careful) {
                (Ok(Some(fast)), Ok(slow)) => assert_eq!(view(&fast), view(slow), "{header}"),
                (Ok(None), Err(_)) => assert_eq!(meter.held(), 0, "{header}"),
                (Err(fast), Err(slow)) => {
                    assert_eq!(fast.to_string(), slow.to_string(), "{header}")
                }
                (fast, slow) => panic!("{header}: one pass {fast:?}, careful {slow:?}"),
            }
        }
    }

    /// A header spelled from pieces that JSON, the scanner and serde_json treat differently:
    /// whitespace JSON has and has not, keys and codes with escapes or quotes, numbers with
    /// signs, leading zeros, fractions and exponents, fields in any order, missing or twice,
    /// stray commas, `__metadata__` anywhere.
    fn spelled_header() -> impl Strategy<Value = String> {
        // Mostly what JSON allows, now and then what it does not.
        let space = prop_oneof![
            12 => prop::sample::select(vec!["", "", "", " ", "\n", "\t", "\r\n"]),
            1 => prop::sample::select(vec!["\u{b}", "\u{c}", "\u{a0}"]),
        ];
        let key = prop_oneof![
            6 => prop::sample::select(vec!["a", "b", "c", "a.b", "é"]),
            1 => prop::sample::select(vec![
                "a\\u0041", "a\\\"b", "a\tb", "__metadata__", "", "a\\/b",
            ]),
        ];
        let dtype = prop_oneof![
            6 => Just("F32"),
            1 => prop::sample::select(vec!["F\\u0033\\u0032", "X", "f32", "U8"]),
        ];
        // Spellings of the numbers a one-element F32 tensor needs (1, then 0 and 4), mostly
        // plain, else one serde_json reads otherwise or not at all.
        let spelled = |n: &'static str| {
            prop_oneof![
                6 => Just(n),
                1 => prop::sample::select(vec![
                    "00", "01", "04", "-0", "-1", "1.0", "4.0", "1e0", "4E0", "+1",
                    "18446744073709551615", "18446744073709551616",
                ]),
            ]
        };
        let field = (
            dtype,
            spelled("1"),
            spelled("0"),
            spelled("4"),
            space.clone(),
        );
        // The three fields in any order, now and then one missing or one more.
        let order = Just(vec![0u8, 1, 2])
            .prop_shuffle()
            .prop_flat_map(|order| {
                (
                    Just(order),
                    prop::option::weighted(0.15, 0u8..4),
                    prop::bool::weighted(0.1),
                )
            })
            .prop_map(|(mut order, extra, drop)| {
                if drop {
                    order.pop();
                }
                order.extend(extra);
                order
            });
        let entry = (
            order,
            prop::collection::vec(field, 4),
            space.clone(),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(order, fields, w, trailing)| {
                let fields: Vec<_> = order.into_iter().zip(fields).collect();
                (fields, w, trailing)
            });
        let item = (key, space.clone(), entry, prop::bool::weighted(0.1));
        (
            prop::collection::vec(item, 0..4),
            space,
            prop::bool::weighted(0.1),
        )
            .prop_map(|(items, end, stray)| {
                let mut text = String::from("{");
                for (i, (key, w, (fields, w2, trailing), metadata)) in items.iter().enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&format!("{w}\"{key}\"{w}:{w}"));
                    if *metadata {
                        text.push_str(r#"{"k":"v"}"#);
                        continue;
                    }
                    let fields: Vec<String> = fields
                        .iter()
                        .map(|(which, (dtype, one, start, end, w))| match which {
                            0 => format!("\"dtype\"{w}:{w}\"{dtype}\""),
                            1 => format!("\"shape\":[{w}{one}{w}]"),
                            2 => format!("\"data_offsets\":{w}[{start},{w}{end}]"),
                            _ => format!("\"shape\":[{one},{w}{one}]"),
                        })
                        .collect();
                    let comma = if *trailing { "," } else { "" };
                    text.push_str(&format!("{{{w2}{}{comma}{w2}}}", fields.join(",")));
                }
                if stray {
                    text.push(',');
                }
                text.push_str(&format!("}}{end}"));
                text
            })
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Where the scanner reads a header, serde_json reads the same entries and metadata;
        /// and the one-pass reading, scanner first, agrees with the careful one.
        #[test]
        fn the_scanner_reads_what_serde_json_reads(header in spelled_header()) {
            let path = Path::new("t.safetensors");
            let meter = Meter::default();
            let refused = RefCell::new(None);
            let charge = Charge::new(path, &meter, &header, &refused);
            if let Some((metadata, entries)) = scan_header(&header, &charge).unwrap() {
                let meter = Meter::default();
                let refused = RefCell::new(None);
                let charge = Charge::new(path, &meter, &header, &refused);
                let serde = walk_header(&header, OnePass(charge), &refused).unwrap();
                let Ok((serde_metadata, serde_entries)) = serde else {
                    return Err(TestCaseError::fail(format!("serde_json refuses {header}")));
                };
                let seen = |metadata: Option<BTreeMap<String, String>>, entries: Entries| {
                    let entries: Vec<_> = entries
                        .iter()
                        .map(|e| (e.name.to_string(), e.dtype, e.shape.clone(), e.start, e.end))
                        .collect();
                    format!("{metadata:?} {entries:?}")
                };
                prop_assert_eq!(seen(metadata, entries), seen(serde_metadata, serde_entries));
            }
            let meter = Meter::default();
            let careful = split_entries(path, &header, &meter)
                .and_then(|raw| parse_entries(path, raw, &meter));
            let meter = Meter::default();
            match (read_at_once(path, &header, &meter), careful) {
                (Ok(Some((m1, e1))), Ok((m2, e2))) => {
                    let names = |e: &Entries| e.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
                    prop_assert_eq!((m1, names(&e1)), (m2, names(&e2)));
                }
                (Ok(None), Err(_)) => prop_assert_eq!(meter.held(), 0),
                (Err(fast), Err(slow)) => prop_assert_eq!(fast.to_string(), slow.to_string()),
                (fast, slow) => {
                    return Err(TestCaseError::fail(format!("{header}: one pass {fast:?}, careful {slow:?}")))
                }
            }
        }
    }

    /// The scanner reads the plain spellings itself (so the agreement above is its own), and
    /// leaves what it does not read to serde_json.
    #[test]
    fn the_scanner_reads_plain_headers_and_leaves_the_rest() {
        let path = Path::new("t.safetensors");
        let scans = |header: &str| {
            let meter = Meter::default();
            let refused = RefCell::new(None);
            let charge = Charge::new(path, &meter, header, &refused);
            scan_header(header, &charge).unwrap().is_some()
        };
        let plain = [
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            r#"{"__metadata__":{"k":"v\"w"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            "{ \"a\" :\t{ \"shape\" : [ 2 ] ,\"data_offsets\":[0 , 8],\r\n\"dtype\" : \"F32\" } }\n",
            r#"{"a":{"dtype":"U8","shape":[18446744073709551615,0],"data_offsets":[0,0]}}"#,
            "{}",
        ];
        for header in plain {
            assert!(scans(header), "{header}");
        }
        let left = [
            r#"{"a\u0041":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[-0,8]}}"#,
            r#"{"a":["F32",[2],[0,8]]}"#,
            r#"{"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}}"#,
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x"#,
        ];
        for header in left {
            assert!(!scans(header), "{header}");
        }
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
