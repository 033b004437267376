//! Entry names as miniz compares them (`mz_zip_filename_compare`): ignoring ASCII case, its
//! central directory sorted so and binary-searched (`mz_zip_locate_file_binary_search`).
//! tensorplay refuses two names equal ignoring case, so that search has at most one answer,
//! the one a table hashed on the lowercased names gives; a name asked for in pieces (the
//! archive's folder, a record folder, a key) is compared piece by piece.

use super::central::Entry;
use super::File;
use crate::error::Result;
use hashbrown::hash_table::{Entry as Slot, HashTable};
use std::hash::BuildHasher;

/// The entries by name ignoring ASCII case: what miniz's sorted directory finds, each name
/// hashed once rather than the directory sorted.
#[derive(Debug)]
pub(super) struct Names {
    table: HashTable<usize>,
    // Seeded at random: crafted names cannot be made to fall in one slot.
    hasher: foldhash::fast::RandomState,
}

/// The hash of `name` lowercased: on the stack, as nearly every name is short.
fn caseless_hash(hasher: &foldhash::fast::RandomState, name: &[u8]) -> u64 {
    let mut short = [0u8; 64];
    let Some(lower) = short.get_mut(..name.len()) else {
        return hasher.hash_one(name.to_ascii_lowercase().as_slice());
    };
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    hasher.hash_one(&*lower)
}

/// Refuses two names that are one to miniz (equal ignoring ASCII case); returns the entries
/// indexed by name, as [`search`] finds them.
pub(super) fn unique_names(file: &File<'_>, entries: &[Entry]) -> Result<Names> {
    let name = |i: usize| entries.get(i).map_or(&[][..], |e| e.name.as_bytes());
    let hasher = foldhash::fast::RandomState::default();
    let mut table = HashTable::with_capacity(entries.len());
    // In directory order, each name's first entry kept: the first repeat met is the first
    // entry, in directory order, whose name an earlier one already had, paired with the
    // earliest entry of that name.
    let mut duplicate = None;
    for (i, entry) in entries.iter().enumerate() {
        let hash = caseless_hash(&hasher, entry.name.as_bytes());
        let same = |&j: &usize| name(j).eq_ignore_ascii_case(entry.name.as_bytes());
        let rehash = |&j: &usize| caseless_hash(&hasher, name(j));
        match table.entry(hash, same, rehash) {
            Slot::Occupied(first) => {
                duplicate = Some((*first.get(), i));
                break;
            }
            Slot::Vacant(slot) => {
                slot.insert(i);
            }
        }
    }
    let Some((first, i)) = duplicate else {
        return Ok(Names { table, hasher });
    };
    let text = |i: usize| entries.get(i).map_or("", |e| e.name.as_str());
    let (other, this) = (text(first), text(i));
    Err(file.ambiguous(if other == this {
        format!("two entries are named '{this}' (central directory entries {first} and {i})")
    } else {
        format!(
            "entries '{other}' and '{this}' differ only in case, and PyTorch's reader matches \
             names ignoring case (central directory entries {first} and {i})"
        )
    }))
}

/// The index of the entry named `folders` and `last` joined by '/' ignoring case (empty
/// folders left out), found in `names`, the entries [`unique_names`] indexed.
pub(super) fn search(
    names: &Names,
    entries: &[Entry],
    folders: &[&str],
    last: &str,
) -> Option<usize> {
    let mut joined = Vec::new();
    for folder in folders.iter().filter(|f| !f.is_empty()) {
        joined.extend_from_slice(folder.as_bytes());
        joined.push(b'/');
    }
    joined.extend_from_slice(last.as_bytes());
    let hash = caseless_hash(&names.hasher, &joined);
    let named = |&i: &usize| {
        entries
            .get(i)
            .is_some_and(|e| e.name.as_bytes().eq_ignore_ascii_case(&joined))
    };
    names.table.find(hash, named).copied()
}

/// Whether `name` is `folders` and `last` joined by '/' (empty folders left out), ignoring
/// ASCII case, compared piece by piece instead of joined: byte for byte first, as records
/// are asked for as they are written, and the caseless comparison goes a byte at a time.
pub(super) fn is_joined(name: &[u8], folders: &[&str], last: &str) -> bool {
    joined_rest(name, folders, <[u8]>::starts_with).is_some_and(|rest| rest == last.as_bytes())
        || joined_rest(name, folders, |head, folder| {
            head.get(..folder.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(folder))
        })
        .is_some_and(|rest| rest.eq_ignore_ascii_case(last.as_bytes()))
}

/// What is left of `name` past `folders`, each followed by '/', where `starts` says it
/// begins with each.
fn joined_rest<'n>(
    name: &'n [u8],
    folders: &[&str],
    starts: impl Fn(&[u8], &[u8]) -> bool,
) -> Option<&'n [u8]> {
    let mut rest = name;
    for folder in folders.iter().filter(|f| !f.is_empty()) {
        let folder = folder.as_bytes();
        if !starts(rest, folder) {
            return None;
        }
        rest = rest.get(folder.len()..)?.strip_prefix(b"/")?;
    }
    Some(rest)
}
