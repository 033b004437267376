//! The pickles of an archive refused as ambiguous, as any reader might find them.
//!
//! An ambiguous archive (two end records, two entries one name ignoring case) is one that
//! different readers resolve to different members; the refusal fails the gate, but it must
//! also name what each reading would run. So every member any central directory entry in the
//! file (or a local header with its own sizes) announces is read for its pickle: a `.pkl`, any
//! member CPython would run as one, and an `.npy` object array (`np.load`'s `NpzFile` unpickles
//! it whatever the member's name).

use super::fields::zip64_fields;
use crate::inflate;
use crate::load::numpy;
use crate::load::pickle_start::{begins, begins_pickle, unsafe_globals_walked, Begins};
use crate::pickle::{unpickle, Budget, Loader, UnsafeGlobal};
use std::borrow::Cow;
use std::path::Path;

const LOCAL_SIG: &[u8; 4] = b"PK\x03\x04";
const CENTRAL_SIG: &[u8; 4] = b"PK\x01\x02";
const DESCRIPTOR_SIG: &[u8; 4] = b"PK\x07\x08";
const END_SIG: &[u8; 4] = b"PK\x05\x06";
/// Fixed part of an end of central directory record.
const END_LEN: usize = 22;
/// Fixed parts of a local header and a central directory entry.
const LOCAL_LEN: usize = 30;
const CENTRAL_LEN: usize = 46;
/// Bytes of a deflated member inflated to tell whether it begins like a pickle.
const PREFIX: usize = 4096;
/// How far past a local header a data descriptor is looked for.
const MAX_SCAN: usize = 1 << 28;
/// Pickle members read at most: a refused file need not cost more than a real archive.
const MAX_PICKLES: usize = 64;
/// Members that may be pickles held at most, each announced perhaps twice (central and local).
const MAX_CANDIDATES: usize = 4 * MAX_PICKLES;

/// The unsafe globals of every member that a central directory entry anywhere in the file, or
/// a local header, announces and that is named `*.pkl` or begins like a pickle (`.pt2` weights
/// are pickles of any name) — in file order, as `torch.load` would judge them.
pub(crate) fn globals_of_every_pickle(
    path: &Path,
    bytes: &[u8],
    budget: &Budget,
) -> Vec<UnsafeGlobal> {
    let shifts = shifts(bytes);
    // Only members some loader would read are held, and at most so many: a refused archive of
    // a million members costs no more than one of a few.
    let mut members: Vec<Member<'_>> = every(bytes, CENTRAL_SIG)
        .filter_map(|at| central_member(bytes, at, &shifts))
        .chain(every(bytes, LOCAL_SIG).filter_map(|at| local_member(bytes, at)))
        .filter(Member::may_be_read)
        .take(MAX_CANDIDATES)
        .collect();
    // One member may be announced by its central entry and its local header alike.
    members.sort_by_key(|m| m.data.as_ptr() as usize);
    members.dedup_by_key(|m| (m.data.as_ptr() as usize, m.data.len()));
    let mut globals = Vec::new();
    let pickles = members.into_iter().filter_map(|m| {
        let named = is_pickle_name(m.name);
        let data = match m.method {
            0 => m.data.to_vec(),
            _ => inflate::all(m.data, m.size.min(budget.max_memory)).ok()?,
        };
        let name = String::from_utf8_lossy(m.name).into_owned();
        if let Some((start, pickle)) = numpy::object_array_pickle(&data) {
            return Some((name, start, pickle.to_vec()));
        }
        (named || begins_pickle(&data)).then_some((name, 0, data))
    });
    for (name, start, data) in pickles.take(MAX_PICKLES) {
        match unpickle(&data, path, &name, start as u64, Loader::Python, budget) {
            Ok(u) => globals.extend(u.unsafe_globals),
            Err(e) => {
                let named = e.unsafe_globals();
                globals.extend(named.iter().cloned());
                if e.over_budget() {
                    // Refused for what its values would take: CPython reads on through.
                    let rest = unsafe_globals_walked(&data, &name, start as u64, named, budget);
                    globals.extend(rest);
                }
            }
        }
    }
    globals
}

struct Member<'a> {
    name: &'a [u8],
    method: u16,
    /// Uncompressed size.
    size: u64,
    data: &'a [u8],
}

impl Member<'_> {
    /// Whether a loader could read it: named `*.pkl`, or (stored or deflated) beginning like
    /// a pickle or an `.npy` array. Other methods no loader here inflates.
    fn may_be_read(&self) -> bool {
        let head = match self.method {
            0 => self
                .data
                .get(..PREFIX.min(self.data.len()))
                .map(Cow::Borrowed),
            8 => Some(Cow::Owned(inflate::prefix(self.data, PREFIX))),
            _ => None,
        };
        head.is_some_and(|head| {
            is_pickle_name(self.name)
                || head.starts_with(numpy::MAGIC)
                || begins(&head) != Begins::NotPickle
        })
    }
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

/// The end record's "unset" 32-bit field: the value is in the zip64 extra field.
const ZIP64: u32 = u32::MAX;

/// How far the archive each end record describes lies from where its central directory says:
/// Python's `zipfile` takes bytes in front of an archive (`concat`) as shifting every offset,
/// so a central entry's local header is looked for at its offset plus each shift found.
fn shifts(bytes: &[u8]) -> Vec<usize> {
    let mut shifts = vec![0];
    for at in every(bytes, END_SIG).take(MAX_PICKLES) {
        let Some(end) = bytes.get(at..at.saturating_add(END_LEN)).map(Record) else {
            continue;
        };
        let shift = end.u32(12).zip(end.u32(16)).and_then(|(size, offset)| {
            at.checked_sub(usize::try_from(size).ok()?)?
                .checked_sub(usize::try_from(offset).ok()?)
        });
        if let Some(shift) = shift.filter(|s| !shifts.contains(s)) {
            shifts.push(shift);
        }
    }
    shifts
}

/// The member a central directory entry at `at` points to, its local header found at its
/// offset plus one of `shifts`.
fn central_member<'a>(bytes: &'a [u8], at: usize, shifts: &[usize]) -> Option<Member<'a>> {
    let entry = Record(bytes.get(at..at.checked_add(CENTRAL_LEN)?)?);
    let name_start = at.checked_add(CENTRAL_LEN)?;
    let name_end = name_start.checked_add(usize::from(entry.u16(28)?))?;
    let name = bytes.get(name_start..name_end)?;
    let extra = bytes.get(name_end..name_end.checked_add(usize::from(entry.u16(30)?))?)?;
    let (compressed, size) = sizes(entry.u32(20)?, entry.u32(24)?, extra)?;
    let offset = usize::try_from(entry.u32(42)?).ok()?;
    let local = shifts.iter().find_map(|shift| {
        let local = offset.checked_add(*shift)?;
        bytes.get(local..)?.starts_with(LOCAL_SIG).then_some(local)
    })?;
    let header = Record(bytes.get(local..local.checked_add(LOCAL_LEN)?)?);
    let data_start = local
        .checked_add(LOCAL_LEN)?
        .checked_add(usize::from(header.u16(26)?))?
        .checked_add(usize::from(header.u16(28)?))?;
    Some(Member {
        name,
        method: entry.u16(10)?,
        size,
        data: bytes.get(data_start..data_start.checked_add(compressed)?)?,
    })
}

/// A record's compressed and uncompressed sizes, from its zip64 extra field where the 32-bit
/// fields say so (`np.savez` writes every member with `force_zip64`): the extra field holds
/// the uncompressed size, then the compressed, each only where its field is unset.
fn sizes(compressed: u32, size: u32, extra: &[u8]) -> Option<(usize, u64)> {
    let wide = zip64_fields(extra).ok()?.last().copied();
    let mut fields = wide.unwrap_or_default().chunks_exact(8).map(|f| {
        let mut le = [0u8; 8];
        le.copy_from_slice(f);
        u64::from_le_bytes(le)
    });
    let size = match size {
        ZIP64 => fields.next()?,
        size => u64::from(size),
    };
    let compressed = match compressed {
        ZIP64 => fields.next()?,
        compressed => u64::from(compressed),
    };
    Some((usize::try_from(compressed).ok()?, size))
}

/// The member whose local header is at `at`, as a streaming reader finds it: sizes from the
/// header, or, where the header leaves them to a data descriptor (torch's writer does), from
/// the first descriptor after the data whose compressed size ends the data there.
fn local_member(bytes: &[u8], at: usize) -> Option<Member<'_>> {
    let header = Record(bytes.get(at..at.checked_add(LOCAL_LEN)?)?);
    let name_start = at.checked_add(LOCAL_LEN)?;
    let name_len = usize::from(header.u16(26)?);
    let name = bytes.get(name_start..name_start.checked_add(name_len)?)?;
    let extra_start = name_start.checked_add(name_len)?;
    let data_start = extra_start.checked_add(usize::from(header.u16(28)?))?;
    let extra = bytes.get(extra_start..data_start)?;
    let (compressed, size) = match (header.u32(18)?, header.u32(22)?) {
        // Only a pickle's name is worth a search for its descriptor.
        (0, _) if header.u16(6)? & 0x8 != 0 && is_pickle_name(name) => {
            descriptor(bytes, data_start)?
        }
        (compressed, size) => sizes(compressed, size, extra)?,
    };
    Some(Member {
        name,
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
