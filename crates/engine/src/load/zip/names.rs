//! Entry names as miniz compares them (`mz_zip_filename_compare`): ignoring ASCII case, its
//! central directory sorted so and binary-searched (`mz_zip_locate_file_binary_search`).
//! Names are compared in place, never lowercased into copies, and a name asked for in pieces
//! (the archive's folder, a record folder, a key) is compared piece by piece, never joined.

use super::central::Entry;
use super::File;
use crate::error::Result;
use std::cmp::Ordering;

/// Refuses two names that are one to miniz (equal ignoring ASCII case); returns the entry
/// indices sorted by name ignoring case, the order [`search`] relies on.
pub(super) fn unique_names(file: &File<'_>, entries: &[Entry]) -> Result<Vec<usize>> {
    let name = |i: usize| entries.get(i).map_or(&[][..], |e| e.name.as_bytes());
    let sorted = sort_caseless(entries.len(), name);
    // The error names the first entry, in directory order, whose name an earlier one already
    // had, and that earlier one: of each run of equal names, its first two indices; of the
    // runs, the one whose second index comes first. Every adjacent equal pair is (a, b) with
    // a < b, and a run's smallest such b is its second index, so the least b over all pairs
    // gives that pair.
    let duplicate = sorted
        .windows(2)
        .filter_map(|pair| match *pair {
            [a, b] if cmp_caseless(name(a), name(b)).0.is_eq() => Some((a, b)),
            _ => None,
        })
        .min_by_key(|&(_, b)| b);
    let Some((first, i)) = duplicate else {
        return Ok(sorted);
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

/// Indices `0..count` ordered by `name` ignoring ASCII case, ties in index order.
///
/// A hundred thousand records share their folder and differ in a few bytes: each index is
/// packed below the twelve bytes that follow the prefix all names share (lowercased, padded
/// with zeros: an order the full comparison agrees with) and the numbers sorted as numbers;
/// only names whose twelve bytes agree are then compared in full.
fn sort_caseless<'n>(count: usize, name: impl Fn(usize) -> &'n [u8]) -> Vec<usize> {
    const KEY_BYTES: usize = 12;
    // Ties in index order: within names equal ignoring case, the earliest comes first.
    let full = |a: usize, b: usize| cmp_caseless(name(a), name(b)).0.then(a.cmp(&b));
    if u32::try_from(count).is_err() {
        let mut sorted: Vec<usize> = (0..count).collect();
        sorted.sort_unstable_by(|&a, &b| full(a, b));
        return sorted;
    }
    let shared = (1..count)
        .map(|i| cmp_caseless(name(0), name(i)).1)
        .min()
        .unwrap_or(0);
    let mut keyed: Vec<u128> = (0..count)
        .map(|i| {
            let mut key = [0u8; 16];
            let rest = name(i).get(shared..).unwrap_or_default();
            for (k, b) in key.iter_mut().zip(rest.iter().take(KEY_BYTES)) {
                *k = b.to_ascii_lowercase();
            }
            u128::from_be_bytes(key) | i as u128
        })
        .collect();
    keyed.sort_unstable();
    let index = |packed: u128| (packed & u128::from(u32::MAX)) as usize;
    for run in keyed.chunk_by_mut(|a, b| a >> 32 == b >> 32) {
        if run.len() > 1 {
            run.sort_unstable_by(|&a, &b| full(index(a), index(b)));
        }
    }
    keyed.into_iter().map(index).collect()
}

/// The index of the entry named `folders` and `last` joined by '/' ignoring case (empty
/// folders left out), found in `sorted`, the entry indices [`unique_names`] sorted.
///
/// A plain binary search would compare every probed name from its first byte, though under
/// one folder the names share most of theirs. All names between two probes share with the
/// name sought whatever both probes share with it (the order is lexicographic), so each
/// comparison starts past the lesser of the two agreements that bound the range.
pub(super) fn search(
    sorted: &[usize],
    entries: &[Entry],
    folders: &[&str],
    last: &str,
) -> Option<usize> {
    let (mut lo, mut hi) = (0, sorted.len());
    // How many leading bytes the names just below `lo` and at `hi` share with the one sought;
    // none where the range reaches an end.
    let (mut lo_agrees, mut hi_agrees) = (0, 0);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let &index = sorted.get(mid)?;
        let name = entries.get(index)?.name.as_bytes();
        let (order, agrees) = cmp_joined(name, folders, last, lo_agrees.min(hi_agrees));
        match order {
            Ordering::Less => (lo, lo_agrees) = (mid + 1, agrees),
            Ordering::Greater => (hi, hi_agrees) = (mid, agrees),
            Ordering::Equal => return Some(index),
        }
    }
    None
}

/// Orders `a` and `b` as their ASCII-lowercased copies would order (miniz's comparator),
/// without making the copies; also gives how many leading bytes agree ignoring case.
pub(super) fn cmp_caseless(a: &[u8], b: &[u8]) -> (Ordering, usize) {
    // Eight bytes at a time while there are: sorting the directory compares long names that
    // agree for most of their length.
    let (words_a, _) = a.as_chunks::<8>();
    let (words_b, _) = b.as_chunks::<8>();
    let mut at = 0usize;
    for (x, y) in words_a.iter().zip(words_b) {
        if x != y {
            // Big-endian, so that the words order as their bytes do.
            let x = lowercase_word(u64::from_be_bytes(*x));
            let y = lowercase_word(u64::from_be_bytes(*y));
            if x != y {
                let agree = (x ^ y).leading_zeros() / 8;
                return (x.cmp(&y), at + agree as usize);
            }
        }
        at += 8;
    }
    let (a, b) = (
        a.get(at..).unwrap_or_default(),
        b.get(at..).unwrap_or_default(),
    );
    let (order, agree) = cmp_caseless_bytes(a, b);
    (order, at + agree)
}

/// [`cmp_caseless`] a byte at a time: for the rest of two names, and for the short pieces a
/// lookup compares, where setting up words would cost more than it saves.
#[inline]
fn cmp_caseless_bytes(a: &[u8], b: &[u8]) -> (Ordering, usize) {
    for (at, (&x, &y)) in a.iter().zip(b).enumerate() {
        // Most bytes of two names compared are equal as they are: case only matters otherwise.
        if x != y {
            let order = x.to_ascii_lowercase().cmp(&y.to_ascii_lowercase());
            if order.is_ne() {
                return (order, at);
            }
        }
    }
    // One is a prefix of the other: the shorter comes first.
    (a.len().cmp(&b.len()), a.len().min(b.len()))
}

/// `to_ascii_lowercase` of each of eight bytes: 0x20 added to those in `A..=Z`, no other.
fn lowercase_word(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Each byte's low seven bits plus a constant sets its top bit where they reach a bound;
    // no byte carries into the next (0x7f + 0x3f < 0x100).
    let low = word & (0x7f * ONES);
    let from_a = low + (0x80 - u64::from(b'A')) * ONES;
    let past_z = low + (0x80 - u64::from(b'Z') - 1) * ONES;
    // Top bit set where the byte is `A..=Z`: at or past 'A', not past 'Z', and not a byte of
    // 0x80 or more whose low bits look like a capital.
    let capital = from_a & !past_z & !word & (0x80 * ONES);
    word | (capital >> 2)
}

/// [`cmp_caseless`] of `name` against `folders` and `last` joined by '/', empty folders left
/// out, compared piece by piece instead of joined. The first `skip` bytes, which the caller
/// knows agree, are not compared again.
pub(super) fn cmp_joined(
    name: &[u8],
    folders: &[&str],
    last: &str,
    skip: usize,
) -> (Ordering, usize) {
    let mut cursor = Cursor { name, skip, at: 0 };
    // A plain loop rather than chained iterators: this runs some twenty times a lookup.
    for folder in folders.iter().filter(|f| !f.is_empty()) {
        if let Some(found) = cursor.next(folder.as_bytes()) {
            return found;
        }
        if let Some(found) = cursor.next(b"/") {
            return found;
        }
    }
    if let Some(found) = cursor.next(last.as_bytes()) {
        return found;
    }
    // Every piece agrees: the name is the joined one or goes on past it.
    (name.len().cmp(&cursor.at), cursor.at)
}

/// A name compared with a joined one a piece at a time.
struct Cursor<'n> {
    name: &'n [u8],
    /// Bytes known to agree: not compared again.
    skip: usize,
    /// Where the next piece begins in the joined name (and, all before agreeing, in `name`).
    at: usize,
}

impl Cursor<'_> {
    /// Compares the next piece: the order and agreement once they differ, `None` while they
    /// agree.
    #[inline(always)]
    fn next(&mut self, piece: &[u8]) -> Option<(Ordering, usize)> {
        let end = self.at.saturating_add(piece.len());
        if end > self.skip {
            let from = self.at.max(self.skip);
            let piece = piece.get(from - self.at..).unwrap_or_default();
            let rest = self.name.get(from..).unwrap_or_default();
            // As much of the name as the piece is long: shorter, it orders first.
            let head = rest.get(..piece.len()).unwrap_or(rest);
            let (order, agrees) = cmp_caseless_bytes(head, piece);
            if order.is_ne() {
                return Some((order, from.saturating_add(agrees)));
            }
        }
        self.at = end;
        None
    }
}
