//! Legacy `torch.save` files (`_use_new_zipfile_serialization=False`): five pickles in a row
//! — magic number, protocol, sys_info, the object, the sorted storage keys — then each
//! storage as an 8-byte little-endian element count followed by its bytes.

use super::torch::{add_member, storage_record, Member, StorageRecord, StorageSource};
use super::Parts;
use crate::error::{Error, Result};
use crate::pickle::{unpickle, Budget, Node};
use crate::{Checkpoint, DType, DataPtr, Format, HostBuffer};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// The member name legacy files report positions under; positions are file offsets.
pub const MEMBER: &str = "<legacy>";

/// `0x1950a86a20f9469cfc6c`, little-endian, as `LONG1` carries it.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const PROTOCOL_VERSION: i64 = 1001;

/// Reads a legacy file, memory-mapped.
pub fn load(path: &Path) -> Result<Checkpoint> {
    let buffer = HostBuffer::map_file(path)?;
    let mut parts = Parts::default();
    read_into(&buffer, &mut parts)?;
    Ok(parts.finish(path, Format::PytorchLegacy))
}

pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<()> {
    let path = buffer.source();
    let bytes = buffer.bytes();
    let budget = Budget::default();
    let err = |position: u64, detail: &str| Error::Pickle {
        path: path.to_owned(),
        member: MEMBER.to_owned(),
        position,
        detail: detail.to_owned(),
    };
    let mut pos = 0u64;
    let next = |pos: &mut u64| {
        let rest = usize::try_from(*pos)
            .ok()
            .and_then(|p| bytes.get(p..))
            .unwrap_or_default();
        let u = unpickle(rest, path, MEMBER, *pos, &budget)?;
        *pos += u.len;
        Ok::<_, Error>(u)
    };

    let magic = next(&mut pos)?;
    if magic.heap.get(magic.root) != &Node::BigInt(MAGIC.to_vec()) {
        return Err(err(0, "magic number is not PyTorch's"));
    }
    let at = pos;
    let protocol = next(&mut pos)?;
    if protocol.heap.int(protocol.root) != Some(PROTOCOL_VERSION) {
        return Err(err(at, "legacy protocol version is not 1001"));
    }
    // sys_info records the writer's endianness, but legacy storages are always little-endian.
    next(&mut pos)?;
    let main_at = pos;
    let main = next(&mut pos)?;
    let keys_at = pos;
    let keys = next(&mut pos)?;
    let key_list: Vec<String> = keys
        .heap
        .seq(keys.root)
        .and_then(|items| {
            items
                .iter()
                .map(|&k| keys.heap.str(k).map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| err(keys_at, "storage key list is not a list of strings"))?;

    let mut ranges = HashMap::with_capacity(key_list.len());
    let mut elements = HashMap::with_capacity(key_list.len());
    let mut need = HashMap::new();
    // Element sizes come from the storage classes the main pickle names.
    for &node in &main.persistent {
        if let Node::Persistent(pid) = main.heap.get(node) {
            if let Ok(Some(StorageRecord {
                key,
                class_dtype: Some(dtype),
                ..
            })) = storage_record(&main.heap, *pid, "")
            {
                need.insert(key, dtype);
            }
        }
    }
    for key in &key_list {
        let at = pos;
        let count_bytes = usize::try_from(pos)
            .ok()
            .and_then(|p| bytes.get(p..p.checked_add(8)?))
            .ok_or_else(|| {
                err(
                    at,
                    &format!("storage '{key}': element count runs past the end of the file"),
                )
            })?;
        let mut le = [0u8; 8];
        le.copy_from_slice(count_bytes);
        let count = u64::from_le_bytes(le);
        let dtype = need.get(key).ok_or_else(|| {
            err(
                at,
                &format!("storage '{key}' is listed but no tensor names its type"),
            )
        })?;
        let size = dtype.element_size().unwrap_or(1);
        let nbytes = count
            .checked_mul(size)
            .ok_or_else(|| err(at, &format!("storage '{key}': {count} elements overflow")))?;
        let start = pos + 8;
        let end = start
            .checked_add(nbytes)
            .filter(|&end| end <= buffer.len())
            .ok_or_else(|| {
                err(
                    at,
                    &format!(
                        "storage '{key}': {nbytes} bytes run past the end of the file (truncated?)"
                    ),
                )
            })?;
        ranges.insert(key.clone(), start..end);
        elements.insert(key.clone(), count);
        pos = end;
    }
    if pos != buffer.len() {
        return Err(err(
            pos,
            &format!("{} bytes after the last storage", buffer.len() - pos),
        ));
    }

    let member = Member {
        path,
        name: MEMBER,
        unpickled: main,
        key_prefix: "",
        name_prefix: "",
    };
    let mut source = Ranges {
        buffer,
        ranges,
        elements,
        at: main_at,
    };
    add_member(member, &mut source, &budget, parts)
}

struct Ranges<'a> {
    buffer: &'a Arc<HostBuffer>,
    ranges: HashMap<String, Range<u64>>,
    elements: HashMap<String, u64>,
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
        let Some(range) = self.ranges.get(&record.key) else {
            if record.location == "meta" {
                return Ok(None);
            }
            return Err(fail(format!(
                "storage '{}' is not in the key list",
                record.key
            )));
        };
        let count = self.elements.get(&record.key).copied().unwrap_or(0);
        if count != record.numel || range.end - range.start != nbytes {
            return Err(fail(format!(
                "storage '{}' holds {count} elements but the pickle describes {}",
                record.key, record.numel
            )));
        }
        DataPtr::host(Arc::clone(self.buffer), range.clone()).map(Some)
    }
}
