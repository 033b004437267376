//! Local headers against their central entries, and the file's tiling.
//!
//! miniz never reads a local header's name or sizes: it takes the data's start from the local
//! name and extra lengths and everything else from the central directory. Readers that walk
//! local headers (streaming unzippers, some scanners) see the local ones instead. So each
//! local header must say what its central entry says, and the entries must follow one another
//! from byte 0 to the central directory with nothing between them but their data descriptors:
//! bytes that belong to no entry are a place to hide a second `data.pkl`.

use super::central::Entry;
use super::fields::{zip64_fields, Fields, Shared};
use super::File;
use crate::error::Result;

const LOCAL_SIG: [u8; 4] = *b"PK\x03\x04";
const LOCAL_LEN: u64 = 30;
const DESCRIPTOR_SIG: [u8; 4] = *b"PK\x07\x08";
/// Sizes follow in a data descriptor (bit 3).
const HAS_DESCRIPTOR: u16 = 0x0008;
const SATURATED: u32 = 0xFFFF_FFFF;

/// Bytes asked for around a local header when they are prefetched: before it, the data
/// descriptor of the entry before (at most 24 bytes); after its name, its extra field (torch
/// pads it to align the record, up to 63 bytes, beside a zip64 field).
const AROUND: u64 = 128;

/// A remote archive's local headers, asked for together before [`check`] reads them one by
/// one: otherwise each is a request of its own, sent once the one before has come back. The
/// list of them is held within what `directory_cost` counts for a lookup slot an entry.
pub(super) fn prefetch(file: &File<'_>, entries: &[Entry]) {
    if file.local.is_some() {
        return;
    }
    let headers: Vec<_> = entries
        .iter()
        .map(|entry| {
            let name_end = entry
                .local_offset
                .saturating_add(LOCAL_LEN)
                .saturating_add(entry.name.len() as u64);
            entry.local_offset.saturating_sub(AROUND)..name_end.saturating_add(AROUND)
        })
        .collect();
    file.buffer.prefetch(&headers);
}

/// Checks every local header, sets each entry's data start, and checks the tiling.
pub(super) fn check(file: &File<'_>, entries: &mut [Entry], cd_offset: u64) -> Result<()> {
    for entry in entries.iter_mut() {
        entry.data_start = local_header(file, entry)?;
    }
    let mut order: Vec<&Entry> = entries.iter().collect();
    order.sort_by_key(|e| e.local_offset);
    let mut pos = 0u64;
    let mut previous: Option<&Entry> = None;
    for entry in order {
        between(file, pos, entry.local_offset, previous, Some(entry))?;
        let data_end = entry
            .data_start
            .checked_add(entry.compressed)
            .filter(|&end| end <= file.len())
            .ok_or_else(|| file.damaged(&entry.name, "data runs past the end of the file"))?;
        pos = data_end + descriptor_len(file, entry, data_end)?;
        previous = Some(entry);
    }
    between(file, pos, cd_offset, previous, None)
}

/// The local header of `entry`, which must agree with it; returns where its data begins.
fn local_header(file: &File<'_>, entry: &Entry) -> Result<u64> {
    let at = entry.local_offset;
    let header = file.slice(at, LOCAL_LEN).ok_or_else(|| {
        file.damaged(
            &entry.name,
            format!("local header at offset {at} runs past the end"),
        )
    })?;
    let mut f = Fields::new(header);
    if f.sig() != LOCAL_SIG {
        return Err(file.damaged(&entry.name, format!("no local header at offset {at}")));
    }
    let _needed = f.u16();
    let Shared {
        flags,
        method,
        crc,
        compressed,
        size,
        name_len,
        extra_len,
    } = f.shared();
    let name_at = at + LOCAL_LEN;
    let (Some(name), Some(extra)) = (
        file.slice(name_at, name_len),
        file.slice(name_at + name_len, extra_len),
    ) else {
        return Err(file.damaged(
            &entry.name,
            format!("local header at offset {at} runs past the end"),
        ));
    };
    let mismatch = |what: &str| {
        file.ambiguous(format!(
            "entry '{}': its local header at offset {at} {what}",
            entry.name
        ))
    };
    if name != entry.name.as_bytes() {
        return Err(mismatch(&format!(
            "names it '{}'",
            String::from_utf8_lossy(name)
        )));
    }
    if flags != entry.flags || method != entry.method {
        return Err(mismatch(&format!(
            "says flags {flags:#06x} and method {method}, the central directory {:#06x} and {}",
            entry.flags, entry.method
        )));
    }
    let (local_size, local_compressed) = if size == SATURATED || compressed == SATURATED {
        zip64_sizes(extra).unwrap_or((size.into(), compressed.into()))
    } else {
        (size.into(), compressed.into())
    };
    // With a data descriptor the local fields may be left zero (torch leaves them so).
    let deferred = flags & HAS_DESCRIPTOR != 0;
    let agrees = |local: u64, central: u64| local == central || (deferred && local == 0);
    if !agrees(local_size, entry.size)
        || !agrees(local_compressed, entry.compressed)
        || !agrees(crc.into(), entry.crc.into())
    {
        return Err(mismatch(&format!(
            "says {local_size} bytes ({local_compressed} in the file, CRC {crc:#010x}), the \
             central directory {} ({}, CRC {:#010x})",
            entry.size, entry.compressed, entry.crc
        )));
    }
    Ok(name_at + name_len + extra_len)
}

/// Size and compressed size from a local zip64 extra field (both are there, in that order).
fn zip64_sizes(extra: &[u8]) -> Option<(u64, u64)> {
    let fields = zip64_fields(extra).ok()?;
    let mut f = Fields::new(fields.first()?.get(..16)?);
    Some((f.u64(), f.u64()))
}

/// The length of the data descriptor after an entry's data: none without bit 3; otherwise
/// 12, 16 (signed), 20 or 24 (signed, zip64 sizes) bytes, whichever repeats the central
/// CRC and sizes (zip64 first when the central entry needed zip64, as miniz writes them).
/// A wrong guess cannot pass: the next entry must begin right after it.
fn descriptor_len(file: &File<'_>, entry: &Entry, at: u64) -> Result<u64> {
    if entry.flags & HAS_DESCRIPTOR == 0 {
        return Ok(0);
    }
    // The signature is optional, so a CRC equal to it reads either way: try both.
    let signed = file.slice(at, 4) == Some(&DESCRIPTOR_SIG[..]);
    let sig_lens: &[u64] = if signed { &[4, 0] } else { &[0] };
    let widths = if entry.zip64 {
        [true, false]
    } else {
        [false, true]
    };
    let matches = |sig_len: u64, wide: bool| {
        let len = if wide { 20 } else { 12 };
        let Some(bytes) = file.slice(at + sig_len, len) else {
            return false;
        };
        let mut f = Fields::new(bytes);
        let crc = f.u32();
        let (compressed, size) = if wide {
            (f.u64(), f.u64())
        } else {
            (f.u32().into(), f.u32().into())
        };
        crc == entry.crc && compressed == entry.compressed && size == entry.size
    };
    let found = sig_lens.iter().find_map(|&sig_len| {
        widths
            .into_iter()
            .find(|&wide| matches(sig_len, wide))
            .map(|wide| sig_len + if wide { 20 } else { 12 })
    });
    match found {
        Some(len) => Ok(len),
        None => Err(file.ambiguous(format!(
            "entry '{}': its data descriptor at offset {at} does not repeat the central \
             directory's CRC and sizes",
            entry.name
        ))),
    }
}

/// Nothing may lie between the end of one entry (`pos`) and the start of the next thing.
fn between(
    file: &File<'_>,
    pos: u64,
    next: u64,
    previous: Option<&Entry>,
    entry: Option<&Entry>,
) -> Result<()> {
    if next == pos {
        return Ok(());
    }
    // Named only for the error: this runs once per entry.
    let after = previous.map_or_else(
        || "the start of the file".to_owned(),
        |p| format!("entry '{}'", p.name),
    );
    let before = entry.map_or_else(
        || "the central directory".to_owned(),
        |e| format!("entry '{}'", e.name),
    );
    Err(file.ambiguous(if next < pos {
        format!("{before} at offset {next} overlaps {after}, which ends at offset {pos}")
    } else {
        format!(
            "{} between {after} and {before} (offset {pos})",
            stray(file, pos, next)
        )
    }))
}

/// What the bytes in `start..end` look like: a local entry no central entry lists, or data.
fn stray(file: &File<'_>, start: u64, end: u64) -> String {
    let header = file.slice(start, LOCAL_LEN);
    if let Some(header) = header.filter(|h| h.starts_with(&LOCAL_SIG)) {
        let mut f = Fields::new(header.get(26..).unwrap_or_default());
        let name_len = u64::from(f.u16());
        let inside = start + LOCAL_LEN + name_len <= end;
        if let Some(name) = file.slice(start + LOCAL_LEN, name_len).filter(|_| inside) {
            return format!(
                "a local entry '{}' that the central directory does not list lies",
                String::from_utf8_lossy(name)
            );
        }
    }
    format!("{} bytes that belong to no entry lie", end - start)
}
