//! The pickles of an archive refused as ambiguous, as any reader might find them.
//!
//! An ambiguous archive (two end records, two entries one name ignoring case) is one that
//! different readers resolve to different members; the refusal fails the gate, but it must
//! also name what each reading would run. So every member any central directory entry in the
//! file (or a local header with its own sizes) announces is read for its pickle: a `.pkl`, any
//! member CPython would run as one, and an `.npy` object array (`np.load`'s `NpzFile` unpickles
//! it whatever the member's name).

use crate::inflate;
use crate::load::numpy;
use crate::load::pickle_start::{begins, begins_pickle, Begins};
use crate::pickle::{unpickle, Budget, Loader, UnsafeGlobal};
use std::path::Path;

const LOCAL_SIG: &[u8; 4] = b"PK\x03\x04";
const CENTRAL_SIG: &[u8; 4] = b"PK\x01\x02";
const DESCRIPTOR_SIG: &[u8; 4] = b"PK\x07\x08";
/// Fixed parts of a local header and a central directory entry.
const LOCAL_LEN: usize = 30;
const CENTRAL_LEN: usize = 46;
/// Bytes of a deflated member inflated to tell whether it begins like a pickle.
const PREFIX: usize = 4096;
/// How far past a local header a data descriptor is looked for.
const MAX_SCAN: usize = 1 << 28;
/// Pickle members read at most: a refused file need not cost more than a real archive.
const MAX_PICKLES: usize = 64;

/// The unsafe globals of every member that a central directory entry anywhere in the file, or
/// a local header, announces and that is named `*.pkl` or begins like a pickle (`.pt2` weights
/// are pickles of any name) — in file order, as `torch.load` would judge them.
pub(crate) fn globals_of_every_pickle(
    path: &Path,
    bytes: &[u8],
    budget: &Budget,
) -> Vec<UnsafeGlobal> {
    let mut members: Vec<Member<'_>> = every(bytes, CENTRAL_SIG)
        .filter_map(|at| central_member(bytes, at))
        .chain(every(bytes, LOCAL_SIG).filter_map(|at| local_member(bytes, at)))
        .collect();
    // One member may be announced by its central entry and its local header alike.
    members.sort_by_key(|m| m.data.as_ptr() as usize);
    members.dedup_by_key(|m| (m.data.as_ptr() as usize, m.data.len()));
    let mut globals = Vec::new();
    let pickles = members.into_iter().filter_map(|m| {
        let named = is_pickle_name(m.name.as_bytes());
        let data = match m.method {
            0 => m.data.to_vec(),
            8 => {
                let head = inflate::prefix(m.data, PREFIX);
                if !named && !head.starts_with(numpy::MAGIC) && begins(&head) == Begins::NotPickle {
                    return None;
                }
                inflate::all(m.data, m.size.min(budget.max_memory)).ok()?
            }
            _ => return None,
        };
        if let Some((start, pickle)) = numpy::object_array_pickle(&data) {
            return Some((m.name, start, pickle.to_vec()));
        }
        (named || begins_pickle(&data)).then_some((m.name, 0, data))
    });
    for (name, start, data) in pickles.take(MAX_PICKLES) {
        match unpickle(&data, path, &name, start as u64, Loader::Python, budget) {
            Ok(u) => globals.extend(u.unsafe_globals),
            Err(e) => globals.extend(e.unsafe_globals().iter().cloned()),
        }
    }
    globals
}

struct Member<'a> {
    name: String,
    method: u16,
    /// Uncompressed size.
    size: u64,
    data: &'a [u8],
}

/// Little-endian fields of a fixed-size record.
struct Record<'a>(&'a [u8]);

impl Record<'_> {
    fn u16(&self, i: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.0.get(i..i + 2)?.try_into().ok()?))
    }
    fn u32(&self, i: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.0.get(i..i + 4)?.try_into().ok()?))
    }
}

/// The member a central directory entry at `at` points to.
fn central_member(bytes: &[u8], at: usize) -> Option<Member<'_>> {
    let entry = Record(bytes.get(at..at.checked_add(CENTRAL_LEN)?)?);
    let name_start = at.checked_add(CENTRAL_LEN)?;
    let name = bytes.get(name_start..name_start.checked_add(usize::from(entry.u16(28)?))?)?;
    let local = usize::try_from(entry.u32(42)?).ok()?;
    let header = Record(bytes.get(local..local.checked_add(LOCAL_LEN)?)?);
    let data_start = local
        .checked_add(LOCAL_LEN)?
        .checked_add(usize::from(header.u16(26)?))?
        .checked_add(usize::from(header.u16(28)?))?;
    let compressed = usize::try_from(entry.u32(20)?).ok()?;
    Some(Member {
        name: String::from_utf8_lossy(name).into_owned(),
        method: entry.u16(10)?,
        size: u64::from(entry.u32(24)?),
        data: bytes.get(data_start..data_start.checked_add(compressed)?)?,
    })
}

/// The member whose local header is at `at`, as a streaming reader finds it: sizes from the
/// header, or, where the header leaves them to a data descriptor (torch's writer does), from
/// the first descriptor after the data whose compressed size ends the data there.
fn local_member(bytes: &[u8], at: usize) -> Option<Member<'_>> {
    let header = Record(bytes.get(at..at.checked_add(LOCAL_LEN)?)?);
    let name_start = at.checked_add(LOCAL_LEN)?;
    let name_len = usize::from(header.u16(26)?);
    let name = bytes.get(name_start..name_start.checked_add(name_len)?)?;
    let data_start = name_start
        .checked_add(name_len)?
        .checked_add(usize::from(header.u16(28)?))?;
    let (compressed, size) = match (header.u32(18)?, header.u32(22)?) {
        // Only a pickle's name is worth a search for its descriptor.
        (0, _) if header.u16(6)? & 0x8 != 0 && is_pickle_name(name) => {
            descriptor(bytes, data_start)?
        }
        (compressed, size) => (usize::try_from(compressed).ok()?, u64::from(size)),
    };
    Some(Member {
        name: String::from_utf8_lossy(name).into_owned(),
        method: header.u16(8)?,
        size,
        data: bytes.get(data_start..data_start.checked_add(compressed)?)?,
    })
    .filter(|m| !m.data.is_empty())
}

fn is_pickle_name(name: &[u8]) -> bool {
    name.len()
        .checked_sub(4)
        .and_then(|start| name.get(start..))
        .is_some_and(|tail| tail.eq_ignore_ascii_case(b".pkl"))
}

/// Compressed and uncompressed sizes of the data starting at `data_start`, from the first data
/// descriptor (`PK\x07\x08`, crc, sizes) that lies exactly that many bytes after it.
fn descriptor(bytes: &[u8], data_start: usize) -> Option<(usize, u64)> {
    let end = data_start.saturating_add(MAX_SCAN).min(bytes.len());
    every(bytes.get(data_start..end)?, DESCRIPTOR_SIG).find_map(|rel| {
        let d = Record(bytes.get(data_start + rel..data_start + rel + 16)?);
        let compressed = usize::try_from(d.u32(8)?).ok()?;
        (compressed == rel).then_some((compressed, u64::from(d.u32(12)?)))
    })
}

/// Every offset where `sig` begins.
fn every<'a>(bytes: &'a [u8], sig: &'a [u8; 4]) -> impl Iterator<Item = usize> + 'a {
    bytes
        .windows(sig.len())
        .enumerate()
        .filter(move |(_, w)| w == sig)
        .map(|(at, _)| at)
}
