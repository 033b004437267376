//! A header's JSON read by hand, for the one-pass reading: only the plain spelling that nearly
//! every writer emits, read exactly as serde_json reads it, and anything else given up for
//! serde_json's own reading to judge.
//!
//! serde_json through serde's derivation spends thousands of instructions on an entry of a
//! hundred bytes; this reads it byte by byte. What it accepts serde_json accepts with the same
//! values (keys, dtype codes and field names without escapes, so borrowed alike; integers
//! without sign, fraction, exponent or leading zero, within `u64`; the three fields each once,
//! in any order; JSON whitespace anywhere serde_json skips it; nothing but whitespace after the
//! object). It gives up on the rest, valid or not: escapes, an entry written as an array,
//! `-0`, duplicate or unknown fields, a trailing comma, a metadata value that is not an
//! object. The `__metadata__` object itself is read by serde_json.

use super::RawEntry;
use crate::layout::Dims;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The text is not in the plain spelling: serde_json is to read it.
#[derive(Debug)]
pub(super) struct GiveUp;

type Scan<T> = Result<T, GiveUp>;

/// A cursor over a header's text, at the start of a key or of the object's end.
pub(super) struct Scanner<'h> {
    text: &'h str,
    bytes: &'h [u8],
    pos: usize,
    /// Whether no key has been read yet (a comma comes before every other).
    first: bool,
}

/// The bytes that end a plain string's scan: its closing quote, an escape, a control
/// character (which serde_json refuses inside a string).
const STRING_STOP: [bool; 256] = {
    let mut stop = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        stop[b] = true;
        b += 1;
    }
    stop[b'"' as usize] = true;
    stop[b'\\' as usize] = true;
    stop
};

/// Where the first quote, backslash or control character of `bytes` is, eight bytes at a
/// time: a name is read in a few steps rather than a lookup per byte.
fn plain_len(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = ONES << 7;
    // The high bit of each byte that is zero: exact for the lowest such byte (a borrow only
    // runs upward from a true zero), which is the only one used.
    let zeros = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..).and_then(|rest| rest.first_chunk::<8>()) {
        let x = u64::from_le_bytes(*chunk);
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
        let stops =
            control | zeros(x ^ (ONES * u64::from(b'"'))) | zeros(x ^ (ONES * u64::from(b'\\')));
        if stops != 0 {
            return Some(at + (stops.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = bytes.get(at..).unwrap_or_default();
    tail.iter()
        .position(|&b| STRING_STOP[usize::from(b)])
        .map(|i| at + i)
}

impl<'h> Scanner<'h> {
    /// A header that opens its object at its first byte.
    pub(super) fn new(text: &'h str) -> Scan<Self> {
        let mut scanner = Scanner {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            first: true,
        };
        scanner.expect(b'{')?;
        Ok(scanner)
    }

    /// The next key and the colon after it; `None` at the object's end, when only whitespace
    /// may follow it.
    pub(super) fn next_key(&mut self) -> Scan<Option<&'h str>> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                self.skip_whitespace();
                return if self.pos == self.bytes.len() {
                    Ok(None)
                } else {
                    Err(GiveUp)
                };
            }
            Some(b',') if !self.first => {
                self.pos += 1;
                self.skip_whitespace();
            }
            _ if self.first => {}
            _ => return Err(GiveUp),
        }
        self.first = false;
        let key = self.string()?;
        self.colon()?;
        Ok(Some(key))
    }

    /// The `__metadata__` value, read by serde_json as the one-pass reading read it: an
    /// object mapping strings to strings.
    pub(super) fn metadata(&mut self) -> Scan<BTreeMap<String, String>> {
        self.skip_whitespace();
        if self.peek() != Some(b'{') {
            return Err(GiveUp);
        }
        let rest = self.text.get(self.pos..).ok_or(GiveUp)?;
        let mut values =
            serde_json::Deserializer::from_str(rest).into_iter::<BTreeMap<String, String>>();
        let Some(Ok(map)) = values.next() else {
            return Err(GiveUp);
        };
        self.pos = self.pos.checked_add(values.byte_offset()).ok_or(GiveUp)?;
        Ok(map)
    }

    /// A tensor's entry: an object of `dtype`, `shape` and `data_offsets`, each once.
    pub(super) fn entry(&mut self) -> Scan<RawEntry<'h>> {
        self.skip_whitespace();
        let start = self.pos;
        if let Ok(entry) = self.compact_entry() {
            return Ok(entry);
        }
        self.pos = start;
        self.expect(b'{')?;
        let mut dtype = None;
        let mut shape = None;
        let mut data_offsets = None;
        loop {
            self.skip_whitespace();
            // A field name is compared whole, quotes included: no escape can hide in it.
            let field = self.field()?;
            self.colon()?;
            self.skip_whitespace();
            match field {
                Field::Dtype if dtype.is_none() => dtype = Some(self.string()?),
                Field::Shape if shape.is_none() => shape = Some(self.integers()?),
                Field::DataOffsets if data_offsets.is_none() => data_offsets = Some(self.pair()?),
                _ => return Err(GiveUp),
            }
            self.skip_whitespace();
            match self.bump()? {
                b',' => continue,
                b'}' => break,
                _ => return Err(GiveUp),
            }
        }
        match (dtype, shape, data_offsets) {
            (Some(dtype), Some(shape), Some(data_offsets)) => Ok(RawEntry {
                dtype: Cow::Borrowed(dtype),
                shape,
                data_offsets,
            }),
            _ => Err(GiveUp),
        }
    }

    /// The spelling the `safetensors` writers emit, read without a look for whitespace or a
    /// field's name: `{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}`. One of the
    /// spellings [`Scanner::entry`] reads, with the same values; anything else is left to it.
    fn compact_entry(&mut self) -> Scan<RawEntry<'h>> {
        self.literal(b"{\"dtype\":")?;
        let dtype = self.string()?;
        self.literal(b",\"shape\":[")?;
        let mut shape = Dims::new();
        if self.literal(b"]").is_err() {
            loop {
                shape.push(self.integer()?);
                match self.bump()? {
                    b',' => continue,
                    b']' => break,
                    _ => return Err(GiveUp),
                }
            }
        }
        self.literal(b",\"data_offsets\":[")?;
        let first = self.integer()?;
        self.expect(b',')?;
        let second = self.integer()?;
        self.literal(b"]}")?;
        Ok(RawEntry {
            dtype: Cow::Borrowed(dtype),
            shape,
            data_offsets: (first, second),
        })
    }

    /// `text` next, stepped over. Of a known length, so compared inline, not by `memcmp`.
    fn literal<const N: usize>(&mut self, text: &[u8; N]) -> Scan<()> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        if rest.first_chunk::<N>() != Some(text) {
            return Err(GiveUp);
        }
        self.pos += N;
        Ok(())
    }

    /// One of the three field names, quoted.
    fn field(&mut self) -> Scan<Field> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let (field, len) = if rest.first_chunk() == Some(b"\"dtype\"") {
            (Field::Dtype, 7)
        } else if rest.first_chunk() == Some(b"\"shape\"") {
            (Field::Shape, 7)
        } else if rest.first_chunk() == Some(b"\"data_offsets\"") {
            (Field::DataOffsets, 14)
        } else {
            return Err(GiveUp);
        };
        self.pos += len;
        Ok(field)
    }

    /// An array of unsigned integers, possibly empty.
    fn integers(&mut self) -> Scan<Dims> {
        self.expect(b'[')?;
        let mut values = Dims::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(values);
        }
        loop {
            self.skip_whitespace();
            values.push(self.integer()?);
            self.skip_whitespace();
            match self.bump()? {
                b',' => continue,
                b']' => return Ok(values),
                _ => return Err(GiveUp),
            }
        }
    }

    /// An array of exactly two unsigned integers, read without a list.
    fn pair(&mut self) -> Scan<(u64, u64)> {
        self.expect(b'[')?;
        self.skip_whitespace();
        let first = self.integer()?;
        self.skip_whitespace();
        self.expect(b',')?;
        self.skip_whitespace();
        let second = self.integer()?;
        self.skip_whitespace();
        self.expect(b']')?;
        Ok((first, second))
    }

    /// An integer as serde_json reads a `u64`: digits, no leading zero, no fraction or
    /// exponent, within range.
    fn integer(&mut self) -> Scan<u64> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        // One pass: nineteen digits cannot overflow a `u64`; longer numbers are read again,
        // checked.
        let (mut value, mut digits) = (0u64, 0usize);
        for &b in rest {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
            digits += 1;
        }
        let number = rest.get(..digits).unwrap_or_default();
        if digits == 0 || (digits > 1 && number.first() == Some(&b'0')) {
            return Err(GiveUp);
        }
        if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return Err(GiveUp);
        }
        if digits > 19 {
            value = number
                .iter()
                .try_fold(0u64, |acc, &d| {
                    acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                })
                .ok_or(GiveUp)?;
        }
        self.pos += digits;
        Ok(value)
    }

    /// A string without escapes or control characters, borrowed from the text.
    fn string(&mut self) -> Scan<&'h str> {
        self.expect(b'"')?;
        let start = self.pos;
        let rest = self.bytes.get(start..).unwrap_or_default();
        let len = plain_len(rest).ok_or(GiveUp)?;
        if rest.get(len) != Some(&b'"') {
            return Err(GiveUp);
        }
        // Both ends are ASCII quotes: character boundaries of the text.
        let value = self.text.get(start..start + len).ok_or(GiveUp)?;
        self.pos = start + len + 1;
        Ok(value)
    }

    /// The colon after a key, whitespace before it.
    fn colon(&mut self) -> Scan<()> {
        self.skip_whitespace();
        self.expect(b':')
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn bump(&mut self) -> Scan<u8> {
        let b = self.peek().ok_or(GiveUp)?;
        self.pos += 1;
        Ok(b)
    }

    fn expect(&mut self, byte: u8) -> Scan<()> {
        if self.bump()? == byte {
            Ok(())
        } else {
            Err(GiveUp)
        }
    }
}

/// An entry's fields.
#[derive(Clone, Copy)]
enum Field {
    Dtype,
    Shape,
    DataOffsets,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest::proptest! {
        /// Eight bytes at a time finds the byte a lookup per byte finds, wherever it falls.
        #[test]
        fn plain_len_finds_the_first_stop(bytes in prop::collection::vec(
            prop_oneof![
                8 => 0x20u8..0x7f,
                1 => Just(b'"'),
                1 => Just(b'\\'),
                1 => 0u8..0x20,
                2 => 0x7fu8..=0xff,
            ],
            0..40,
        )) {
            let expected = bytes.iter().position(|&b| STRING_STOP[usize::from(b)]);
            prop_assert_eq!(plain_len(&bytes), expected);
        }
    }
}
