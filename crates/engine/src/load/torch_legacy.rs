//! Legacy `torch.save` files (`_use_new_zipfile_serialization=False`): five pickles in a row
//! — magic number, protocol, sys_info, the object, the sorted storage keys — then each
//! storage as an 8-byte little-endian element count followed by its bytes.

use super::torch::{add_member, storage_record, Member, StorageRecord, StorageSource};
use super::Parts;
use crate::error::{Error, Result};
use crate::pickle::{unpickle, Budget, Loader, Node, Unpickled};
use crate::{DType, DataPtr, Format, HostBuffer};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// The member name legacy files report positions under; positions are file offsets.
pub const MEMBER: &str = "<legacy>";

/// `0x1950a86a20f9469cfc6c`, little-endian, as `LONG1` carries it.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const PROTOCOL_VERSION: i64 = 1001;

/// Reads one legacy file into `parts`.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let budget = Budget::default();
    let mut stream = Stream {
        buffer,
        budget: &budget,
        pos: 0,
    };
    stream.preamble()?;
    let main_at = stream.pos;
    let main = stream.next()?;
    let keys = stream.storage_keys()?;
    let storages = stream.storages(&keys, &storage_dtypes(&main))?;
    let member = Member {
        path: buffer.source(),
        name: MEMBER,
        unpickled: main,
        key_prefix: "",
        name_prefix: "",
    };
    let mut source = Ranges {
        buffer,
        storages,
        at: main_at,
    };
    add_member(member, &mut source, &budget, parts)?;
    Ok(Format::PytorchLegacy)
}

/// The file read front to back; `pos` is where the next part begins.
struct Stream<'a> {
    buffer: &'a Arc<HostBuffer>,
    budget: &'a Budget,
    pos: u64,
}

impl Stream<'_> {
    fn err(&self, position: u64, detail: &str) -> Error {
        Error::Pickle {
            path: self.buffer.source().to_owned(),
            member: MEMBER.to_owned(),
            position,
            detail: detail.to_owned(),
        }
    }

    /// Runs the pickle at `pos` and moves past it.
    fn next(&mut self) -> Result<Unpickled> {
        let rest = usize::try_from(self.pos)
            .ok()
            .and_then(|p| self.buffer.bytes().get(p..))
            .unwrap_or_default();
        let path = self.buffer.source();
        let u = unpickle(rest, path, MEMBER, self.pos, Loader::Python, self.budget)?;
        // The pickle lies inside `rest`, so this stays within the file's length.
        self.pos += u.len;
        Ok(u)
    }

    /// Magic number, protocol version, and sys_info, which records the writer's endianness
    /// although legacy storages are always little-endian.
    fn preamble(&mut self) -> Result<()> {
        let magic = self.next()?;
        if magic.heap.get(magic.root) != &Node::BigInt(MAGIC.to_vec()) {
            return Err(self.err(0, "magic number is not PyTorch's"));
        }
        let at = self.pos;
        let protocol = self.next()?;
        if protocol.heap.int(protocol.root) != Some(PROTOCOL_VERSION) {
            return Err(self.err(at, "legacy protocol version is not 1001"));
        }
        self.next().map(drop)
    }

    /// The last pickle: the storage keys, in the order their bytes follow.
    fn storage_keys(&mut self) -> Result<Vec<String>> {
        let at = self.pos;
        let keys = self.next()?;
        keys.heap
            .seq(keys.root)
            .and_then(|items| {
                items
                    .iter()
                    .map(|&k| keys.heap.str(k).map(str::to_owned))
                    .collect()
            })
            .ok_or_else(|| self.err(at, "storage key list is not a list of strings"))
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
                self.pos,
                &format!("{} bytes after the last storage", len - self.pos),
            ));
        }
        Ok(storages)
    }

    /// One storage at `pos`: its element count, then its bytes.
    fn storage(&self, key: &str, dtypes: &HashMap<String, DType>) -> Result<(u64, Range<u64>)> {
        let at = self.pos;
        let count_bytes = usize::try_from(at)
            .ok()
            .and_then(|p| self.buffer.bytes().get(p..p.checked_add(8)?))
            .ok_or_else(|| {
                self.err(
                    at,
                    &format!("storage '{key}': element count runs past the end of the file"),
                )
            })?;
        let mut le = [0u8; 8];
        le.copy_from_slice(count_bytes);
        let count = u64::from_le_bytes(le);
        let dtype = dtypes.get(key).ok_or_else(|| {
            self.err(
                at,
                &format!("storage '{key}' is listed but no tensor names its type"),
            )
        })?;
        let size = dtype.element_size().unwrap_or(1);
        let nbytes = count
            .checked_mul(size)
            .ok_or_else(|| self.err(at, &format!("storage '{key}': {count} elements overflow")))?;
        // The 8 count bytes were just read, so they end inside the file.
        let start = at + 8;
        let end = start
            .checked_add(nbytes)
            .filter(|&end| end <= self.buffer.len())
            .ok_or_else(|| {
                self.err(
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
            })) = storage_record(&main.heap, *pid, "")
            {
                dtypes.insert(key, dtype);
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
            member: MEMBER.to_owned(),
            position: self.at,
            detail,
        };
        let Some((count, range)) = self.storages.get(&record.key) else {
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
