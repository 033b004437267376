//! Archives built byte by byte the way torch's writer lays them out (stored, data descriptors,
//! zip64 end records), then bent one field at a time.

use super::{names, File, Zip};
use crate::load::limits::{Meter, ReadLimits};
use crate::HostBuffer;
use std::io::Write;

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
    Zip::open(
        &HostBuffer::from_vec("t.pt", bytes.to_vec()),
        &Meter::default(),
    )
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
    let buffer = HostBuffer::from_vec("t.pt", built.bytes.clone());
    let zip = Zip::open(&buffer, &Meter::default()).expect("reads");
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
    let buffer = HostBuffer::from_vec("t.pt", built.bytes.clone());
    Zip::open(&buffer, &roomy).expect("reads");
    let held = roomy.held();
    // Two entries and their names: more than the names alone, far less than a page.
    assert!((2 * 18..4096).contains(&held), "{held}");
    let buffer = HostBuffer::from_vec("t.pt", built.bytes.clone());
    let e = Zip::open(&buffer, &meter(held - 1)).err().expect("refused");
    assert_eq!(
        e.to_string(),
        format!(
            "t.pt: exceeds the memory budget (--max-memory): the read would hold {held} bytes, \
             more than the {} bytes allowed, for the central directory's 2 entries",
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
    let buffer = HostBuffer::from_vec("t.pt", built.bytes.clone());
    let zip = Zip::open(&buffer, &Meter::default()).expect("reads");
    assert_eq!(&*zip.read(&zip.entries()[0]).unwrap(), &text[..]);
    assert_eq!(&*zip.peek(&zip.entries()[0], 4).unwrap(), b"tens");

    let built = build(&[member(text.len() as u64 - 1)], b"");
    let buffer = HostBuffer::from_vec("t.pt", built.bytes.clone());
    let zip = Zip::open(&buffer, &Meter::default()).expect("opens");
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

/// The joined name `position` looks for: empty folders left out, the last piece kept.
fn joined(folders: &[&str], last: &str) -> String {
    let mut pieces: Vec<&str> = folders.iter().copied().filter(|f| !f.is_empty()).collect();
    pieces.push(last);
    pieces.join("/")
}

/// What every lookup must agree with: the lowercased copies, equal as bytes.
#[allow(clippy::manual_ignore_case_cmp)] // the copies are the reference, not the shortcut
fn reference(a: &str, b: &str) -> bool {
    a.to_ascii_lowercase() == b.to_ascii_lowercase()
}

/// Names to compare: differing in case or in one byte early and late; '@', '[', '`' and '{'
/// (next to the letters, one bit from a capital or a small letter); letters beyond ASCII,
/// whose lead bytes' low bits look like capitals ('Ł' is 0xC5 0x81, 'Ż' 0xC5 0xBB);
/// prefixes of one another.
const NAMES: &str = "|a|A|a/|a/b|A/B|a/bc|a/b/c|a/B/C|ab|a0|a.|a_|b|[|`|Z|z|arch/data/1\
                     |arch/data/10|arch/Data/1|arch/data|arch/|archive/|archive/data/1234567\
                     |archive/data/12345678|ARCHIVE/DATA/12345678|archive/data/123456789\
                     |archive/data/12345678X|archive/data/12345678x|archive/data/12345678[\
                     |archive/data/12345678`|archive/data/1234567890123456\
                     |archive/data/1234567890123457|archive/data/123456789012345A\
                     |archive/data/123456789012345a|ARCHIVE/@ATA/x|archive/[ata/x|archive/`ata/x\
                     |archive/{ata/x|archive/Żata/x|archive/zata/x|archive/ŻATA/x|archive/źata/x\
                     |archive/ŁATA/x|archive/eata/x|Łarchive|łarchive|earchive|жarchive|大archive\
                     |@rchive/data/1|`rchive/data/1|[rchive/|{rchive/|Zarchive|zarchive|[rchive\
                     |`rchive|{rchive|Arch1ve|aRCH1VE|Arch1ve/@|Arch1ve/[";

#[test]
fn joined_names_match_as_their_lowercased_join() {
    let queries: [(&[&str], &str); 17] = [
        (&[], ""),
        (&[], "a"),
        (&["a"], ""),
        (&["a"], "b"),
        (&["A", "b"], "C"),
        (&["", "a", ""], "b"),
        (&["a"], "bc"),
        (&["arch", "data"], "1"),
        (&["ARCH", "", "data"], "10"),
        (&["arch"], "data/1"),
        (&["arch"], "data"),
        (&["arch", "data"], ""),
        (&["ar", "ch"], "data"),
        (&[""], "_"),
        (&["archive", "DATA"], "12345678"),
        (&["Archive", "data"], "12345678x"),
        (&["archive/data", ""], "1234567890123456"),
    ];
    for name in NAMES.split('|') {
        for (folders, last) in queries {
            assert_eq!(
                names::is_joined(name.as_bytes(), folders, last),
                reference(name, &joined(folders, last)),
                "{name:?} is {folders:?} {last:?}"
            );
        }
    }
}

/// Entries named `names`, nothing else read from them.
fn named_entries(names: &[String]) -> Vec<super::Entry> {
    names
        .iter()
        .map(|name| super::Entry {
            name: name.clone(),
            flags: 0,
            method: 0,
            crc: 0,
            compressed: 0,
            size: 0,
            local_offset: 0,
            zip64: false,
            data_start: 0,
        })
        .collect()
}

#[test]
fn every_name_is_found_in_any_case_and_no_other() {
    // Each list as is and under shared folders, one making every name too long to hash on
    // the stack; zero bytes, letters beyond ASCII and names that are prefixes of one another.
    let mut base: Vec<String> = Vec::new();
    for name in NAMES.split('|').chain(["a\0", "a\0\0b", "a\0B", "a\x01"]) {
        if !base.iter().any(|b| b.eq_ignore_ascii_case(name)) {
            base.push(name.to_owned());
        }
    }
    let long = "A/Folder/Name/Longer/Than/The/Sixty/Four/Bytes/Hashed/On/The/Stack/";
    for folder in ["", "Shared/Folder/", "shared/", long] {
        let names: Vec<String> = base.iter().map(|n| format!("{folder}{n}")).collect();
        let entries = named_entries(&names);
        let empty = HostBuffer::from_vec("t.pt", Vec::new());
        let file = File::new(&empty);
        let index = names::unique_names(&file, &entries).expect("unique");
        for (i, name) in names.iter().enumerate() {
            for asked in [
                name.clone(),
                name.to_ascii_uppercase(),
                name.to_ascii_lowercase(),
            ] {
                let found = names::search(&index, &entries, &[], &asked);
                assert_eq!(found, Some(i), "{asked:?} under {folder:?}");
            }
            let longer = format!("{name}x");
            if !names.iter().any(|n| reference(n, &longer)) {
                assert_eq!(names::search(&index, &entries, &[], &longer), None);
            }
        }
    }
}

#[test]
fn the_search_finds_what_a_scan_ignoring_case_finds() {
    // Names alike in long runs (as a checkpoint's records are), in several cases and depths.
    let mut names: Vec<String> = (0..300).map(|i| format!("arch/data/{i}")).collect();
    names.extend((0..40).map(|i| format!("arch/DATA/{i}x")));
    names.extend((0..40).map(|i| format!("arch/data/{i}/y")));
    names.extend(
        [
            "arch/data.pkl",
            "arch/Data",
            "arch/datA/",
            "arch/constants/0",
            "arch/b",
        ]
        .map(String::from),
    );
    let entries = named_entries(&names);
    let empty = HostBuffer::from_vec("t.pt", Vec::new());
    let file = File::new(&empty);
    let index = names::unique_names(&file, &entries).expect("unique");
    let mut queries: Vec<(Vec<&str>, String)> = Vec::new();
    for i in 0..400 {
        for (folders, last) in [
            (vec!["arch", "data"], format!("{i}")),
            (vec!["ARCH", "data"], format!("{i}X")),
            (vec!["arch", "", "Data"], format!("{i}/Y")),
            (vec!["arch"], format!("data/{i}")),
            (vec!["", "arch"], format!("DATA/{i}/")),
        ] {
            queries.push((folders, last));
        }
    }
    for (folders, last) in [
        (vec!["arch"], "data.pkl"),
        (vec!["arch"], "data"),
        (vec!["arch", "data"], ""),
        (vec!["arch"], "b"),
        (vec!["arch"], "a"),
        (vec!["arch"], "c"),
        (vec![], ""),
        (vec!["arch", "constants"], "0"),
    ] {
        queries.push((folders, last.to_owned()));
    }
    let mut found = 0;
    for (folders, last) in &queries {
        let want = joined(folders, last).to_ascii_lowercase();
        let scan = names.iter().position(|n| n.to_ascii_lowercase() == want);
        let searched = names::search(&index, &entries, folders, last);
        assert_eq!(searched, scan, "{folders:?} {last:?}");
        found += usize::from(scan.is_some());
    }
    // Most are there, some are not: both answers are checked.
    assert_eq!((queries.len(), found), (2008, 685));
}

#[test]
fn records_are_found_under_their_folders_ignoring_case() {
    let members = vec![
        stored("Arch/data.pkl", b"\x80\x02N."),
        stored("arch/data/1", &[1]),
        stored("arch/DATA/10", &[10]),
        stored("arch/data/1x", &[11]),
        stored("arch/data/", b""),
        stored("arch/version", b"3\n"),
    ];
    let built = build(&members, b"");
    let buffer = HostBuffer::from_vec("t.pt", built.bytes.clone());
    let zip = Zip::open(&buffer, &Meter::default()).expect("reads");
    let at = |folders: &[&str], name: &str| zip.position(folders, name);
    assert_eq!(at(&["arch"], "data.pkl"), Some(0));
    assert_eq!(at(&["ARCH", "data"], "1"), Some(1));
    // A name that is a prefix of others, and one that others are a prefix of.
    assert_eq!(at(&["arch", "data"], "10"), Some(2));
    assert_eq!(at(&["arch", "Data"], "1X"), Some(3));
    assert_eq!(at(&["arch", "data"], "100"), None);
    assert_eq!(at(&["arch", "data"], "0"), None);
    // Empty folders are left out; an empty name still ends the joined name with '/'.
    assert_eq!(at(&["", "arch", ""], "version"), Some(5));
    assert_eq!(at(&["arch", "data"], ""), Some(4));
    assert_eq!(at(&["arch"], "data"), None);
    assert_eq!(at(&[], "arch/data/10"), Some(2));
    assert_eq!(at(&["arch/data"], "10"), Some(2));
    assert_eq!(at(&["arc", "h"], "version"), None);
    assert_eq!(
        zip.find("ARCH/VERSION").map(|e| e.name.as_str()),
        Some("arch/version")
    );
    assert!(zip.find("arch").is_none());
    // A guess is taken only when it names the record (ignoring case), else the search runs;
    // a guess past the end is no answer.
    for guess in 0..8 {
        let from = |folders: &[&str], name: &str| zip.position_from(guess, folders, name);
        assert_eq!(from(&["arch", "data"], "10"), Some(2), "{guess}");
        assert_eq!(from(&["ARCH", "data"], "1"), Some(1), "{guess}");
        assert_eq!(from(&["arch", "data"], "100"), None, "{guess}");
        assert_eq!(from(&["arch"], "data"), None, "{guess}");
    }
}

#[test]
fn of_several_names_equal_ignoring_case_the_first_repeat_in_directory_order_is_reported() {
    // Each case: its names in directory order, and the pair reported.
    let cases: [(&[&str], &str); 3] = [
        // "b" repeats at entry 2, before "a" repeats at entry 3, though "a" sorts first.
        (
            &["a/b", "a/a", "a/B", "a/A", "a/b"],
            "ambiguous archive: entries 'a/b' and 'a/B' differ only in case, and PyTorch's \
             reader matches names ignoring case (central directory entries 0 and 2)",
        ),
        (
            &["a/x", "a/c", "a/C", "a/c"],
            "entries 'a/c' and 'a/C' differ only in case, and PyTorch's reader matches names \
             ignoring case (central directory entries 1 and 2)",
        ),
        (
            &["a/y", "a/x", "a/X", "a/Y"],
            "entries 'a/x' and 'a/X' differ only in case, and PyTorch's reader matches names \
             ignoring case (central directory entries 1 and 2)",
        ),
    ];
    const DATA: [&[u8]; 5] = [b"1", b"2", b"3", b"4", b"5"];
    for (names, expected) in cases {
        let members: Vec<Member> = names
            .iter()
            .zip(DATA)
            .map(|(&name, data)| stored(name, data))
            .collect();
        refused(&build(&members, b"").bytes, expected);
    }
}

/// An `.npy` holding an object array whose pickle calls `os.system`.
fn object_npy(pickle: &[u8]) -> Vec<u8> {
    let mut header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }".to_owned();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(pickle);
    out
}

#[test]
fn members_other_loaders_read_are_judged_whatever_their_name_or_first_byte() {
    use crate::{load::from_buffer, HostBuffer};
    let call = b"cos\nsystem\n(S'true'\ntR.";
    let npy = object_npy(&[b"\x80\x02".as_slice(), call].concat());
    // A 600-byte first operand: no window shows the call after it.
    let mut long = vec![b'X'];
    long.extend(600u32.to_le_bytes());
    long.extend([b'a'; 600]);
    long.push(b'0');
    long.extend(b"cposix\nsystem\n(S'true'\ntR.");
    let members = [
        stored("a/data.pkl", b"\x80\x02}."),
        stored("a/extra/x.npy", &npy),
        stored("a/notes", &long),
        stored("a/version", b"3\n"),
    ];
    let bytes = build(&members, b"").bytes;
    let ckpt = from_buffer(HostBuffer::from_vec("t.pt", bytes)).expect("reads");
    let named: Vec<String> = ckpt
        .unsafe_globals
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect();
    assert_eq!(
        named,
        ["os.system", "posix.system"],
        "{:?}",
        ckpt.unsafe_globals
    );
    // A plain array and text members run nothing.
    let plain =
        b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    let mut plain = plain.to_vec();
    plain.resize(10 + 0x76 - 1, b' ');
    plain.push(b'\n');
    plain.extend([0; 4]);
    let members = [
        stored("a/data.pkl", b"\x80\x02}."),
        stored("a/extra/y.npy", &plain),
        stored("a/README", b"Some text\n"),
    ];
    let bytes = build(&members, b"").bytes;
    let ckpt = from_buffer(HostBuffer::from_vec("t.pt", bytes)).expect("reads");
    assert!(ckpt.unsafe_globals.is_empty(), "{:?}", ckpt.unsafe_globals);
}
