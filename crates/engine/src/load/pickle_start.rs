//! Whether bytes begin a pickle that CPython's `pickle.load` would run, walked as it runs them.
//!
//! Only protocol 2 and later start with PROTO; protocol 0 and 1 streams start with whatever
//! they push first (`(`, `}`, `c`, `I`…), and CPython accepts a stream of any protocol without
//! PROTO. So the prefix is walked opcode by opcode as CPython would run it, counting the values
//! above the innermost mark, the marks, and the memo keys: text starting with a capital letter
//! (`C`, `I`, `N`, `S`… are opcodes) fails within a few bytes, a pickle does not.
//!
//! CPython runs every opcode before the one it rejects: a stream that names a global and only
//! then fails (an unknown opcode or memo key, STOP on an empty stack, text after the call) has
//! already imported and called it, so it begins a pickle as much as a whole one does.

use super::sniff::Prefix;
use crate::pickle::allowlist::{map_module, resolves};
use crate::pickle::opcodes as ops;
use crate::pickle::{Budget, Loader, UnsafeGlobal};

/// Highest protocol CPython (3.8 and later) reads.
const HIGHEST_PROTOCOL: u64 = 5;

/// True when CPython's `pickle.load` would run `prefix` as a pickle: every opcode is one
/// CPython knows, with well-formed operands, and none would fail on the stack, marks and memo
/// built before it, until the walk reached STOP, or ran out of prefix after at least one whole
/// opcode (CPython runs everything before a cut); or, whatever follows, a global was named
/// (GLOBAL, STACK_GLOBAL, INST) before the first opcode CPython rejects. Given a whole file,
/// a first operand running past its end is a truncated stream CPython refuses unrun.
pub(crate) fn begins_pickle(prefix: &[u8]) -> bool {
    matches!(
        walk(prefix),
        Walked::Pickle | Walked::TooLarge | Walked::Cut
    )
}

/// [`begins_pickle`] of a file's first bytes: `None` when the walk ran out of them before
/// deciding, where the whole file may decide otherwise.
pub(crate) fn begins_pickle_in(prefix: Prefix<'_>) -> Option<bool> {
    match walk(prefix.bytes) {
        Walked::Pickle | Walked::TooLarge => Some(true),
        Walked::NotPickle => Some(false),
        Walked::Cut | Walked::FirstOperandCut if !prefix.whole => None,
        Walked::Cut => Some(true),
        Walked::FirstOperandCut => Some(false),
    }
}

/// What the walk says of the first bytes of a stream that may go on past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Begins {
    /// CPython would run it as a pickle.
    Pickle,
    /// CPython would reject it before running anything.
    NotPickle,
    /// The first opcode's operand runs past the bytes given: only more of the stream settles
    /// it (a 600-byte `X` string, a long protocol-0 line).
    NeedMore,
}

/// [`begins_pickle`] of the first bytes of a stream: `NeedMore` when they are cut inside the
/// first opcode, so a caller inflating the stream (or reading it by ranges) reads on rather
/// than deciding from a window.
pub(crate) fn begins(prefix: &[u8]) -> Begins {
    match walk(prefix) {
        Walked::Pickle | Walked::TooLarge | Walked::Cut => Begins::Pickle,
        Walked::NotPickle => Begins::NotPickle,
        Walked::FirstOperandCut => Begins::NeedMore,
    }
}

/// Where the stream at the start of `bytes` ends (just past its STOP), walked as CPython runs
/// it; `None` when CPython would reject it first. A reader that refuses a stream for what it
/// holds finds the next one here.
pub(crate) fn stream_end(bytes: &[u8]) -> Option<usize> {
    let mut walk = Walk::new(bytes);
    loop {
        match walk.step() {
            Ok(()) => {}
            Err(End::Stop) => return Some(walk.pos),
            Err(_) => return None,
        }
    }
}

/// [`stream_end`] of a stream's first bytes: `Some(None)` where the walk stopped short of a
/// STOP for any reason but their end, `None` when they end before it decided.
pub(crate) fn stream_end_in(prefix: Prefix<'_>) -> Option<Option<usize>> {
    let mut walk = Walk::new(prefix.bytes);
    loop {
        match walk.step() {
            Ok(()) => {}
            Err(End::Stop) => return Some(Some(walk.pos)),
            Err(End::OutOfPrefix) if !prefix.whole => return None,
            Err(_) => return Some(None),
        }
    }
}

/// The globals CPython would resolve running `bytes` from their start, as `(module, name,
/// offset of the opcode)`: GLOBAL's and INST's names, and STACK_GLOBAL's where both operands
/// are strings the walk has seen (pushed, or fetched from the memo). Nothing is built or
/// copied, so a stream refused for what its values would take still has what follows named;
/// the walk stops where CPython would (STOP, an opcode it rejects) or past [`MAX_TRACKED`]
/// marks or keys; past as many values on the stack it no longer follows which are strings.
fn globals_named(bytes: &[u8]) -> Vec<(&[u8], &[u8], usize)> {
    let mut walk = Walk::new(bytes);
    walk.names = Some(Names::default());
    while walk.step().is_ok() {}
    walk.names.map(|n| n.globals).unwrap_or_default()
}

/// [`globals_named`] outside what `pickle.load` resolves unasked, each distinct global once
/// and none the refusal already `named` (by module and name), their names copying at most a
/// quarter of what `budget` has left: for a stream (at `base` in `member`) refused before its
/// end for what reading it would take, which CPython reads on through. A stream naming one
/// long global thousands of times (through the memo) costs its hashing, not copies.
pub(crate) fn unsafe_globals_walked<'g>(
    bytes: &[u8],
    member: &str,
    base: u64,
    named: impl IntoIterator<Item = &'g UnsafeGlobal>,
    budget: &Budget,
) -> Vec<UnsafeGlobal> {
    let known: std::collections::HashSet<(&str, &str)> = named
        .into_iter()
        .map(|g| (g.module.as_str(), g.name.as_str()))
        .collect();
    let max_bytes = budget.max_memory.saturating_sub(budget.memory_held) / 4;
    let payload = crate::unsafe_global::sha256_hex(bytes);
    let mut seen = std::collections::HashSet::new();
    let mut copied = 0u64;
    let mut out = Vec::new();
    for (module, name, at) in globals_named(bytes) {
        let text = |b| String::from_utf8_lossy(b);
        let (module, name) = (text(module), text(name));
        let module = map_module(&module);
        if known.contains(&(module, &*name))
            || resolves(Loader::Python, module, &name)
            || !seen.insert((module.to_owned(), name.clone()))
        {
            continue;
        }
        copied = copied.saturating_add((module.len() + name.len()) as u64);
        if copied > max_bytes {
            break;
        }
        out.push(UnsafeGlobal {
            module: module.to_owned(),
            name: name.into_owned(),
            member: member.to_owned(),
            position: base.saturating_add(at as u64),
            payload: payload.clone(),
        });
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
enum Walked {
    Pickle,
    NotPickle,
    /// The bytes given end after at least one whole opcode, before the walk decided.
    Cut,
    /// The first opcode's operand runs past the bytes given.
    FirstOperandCut,
    /// More marks or memo keys than are worth tracking: taken for a pickle (fail closed).
    TooLarge,
}

fn walk(bytes: &[u8]) -> Walked {
    let mut walk = Walk::new(bytes);
    let mut whole = 0usize;
    loop {
        let at = walk.pos;
        match walk.step() {
            // A global named: CPython has imported and called it whatever follows.
            Ok(())
                if matches!(
                    bytes.get(at),
                    Some(&(ops::GLOBAL | ops::INST | ops::STACK_GLOBAL))
                ) =>
            {
                return Walked::Pickle
            }
            Ok(()) => whole += 1,
            Err(End::Stop) => return Walked::Pickle,
            Err(End::OutOfPrefix) if whole > 0 => return Walked::Cut,
            Err(End::OutOfPrefix) => return Walked::FirstOperandCut,
            Err(End::Invalid) => return Walked::NotPickle,
            Err(End::TooLarge) => return Walked::TooLarge,
        }
    }
}

/// Marks or memo keys beyond which a walk stops counting, and values beyond which naming stops
/// following them (a file-length walk stays bounded).
const MAX_TRACKED: usize = 1 << 20;

/// Why the walk ended.
enum End {
    /// STOP with a value to return: a whole pickle.
    Stop,
    /// An opcode or operand runs past the prefix.
    OutOfPrefix,
    /// CPython would raise here.
    Invalid,
    /// Past [`MAX_TRACKED`] marks or memo keys.
    TooLarge,
}

type Step<T> = Result<T, End>;

struct Walk<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Values above the innermost mark: all an opcode may pop.
    depth: usize,
    /// Depths saved by MARK.
    marks: Vec<usize>,
    /// Memo keys set so far.
    memo: MemoKeys,
    /// The strings among the values, when the walk names globals ([`globals_named`]).
    names: Option<Names<'a>>,
    /// The string the current opcode pushes, if it pushes one.
    pushed: Option<&'a [u8]>,
}

/// What naming STACK_GLOBAL's operands takes: which values are strings.
#[derive(Default)]
struct Names<'a> {
    /// The values above the innermost mark, `Some` for a string.
    values: Vec<Option<&'a [u8]>>,
    /// The values below each mark.
    marked: Vec<Vec<Option<&'a [u8]>>>,
    /// How many values `marked` holds in all.
    marked_len: usize,
    /// Whether the values outgrew [`MAX_TRACKED`] and are no longer followed: STACK_GLOBAL's
    /// operands are unknown from there (GLOBAL's and INST's names are still read).
    values_lost: bool,
    /// Memo keys holding a string.
    memo: std::collections::HashMap<u64, &'a [u8]>,
    globals: Vec<(&'a [u8], &'a [u8], usize)>,
}

/// A set of memo keys: a bitset for the keys writers use (BINPUT, LONG_BINPUT and MEMOIZE
/// count up from 0), a hash set for any others; a file-length walk sets a key per value.
#[derive(Default)]
struct MemoKeys {
    bits: Vec<u64>,
    others: std::collections::HashSet<u64>,
    len: usize,
}

impl MemoKeys {
    /// Keys below this are bits.
    const BITS: u64 = (MAX_TRACKED as u64) * 4;

    fn contains(&self, key: u64) -> bool {
        match key < Self::BITS {
            true => usize::try_from(key / 64)
                .ok()
                .and_then(|word| self.bits.get(word))
                .is_some_and(|word| word & (1 << (key % 64)) != 0),
            false => self.others.contains(&key),
        }
    }

    fn insert(&mut self, key: u64) {
        let new = match key < Self::BITS {
            true => {
                // Below BITS, so within usize.
                let word = (key / 64) as usize;
                if self.bits.len() <= word {
                    self.bits.resize(word + 1, 0);
                }
                let bit = 1 << (key % 64);
                self.bits.get_mut(word).is_some_and(|word| {
                    let new = *word & bit == 0;
                    *word |= bit;
                    new
                })
            }
            false => self.others.insert(key),
        };
        self.len += usize::from(new);
    }
}

impl<'a> Walk<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Walk {
            bytes,
            pos: 0,
            depth: 0,
            marks: Vec::new(),
            memo: MemoKeys::default(),
            names: None,
            pushed: None,
        }
    }

    fn take(&mut self, n: u64) -> Step<&'a [u8]> {
        let bytes = self.bytes;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .ok_or(End::OutOfPrefix)?;
        let taken = bytes.get(self.pos..end).ok_or(End::OutOfPrefix)?;
        self.pos = end;
        Ok(taken)
    }

    /// A little-endian unsigned operand of `n` bytes (at most 8).
    fn uint(&mut self, n: u64) -> Step<u64> {
        let bytes = self.take(n)?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// A 4-byte signed length: negative is an error in CPython.
    fn signed_len(&mut self) -> Step<u64> {
        let n = self.uint(4)?;
        if n >= 1 << 31 {
            return Err(End::Invalid);
        }
        Ok(n)
    }

    /// A text operand up to its newline, without it.
    fn line(&mut self) -> Step<&'a [u8]> {
        let bytes = self.bytes;
        let rest = bytes.get(self.pos..).unwrap_or_default();
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(End::OutOfPrefix)?;
        self.pos += n + 1;
        Ok(rest.get(..n).unwrap_or_default())
    }

    fn pop(&mut self, n: usize) -> Step<()> {
        self.depth = self.depth.checked_sub(n).ok_or(End::Invalid)?;
        if let Some(names) = &mut self.names {
            names.values.truncate(self.depth);
        }
        Ok(())
    }

    /// Pops to the innermost mark; how many values were above it.
    fn pop_mark(&mut self) -> Step<usize> {
        let items = self.depth;
        self.depth = self.marks.pop().ok_or(End::Invalid)?;
        if let Some(names) = &mut self.names {
            names.values = names.marked.pop().unwrap_or_default();
            names.marked_len = names.marked_len.saturating_sub(names.values.len());
        }
        Ok(items)
    }

    /// The string `back` values below the top (0: the top), when it is one and known.
    fn string_at(&self, back: usize) -> Option<&'a [u8]> {
        let values = &self.names.as_ref().filter(|n| !n.values_lost)?.values;
        let i = values.len().checked_sub(back + 1)?;
        *values.get(i)?
    }

    fn name_global(&mut self, module: &'a [u8], name: &'a [u8], at: usize) {
        if let Some(names) = &mut self.names {
            names.globals.push((module, name, at));
        }
    }

    fn put(&mut self, key: u64) -> Step<()> {
        if self.depth == 0 {
            return Err(End::Invalid);
        }
        if self.memo.len >= MAX_TRACKED {
            return Err(End::TooLarge);
        }
        self.memo.insert(key);
        Ok(())
    }

    /// Runs one opcode's effect on the counts.
    fn step(&mut self) -> Step<()> {
        let at = self.pos;
        self.pushed = None;
        let op = self.uint(1)? as u8;
        // Values each opcode pops (above the innermost mark) and pushes.
        let (pops, pushes) = match op {
            ops::MARK => {
                if self.marks.len() >= MAX_TRACKED {
                    return Err(End::TooLarge);
                }
                self.marks.push(self.depth);
                self.depth = 0;
                if let Some(names) = &mut self.names {
                    names.marked_len += names.values.len();
                    names.marked.push(std::mem::take(&mut names.values));
                }
                (0, 0)
            }
            ops::STOP => {
                self.pop(1)?;
                return Err(End::Stop);
            }
            // POP: a value, or the innermost mark when none is above it.
            ops::POP if self.depth == 0 => {
                self.pop_mark()?;
                (0, 0)
            }
            ops::POP => (1, 0),
            ops::POP_MARK => {
                self.pop_mark()?;
                (0, 0)
            }
            ops::DUP => {
                self.pushed = self.string_at(0);
                (1, 2)
            }
            ops::FLOAT => text(float_text(self.line()?))?,
            ops::INT => text(int_text(self.line()?, false))?,
            ops::LONG => text(int_text(self.line()?, true))?,
            ops::STRING => {
                let line = self.line()?;
                self.pushed = line.get(1..line.len().saturating_sub(1));
                text(quoted(line))?
            }
            // UNICODE is raw-unicode-escape (any bytes); protocol 0 persistent ids are ASCII.
            ops::UNICODE => {
                self.pushed = Some(self.line()?);
                (0, 1)
            }
            ops::PERSID => text(self.line()?.is_ascii())?,
            ops::GET | ops::BINGET | ops::LONG_BINGET => {
                let key = self.memo_key(op)?;
                if !self.memo.contains(key) {
                    return Err(End::Invalid);
                }
                self.pushed = self.names.as_ref().and_then(|n| n.memo.get(&key).copied());
                (0, 1)
            }
            ops::PUT | ops::BINPUT | ops::LONG_BINPUT | ops::MEMOIZE => {
                let key = self.memo_key(op)?;
                self.put(key)?;
                let top = self.string_at(0);
                if let Some(names) = &mut self.names {
                    match top {
                        Some(text) => names.memo.insert(key, text),
                        None => names.memo.remove(&key),
                    };
                }
                (0, 0)
            }
            ops::BININT => self.take(4).map(|_| (0, 1))?,
            ops::BININT1 => self.take(1).map(|_| (0, 1))?,
            ops::BININT2 => self.take(2).map(|_| (0, 1))?,
            ops::BINFLOAT => self.take(8).map(|_| (0, 1))?,
            // Counted operands: LONG1, SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE…
            ops::LONG1 | ops::SHORT_BINSTRING | ops::SHORT_BINBYTES | ops::SHORT_BINUNICODE => {
                self.counted(1)?
            }
            ops::BINUNICODE | ops::BINBYTES => self.counted(4)?,
            ops::BINUNICODE8 | ops::BINBYTES8 | ops::BYTEARRAY8 => self.counted(8)?,
            ops::LONG4 | ops::BINSTRING => {
                let n = self.signed_len()?;
                let operand = self.take(n)?;
                self.pushed = (op == ops::BINSTRING).then_some(operand);
                (0, 1)
            }
            ops::NONE
            | ops::NEWTRUE
            | ops::NEWFALSE
            | ops::EMPTY_LIST
            | ops::EMPTY_TUPLE
            | ops::EMPTY_DICT
            | ops::EMPTY_SET => (0, 1),
            ops::GLOBAL | ops::INST => {
                let module = self.line()?;
                let name = self.line()?;
                if !(dotted_name(module) && dotted_name(name)) {
                    return Err(End::Invalid);
                }
                if op == ops::INST {
                    self.pop_mark()?;
                }
                self.name_global(module, name, at);
                (0, 1)
            }
            ops::STACK_GLOBAL => {
                if let (Some(module), Some(name)) = (self.string_at(1), self.string_at(0)) {
                    self.name_global(module, name, at);
                }
                (2, 1)
            }
            // BINPERSID, TUPLE1, READONLY_BUFFER
            ops::BINPERSID | ops::TUPLE1 | ops::READONLY_BUFFER => (1, 1),
            // APPEND, BUILD, STACK_GLOBAL, REDUCE, NEWOBJ, TUPLE2
            ops::APPEND | ops::BUILD | ops::REDUCE | ops::NEWOBJ | ops::TUPLE2 => (2, 1),
            // SETITEM, NEWOBJ_EX, TUPLE3
            ops::SETITEM | ops::NEWOBJ_EX | ops::TUPLE3 => (3, 1),
            // OBJ: the class and its arguments above a mark.
            ops::OBJ => match self.pop_mark()? {
                0 => return Err(End::Invalid),
                _ => (0, 1),
            },
            ops::LIST | ops::TUPLE | ops::FROZENSET => {
                self.pop_mark()?;
                (0, 1)
            }
            ops::DICT => match self.pop_mark()? % 2 {
                0 => (0, 1),
                _ => return Err(End::Invalid),
            },
            // APPENDS, SETITEMS, ADDITEMS: into the container below the mark.
            ops::APPENDS | ops::SETITEMS | ops::ADDITEMS => {
                let items = self.pop_mark()?;
                if op == ops::SETITEMS && items % 2 != 0 {
                    return Err(End::Invalid);
                }
                (1, 1)
            }
            ops::FRAME => self.take(8).map(|_| (0, 0))?,
            ops::PROTO if self.uint(1)? <= HIGHEST_PROTOCOL => (0, 0),
            // Unknown opcodes; PROTO above 5; EXT1/2/4, whose registry is empty unless a
            // program fills it; NEXT_BUFFER, which `pickle.load` has no buffers for.
            _ => return Err(End::Invalid),
        };
        self.pop(pops)?;
        self.depth += pushes;
        if let Some(names) = self.names.as_mut().filter(|n| !n.values_lost) {
            // Past MAX_TRACKED values on the stack they are dropped, not followed: the memory
            // a walk holds stays bounded, as for marks and memo keys.
            if names.values.len().saturating_add(names.marked_len) >= MAX_TRACKED {
                *names = Names {
                    values_lost: true,
                    memo: std::mem::take(&mut names.memo),
                    globals: std::mem::take(&mut names.globals),
                    ..Names::default()
                };
                return Ok(());
            }
            let pushed = self.pushed.take();
            // Every value but the last is a copy of it (DUP) or not a string.
            names
                .values
                .extend((0..pushes).map(|i| pushed.filter(|_| i + 1 == pushes || op == ops::DUP)));
        }
        Ok(())
    }

    /// The memo key a GET or PUT opcode names: text, one or four bytes; MEMOIZE's is the
    /// number of keys so far.
    fn memo_key(&mut self, op: u8) -> Step<u64> {
        match op {
            ops::GET | ops::PUT => decimal(self.line()?),
            ops::BINGET | ops::BINPUT => self.uint(1),
            ops::LONG_BINGET | ops::LONG_BINPUT => self.uint(4),
            _ => Ok(self.memo.len as u64),
        }
    }

    /// An operand whose `width`-byte length precedes it; the opcode pushes it (a string,
    /// for the text opcodes among them).
    fn counted(&mut self, width: u64) -> Step<(usize, usize)> {
        let op = self.bytes.get(self.pos.wrapping_sub(1)).copied();
        let n = self.uint(width)?;
        let operand = self.take(n)?;
        if matches!(
            op,
            Some(ops::SHORT_BINSTRING | ops::SHORT_BINUNICODE | ops::BINUNICODE | ops::BINUNICODE8)
        ) {
            self.pushed = Some(operand);
        }
        Ok((0, 1))
    }
}

/// A text opcode whose operand is valid pushes one value.
fn text(valid: bool) -> Step<(usize, usize)> {
    if valid {
        Ok((0, 1))
    } else {
        Err(End::Invalid)
    }
}

/// What Python's `int(text, 0)` takes, roughly: sign, digits, base prefixes, underscores;
/// `L` ends a protocol-0 long.
fn int_text(line: &[u8], long: bool) -> bool {
    let t = line.trim_ascii();
    let t = if long {
        t.strip_suffix(b"L").unwrap_or(t)
    } else {
        t
    };
    let t = t
        .strip_prefix(b"-")
        .or_else(|| t.strip_prefix(b"+"))
        .unwrap_or(t);
    t.first().is_some_and(u8::is_ascii_digit)
        && t.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// What Python's `float(text)` takes, roughly.
fn float_text(line: &[u8]) -> bool {
    let t = line.trim_ascii();
    !t.is_empty()
        && t.iter()
            .all(|b| b"0123456789+-._eEinfatyINFATY".contains(b))
}

/// STRING's operand must be quoted.
fn quoted(line: &[u8]) -> bool {
    matches!((line.first(), line.last()), (Some(&a), Some(&b)) if line.len() >= 2 && a == b && (a == b'\'' || a == b'"'))
}

/// A memo key in decimal.
fn decimal(line: &[u8]) -> Step<u64> {
    std::str::from_utf8(line.trim_ascii())
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(End::Invalid)
}

/// A module or attribute name as GLOBAL and INST carry it: dotted identifiers in UTF-8.
fn dotted_name(line: &[u8]) -> bool {
    std::str::from_utf8(line).is_ok_and(|s| {
        s.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{begins_pickle, globals_named, MAX_TRACKED};

    #[test]
    fn the_walk_names_the_globals_cpython_resolves_building_nothing() {
        let named = |stream: &[u8]| -> Vec<(String, String, usize)> {
            globals_named(stream)
                .into_iter()
                .map(|(m, n, at)| {
                    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                    (text(m), text(n), at)
                })
                .collect()
        };
        let g = |m: &str, n: &str, at| (m.to_owned(), n.to_owned(), at);
        // Protocol 0: GLOBAL's lines, then INST's under a mark.
        assert_eq!(
            named(b"cos\nsystem\n(S'true'\ntR0(S'x'\niposix\nsystem\n."),
            [g("os", "system", 0), g("posix", "system", 29)]
        );
        // Protocol 4: STACK_GLOBAL's operands pushed, then fetched from the memo (MEMOIZE
        // keys 0 and 1), after a POP of the first global.
        let stream = b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x930h\x00h\x01\x93.";
        assert_eq!(
            named(stream),
            [g("os", "system", 16), g("os", "system", 22)]
        );
        // An operand that is not a string names nothing; the walk stops where CPython would.
        assert_eq!(named(b"\x80\x04K\x01\x8c\x01x\x93."), []);
        assert_eq!(named(b"\x80\x04\xffcos\nsystem\n."), []);
    }

    /// Naming follows which values on the stack are strings up to 2^20 of them (across marks
    /// too), then drops them, where it once held 16 bytes a value without bound (a 35 MB
    /// stream took 420 MB under a 16 MiB budget): STACK_GLOBAL's operands are unknown from
    /// there, GLOBAL's names still read.
    #[test]
    fn naming_follows_at_most_a_million_values_on_the_stack() {
        let stream = |values: usize, marks: usize| {
            let mut s = b"\x80\x04\x8c\x02os\x8c\x06system".to_vec();
            for _ in 0..marks {
                s.push(b'(');
                s.extend(std::iter::repeat_n(b'N', values / marks));
            }
            s.extend(std::iter::repeat_n(b'1', marks));
            s.extend(b"\x93cposix\nsystem\n.");
            s
        };
        for marks in [1, 1000] {
            let named = |values| -> Vec<String> {
                globals_named(&stream(values, marks))
                    .into_iter()
                    .map(|(m, n, _)| format!("{}.{}", m.escape_ascii(), n.escape_ascii()))
                    .collect()
            };
            assert_eq!(named(MAX_TRACKED - 1000), ["os.system", "posix.system"]);
            assert_eq!(named(MAX_TRACKED + 1000), ["posix.system"]);
        }
    }

    #[test]
    fn pickles_of_every_protocol_begin_a_pickle() {
        // pickle.dumps({'a': 1}, protocol=p) for p in 0..=5, as CPython 3.11 writes them.
        let streams: [&[u8]; 6] = [
            b"(dp0\nVa\np1\nI1\ns.",
            b"}q\x00X\x01\x00\x00\x00aq\x01K\x01s.",
            b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.",
            b"\x80\x03}q\x00X\x01\x00\x00\x00aq\x01K\x01s.",
            b"\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.",
            b"\x80\x05\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.",
        ];
        for s in streams {
            assert!(begins_pickle(s), "{s:?}");
        }
        // Protocol 0 with a global first (os.system via __reduce__), cut short: still a pickle.
        assert!(begins_pickle(
            b"cposix\nsystem\np0\n(Vecho hi\np1\ntp2\nRp3"
        ));
        // A long first operand running past the prefix: one whole opcode (PROTO) suffices.
        assert!(begins_pickle(b"\x80\x03B\x00\x00\x10\x00abc"));
    }

    #[test]
    fn a_global_named_before_an_opcode_cpython_rejects_begins_a_pickle() {
        // Each names os.system (GLOBAL, STACK_GLOBAL, INST) and calls it, then fails: CPython
        // has imported and called it by then.
        let calls: [&[u8]; 3] = [
            b"cos\nsystem\n(S'true'\ntR",
            b"\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R",
            b"(S'true'\nios\nsystem\n",
        ];
        let failures: [&[u8]; 5] = [b"\xff", b"h\xfe", b"0.", b"0\n\n.", b"\x80\x06"];
        for call in calls {
            for failure in failures {
                let stream = [call, failure].concat();
                assert!(begins_pickle(&stream), "{stream:?}");
            }
        }
        // The same failures with no global named first are not a pickle.
        for failure in failures {
            assert!(!begins_pickle(&[b"N", failure].concat()), "{failure:?}");
        }
    }

    #[test]
    fn memo_keys_of_any_size_are_tracked() {
        // PUT then GET of a small and a huge text key, a BINPUT and MEMOIZE's count: whole
        // pickles; a GET of a key never put is one CPython refuses.
        for key in ["7", "99999999999999"] {
            let stream = format!("Np{key}\n0g{key}\n.");
            assert!(begins_pickle(stream.as_bytes()), "{stream}");
            let unset = format!("Np{key}\n0g1{key}\n.");
            assert!(!begins_pickle(unset.as_bytes()), "{unset}");
        }
        assert!(begins_pickle(b"\x80\x04N\x94K\x01q\x010h\x00h\x01\x86."));
        assert!(!begins_pickle(b"\x80\x04N\x94h\x01."));
    }

    #[test]
    fn text_and_other_formats_do_not() {
        let others: [&[u8]; 13] = [
            b"",
            b"Copyright (c) 2024 the authors, with a long first line",
            b"Note: this model",
            b"Introduction\n",
            b"Some text\n",
            b"Makefile",
            b"(a)",
            b"349992493fdda912fdab4a9aad21726b595a55ff",
            b"\x89PNG\r\n\x1a\n\x00\x00",
            b"GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            b"\x93NUMPY\x01\x00v\x00{'descr'",
            b"\x80\x06}.",
            b"(dp0\nVa\nI1\nd.",
        ];
        for s in others {
            assert!(!begins_pickle(s), "{s:?}");
        }
        // Text whose first line is `c` and a name, its second a name, is GLOBAL `at.dog`:
        // CPython imports `at` before the `t` it rejects, so this is a pickle.
        assert!(begins_pickle(b"cat\ndog\nthis"));
    }
}
