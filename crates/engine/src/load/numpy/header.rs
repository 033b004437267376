//! A `.npy` header: the text of a Python dict literal (`{'descr': '<f4', 'fortran_order':
//! False, 'shape': (2, 3), }`), which numpy reads with `ast.literal_eval` and then checks
//! (`numpy.lib.format._read_array_header`). Read here by a small strict parser that takes
//! only the literals numpy's header can hold: str, int, bool, None, tuple, list and dict, in
//! every spelling `literal_eval` reads (comments, line continuations, implicit string
//! concatenation, triple quotes, `u`/`r` prefixes, hexadecimal, octal and binary integers).
//! Whatever `literal_eval` refuses (a call, a name, an operator) is refused too, and so are
//! the literals it takes that numpy's checks then refuse (floats, bytes, sets), with the
//! reason.

use crate::DType;
use std::fmt;

/// numpy's limit on the header's length in characters (`_MAX_HEADER_SIZE`): a longer one is
/// refused unless the file is trusted with `allow_pickle=True`.
pub(super) const MAX_HEADER_CHARS: usize = 10_000;

/// How deep literals may nest; CPython's parser stops at 200 parentheses.
const MAX_DEPTH: usize = 64;

/// A Python literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Str(String),
    Int(i128),
    Bool(bool),
    None,
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// Key-value pairs in written order, repeats kept (the header check refuses them).
    Dict(Vec<(Value, Value)>),
}

impl fmt::Display for Value {
    /// As Python's `repr` writes it, for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn seq(
            f: &mut fmt::Formatter<'_>,
            items: &[Value],
            open: &str,
            close: &str,
        ) -> fmt::Result {
            f.write_str(open)?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{item}")?;
            }
            if open == "(" && items.len() == 1 {
                f.write_str(",")?;
            }
            f.write_str(close)
        }
        match self {
            Value::Str(s) => write!(f, "'{}'", s.escape_debug()),
            Value::Int(i) => write!(f, "{i}"),
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::None => f.write_str("None"),
            Value::Tuple(items) => seq(f, items, "(", ")"),
            Value::List(items) => seq(f, items, "[", "]"),
            Value::Dict(pairs) => {
                f.write_str("{")?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Parses `text` as one Python literal, surrounded by whitespace only. With `python2_longs`
/// (format versions 1.0 and 2.0, which Python 2 wrote), an `L` after an integer is dropped,
/// as numpy's `_filter_header` drops it.
pub(super) fn parse_literal(text: &str, python2_longs: bool) -> Result<Value, String> {
    // Python's eval mode skips leading blank lines; literal_eval strips spaces and tabs.
    let mut parser = Parser {
        text,
        pos: 0,
        depth: 0,
        python2_longs,
    };
    // Blank and comment lines before the literal, as eval mode skips them.
    parser.skip_space(true);
    let value = parser.value()?;
    parser.skip_space(true);
    match parser.peek() {
        None => Ok(value),
        Some(c) => Err(parser.unexpected(c, "after the literal")),
    }
}

struct Parser<'a> {
    text: &'a str,
    /// Byte offset into `text`.
    pos: usize,
    /// Brackets open: inside them a newline is whitespace.
    depth: usize,
    python2_longs: bool,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips whitespace: spaces, tabs, form feeds, comments (to the end of their line) and
    /// line continuations (a backslash ending a line) anywhere; newlines inside brackets, or
    /// everywhere with `newlines` (before and after the literal).
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            let rest = self.text.get(self.pos..).unwrap_or_default();
            let skip = match c {
                ' ' | '\t' | '\x0c' => 1,
                '\n' | '\r' if newlines || self.depth > 0 => 1,
                '#' => rest.find(['\n', '\r']).unwrap_or(rest.len()),
                '\\' if rest.starts_with("\\\r\n") => 3,
                '\\' if rest.starts_with("\\\n") || rest.starts_with("\\\r") => 2,
                _ => break,
            };
            self.pos += skip;
        }
    }

    fn unexpected(&self, c: char, place: &str) -> String {
        let mut only_literals = "";
        let what = match c {
            '#' => "a comment".to_owned(),
            '\\' => "a line continuation".to_owned(),
            c if c.is_alphabetic() || c == '_' => {
                let name: String = self
                    .text
                    .get(self.pos..)
                    .unwrap_or_default()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .take(40)
                    .collect();
                only_literals = " (only literals are read: no names, calls or operators)";
                format!("the name '{name}'")
            }
            c => format!("{c:?}"),
        };
        format!(
            "{what} {place} at character {}{only_literals}",
            self.char_index()
        )
    }

    /// The position in characters, as Python counts them.
    fn char_index(&self) -> usize {
        self.text.get(..self.pos).map_or(0, |s| s.chars().count())
    }

    fn value(&mut self) -> Result<Value, String> {
        self.skip_space(false);
        let Some(c) = self.peek() else {
            return Err("the literal ends early".into());
        };
        match c {
            '\'' | '"' => self.string(),
            '0'..='9' => self.int(false),
            '-' | '+' => {
                self.bump();
                self.skip_space(false);
                match self.peek() {
                    Some('0'..='9') => self.int(c == '-'),
                    Some(other) => Err(self.unexpected(other, &format!("after the sign {c:?}"))),
                    None => Err("the literal ends early".into()),
                }
            }
            '(' | '[' | '{' => {
                if self.depth >= MAX_DEPTH {
                    return Err(format!("literals nest deeper than {MAX_DEPTH} levels"));
                }
                self.bump();
                self.depth += 1;
                let value = match c {
                    '(' => self.tuple(),
                    '[' => self.sequence(']').map(Value::List),
                    _ => self.dict(),
                };
                self.depth -= 1;
                value
            }
            c if c.is_alphabetic() || c == '_' => {
                let rest = self.text.get(self.pos..).unwrap_or_default();
                let name: &str = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default();
                let quoted = rest
                    .get(name.len()..)
                    .is_some_and(|r| r.starts_with(['\'', '"']));
                if quoted {
                    return self.prefixed_string(name);
                }
                let value = match name {
                    "True" => Value::Bool(true),
                    "False" => Value::Bool(false),
                    "None" => Value::None,
                    _ => return Err(self.unexpected(c, "where a literal was expected")),
                };
                self.pos += name.len();
                Ok(value)
            }
            c => Err(self.unexpected(c, "where a literal was expected")),
        }
    }

    /// Items up to `close`, comma-separated, a trailing comma allowed.
    fn sequence(&mut self, close: char) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        loop {
            self.skip_space(false);
            if self.peek() == Some(close) {
                self.bump();
                return Ok(items);
            }
            items.push(self.value()?);
            self.skip_space(false);
            match self.bump() {
                Some(',') => {}
                Some(c) if c == close => return Ok(items),
                Some(c) => {
                    self.pos -= c.len_utf8();
                    return Err(self.unexpected(c, &format!("where ',' or '{close}' was expected")));
                }
                None => return Err(format!("'{close}' is missing: the literal ends early")),
            }
        }
    }

    /// `()`, `(x,)`, `(x, y)`, or `(x)`: a parenthesised value that is no tuple.
    fn tuple(&mut self) -> Result<Value, String> {
        self.skip_space(false);
        if self.peek() == Some(')') {
            self.bump();
            return Ok(Value::Tuple(Vec::new()));
        }
        let first = self.value()?;
        self.skip_space(false);
        match self.bump() {
            Some(')') => Ok(first),
            Some(',') => {
                let mut items = vec![first];
                items.extend(self.sequence(')')?);
                Ok(Value::Tuple(items))
            }
            Some(c) => {
                self.pos -= c.len_utf8();
                Err(self.unexpected(c, "where ',' or ')' was expected"))
            }
            None => Err("')' is missing: the literal ends early".into()),
        }
    }

    fn dict(&mut self) -> Result<Value, String> {
        let mut pairs = Vec::new();
        loop {
            self.skip_space(false);
            if self.peek() == Some('}') {
                self.bump();
                return Ok(Value::Dict(pairs));
            }
            let key = self.value()?;
            self.skip_space(false);
            match self.bump() {
                Some(':') => {}
                Some(c) => {
                    self.pos -= c.len_utf8();
                    return Err(self.unexpected(c, "where ':' was expected"));
                }
                None => return Err("'}' is missing: the literal ends early".into()),
            }
            let value = self.value()?;
            pairs.push((key, value));
            self.skip_space(false);
            match self.bump() {
                Some(',') => {}
                Some('}') => return Ok(Value::Dict(pairs)),
                Some(c) => {
                    self.pos -= c.len_utf8();
                    return Err(self.unexpected(c, "where ',' or '}' was expected"));
                }
                None => return Err("'}' is missing: the literal ends early".into()),
            }
        }
    }

    /// A decimal integer (underscores between digits, no leading zeros but for zero itself,
    /// as Python 3 reads it), or a hexadecimal, octal or binary one (`0x`, `0o`, `0b`); with
    /// `python2_longs`, an `L` after a decimal one is dropped.
    fn int(&mut self, negative: bool) -> Result<Value, String> {
        let at = self.char_index();
        let rest = self.text.get(self.pos..).unwrap_or_default();
        let radix = match rest.get(..2).map(str::to_ascii_lowercase).as_deref() {
            Some("0x") => Some(16),
            Some("0o") => Some(8),
            Some("0b") => Some(2),
            _ => None,
        };
        if let Some(radix) = radix {
            return self.radix_int(at, radix, negative);
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        let literal = rest.get(..len).unwrap_or_default();
        self.pos += len;
        let bad = |why: &str| format!("integer {literal:?} at character {at}: {why}");
        if literal.ends_with('_') || literal.contains("__") {
            return Err(bad("misplaced underscore"));
        }
        let digits: String = literal.chars().filter(|&c| c != '_').collect();
        if digits.len() > 1 && digits.starts_with('0') && digits.bytes().any(|b| b != b'0') {
            return Err(bad("leading zeros are not allowed in Python 3"));
        }
        if let Some('.' | 'e' | 'E' | 'j' | 'J') = self.peek() {
            return Err(bad("only integers are read (no floats or complex numbers)"));
        }
        if self.python2_longs {
            // `_filter_header` drops a NAME token `L` after a NUMBER token, spaces between.
            let save = self.pos;
            self.skip_space(false);
            let rest = self.text.get(self.pos..).unwrap_or_default();
            let after = rest.strip_prefix('L');
            let is_l =
                after.is_some_and(|a| !a.starts_with(|c: char| c.is_alphanumeric() || c == '_'));
            self.pos = if is_l { self.pos + 1 } else { save };
        }
        if self.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return Err(bad("a name follows it"));
        }
        let value: i128 = digits
            .parse()
            .map_err(|_| bad("too large to be an array size"))?;
        Ok(Value::Int(if negative { -value } else { value }))
    }

    /// `0x1f`, `0o17`, `0b1_0`: underscores may follow the prefix and separate digits.
    fn radix_int(&mut self, at: usize, radix: u32, negative: bool) -> Result<Value, String> {
        let rest = self.text.get(self.pos..).unwrap_or_default();
        let body = rest.get(2..).unwrap_or_default();
        let len = 2 + body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let literal = rest.get(..len).unwrap_or_default();
        self.pos += len;
        let bad = |why: &str| format!("integer {literal:?} at character {at}: {why}");
        let digits = literal.get(2..).unwrap_or_default();
        if digits.is_empty() || digits.ends_with('_') || digits.contains("__") {
            return Err(bad("misplaced underscore or no digits"));
        }
        let digits: String = digits.chars().filter(|&c| c != '_').collect();
        let value = i128::from_str_radix(&digits, radix).map_err(|e| match e.kind() {
            std::num::IntErrorKind::PosOverflow => bad("too large to be an array size"),
            _ => bad("not a digit of its base"),
        })?;
        if self.peek() == Some('.') {
            return Err(bad("only integers are read (no floats or complex numbers)"));
        }
        Ok(Value::Int(if negative { -value } else { value }))
    }

    /// A string after its prefix (`u`, `r`, either case): bytes (`b`) numpy refuses in a
    /// header, and an f-string `literal_eval` refuses.
    fn prefixed_string(&mut self, prefix: &str) -> Result<Value, String> {
        let at = self.char_index();
        let lower = prefix.to_ascii_lowercase();
        match lower.as_str() {
            "u" | "r" => {
                self.pos += prefix.len();
                self.string_from(at, lower == "r")
            }
            "b" | "br" | "rb" => Err(format!(
                "bytes literal at character {at}: numpy reads no bytes in a header"
            )),
            _ => Err(format!(
                "the prefix '{prefix}' of the string at character {at} is not a literal's"
            )),
        }
    }

    /// A string literal, and those adjacent to it, concatenated as Python does.
    fn string(&mut self) -> Result<Value, String> {
        let at = self.char_index();
        self.string_from(at, false)
    }

    fn string_from(&mut self, at: usize, raw: bool) -> Result<Value, String> {
        let mut out = String::new();
        self.one_string(at, raw, &mut out)?;
        loop {
            self.skip_space(false);
            let rest = self.text.get(self.pos..).unwrap_or_default();
            if rest.starts_with(['\'', '"']) {
                let at = self.char_index();
                self.one_string(at, false, &mut out)?;
                continue;
            }
            let prefix: &str = rest
                .split(|c: char| !c.is_ascii_alphabetic())
                .next()
                .unwrap_or_default();
            let quoted = !prefix.is_empty()
                && rest
                    .get(prefix.len()..)
                    .is_some_and(|r| r.starts_with(['\'', '"']));
            if !quoted {
                return Ok(Value::Str(out));
            }
            let Value::Str(more) = self.prefixed_string(prefix)? else {
                return Ok(Value::Str(out));
            };
            out.push_str(&more);
        }
    }

    /// One quoted string (single, double, or either tripled) appended to `out`; `raw` keeps
    /// backslashes as written.
    fn one_string(&mut self, at: usize, raw: bool, out: &mut String) -> Result<(), String> {
        let quote = self.bump().unwrap_or('\'');
        let tripled: String = [quote; 3].iter().collect();
        let triple = self
            .text
            .get(self.pos..)
            .is_some_and(|r| r.starts_with(&tripled[1..]));
        if triple {
            self.pos += 2;
        }
        let close = if triple { &tripled[..] } else { &tripled[..1] };
        loop {
            if self
                .text
                .get(self.pos..)
                .is_some_and(|r| r.starts_with(close))
            {
                self.pos += close.len();
                return Ok(());
            }
            let Some(c) = self.bump() else {
                return Err(format!("string at character {at} is not closed"));
            };
            match c {
                '\n' | '\r' if !triple => {
                    return Err(format!("string at character {at} is not closed"))
                }
                '\\' if raw => {
                    // A raw string keeps the backslash and the character after it.
                    out.push('\\');
                    match self.bump() {
                        Some(next) => out.push(next),
                        None => return Err(format!("string at character {at} is not closed")),
                    }
                }
                '\\' => self.escape(at, out)?,
                c => out.push(c),
            }
        }
    }

    /// The escape after a backslash, as Python reads it: a backslash ending a line joins
    /// the next; an unknown escape keeps its backslash.
    fn escape(&mut self, at: usize, out: &mut String) -> Result<(), String> {
        let hex = |p: &mut Self, n: usize| -> Result<char, String> {
            let digits: String = (0..n).filter_map(|_| p.bump()).collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .filter(|_| digits.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(|| format!("string at character {at}: bad escape \\{digits}"))
        };
        let c = match self.bump() {
            Some('\n') => return Ok(()),
            Some('\r') => {
                if self.peek() == Some('\n') {
                    self.bump();
                }
                return Ok(());
            }
            Some('\\') => '\\',
            Some('\'') => '\'',
            Some('"') => '"',
            Some('n') => '\n',
            Some('t') => '\t',
            Some('r') => '\r',
            Some('a') => '\x07',
            Some('b') => '\x08',
            Some('f') => '\x0c',
            Some('v') => '\x0b',
            Some('x') => hex(self, 2)?,
            Some('u') => hex(self, 4)?,
            Some('U') => hex(self, 8)?,
            Some(d @ '0'..='7') => {
                let mut value = d.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek().and_then(|c| c.to_digit(8)) {
                        Some(v) => {
                            value = value * 8 + v;
                            self.bump();
                        }
                        None => break,
                    }
                }
                char::from_u32(value).unwrap_or('\u{fffd}')
            }
            Some('N') => {
                return Err(format!(
                    "string at character {at}: named escapes (\\N{{...}}) are not read"
                ))
            }
            Some(other) => {
                out.push('\\');
                other
            }
            None => return Err(format!("string at character {at} is not closed")),
        };
        out.push(c);
        Ok(())
    }
}

/// The header once checked as numpy checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    pub descr: Descr,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
}

/// What the header's `descr` says the data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Descr {
    /// Elements of a tensor dtype; `swap` when their bytes are big-endian.
    Plain { dtype: DType, swap: bool },
    /// Python objects: the data is a pickle (`descr` as written, for messages).
    Objects(String),
    /// Elements of a dtype numpy reads that no tensor dtype holds (strings, raw bytes,
    /// datetimes, long doubles, records, subarrays): why, for the refusal.
    NoTensor { descr: String, why: String },
    /// A descr that is no dtype numpy reads: why, for the refusal.
    Unsupported(String),
}

/// The header's keys, as numpy requires them (`EXPECTED_KEYS`).
const KEYS: [&str; 3] = ["descr", "fortran_order", "shape"];

/// Checks a parsed header as `_read_array_header` does: a dict of exactly the three keys, a
/// tuple of non-negative ints for `shape` (a bool is an int to Python), a bool for
/// `fortran_order`. A key written twice is refused: numpy keeps the last value, a reader that
/// keeps the first reads another array.
pub(super) fn check(value: Value) -> Result<Header, String> {
    let Value::Dict(pairs) = value else {
        return Err(format!("not a dictionary but {value}"));
    };
    let mut found: [Option<Value>; 3] = [None, None, None];
    let mut keys = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        let Value::Str(name) = &key else {
            return Err(format!("the key {key} is not a string"));
        };
        match KEYS.iter().position(|k| k == name) {
            Some(i) => {
                if found.get(i).is_some_and(Option::is_some) {
                    return Err(format!(
                        "'{name}' is set twice (numpy keeps the last value, another reader the \
                         first: they would read different arrays)"
                    ));
                }
                if let Some(slot) = found.get_mut(i) {
                    *slot = Some(value);
                }
            }
            None => keys.push(name.clone()),
        }
    }
    let [Some(descr), Some(fortran_order), Some(shape)] = found else {
        let mut all: Vec<String> = keys;
        all.extend(
            KEYS.iter()
                .zip(&found)
                .filter(|(_, v)| v.is_some())
                .map(|(k, _)| (*k).to_owned()),
        );
        return Err(wrong_keys(all));
    };
    if !keys.is_empty() {
        let mut all = keys;
        all.extend(KEYS.iter().map(|k| (*k).to_owned()));
        return Err(wrong_keys(all));
    }
    let shape = match &shape {
        Value::Tuple(items) => items
            .iter()
            .map(|item| match item {
                Value::Int(n) => u64::try_from(*n).ok(),
                Value::Bool(b) => Some(u64::from(*b)),
                _ => None,
            })
            .collect::<Option<Vec<u64>>>(),
        _ => None,
    }
    .ok_or_else(|| format!("shape is not a tuple of non-negative integers: {shape}"))?;
    let Value::Bool(fortran_order) = fortran_order else {
        return Err(format!("fortran_order is not a bool: {fortran_order}"));
    };
    Ok(Header {
        descr: descr_of(&descr),
        fortran_order,
        shape,
    })
}

/// The refusal of a header without exactly numpy's keys, listing its keys sorted as numpy does.
fn wrong_keys(mut keys: Vec<String>) -> String {
    keys.sort();
    let keys: Vec<String> = keys
        .into_iter()
        .map(|k| Value::Str(k).to_string())
        .collect();
    format!(
        "the keys are [{}], not exactly 'descr', 'fortran_order' and 'shape'",
        keys.join(", ")
    )
}

/// What a `descr` value stands for. A string names one element type; a list is a structured
/// dtype, a tuple a subarray: no tensor dtype holds either, and one with an object field is
/// pickled like an object array.
fn descr_of(descr: &Value) -> Descr {
    match descr {
        Value::Str(s) => type_string(s),
        Value::List(_) | Value::Tuple(_) if holds_objects(descr) => {
            Descr::Objects(descr.to_string())
        }
        Value::List(_) => Descr::NoTensor {
            descr: descr.to_string(),
            why: format!(
                "descr {descr} is a structured dtype (named fields): no tensor dtype holds its \
                 records"
            ),
        },
        Value::Tuple(_) => Descr::NoTensor {
            descr: descr.to_string(),
            why: format!("descr {descr} is a subarray dtype: no tensor dtype holds it"),
        },
        other => Descr::Unsupported(format!("descr {other} is not a dtype descriptor")),
    }
}

/// Whether a structured or subarray descr has an object field anywhere (numpy's
/// `dtype.hasobject`): fields are `(name, descr)` or `(name, descr, shape)`.
fn holds_objects(descr: &Value) -> bool {
    match descr {
        Value::Str(s) => matches!(type_string(s), Descr::Objects(_)),
        Value::Tuple(items) => items.first().is_some_and(holds_objects),
        Value::List(fields) => fields.iter().any(|field| match field {
            Value::Tuple(parts) | Value::List(parts) => parts.get(1).is_some_and(holds_objects),
            _ => false,
        }),
        _ => false,
    }
}

/// A type string as `dtype.str` writes it: a byte order (`<` little, `>` big, `|` not
/// applicable, `=` native), a kind and a width in bytes (`<f4`, `|b1`, `>c16`, `|O`).
pub(crate) fn type_string(s: &str) -> Descr {
    let (order, rest) = match s.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, s.get(1..).unwrap_or_default()),
        _ => ('=', s),
    };
    let mut chars = rest.chars();
    let kind = chars.next();
    let width = chars.as_str();
    let big = match order {
        '>' => true,
        '<' => false,
        // Native: this machine's order, as numpy on it would read the file.
        _ => cfg!(target_endian = "big"),
    };
    let dtype = match (kind, width) {
        (Some('b'), "1") => Some(DType::Bool),
        (Some('i'), "1") => Some(DType::Int8),
        (Some('u'), "1") => Some(DType::UInt8),
        (Some('i'), "2") => Some(DType::Int16),
        (Some('u'), "2") => Some(DType::UInt16),
        (Some('i'), "4") => Some(DType::Int32),
        (Some('u'), "4") => Some(DType::UInt32),
        (Some('i'), "8") => Some(DType::Int64),
        (Some('u'), "8") => Some(DType::UInt64),
        (Some('f'), "2") => Some(DType::Float16),
        (Some('f'), "4") => Some(DType::Float32),
        (Some('f'), "8") => Some(DType::Float64),
        (Some('c'), "8") => Some(DType::Complex64),
        (Some('c'), "16") => Some(DType::Complex128),
        _ => None,
    };
    if let Some(dtype) = dtype {
        // The engine reads little-endian bytes: big-endian ones are swapped.
        let swap = big && dtype.element_size().is_some_and(|size| size > 1);
        return Descr::Plain { dtype, swap };
    }
    let shown = format!("'{}'", s.escape_debug());
    if kind == Some('O') && (width.is_empty() || width.bytes().all(|b| b.is_ascii_digit())) {
        return Descr::Objects(shown);
    }
    let what = match (kind, width) {
        (Some('f'), "12" | "16") => "long double floats",
        (Some('c'), "24" | "32") => "long double complex numbers",
        (Some('U'), _) => "unicode strings",
        (Some('S' | 'a'), _) => "byte strings",
        (Some('V'), _) => "raw bytes (void)",
        (Some('M'), _) => "datetime64 values",
        (Some('m'), _) => "timedelta64 values",
        _ => {
            return Descr::Unsupported(format!(
                "descr {shown} is not a type string numpy writes (a byte order, a kind and a \
                 width, as '<f4')"
            ))
        }
    };
    Descr::NoTensor {
        why: format!("descr {shown} holds {what}: no tensor dtype holds them"),
        descr: shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Value, String> {
        parse_literal(text, false)
    }

    fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    #[test]
    fn reads_the_header_numpy_writes() {
        let text = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n";
        let header = check(parse(text).expect("parses")).expect("checks");
        assert_eq!(
            header,
            Header {
                descr: Descr::Plain {
                    dtype: DType::Float32,
                    swap: false
                },
                fortran_order: false,
                shape: vec![2, 3],
            }
        );
        let scalar = "{'descr': '>c16', 'fortran_order': True, 'shape': (), }";
        let header = check(parse(scalar).expect("parses")).expect("checks");
        assert_eq!(header.shape, Vec::<u64>::new());
        assert!(header.fortran_order);
        assert_eq!(
            header.descr,
            Descr::Plain {
                dtype: DType::Complex128,
                swap: true
            }
        );
    }

    #[test]
    fn parses_every_literal_numpy_can_hold() {
        assert_eq!(parse("(1,)"), Ok(Value::Tuple(vec![Value::Int(1)])));
        // Parentheses around one value make no tuple.
        assert_eq!(parse("(7)"), Ok(Value::Int(7)));
        assert_eq!(parse("()"), Ok(Value::Tuple(vec![])));
        assert_eq!(
            parse("[('a', '<f4'), (\"b\", '|u1', (2,))]"),
            Ok(Value::List(vec![
                Value::Tuple(vec![s("a"), s("<f4")]),
                Value::Tuple(vec![s("b"), s("|u1"), Value::Tuple(vec![Value::Int(2)])]),
            ]))
        );
        assert_eq!(parse("-3"), Ok(Value::Int(-3)));
        assert_eq!(parse("+ 3"), Ok(Value::Int(3)));
        assert_eq!(parse("1_000"), Ok(Value::Int(1000)));
        assert_eq!(parse("00"), Ok(Value::Int(0)));
        assert_eq!(parse("None"), Ok(Value::None));
        assert_eq!(parse("\n\t{}"), Ok(Value::Dict(vec![])));
        assert_eq!(parse("'\\x3cf4'"), Ok(s("<f4")));
        assert_eq!(parse("'it\\'s'"), Ok(s("it's")));
        // Newlines are whitespace inside brackets, and after the literal.
        assert_eq!(
            parse("{\n'a':\n[1,\n2]\n}\n\n"),
            Ok(Value::Dict(vec![(
                s("a"),
                Value::List(vec![Value::Int(1), Value::Int(2)])
            )]))
        );
        // Python 2's longs, only where numpy filters them (format versions 1.0 and 2.0).
        assert_eq!(
            parse_literal("(2L, 3 L)", true),
            Ok(Value::Tuple(vec![Value::Int(2), Value::Int(3)]))
        );
        assert!(parse("(2L,)").is_err());
    }

    /// Spellings `literal_eval` reads and numpy writes none of; np.load (numpy 2.2.6) read an
    /// array under each of these headers.
    #[test]
    fn reads_every_spelling_literal_eval_reads() {
        let header = |text: &str| check(parse(text).expect(text)).expect(text);
        let plain = header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
        for text in [
            "{'descr': '<f4', # c\n 'fortran_order': False, 'shape': (2,), }",
            "{'descr': '<f4', \\\n'fortran_order': False, 'shape': (2,), }",
            "{'descr': '<' 'f4', 'fortran_order': False, 'shape': (2,), }",
            "{'descr': '''<f4''', 'fortran_order': False, 'shape': (2,), }",
            "{'descr': u'<f4', 'fortran_order': False, 'shape': (0x2,), }",
            "{'descr': r'<f4', 'fortran_order': False, 'shape': (0b10,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } # trailing",
            "# lead\n{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            "{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (0o2,), }",
        ] {
            assert_eq!(header(text), plain, "{text:?}");
        }
        assert_eq!(
            parse("'a\\\nb'"),
            Ok(s("ab")),
            "a backslash ending a line joins it"
        );
        assert_eq!(parse("'\\q\\101'"), Ok(s("\\qA")), "unknown escapes stay");
        assert_eq!(parse("r'\\x41'"), Ok(s("\\x41")));
        assert_eq!(parse("\"\"\"a\nb\"\"\""), Ok(s("a\nb")));
        assert_eq!(parse("-0x_1F"), Ok(Value::Int(-31)));
    }

    #[test]
    fn refuses_what_literal_eval_refuses_and_what_numpy_never_writes() {
        for (text, says) in [
            ("{'descr': __import__('os'), }", "the name '__import__'"),
            ("{'descr': os.system}", "the name 'os'"),
            ("{'shape': (1+2,)}", "'+'"),
            ("{'shape': (--1,)}", "after the sign"),
            ("{'a': 1} {'b': 2}", "after the literal"),
            ("{'a': 1.5}", "no floats"),
            ("{'a': 0x1g}", "not a digit of its base"),
            ("{'a': 0x}", "no digits"),
            ("{'a': f'x'}", "the prefix 'f'"),
            ("{'a': 1} \\", "after the literal"),
            ("{'a': 01}", "leading zeros"),
            ("{'a': 1__0}", "underscore"),
            ("{'a': b'x'}", "bytes literal"),
            ("{'a': 'x' b'y'}", "bytes literal"),
            ("{'a': 'x\n'}", "not closed"),
            ("{'a': '''x}", "not closed"),
            ("{'a': '\\N{DASH}'}", "named escapes"),
            ("# only a comment", "ends early"),
            ("{'a': 1}\n{'b': 2}", "after the literal"),
            ("{1, 2}", "':' was expected"),
            ("{'a': (1, 2}", "')' was expected"),
            ("{'a': 1", "'}' is missing"),
            ("", "ends early"),
            (
                "{'a': 99999999999999999999999999999999999999999}",
                "too large",
            ),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).unwrap_err().contains("nest deeper"));
    }

    #[test]
    fn checks_the_header_as_numpy_does() {
        let check_text = |text: &str| check(parse(text).expect(text));
        for (text, says) in [
            (
                "[('descr', '<f4')]",
                "not a dictionary but [('descr', '<f4')]",
            ),
            (
                "{'descr': '<f4', 'shape': (1,)}",
                "the keys are ['descr', 'shape'], not exactly",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                "['descr', 'fortran_order', 'shape', 'x']",
            ),
            ("{1: 2}", "the key 1 is not a string"),
            (
                "{'descr': '<f4', 'descr': '<i4', 'fortran_order': False, 'shape': (1,)}",
                "'descr' is set twice",
            ),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
                "fortran_order is not a bool: 0",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': [1]}",
                "shape is not a tuple of non-negative integers: [1]",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
                "non-negative",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
                "shape is not a tuple of non-negative integers: 2",
            ),
        ] {
            let e = check_text(text).expect_err(text);
            assert!(e.contains(says), "{text:?}: {e}");
        }
        // A bool is an int to Python's isinstance: numpy takes it as a size.
        let header = check_text("{'descr': '|u1', 'fortran_order': False, 'shape': (True, 2)}");
        assert_eq!(header.expect("checks").shape, vec![1, 2]);
    }

    #[test]
    fn maps_every_plain_dtype_numpy_writes_and_names_the_rest() {
        let plain = |s: &str| match type_string(s) {
            Descr::Plain { dtype, swap } => Some((dtype, swap)),
            _ => None,
        };
        let native_big = cfg!(target_endian = "big");
        for (s, dtype, swap) in [
            ("|b1", DType::Bool, false),
            ("|i1", DType::Int8, false),
            ("|u1", DType::UInt8, false),
            (">u1", DType::UInt8, false),
            ("<i2", DType::Int16, false),
            (">u2", DType::UInt16, true),
            ("<i4", DType::Int32, false),
            ("<u4", DType::UInt32, false),
            ("<i8", DType::Int64, false),
            (">u8", DType::UInt64, true),
            ("<f2", DType::Float16, false),
            ("<f4", DType::Float32, false),
            ("=f4", DType::Float32, native_big),
            ("|f8", DType::Float64, native_big),
            ("f8", DType::Float64, native_big),
            ("<c8", DType::Complex64, false),
            (">c16", DType::Complex128, true),
        ] {
            assert_eq!(plain(s), Some((dtype, swap)), "{s}");
        }
        for s in ["|O", "|O8", "O"] {
            assert!(matches!(type_string(s), Descr::Objects(_)), "{s}");
        }
        for (s, says) in [
            ("<U2", "unicode strings"),
            ("|S3", "byte strings"),
            ("|V8", "raw bytes"),
            ("<M8[ns]", "datetime64"),
            ("<m8[s]", "timedelta64"),
            ("<f16", "long double floats"),
            ("<c32", "long double complex"),
            ("<i16", "not a type string numpy writes"),
            ("float32", "not a type string numpy writes"),
        ] {
            match type_string(s) {
                Descr::NoTensor { why, .. } | Descr::Unsupported(why) => {
                    assert!(why.contains(says), "{s}: {why}")
                }
                other => panic!("{s}: {other:?}"),
            }
        }
        let structured = parse("[('a', '<f4'), ('b', '|O')]").expect("parses");
        assert!(matches!(descr_of(&structured), Descr::Objects(_)));
        let structured = parse("[('O', '<f4')]").expect("parses");
        match descr_of(&structured) {
            Descr::NoTensor { why, .. } => assert!(why.contains("structured dtype"), "{why}"),
            other => panic!("{other:?}"),
        }
        let subarray = parse("('<f4', (2,))").expect("parses");
        assert!(matches!(descr_of(&subarray), Descr::NoTensor { .. }));
    }
}
