//! Dicts that set one key twice. Python's dict keeps one value per key: the second DICT pair
//! or SETITEM(S) with an equal key replaces the value (the last wins), while the heap keeps
//! every pair, so a reader taking the first would read a value Python dropped. No pickle of
//! a real dict holds two equal keys, so such a dict is refused, whichever reader would use it.
//!
//! Key equality is Python's: `1 == 1.0 == True`, `-0.0 == 0`, NaN equal only to itself (the
//! same object), strings and bytes compared exactly and never to each other, tuples
//! element-wise, a global equal to itself (both names resolve to one object). Any other value
//! (an object, a tensor, a list) is equal only to itself here: its `__eq__` is its class's.

use super::heap::{Heap, Id, Node};
use hashbrown::HashTable;
use std::hash::{BuildHasher, Hash, Hasher};

/// Dicts at most this long are compared pair by pair, without hashing.
const SMALL: usize = 8;

/// Tuples nested deeper than this compare by identity: Python would hit its own recursion
/// limit long before, and no reader looks them up.
const MAX_DEPTH: u32 = 64;

/// The first key some dict of `heap` holds twice, in heap order.
pub(super) fn repeated_key(heap: &Heap) -> Option<Id> {
    let hasher = foldhash::fast::RandomState::default();
    // Reused across dicts; it never holds more than the largest dict's keys.
    let mut table: HashTable<u32> = HashTable::new();
    (0..heap.len()).find_map(|id| {
        let Node::Dict(pairs) = heap.get(Id::try_from(id).ok()?) else {
            return None;
        };
        repeated_in(heap, pairs, &hasher, &mut table)
    })
}

fn repeated_in(
    heap: &Heap,
    pairs: &[(Id, Id)],
    hasher: &foldhash::fast::RandomState,
    table: &mut HashTable<u32>,
) -> Option<Id> {
    if pairs.len() <= SMALL {
        return pairs.iter().enumerate().find_map(|(i, &(key, _))| {
            let earlier = pairs.get(..i).unwrap_or_default();
            earlier
                .iter()
                .any(|&(k, _)| equal(heap, k, key, 0))
                .then_some(key)
        });
    }
    table.clear();
    // Room for every key: the table never grows, so it never rehashes.
    table.reserve(pairs.len(), |_| 0);
    let key_at = |i: u32| pairs.get(i as usize).map_or(Id::MAX, |&(k, _)| k);
    for (i, &(key, _)) in pairs.iter().enumerate() {
        let hash = key_hash(heap, key, hasher);
        if table
            .find(hash, |&j| equal(heap, key_at(j), key, 0))
            .is_some()
        {
            return Some(key);
        }
        let i = u32::try_from(i).ok()?;
        table.insert_unique(hash, i, |&j| key_hash(heap, key_at(j), hasher));
    }
    None
}

/// A number as Python compares numbers: an exact integer (small or big) or a float that is
/// not one.
#[derive(PartialEq)]
enum Number {
    Small(i64),
    /// Sign and magnitude (little-endian, no high zero bytes) of an integer past 64 bits.
    Big(bool, Vec<u8>),
    /// A float with a fractional part, an infinity or NaN (`==` as floats: NaN unequal).
    Fraction(f64),
}

fn number(node: &Node) -> Option<Number> {
    Some(match node {
        Node::Bool(b) => Number::Small(i64::from(*b)),
        Node::Int(v) => Number::Small(*v),
        Node::BigInt(bytes) => big_from_le(bytes),
        Node::Float(f) => float_number(*f),
        _ => return None,
    })
}

/// LONG operands are little-endian two's complement, of any length (padding included).
fn big_from_le(bytes: &[u8]) -> Number {
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let mut magnitude = bytes.to_vec();
    if negative {
        // Two's complement negation: invert, add one.
        let mut carry = true;
        for b in &mut magnitude {
            let (sum, overflow) = (!*b).overflowing_add(u8::from(carry));
            *b = sum;
            carry = overflow;
        }
    }
    integer(negative, magnitude)
}

/// An integer from its sign and little-endian magnitude, small when it fits 64 bits.
fn integer(negative: bool, mut magnitude: Vec<u8>) -> Number {
    while magnitude.last() == Some(&0) {
        magnitude.pop();
    }
    if magnitude.len() <= 8 {
        let mut full = [0u8; 8];
        if let Some(low) = full.get_mut(..magnitude.len()) {
            low.copy_from_slice(&magnitude);
        }
        let m = u64::from_le_bytes(full);
        let small = match negative {
            false => i64::try_from(m).ok(),
            true => 0i64.checked_sub_unsigned(m),
        };
        if let Some(v) = small {
            return Number::Small(v);
        }
    }
    Number::Big(negative && !magnitude.is_empty(), magnitude)
}

fn float_number(f: f64) -> Number {
    if !f.is_finite() || f.fract() != 0.0 {
        return Number::Fraction(f);
    }
    // An integral float is the integer it equals: 2.0 == 2, and 2.0**70 == 2**70.
    let bits = f.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64 - 1075;
    let mantissa = match (bits >> 52) & 0x7ff {
        0 => (bits & ((1 << 52) - 1)) << 1,
        _ => (bits & ((1 << 52) - 1)) | (1 << 52),
    };
    let magnitude = if exponent <= 0 {
        // Integral, so the bits shifted out are zero.
        let shift = u32::try_from(-exponent).unwrap_or(u32::MAX);
        mantissa
            .checked_shr(shift)
            .unwrap_or(0)
            .to_le_bytes()
            .to_vec()
    } else {
        let shift = exponent as usize;
        let wide = u128::from(mantissa) << (shift % 8);
        let mut bytes = vec![0u8; shift / 8];
        bytes.extend_from_slice(&wide.to_le_bytes());
        bytes
    };
    integer(f.is_sign_negative(), magnitude)
}

/// Python's `a == b` for dict keys, `a is b` first.
fn equal(heap: &Heap, a: Id, b: Id, depth: u32) -> bool {
    if a == b {
        return true;
    }
    let (x, y) = (heap.get(a), heap.get(b));
    if let (Some(p), Some(q)) = (number(x), number(y)) {
        return p == q;
    }
    match (x, y) {
        (Node::None, Node::None) => true,
        (Node::Str(p), Node::Str(q)) => p == q,
        (Node::Bytes(p), Node::Bytes(q)) => p == q,
        (Node::Global(p), Node::Global(q)) => p.module == q.module && p.name == q.name,
        (Node::Tuple(p), Node::Tuple(q)) if depth < MAX_DEPTH => {
            p.len() == q.len()
                && p.iter()
                    .zip(q.iter())
                    .all(|(&i, &j)| equal(heap, i, j, depth + 1))
        }
        _ => false,
    }
}

/// A hash that agrees with [`equal`]: equal keys hash alike.
fn key_hash(heap: &Heap, id: Id, hasher: &foldhash::fast::RandomState) -> u64 {
    let mut state = hasher.build_hasher();
    feed(heap, id, 0, &mut state);
    state.finish()
}

fn feed(heap: &Heap, id: Id, depth: u32, state: &mut impl Hasher) {
    let node = heap.get(id);
    if let Some(n) = number(node) {
        match n {
            Number::Small(v) => (0u8, v).hash(state),
            Number::Big(negative, magnitude) => (1u8, negative, magnitude).hash(state),
            Number::Fraction(f) => (2u8, f.to_bits()).hash(state),
        }
        return;
    }
    match node {
        Node::None => 3u8.hash(state),
        Node::Str(s) => (4u8, s).hash(state),
        Node::Bytes(b) => (5u8, b).hash(state),
        Node::Global(g) => (6u8, &g.module, &g.name).hash(state),
        Node::Tuple(items) if depth < MAX_DEPTH => {
            (7u8, items.len()).hash(state);
            for &item in items.iter() {
                feed(heap, item, depth + 1, state);
            }
        }
        // Equal only to itself.
        _ => (8u8, id).hash(state),
    }
}

/// The key as Python would print it, cut short: error messages name it.
pub(super) fn key_text(heap: &Heap, id: Id) -> String {
    const MAX: usize = 120;
    let mut text = String::new();
    write_key(heap, id, 0, &mut text);
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", text.get(..end).unwrap_or_default()),
        None => text,
    }
}

fn write_key(heap: &Heap, id: Id, depth: u32, out: &mut String) {
    // Long enough for any message; stops a deep tuple early.
    if out.len() > 200 {
        return;
    }
    match heap.get(id) {
        Node::None => out.push_str("None"),
        Node::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Node::Int(v) => out.push_str(&v.to_string()),
        Node::BigInt(_) => out.push_str("an integer past 64 bits"),
        Node::Float(f) => out.push_str(&format!("{f:?}")),
        Node::Str(s) => out.push_str(&format!("'{}'", s.escape_debug())),
        Node::Bytes(b) => out.push_str(&format!("b'{}'", b.escape_ascii())),
        Node::Global(g) => out.push_str(&format!("{}.{}", g.module, g.name)),
        Node::Tuple(items) if depth < MAX_DEPTH => {
            out.push('(');
            for (i, &item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_key(heap, item, depth + 1, out);
            }
            out.push_str(if items.len() == 1 { ",)" } else { ")" });
        }
        _ => out.push_str("an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heap of `nodes`, and the key of `pairs` (indices into it) repeated, if any.
    fn repeated(nodes: Vec<Node>, pairs: &[(Id, Id)]) -> Option<Id> {
        let mut heap = Heap::default();
        for node in nodes {
            heap.push(node).expect("room");
        }
        heap.push(Node::Dict(pairs.iter().copied().collect()))
            .expect("room");
        repeated_key(&heap)
    }

    fn first_two_equal(a: Node, b: Node) -> bool {
        repeated(vec![a, b, Node::None], &[(0, 2), (1, 2)]).is_some()
    }

    #[test]
    fn python_equal_keys_are_one_key() {
        assert!(first_two_equal(Node::Int(1), Node::Float(1.0)));
        assert!(first_two_equal(Node::Bool(true), Node::Int(1)));
        assert!(first_two_equal(Node::Float(-0.0), Node::Int(0)));
        assert!(first_two_equal(
            Node::Str("a".into()),
            Node::Str("a".into())
        ));
        // 2**64, padded and not, and as a float.
        let big = Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1].into());
        let padded = Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0].into());
        assert!(first_two_equal(big.clone(), padded));
        assert!(first_two_equal(big, Node::Float(18446744073709551616.0)));
        // -1 written with nine bytes is a small integer.
        assert!(first_two_equal(
            Node::BigInt(vec![0xff; 9].into()),
            Node::Int(-1)
        ));
        let min = Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0x80, 0xff].into());
        assert!(first_two_equal(min, Node::Int(i64::MIN)));
        assert!(first_two_equal(
            Node::Float(-(2f64.powi(63))),
            Node::Int(i64::MIN)
        ));
    }

    #[test]
    fn python_unequal_keys_are_two() {
        assert!(!first_two_equal(
            Node::Str("a".into()),
            Node::Bytes(b"a".to_vec().into())
        ));
        assert!(!first_two_equal(
            Node::Float(f64::NAN),
            Node::Float(f64::NAN)
        ));
        assert!(!first_two_equal(Node::Float(0.5), Node::Int(0)));
        assert!(!first_two_equal(Node::Str("1".into()), Node::Int(1)));
        assert!(!first_two_equal(Node::None, Node::Int(0)));
        assert!(!first_two_equal(
            Node::Float(2f64.powi(63)),
            Node::Int(i64::MAX)
        ));
        assert!(!first_two_equal(
            Node::List(Default::default()),
            Node::List(Default::default())
        ));
        // The same NaN object is one key.
        assert!(repeated(vec![Node::Float(f64::NAN), Node::None], &[(0, 1), (0, 1)]).is_some());
    }

    #[test]
    fn tuples_and_large_dicts() {
        // (1, 'a') and (True, 'a'), each a tuple of heap values.
        let nodes = vec![
            Node::Int(1),
            Node::Str("a".into()),
            Node::Bool(true),
            Node::Tuple(vec![0, 1].into()),
            Node::Tuple(vec![2, 1].into()),
        ];
        assert_eq!(repeated(nodes, &[(3, 0), (4, 0)]), Some(4));
        // Past the small size, through the table: keys 0..20, then 7.0.
        let mut nodes: Vec<Node> = (0..20).map(Node::Int).collect();
        nodes.push(Node::Float(7.0));
        let distinct: Vec<(Id, Id)> = (0..20).map(|i| (i, i)).collect();
        assert_eq!(repeated(nodes.clone(), &distinct), None);
        let mut twice = distinct;
        twice.push((20, 0));
        assert_eq!(repeated(nodes, &twice), Some(20));
    }

    #[test]
    fn keys_print_as_python_would() {
        let mut heap = Heap::default();
        for node in [
            Node::Str("offset".into()),
            Node::Int(1),
            Node::Tuple(vec![0, 1].into()),
            Node::Tuple(vec![1].into()),
        ] {
            heap.push(node).expect("room");
        }
        assert_eq!(key_text(&heap, 0), "'offset'");
        assert_eq!(key_text(&heap, 2), "('offset', 1)");
        assert_eq!(key_text(&heap, 3), "(1,)");
    }
}
