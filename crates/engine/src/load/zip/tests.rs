//! Archives built byte by byte the way torch's writer lays them out (stored, data descriptors,
//! zip64 end records), then bent one field at a time.

use super::Zip;
use crate::load::limits::{Meter, ReadLimits};
use std::io::Write;
use std::path::Path;

struct Member {
    name: &'static str,
    data: Vec<u8>,
    method: u16,
    size: u64,
    descriptor: bool,
    external: u32,
    /// Bytes written after the member's data (and descriptor), belonging to nothing.
    after: Vec<u8>,
}

fn stored(name: &'static str, data: &[u8]) -> Member {
    Member {
        name,
        data: data.to_vec(),
        method: 0,
        size: data.len() as u64,
        descriptor: true,
        external: 0,
        after: Vec::new(),
    }
}

const CRC: u32 = 0x1234_5678;

/// The archive's bytes and where its parts begin.
struct Built {
    bytes: Vec<u8>,
    local: Vec<usize>,
    central: Vec<usize>,
    z64: usize,
    eocd: usize,
}

fn build(members: &[Member], lead: &[u8]) -> Built {
    let mut out = lead.to_vec();
    let mut local = Vec::new();
    for m in members {
        local.push(out.len());
        let flags: u16 = if m.descriptor { 0x0808 } else { 0x0800 };
        let (crc, csize, size) = if m.descriptor {
            (0, 0, 0)
        } else {
            (CRC, m.data.len() as u32, m.size as u32)
        };
        out.extend(b"PK\x03\x04");
        for v in [0u16, flags, m.method, 0, 0] {
            out.extend(v.to_le_bytes());
        }
        for v in [crc, csize, size] {
            out.extend(v.to_le_bytes());
        }
        out.extend((m.name.len() as u16).to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(m.name.as_bytes());
        out.extend(&m.data);
        if m.descriptor {
            out.extend(b"PK\x07\x08");
            for v in [CRC, m.data.len() as u32, m.size as u32] {
                out.extend(v.to_le_bytes());
            }
        }
        out.extend(&m.after);
    }
    let cd = out.len();
    let mut central = Vec::new();
    for (m, &at) in members.iter().zip(&local) {
        central.push(out.len());
        let flags: u16 = if m.descriptor { 0x0808 } else { 0x0800 };
        out.extend(b"PK\x01\x02");
        for v in [0u16, 0, flags, m.method, 0, 0] {
            out.extend(v.to_le_bytes());
        }
        for v in [CRC, m.data.len() as u32, m.size as u32] {
            out.extend(v.to_le_bytes());
        }
        for v in [m.name.len() as u16, 0, 0, 0, 0] {
            out.extend(v.to_le_bytes());
        }
        out.extend(m.external.to_le_bytes());
        out.extend((at as u32).to_le_bytes());
        out.extend(m.name.as_bytes());
    }
    let (cd_size, count) = ((out.len() - cd) as u64, members.len() as u64);
    let z64 = out.len();
    out.extend(b"PK\x06\x06");
    out.extend(44u64.to_le_bytes());
    out.extend([0x1e, 0x03, 0x2d, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]);
    for v in [count, count, cd_size, cd as u64] {
        out.extend(v.to_le_bytes());
    }
    out.extend(b"PK\x06\x07");
    out.extend(0u32.to_le_bytes());
    out.extend((z64 as u64).to_le_bytes());
    out.extend(1u32.to_le_bytes());
    let eocd = out.len();
    out.extend(b"PK\x05\x06");
    for v in [0u16, 0, count as u16, count as u16] {
        out.extend(v.to_le_bytes());
    }
    out.extend((cd_size as u32).to_le_bytes());
    out.extend((cd as u32).to_le_bytes());
    out.extend(0u16.to_le_bytes());
    Built {
        bytes: out,
        local,
        central,
        z64,
        eocd,
    }
}

fn two() -> Vec<Member> {
    vec![
        stored("a/data.pkl", b"\x80\x02N."),
        stored("a/data/0", &[7; 8]),
    ]
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// The reader's verdict: `Ok` names, or the error's text after the path.
fn open(bytes: &[u8]) -> Result<Vec<String>, String> {
    Zip::open(Path::new("t.pt"), bytes, &Meter::default())
        .map(|z| z.entries().iter().map(|e| e.name.clone()).collect())
        .map_err(|e| e.to_string().trim_start_matches("t.pt: ").to_owned())
}

#[track_caller]
fn refused(bytes: &[u8], expected: &str) {
    match open(bytes) {
        Ok(names) => panic!("read as {names:?}; expected: {expected}"),
        Err(e) => assert!(e.contains(expected), "{e}\nexpected: {expected}"),
    }
}

#[test]
fn reads_torch_layout_and_finds_names_ignoring_case() {
    let built = build(&two(), b"");
    let zip = Zip::open(Path::new("t.pt"), &built.bytes, &Meter::default()).expect("reads");
    let names: Vec<&str> = zip.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a/data.pkl", "a/data/0"]);
    let entry = zip.find("A/DATA/0").expect("found ignoring case");
    assert_eq!(&*zip.read(entry).expect("read"), &[7; 8]);
    assert_eq!(entry.data_start(), 60 + 30 + 8);
    assert!(zip.find("a/data/1").is_none());
}

#[test]
fn the_directory_is_held_against_the_budget_before_it_is_read() {
    let built = build(&two(), b"");
    let meter = |max_memory| {
        Meter::new(ReadLimits {
            max_memory,
            ..ReadLimits::default()
        })
    };
    let roomy = meter(1 << 20);
    Zip::open(Path::new("t.pt"), &built.bytes, &roomy).expect("reads");
    let held = roomy.held();
    // Two entries and their names: more than the names alone, far less than a page.
    assert!((2 * 18..4096).contains(&held), "{held}");
    let e = Zip::open(Path::new("t.pt"), &built.bytes, &meter(held - 1))
        .err()
        .expect("refused");
    assert_eq!(
        e.to_string(),
        format!(
            "t.pt: exceeds the memory budget ({held} > {}): the central directory's 2 entries",
            held - 1
        )
    );
}

#[test]
fn without_zip64_or_descriptors_it_reads_too() {
    let mut members = two();
    for m in &mut members {
        m.descriptor = false;
    }
    let mut built = build(&members, b"");
    // Drop the zip64 record and locator: a plain 32-bit archive, as Python's zipfile writes.
    let eocd = built.bytes.split_off(built.eocd);
    built.bytes.truncate(built.z64);
    built.bytes.extend(eocd);
    assert_eq!(
        open(&built.bytes).expect("reads"),
        ["a/data.pkl", "a/data/0"]
    );
}

#[test]
fn deflated_members_inflate_to_exactly_their_size() {
    let text = b"tensorplay tensorplay tensorplay tensorplay".to_vec();
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&text).unwrap();
    let compressed = enc.finish().unwrap();
    let member = |size| Member {
        method: 8,
        size,
        ..stored("a/data.pkl", &compressed)
    };
    let built = build(&[member(text.len() as u64)], b"");
    let zip = Zip::open(Path::new("t.pt"), &built.bytes, &Meter::default()).expect("reads");
    assert_eq!(&*zip.read(&zip.entries()[0]).unwrap(), &text[..]);
    assert_eq!(&*zip.peek(&zip.entries()[0], 4).unwrap(), b"tens");

    let built = build(&[member(text.len() as u64 - 1)], b"");
    let zip = Zip::open(Path::new("t.pt"), &built.bytes, &Meter::default()).expect("opens");
    let e = zip.read(&zip.entries()[0]).unwrap_err().to_string();
    assert_eq!(e, "t.pt: a/data.pkl: inflates past its declared 42 bytes");
}

#[test]
fn two_entries_of_one_name_are_ambiguous_even_in_different_case() {
    let mut members = two();
    members.push(stored("a/data.pkl", b"\x80\x02N."));
    refused(
        &build(&members, b"").bytes,
        "ambiguous archive: two entries are named 'a/data.pkl' (central directory entries 0 and 2)",
    );
    members[2].name = "a/Data.PKL";
    refused(
        &build(&members, b"").bytes,
        "ambiguous archive: entries 'a/data.pkl' and 'a/Data.PKL' differ only in case",
    );
}

#[test]
fn bytes_outside_every_entry_are_ambiguous() {
    refused(
        &build(&two(), b"junk").bytes,
        "ambiguous archive: 4 bytes that belong to no entry lie between the start of the file \
         and entry 'a/data.pkl' (offset 0)",
    );
    let mut members = two();
    members[0].after = b"PK\x03\x04 hidden".to_vec();
    refused(
        &build(&members, b"").bytes,
        "ambiguous archive: 11 bytes that belong to no entry lie between entry 'a/data.pkl' and \
         entry 'a/data/0' (offset 60)",
    );
    let mut members = two();
    members[1].after = vec![0; 3];
    refused(
        &build(&members, b"").bytes,
        "3 bytes that belong to no entry lie between entry 'a/data/0' and the central directory",
    );
}

#[test]
fn an_entry_inside_another_is_ambiguous() {
    // a/outer's data is a whole local record of a/inner; both are listed.
    let inner = build(&[stored("a/inner", b"xyz")], b"");
    let record = inner.bytes[..inner.local[0] + 30 + 7 + 3 + 16].to_vec();
    let mut built = build(
        &[stored("a/outer", &record), stored("a/inner", b"xyz")],
        b"",
    );
    let inner_at = (30 + 7) as u32;
    put(
        &mut built.bytes,
        built.central[1] + 42,
        &inner_at.to_le_bytes(),
    );
    refused(
        &built.bytes,
        "ambiguous archive: entry 'a/inner' at offset 37 overlaps entry 'a/outer'",
    );
}

#[test]
fn local_headers_must_repeat_the_central_directory() {
    let built = build(&two(), b"");
    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.local[1] + 30, b"b");
    refused(
        &bytes,
        "ambiguous archive: entry 'a/data/0': its local header at offset 60 names it 'b/data/0'",
    );

    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.local[1] + 8, &8u16.to_le_bytes());
    refused(&bytes, "its local header at offset 60 says flags 0x0808 and method 8, the central directory 0x0808 and 0");

    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.local[1] + 22, &9u32.to_le_bytes());
    refused(&bytes, "its local header at offset 60 says 9 bytes");

    let descriptor = built.local[1] + 30 + 8 + 8;
    let mut bytes = built.bytes.clone();
    put(&mut bytes, descriptor + 8, &7u32.to_le_bytes());
    refused(
        &bytes,
        "entry 'a/data/0': its data descriptor at offset 106 does not repeat the central",
    );

    let mut members = two();
    members[1].descriptor = false;
    let mut built = build(&members, b"");
    put(&mut built.bytes, built.local[1] + 18, &4u32.to_le_bytes());
    refused(&built.bytes, "says 8 bytes (4 in the file");
}

#[test]
fn the_end_record_must_be_the_only_one_and_end_the_file() {
    let mut bytes = build(&two(), b"").bytes;
    bytes.extend(b"abc");
    refused(
        &bytes,
        "ambiguous archive: the end record at offset 308 declares a 0-byte comment but 3 bytes \
         follow it",
    );

    // A second end record in the first one's comment: miniz takes the second.
    let built = build(&two(), b"");
    let mut bytes = built.bytes.clone();
    let fake = bytes[built.eocd..].to_vec();
    put(
        &mut bytes,
        built.eocd + 20,
        &(fake.len() as u16).to_le_bytes(),
    );
    bytes.extend(fake);
    refused(
        &bytes,
        "ambiguous archive: two end records could end the archive, at offsets 308 and 330",
    );

    refused(
        &built.bytes[..built.eocd],
        "zip: unreadable archive, truncated or damaged (no end-of-central-directory record)",
    );
}

#[test]
fn the_central_directory_must_be_where_the_end_records_say() {
    let built = build(&two(), b"");
    // zip64 and 32-bit records agree on another offset.
    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.z64 + 48, &48u64.to_le_bytes());
    put(&mut bytes, built.eocd + 16, &48u32.to_le_bytes());
    refused(
        &bytes,
        "ambiguous archive: the end record puts the central directory at offset 48 (110 bytes, \
         ending at 158), but the end records begin at offset 232",
    );

    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.eocd + 16, &48u32.to_le_bytes());
    refused(
        &bytes,
        "ambiguous archive: the end record and the zip64 end record disagree on the central \
         directory offset (48 and 122)",
    );
    // All ones in the 32-bit record defers to zip64.
    put(&mut bytes, built.eocd + 16, &u32::MAX.to_le_bytes());
    assert!(open(&bytes).is_ok());

    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.eocd - 12, &0u64.to_le_bytes());
    refused(
        &bytes,
        "ambiguous archive: the zip64 locator at offset 288 points at offset 0, where there is \
         no zip64 end record",
    );
}

#[test]
fn the_central_directory_holds_its_entries_and_nothing_else() {
    let built = build(&two(), b"");
    let mut bytes = built.bytes.clone();
    // One entry fewer in both end records: the second entry's header is left over.
    put(&mut bytes, built.z64 + 24, &1u64.to_le_bytes());
    put(&mut bytes, built.z64 + 32, &1u64.to_le_bytes());
    put(&mut bytes, built.eocd + 8, &[1, 0, 1, 0]);
    refused(
        &bytes,
        "ambiguous archive: the central directory at offset 122 holds 54 bytes after its 1 \
         entries",
    );
}

#[test]
fn a_folder_with_bytes_and_names_that_are_not_text_are_ambiguous() {
    let mut members = two();
    members[1].external = 0x10;
    refused(
        &build(&members, b"").bytes,
        "ambiguous archive: entry 'a/data/0' is marked as a folder but holds 8 bytes",
    );
    let built = build(&two(), b"");
    let mut bytes = built.bytes.clone();
    put(&mut bytes, built.central[1] + 46 + 2, b"\xff");
    refused(
        &bytes,
        "the name of central entry 1 (offset 178) is not UTF-8 text",
    );
}
