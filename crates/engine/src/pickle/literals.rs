//! Decoders for the operands that are text or variable-width integers.

use super::heap::Node;

/// A LONG1/LONG4 operand: an `Int` when it fits 64 bits.
pub(super) fn long_from_le(bytes: &[u8]) -> Node {
    // Python's value, in its shortest two's-complement form: a sign byte the value does not
    // need (a text LONG's, a non-minimal LONG1 from another writer) is dropped, so equal
    // integers are equal values here as they are in Python.
    let mut len = bytes.len();
    while let [.., next, last] = bytes.get(..len).unwrap_or_default() {
        let redundant = (*last == 0 && next & 0x80 == 0) || (*last == 0xff && next & 0x80 != 0);
        if !redundant {
            break;
        }
        len -= 1;
    }
    let bytes = bytes.get(..len).unwrap_or_default();
    if bytes.len() > 8 {
        return Node::BigInt(bytes.into());
    }
    // Sign-extend to 64 bits; no bytes at all is 0.
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let mut full = [if negative { 0xff } else { 0 }; 8];
    if let Some(low) = full.get_mut(..bytes.len()) {
        low.copy_from_slice(bytes);
    }
    Node::Int(i64::from_le_bytes(full))
}

/// A decimal literal as little-endian two's-complement bytes (for integers past 64 bits).
pub(super) fn decimal_to_le(text: &str) -> Option<Vec<u8>> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Magnitude, little-endian base 256; the line length bounds its size.
    let mut mag: Vec<u8> = Vec::new();
    for d in digits.bytes() {
        let mut carry = u32::from(d - b'0');
        for byte in mag.iter_mut() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = (v & 0xff) as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            mag.push((carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    mag.push(0); // room for the sign bit
    if negative {
        let mut carry = true;
        for byte in mag.iter_mut() {
            let (v, c) = (!*byte).overflowing_add(u8::from(carry));
            *byte = v;
            carry = c;
        }
    }
    Some(mag)
}

/// Decodes protocol 0's `raw-unicode-escape`: bytes are latin-1, `\uXXXX` and `\UXXXXXXXX` escape.
pub(super) fn raw_unicode_escape(line: &[u8]) -> Option<String> {
    let mut out = String::new();
    let mut i = 0;
    while let Some(&b) = line.get(i) {
        let width = match (b, line.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => {
                out.push(char::from(b));
                i += 1;
                continue;
            }
        };
        let hex = std::str::from_utf8(line.get(i + 2..i + 2 + width)?).ok()?;
        let code = u32::from_str_radix(hex, 16).ok()?;
        match char::from_u32(code) {
            Some(c) => out.push(c),
            // Python keeps a lone surrogate; Rust text cannot: it is written out visibly.
            None if (0xd800..=0xdfff).contains(&code) => out.push_str(&format!("\\u{{{code:x}}}")),
            None => return None,
        }
        i += 2 + width;
    }
    Some(out)
}

/// Decodes protocol 0's `STRING` operand: a quoted Python 2 `repr` with backslash escapes.
pub(super) fn python_string_literal(line: &[u8]) -> Option<String> {
    let quote = *line.first()?;
    if !(quote == b'\'' || quote == b'"') || line.len() < 2 || line.last() != Some(&quote) {
        return None;
    }
    let body = line.get(1..line.len() - 1)?;
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let esc = *body.get(i + 1)?;
        i += 2;
        out.push(match esc {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'0'..=b'7' => {
                let mut v = u32::from(esc - b'0');
                for _ in 0..2 {
                    match body.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                u8::try_from(v).ok()?
            }
            b'x' => {
                let hex = std::str::from_utf8(body.get(i..i + 2)?).ok()?;
                i += 2;
                u8::from_str_radix(hex, 16).ok()?
            }
            other => other,
        });
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Decodes UTF-8 as Python's pickle does (`'utf-8', 'surrogatepass'`): an encoded surrogate
/// (`ED A0..BF 80..BF`), which Python keeps as a lone surrogate, is written out visibly
/// (`\u{d800}`), since Rust text cannot hold one; any other invalid sequence is `None`, as
/// Python refuses it.
pub(super) fn utf8_surrogatepass(raw: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                return Some(out);
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).ok()?);
                let [0xed, b1 @ 0xa0..=0xbf, b2 @ 0x80..=0xbf, ..] = after else {
                    return None;
                };
                let code = 0xd000 | (u32::from(b1 & 0x3f) << 6) | u32::from(b2 & 0x3f);
                out.push_str(&format!("\\u{{{code:x}}}"));
                rest = after.get(3..)?;
            }
        }
    }
}

#[cfg(test)]
mod long_tests {
    use super::*;

    /// One integer, one value, however many sign bytes its writer spent on it: PyTorch's
    /// legacy magic number as LONG1 and as protocol 1's text LONG compare equal.
    #[test]
    fn an_integer_is_one_value_whatever_its_sign_bytes() {
        let magic = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
        let text = decimal_to_le("119547037146038801333356").expect("decimal");
        assert_eq!(long_from_le(&text), long_from_le(&magic));
        assert_eq!(long_from_le(&magic), Node::BigInt(magic[..].into()));
        assert_eq!(long_from_le(&[0x01, 0x00, 0x00]), Node::Int(1));
        assert_eq!(long_from_le(&[0xff; 12]), Node::Int(-1));
        assert_eq!(long_from_le(&[0x80, 0x00]), Node::Int(128));
        assert_eq!(long_from_le(&[]), Node::Int(0));
    }
}
