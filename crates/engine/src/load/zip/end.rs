//! The end records: which end-of-central-directory record miniz takes, its zip64 twin, and
//! where they put the central directory.
//!
//! miniz (`mz_zip_reader_locate_header_sig`) takes the *last* `PK\x05\x06` with 22 bytes after
//! it, ignoring its comment length, then a zip64 locator exactly 20 bytes before it, whose
//! record offset it follows, and reads the central directory at the declared offset. Python's
//! zipfile also prefers the last signature but places the zip64 record and the directory by
//! position (just before what follows them); other readers check the comment length. An
//! archive is accepted only where all of these agree.

use super::fields::Fields;
use super::File;
use crate::error::Result;

const EOCD_SIG: [u8; 4] = *b"PK\x05\x06";
const EOCD_LEN: u64 = 22;
const MAX_COMMENT: u64 = 0xFFFF;
const LOCATOR_SIG: [u8; 4] = *b"PK\x06\x07";
const LOCATOR_LEN: u64 = 20;
const ZIP64_SIG: [u8; 4] = *b"PK\x06\x06";
/// A zip64 end record without extensible data: 12 bytes of signature and size, 44 of fields.
const ZIP64_LEN: u64 = 56;
const ZIP64_FIELDS: u64 = 44;
/// The smallest central-directory header (no name, extra or comment).
pub(super) const CENTRAL_HEADER_LEN: u64 = 46;

/// Where the central directory is, as the end records say and the file confirms.
#[derive(Debug)]
pub(super) struct End {
    pub count: u64,
    pub cd_offset: u64,
    pub cd_size: u64,
}

/// The fields of an end record, 32-bit or zip64.
#[derive(Debug, PartialEq)]
struct Declared {
    disk: u64,
    cd_disk: u64,
    entries_here: u64,
    count: u64,
    cd_size: u64,
    cd_offset: u64,
}

pub(super) fn locate(file: &File<'_>) -> Result<End> {
    let at = last_end_record(file)?;
    let record = file.slice(at, EOCD_LEN).unwrap_or_default();
    let mut f = Fields::new(record);
    f.sig();
    let short = Declared {
        disk: f.u16().into(),
        cd_disk: f.u16().into(),
        entries_here: f.u16().into(),
        count: f.u16().into(),
        cd_size: f.u32().into(),
        cd_offset: f.u32().into(),
    };
    let (declared, records_start) = match zip64(file, at)? {
        Some((long, z64_at)) => {
            agree(file, &short, &long)?;
            (long, z64_at)
        }
        None => (short, at),
    };
    if declared.disk != 0 || declared.cd_disk != 0 || declared.entries_here != declared.count {
        return Err(file.damaged("zip", "archives split across disks are not supported"));
    }
    let cd_end = declared.cd_offset.checked_add(declared.cd_size);
    if cd_end.is_none_or(|end| end > file.len())
        || declared.cd_size < declared.count.saturating_mul(CENTRAL_HEADER_LEN)
    {
        return Err(file.damaged(
            "zip",
            format!(
                "the end record's central directory ({} entries, {} bytes at offset {}) does \
                 not fit the {}-byte file",
                declared.count,
                declared.cd_size,
                declared.cd_offset,
                file.len()
            ),
        ));
    }
    if cd_end != Some(records_start) {
        return Err(file.ambiguous(format!(
            "the end record puts the central directory at offset {} ({} bytes, ending at {}), \
             but the end records begin at offset {records_start}",
            declared.cd_offset,
            declared.cd_size,
            declared.cd_offset + declared.cd_size
        )));
    }
    Ok(End {
        count: declared.count,
        cd_offset: declared.cd_offset,
        cd_size: declared.cd_size,
    })
}

/// The offset of the end record miniz takes: the last signature with a whole record after
/// it. Refused unless its comment ends the file and no earlier record could end it too.
fn last_end_record(file: &File<'_>) -> Result<u64> {
    let len = file.len();
    let window = len.saturating_sub(EOCD_LEN + MAX_COMMENT);
    // The tail is asked for once: of a remote object, one fetch.
    let tail = file.slice(window, len - window).unwrap_or_default();
    let candidates: Vec<u64> = (window..=len.saturating_sub(EOCD_LEN))
        .rev()
        .filter(|&at| {
            let i = (at - window) as usize; // inside the tail, which is in memory
            len >= EOCD_LEN && tail.get(i..i + 4) == Some(&EOCD_SIG[..])
        })
        .collect();
    let Some((&last, earlier)) = candidates.split_first() else {
        return Err(file.damaged(
            "zip",
            "unreadable archive, truncated or damaged (no end-of-central-directory record)",
        ));
    };
    let follows = len - last - EOCD_LEN;
    let comment = comment_len(file, last);
    if comment != follows {
        return Err(file.ambiguous(format!(
            "the end record at offset {last} declares a {comment}-byte comment but {follows} \
             bytes follow it"
        )));
    }
    if let Some(other) = earlier
        .iter()
        .find(|&&at| at + EOCD_LEN + comment_len(file, at) == len)
    {
        return Err(file.ambiguous(format!(
            "two end records could end the archive, at offsets {other} and {last} (the second \
             inside the first one's comment)"
        )));
    }
    Ok(last)
}

fn comment_len(file: &File<'_>, eocd: u64) -> u64 {
    let mut f = Fields::new(file.slice(eocd + 20, 2).unwrap_or_default());
    f.u16().into()
}

/// The zip64 end record a locator right before the end record points at, if there is one,
/// with its offset. miniz follows the locator; zipfile assumes the record sits just before
/// it: both must hold.
fn zip64(file: &File<'_>, eocd: u64) -> Result<Option<(Declared, u64)>> {
    let Some(locator_at) = eocd.checked_sub(LOCATOR_LEN) else {
        return Ok(None);
    };
    let locator = file.slice(locator_at, LOCATOR_LEN).unwrap_or_default();
    let mut f = Fields::new(locator);
    // miniz only looks for a locator where a zip64 record could precede it.
    if eocd < LOCATOR_LEN + ZIP64_LEN || f.sig() != LOCATOR_SIG {
        return Ok(None);
    }
    let _record_disk = f.u32();
    let at = f.u64();
    let disks = f.u32();
    if disks != 1 {
        return Err(file.damaged("zip", "archives split across disks are not supported"));
    }
    let Some(record) = file.slice(at, ZIP64_LEN) else {
        return Err(file.damaged(
            "zip",
            format!("the zip64 locator points past the end of the file (offset {at})"),
        ));
    };
    let mut f = Fields::new(record);
    let sig = f.sig();
    let size = f.u64();
    if sig != ZIP64_SIG {
        // miniz then silently falls back to the 32-bit end record; zipfile fails.
        return Err(file.ambiguous(format!(
            "the zip64 locator at offset {locator_at} points at offset {at}, where there is no \
             zip64 end record"
        )));
    }
    if size != ZIP64_FIELDS || at.checked_add(ZIP64_LEN) != Some(locator_at) {
        return Err(file.ambiguous(format!(
            "the zip64 end record at offset {at} ({size} bytes of fields) does not end where \
             its locator begins, at offset {locator_at}"
        )));
    }
    let _made_by = f.u16();
    let _needed = f.u16();
    let declared = Declared {
        disk: f.u32().into(),
        cd_disk: f.u32().into(),
        entries_here: f.u64(),
        count: f.u64(),
        cd_size: f.u64(),
        cd_offset: f.u64(),
    };
    Ok(Some((declared, at)))
}

/// The 32-bit end record must say what the zip64 one says, or hold the all-ones placeholder:
/// a reader that ignores zip64 must not find another directory.
fn agree(file: &File<'_>, short: &Declared, long: &Declared) -> Result<()> {
    let pairs = [
        ("disk number", short.disk, long.disk, 0xFFFF),
        (
            "central directory disk",
            short.cd_disk,
            long.cd_disk,
            0xFFFF,
        ),
        (
            "entries on this disk",
            short.entries_here,
            long.entries_here,
            0xFFFF,
        ),
        ("entry count", short.count, long.count, 0xFFFF),
        (
            "central directory size",
            short.cd_size,
            long.cd_size,
            0xFFFF_FFFF,
        ),
        (
            "central directory offset",
            short.cd_offset,
            long.cd_offset,
            0xFFFF_FFFF,
        ),
    ];
    match pairs
        .iter()
        .find(|(_, a, b, saturated)| a != b && a != saturated)
    {
        Some((what, a, b, _)) => Err(file.ambiguous(format!(
            "the end record and the zip64 end record disagree on the {what} ({a} and {b})"
        ))),
        None => Ok(()),
    }
}
