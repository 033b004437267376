//! Legacy `torch.save` files (`_use_new_zipfile_serialization=False`): five pickles in a row
//! — magic number, protocol, sys_info, the object, the sorted storage keys — then each
//! storage as an 8-byte little-endian element count followed by its bytes. `torch.load`
//! unpickles all five with one unpickler, so a global in any of them runs: each pickle's
//! unsafe globals are reported under its own name, and a file refused part-way still names
//! those of every pickle that parses.

use super::{add_member, storage_record, Member, StorageRecord, StorageSource};
use crate::error::{Error, Result};
use crate::files::HEAD;
use crate::load::limits::Meter;
use crate::load::pickle_start;
use crate::load::sniff::Prefix;
use crate::load::table::{Accepts, FileReader, FileRule, Row};
use crate::load::{Sink, Sniffed};
use crate::pickle::weights_only::{replay, Persistent};
use crate::pickle::{unpickle, Budget, Loader, Node, Unpickled, UnsafeGlobal, WeightsOnly};
use crate::{DType, DataPtr, Format, HostBackend, HostBuffer};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// The five pickles, named after what `_legacy_save` dumps; positions are file offsets.
pub const PICKLES: [&str; 5] = [
    "legacy pickle 1 (magic_number)",
    "legacy pickle 2 (protocol_version)",
    "legacy pickle 3 (sys_info)",
    "legacy pickle 4 (obj)",
    "legacy pickle 5 (storage_keys)",
];

/// Where errors about the raw storages after the pickles point.
const STORAGES: &str = "legacy storages";

/// `0x1950a86a20f9469cfc6c`, little-endian, as `LONG1` carries it.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const PROTOCOL_VERSION: i64 = 1001;

/// `torch.save(..., _use_new_zipfile_serialization=False)`: a stream whose first pickle is
/// PyTorch's magic number (what is neither zip nor tar, `torch.load` unpickles).
pub(crate) const ROW: Row = Row {
    what: "a legacy PyTorch pickle",
    loader: "torch.load",
    extensions: &["pt", "pth", "bin", "ckpt"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::PytorchLegacy),
        accepts: |prefix| prefix.given(MAX_MAGIC_PICKLE, begins_legacy),
        read: Some(FileReader {
            read: read_into,
            index: Format::PytorchIndex,
            reads_pickle: true,
        }),
    }),
};

/// The pickled magic number `0x1950a86a20f9469cfc6c` as `LONG1` (protocol 2 and later).
const LEGACY_MAGIC: [u8; 12] = [
    0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
];

/// The same number as protocols 0 and 1 write it: a text `LONG`.
const LEGACY_MAGIC_TEXT: &[u8] = b"L119547037146038801333356L\n";

/// Whether the first pickle's value is PyTorch's legacy magic number, as `torch.load` decides:
/// it unpickles the first pickle whatever its protocol and compares the value. The encodings
/// `torch.save(..., pickle_protocol=n)` writes are matched at once (text for 0 and 1, `LONG1`
/// after `PROTO` from 2 on, inside a `FRAME` from 4 on); any other short first pickle (the
/// number as `INT` text, `LONG4`, in hexadecimal) is read by the machine for its value.
fn begins_legacy(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    if let [0x80, _, tail @ ..] = rest {
        rest = tail;
        if let [0x95, tail @ ..] = rest {
            rest = tail.get(8..).unwrap_or_default();
        }
        if rest.starts_with(&LEGACY_MAGIC) {
            return true;
        }
    } else if rest.starts_with(LEGACY_MAGIC_TEXT) {
        return true;
    }
    let Some(first) = pickle_start::stream_end(bytes)
        .filter(|&end| end <= MAX_MAGIC_PICKLE)
        .and_then(|end| bytes.get(..end))
    else {
        return false;
    };
    let budget = Meter::default().pickle_budget();
    unpickle(first, Path::new(""), PICKLES[0], 0, Loader::Python, &budget)
        .is_ok_and(|magic| magic.heap.get(magic.root) == &Node::BigInt(MAGIC.into()))
}

/// The longest first pickle looked at for the magic number (any plain encoding of it takes a
/// few dozen bytes); a longer one is read as the pickle it is.
const MAX_MAGIC_PICKLE: usize = 4096;

/// Reads one legacy file through `sink`.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let budget = sink.meter().pickle_budget();
    let pickles = Pickles::read(buffer, &budget);
    let globals = pickles.unsafe_globals();
    match pickles.weights_only(buffer, &budget) {
        Ok(verdict) => sink.weights_only(verdict),
        Err(e) => return Err(e.with_unsafe_globals(globals)),
    }
    match read_stream(buffer, &budget, pickles, sink) {
        Ok(()) => {
            sink.add_unsafe_globals(globals);
            Ok(Format::PytorchLegacy)
        }
        Err(e) => Err(e.with_unsafe_globals(globals)),
    }
}

/// The bytes from `pos` on that hold the pickle starting there. Of a remote object, as little
/// as reaches its STOP, walked as CPython runs it (fetched four times as much each time it
/// does not); the rest of the file when the walk stops short of a STOP (a pickle CPython
/// refuses, one too large to walk), so the machine meets what it would in the whole file.
fn pickle_at(buffer: &HostBuffer, pos: u64) -> Result<&[u8]> {
    let len = buffer.len();
    if buffer.backend() != HostBackend::Remote {
        return buffer.range(pos..len);
    }
    let mut read = HEAD;
    loop {
        let end = pos.saturating_add(read).min(len);
        let prefix = Prefix {
            bytes: buffer.range(pos..end)?,
            whole: end == len,
        };
        match pickle_start::stream_end_in(prefix) {
            Some(Some(_)) => return Ok(prefix.bytes),
            Some(None) => return buffer.range(pos..len),
            None => read = read.saturating_mul(4),
        }
    }
}

/// A pickle of the stream and where it starts.
type Parsed = (u64, Unpickled);

/// The pickles at the start of a file, read as a legacy stream: each that parses, in order,
/// then why the next did not (at most five in all).
pub(crate) struct Pickles {
    read: Vec<Result<Parsed>>,
    /// Where the last pickle that parsed ends.
    end: u64,
}

impl Pickles {
    /// Runs the stream's pickles from the start of the file, stopping at the first that fails.
    pub(crate) fn read(buffer: &HostBuffer, budget: &Budget) -> Self {
        let mut read = Vec::with_capacity(PICKLES.len());
        let mut pos = 0u64;
        for name in PICKLES {
            let rest = match pickle_at(buffer, pos) {
                Ok(rest) => rest,
                Err(e) => {
                    read.push(Err(e));
                    break;
                }
            };
            match unpickle(rest, buffer.source(), name, pos, Loader::Python, budget) {
                Ok(u) => {
                    let at = pos;
                    // The pickle lies inside `rest`, so this stays within the file's length.
                    pos += u.len;
                    read.push(Ok((at, u)));
                }
                Err(e) => {
                    read.push(Err(e));
                    break;
                }
            }
        }
        Pickles { read, end: pos }
    }

    /// What torch.load's weights-only unpickler does with the pickles that parsed: it runs
    /// them one after another, the object's with the legacy `persistent_load`.
    fn weights_only(&self, buffer: &HostBuffer, budget: &Budget) -> Result<WeightsOnly> {
        // Beside the values the machine built, which are still held.
        let built = self.read.iter().flatten().map(|(_, u)| u.bytes).sum();
        let budget = &budget.holding(built);
        for (name, (at, u)) in PICKLES.iter().zip(self.read.iter().flatten()) {
            let persistent = if *name == PICKLES[3] {
                Persistent::Legacy
            } else {
                Persistent::Refused
            };
            // Read already, so in memory: no fetch fails here.
            let stream = buffer
                .range(*at..at.saturating_add(u.len))
                .unwrap_or_default();
            let verdict = replay(stream, persistent, budget)
                .map_err(|overrun| overrun.into_error(buffer.source(), name, budget))?;
            if let Err(reason) = verdict {
                return Ok(WeightsOnly::refuses(name, reason));
            }
        }
        Ok(WeightsOnly::Loads)
    }

    /// The unsafe globals of every pickle that parsed, in file order.
    pub(crate) fn unsafe_globals(&self) -> Vec<UnsafeGlobal> {
        self.read
            .iter()
            .flatten()
            .flat_map(|(_, u)| u.unsafe_globals.iter().cloned())
            .collect()
    }
}

/// Checks the pickles as `_legacy_load` does, then reads the storages they describe.
fn read_stream(
    buffer: &Arc<HostBuffer>,
    budget: &Budget,
    pickles: Pickles,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let (main_at, mut main, storages) = checked(buffer, pickles)?;
    // Reported with the other pickles' globals, in file order.
    main.unsafe_globals.clear();
    let member = Member {
        path: buffer.source(),
        name: PICKLES[3],
        unpickled: main,
        declared: None,
    };
    let mut source = Ranges {
        buffer,
        storages,
        at: main_at,
    };
    add_member(member, &mut source, budget, sink)
}

/// The five pickles checked as `_legacy_load` checks them, and where each storage after them
/// lies: the main pickle (and where it starts) and the storages by key.
fn checked(buffer: &Arc<HostBuffer>, pickles: Pickles) -> Result<(u64, Unpickled, Storages)> {
    let mut stream = Stream {
        buffer,
        pos: pickles.end,
    };
    let mut read = pickles.read.into_iter();
    let mut next = |name: &str| {
        read.next()
            .unwrap_or_else(|| Err(stream.err(name, stream.pos, "missing")))
    };
    let (_, magic) = next(PICKLES[0])?;
    if magic.heap.get(magic.root) != &Node::BigInt(MAGIC.into()) {
        return Err(stream.err(PICKLES[0], 0, "magic number is not PyTorch's"));
    }
    let (at, protocol) = next(PICKLES[1])?;
    if protocol.heap.int(protocol.root) != Some(PROTOCOL_VERSION) {
        return Err(stream.err(PICKLES[1], at, "legacy protocol version is not 1001"));
    }
    // sys_info records the writer's endianness, but legacy storages are always little-endian.
    next(PICKLES[2])?;
    let (main_at, main) = next(PICKLES[3])?;
    let (keys_at, keys) = next(PICKLES[4])?;
    let keys = storage_keys(&stream, keys_at, &keys)?;
    let storages = stream.storages(&keys, &storage_dtypes(&main))?;
    Ok((main_at, main, storages))
}

/// What `torch.storage._load_from_bytes(bytes)` returns (`pickle.dump` of a tensor writes its
/// storage so): `buffer` read as a legacy stream, as [`read_into`] reads a file, that must hold
/// one storage alone — the main pickle that storage's persistent id and nothing else, naming
/// no global outside the allowlist, its bytes all that follows the pickles. Anything else is
/// refused: `weights_only=False` would run whatever else the bytes hold. The globals the
/// pickles name come with the refusal.
pub(crate) fn storage_alone(
    buffer: &Arc<HostBuffer>,
    budget: &Budget,
) -> Result<(StorageRecord, DataPtr)> {
    let pickles = Pickles::read(buffer, budget);
    let globals = pickles.unsafe_globals();
    let named = !globals.is_empty();
    one_storage(buffer, pickles, named).map_err(|e| e.with_unsafe_globals(globals))
}

fn one_storage(
    buffer: &Arc<HostBuffer>,
    pickles: Pickles,
    names_globals: bool,
) -> Result<(StorageRecord, DataPtr)> {
    let (at, main, storages) = checked(buffer, pickles)?;
    let fail = |detail: String| Error::Pickle {
        path: buffer.source().to_owned(),
        member: PICKLES[3].to_owned(),
        position: at,
        detail: format!("not one storage alone: {detail}"),
    };
    if names_globals {
        return Err(fail(
            "its pickles name globals outside the allowlist".into(),
        ));
    }
    let record = match main.heap.get(main.root) {
        Node::Persistent(pid) if main.persistent == [main.root] => {
            storage_record(&main.heap, *pid).map_err(fail)?
        }
        _ => None,
    }
    .ok_or_else(|| fail("the object is not a storage's persistent id".into()))?;
    if storages.len() != 1 {
        return Err(fail(format!(
            "{} storages follow the pickles",
            storages.len()
        )));
    }
    let Some((count, range)) = storages.get(&*record.key) else {
        return Err(fail(format!(
            "storage '{}' is not in the key list",
            record.key
        )));
    };
    if *count != record.numel {
        return Err(fail(format!(
            "storage '{}' holds {count} elements but the pickle describes {}",
            record.key, record.numel
        )));
    }
    let data = DataPtr::host(Arc::clone(buffer), range.clone())?;
    Ok((record, data))
}

/// The last pickle: the storage keys, in the order their bytes follow.
fn storage_keys(stream: &Stream<'_>, at: u64, keys: &Unpickled) -> Result<Vec<String>> {
    keys.heap
        .seq(keys.root)
        .and_then(|items| {
            items
                .iter()
                .map(|&k| keys.heap.str(k).map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| stream.err(PICKLES[4], at, "storage key list is not a list of strings"))
}

/// The storages after the pickles, read front to back; `pos` is where the next one begins.
struct Stream<'a> {
    buffer: &'a Arc<HostBuffer>,
    pos: u64,
}

impl Stream<'_> {
    fn err(&self, part: &str, position: u64, detail: &str) -> Error {
        Error::Pickle {
            path: self.buffer.source().to_owned(),
            member: part.to_owned(),
            position,
            detail: detail.to_owned(),
        }
    }

    /// Every storage, in key order; the storages must end the file.
    fn storages(&mut self, keys: &[String], dtypes: &HashMap<String, DType>) -> Result<Storages> {
        let mut storages = HashMap::with_capacity(keys.len());
        for key in keys {
            let (count, range) = self.storage(key, dtypes)?;
            self.pos = range.end;
            storages.insert(key.clone(), (count, range));
        }
        let len = self.buffer.len();
        if self.pos != len {
            return Err(self.err(
                STORAGES,
                self.pos,
                &format!("{} bytes after the last storage", len - self.pos),
            ));
        }
        Ok(storages)
    }

    /// One storage at `pos`: its element count, then its bytes.
    fn storage(&self, key: &str, dtypes: &HashMap<String, DType>) -> Result<(u64, Range<u64>)> {
        let at = self.pos;
        let count_bytes = self
            .buffer
            .range(at..at.saturating_add(8))?
            .get(..8)
            .ok_or_else(|| {
                self.err(
                    STORAGES,
                    at,
                    &format!("storage '{key}': element count runs past the end of the file"),
                )
            })?;
        let mut le = [0u8; 8];
        le.copy_from_slice(count_bytes);
        let count = u64::from_le_bytes(le);
        let dtype = dtypes.get(key).ok_or_else(|| {
            self.err(
                STORAGES,
                at,
                &format!("storage '{key}' is listed but no tensor names its type"),
            )
        })?;
        let size = dtype.element_size().unwrap_or(1);
        let nbytes = count.checked_mul(size).ok_or_else(|| {
            self.err(
                STORAGES,
                at,
                &format!("storage '{key}': {count} elements overflow"),
            )
        })?;
        // The 8 count bytes were just read, so they end inside the file.
        let start = at + 8;
        let end = start
            .checked_add(nbytes)
            .filter(|&end| end <= self.buffer.len())
            .ok_or_else(|| {
                self.err(
                    STORAGES,
                    at,
                    &format!(
                        "storage '{key}': {nbytes} bytes run past the end of the file (truncated?)"
                    ),
                )
            })?;
        Ok((count, start..end))
    }
}

/// Element types by storage key, from the storage classes the main pickle names.
fn storage_dtypes(main: &Unpickled) -> HashMap<String, DType> {
    let mut dtypes = HashMap::new();
    for &node in &main.persistent {
        if let Node::Persistent(pid) = main.heap.get(node) {
            if let Ok(Some(StorageRecord {
                key,
                class_dtype: Some(dtype),
                ..
            })) = storage_record(&main.heap, *pid)
            {
                dtypes.insert(String::from(&*key), dtype);
            }
        }
    }
    dtypes
}

/// Each storage's element count and byte range in the file, by key.
type Storages = HashMap<String, (u64, Range<u64>)>;

/// The storages of one legacy file; errors point at the main pickle, which describes them.
struct Ranges<'a> {
    buffer: &'a Arc<HostBuffer>,
    storages: Storages,
    at: u64,
}

impl StorageSource for Ranges<'_> {
    fn data_ptr(
        &mut self,
        record: &StorageRecord,
        _dtype: DType,
        nbytes: u64,
    ) -> Result<Option<DataPtr>> {
        let fail = |detail: String| Error::Pickle {
            path: self.buffer.source().to_owned(),
            member: PICKLES[3].to_owned(),
            position: self.at,
            detail,
        };
        let Some((count, range)) = self.storages.get(&*record.key) else {
            if record.location == "meta" {
                return Ok(None);
            }
            return Err(fail(format!(
                "storage '{}' is not in the key list",
                record.key
            )));
        };
        if *count != record.numel || range.end - range.start != nbytes {
            return Err(fail(format!(
                "storage '{}' holds {count} elements but the pickle describes {}",
                record.key, record.numel
            )));
        }
        DataPtr::host(Arc::clone(self.buffer), range.clone()).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::begins_legacy;

    #[test]
    fn the_magic_number_is_known_by_its_value_in_any_encoding() {
        let decimal = b"119547037146038801333356";
        // INT text, as protocol 0 may write it; LONG4; LONG1 with a redundant sign byte.
        let int = [b"I".as_slice(), decimal, b"\n."].concat();
        let mut long4 = vec![0x80, 0x02, 0x8b, 10, 0, 0, 0];
        long4.extend(super::MAGIC);
        long4.push(b'.');
        let mut padded = vec![0x80, 0x02, 0x8a, 11];
        padded.extend(super::MAGIC);
        padded.extend([0, b'.']);
        for stream in [int, long4, padded] {
            assert!(begins_legacy(&stream), "{stream:?}");
        }
        // Another number, or the number built by a call, is not the magic number.
        assert!(!begins_legacy(b"I119547037146038801333357\n."));
        assert!(!begins_legacy(
            b"cbuiltins\neval\n(V0x1950a86a20f9469cfc6c\ntR."
        ));
    }
}
