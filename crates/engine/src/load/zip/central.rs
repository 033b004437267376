//! The central directory, read as miniz reads it (`mz_zip_reader_read_central_dir`,
//! `mz_zip_file_stat_internal`): sizes and offsets from the central headers, zip64 values from
//! the first zip64 extra field when a 32-bit field is all ones.

use super::end::{End, CENTRAL_HEADER_LEN};
use super::fields::{zip64_fields, Fields, Shared};
use super::File;
use crate::error::Result;

const CENTRAL_SIG: [u8; 4] = *b"PK\x01\x02";
const SATURATED: u32 = 0xFFFF_FFFF;
pub(super) const STORED: u16 = 0;
pub(super) const DEFLATED: u16 = 8;
/// Encrypted (bit 0), strongly encrypted (bit 6) or patch data (bit 5): miniz will not extract.
pub(super) const UNREADABLE_FLAGS: u16 = 0x0001 | 0x0020 | 0x0040;
/// Local headers masked (bit 13): miniz refuses the whole archive.
const MASKED_LOCAL_HEADERS: u16 = 0x2000;
/// The DOS directory attribute in the external attributes.
const DOS_DIRECTORY: u32 = 0x10;

/// One member, as its central header describes it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The full name, folder included.
    pub name: String,
    pub(super) flags: u16,
    pub(super) method: u16,
    pub(super) crc: u32,
    /// Bytes in the file.
    pub(super) compressed: u64,
    /// Bytes once read.
    pub size: u64,
    pub(super) local_offset: u64,
    /// Whether a size or the offset came from a zip64 extra field.
    pub(super) zip64: bool,
    /// Where the member's bytes begin: after the local header's name and extra field.
    pub(super) data_start: u64,
}

impl Entry {
    /// Stored as is: its bytes can be borrowed from the file.
    pub fn is_stored(&self) -> bool {
        self.method == STORED
    }

    /// The file offset of the first stored byte.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }
}

/// Every central entry, in directory order; the directory must hold nothing else.
pub(super) fn read(file: &File<'_>, end: &End) -> Result<Vec<Entry>> {
    let cd = file.slice(end.cd_offset, end.cd_size).unwrap_or_default();
    // Bounded by the directory's size: `locate` checked count × 46 ≤ cd_size ≤ file length.
    let mut entries = Vec::with_capacity(usize::try_from(end.count).unwrap_or(0));
    let mut pos = 0u64;
    for index in 0..end.count {
        let at = end.cd_offset + pos;
        let (entry, len) = entry(file, cd, pos, index, at)?;
        entries.push(entry);
        pos += len;
    }
    if pos != end.cd_size {
        return Err(file.ambiguous(format!(
            "the central directory at offset {} holds {} bytes after its {} entries",
            end.cd_offset,
            end.cd_size - pos,
            end.count
        )));
    }
    if entries.is_empty() {
        return Err(file.damaged("zip", "the archive is empty"));
    }
    Ok(entries)
}

/// The entry at `pos` in the directory and the bytes its header takes.
fn entry(file: &File<'_>, cd: &[u8], pos: u64, index: u64, at: u64) -> Result<(Entry, u64)> {
    let bad = |detail: String| {
        file.damaged(
            "zip",
            format!("central entry {index} at offset {at}: {detail}"),
        )
    };
    let header = slice(cd, pos, CENTRAL_HEADER_LEN).ok_or_else(|| bad("cut short".into()))?;
    let mut f = Fields::new(header);
    if f.sig() != CENTRAL_SIG {
        return Err(bad("no central header signature".into()));
    }
    let _made_by = f.u16();
    let _needed = f.u16();
    let Shared {
        flags,
        method,
        crc,
        compressed: compressed32,
        size: size32,
        name_len,
        extra_len,
    } = f.shared();
    let comment_len = u64::from(f.u16());
    let disk = f.u16();
    let _internal = f.u16();
    let external = f.u32();
    let offset32 = f.u32();
    let total = CENTRAL_HEADER_LEN + name_len + extra_len + comment_len;
    let name = slice(cd, pos + CENTRAL_HEADER_LEN, name_len);
    let extra = slice(cd, pos + CENTRAL_HEADER_LEN + name_len, extra_len);
    let (Some(name), Some(extra), Some(_)) = (name, extra, slice(cd, pos, total)) else {
        return Err(bad(
            "its name, extra field or comment runs past the central directory".into(),
        ));
    };
    let name = entry_name(file, name, index, at)?;
    let zip64 = [compressed32, size32, offset32].contains(&SATURATED);
    let (size, compressed, local_offset) = if zip64 {
        zip64_values(extra, size32, compressed32, offset32).map_err(bad)?
    } else {
        (size32.into(), compressed32.into(), offset32.into())
    };
    if flags & MASKED_LOCAL_HEADERS != 0 {
        return Err(bad("masked local headers are not supported".into()));
    }
    if disk != 0 {
        return Err(file.damaged("zip", "archives split across disks are not supported"));
    }
    // miniz's own checks when it opens the archive.
    if (method == STORED && compressed != size) || (size > 0 && compressed == 0) {
        return Err(bad(format!(
            "'{name}' is {compressed} bytes in the file but {size} once read"
        )));
    }
    let directory = name.ends_with('/') || external & DOS_DIRECTORY != 0;
    if directory && size > 0 {
        // miniz extracts nothing for a folder, and torch then uses the buffer it allocated.
        return Err(file.ambiguous(format!(
            "entry '{name}' is marked as a folder but holds {size} bytes"
        )));
    }
    let entry = Entry {
        name,
        flags,
        method,
        crc,
        compressed,
        size,
        local_offset,
        zip64,
        data_start: 0,
    };
    Ok((entry, total))
}

fn slice(bytes: &[u8], at: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(at).ok()?;
    bytes.get(start..start.checked_add(usize::try_from(len).ok()?)?)
}

/// Names torch writes are ASCII; one that is not UTF-8, or holds a NUL that C strings stop
/// at, reads as different names to different readers.
fn entry_name(file: &File<'_>, raw: &[u8], index: u64, at: u64) -> Result<String> {
    match std::str::from_utf8(raw) {
        Ok(name) if !name.contains('\0') => Ok(name.to_owned()),
        _ => Err(file.ambiguous(format!(
            "the name of central entry {index} (offset {at}) is not UTF-8 text without NUL \
             bytes, so readers would name it differently"
        ))),
    }
}

/// The 64-bit size, compressed size and local offset: from the zip64 extra field for each
/// 32-bit field that is all ones, in that order (miniz reads them so).
fn zip64_values(
    extra: &[u8],
    size32: u32,
    compressed32: u32,
    offset32: u32,
) -> std::result::Result<(u64, u64, u64), String> {
    let fields = zip64_fields(extra)?;
    let data = match fields.as_slice() {
        [one] => *one,
        [] => return Err("a size or offset is all ones but there is no zip64 extra field".into()),
        _ => return Err("two zip64 extra fields".into()),
    };
    let mut f = Fields::new(data);
    let mut needed = 0usize;
    let mut take = |value: u32, f: &mut Fields<'_>| {
        if value == SATURATED {
            needed += 8;
            f.u64()
        } else {
            value.into()
        }
    };
    let size = take(size32, &mut f);
    let compressed = take(compressed32, &mut f);
    let offset = take(offset32, &mut f);
    if data.len() < needed {
        return Err("its zip64 extra field is too short for the values it replaces".into());
    }
    Ok((size, compressed, offset))
}
