//! What `torch.load` does with a pickle by default (`weights_only=True` since torch 2.6).
//!
//! torch's weights-only unpickler (`torch/_weights_only_unpickler.py`, 2.9.1) is a machine of
//! its own, not CPython's: it runs only the opcodes protocol 2 writes for tensors (no FRAME,
//! no SHORT_BINUNICODE, no POP, no MEMOIZE), resolves only its allowlist, creates only
//! allowlisted classes, BUILDs only tensors, parameters, `OrderedDict`s and allowlisted
//! types, and APPENDs only to lists. A stream tensorplay reads can still be one torch refuses,
//! and a checkpoint that would fail to load in production must not pass silently, so the
//! stream is replayed here on the kinds of its values — never on values: nothing is built.
//! Where it refuses, [`replay`] gives torch's own message.

use super::allowlist::{resolves, DTENSOR_REGISTERS};
use super::budget::{doubled, slice_bytes, table_bytes};
use super::opcodes::*;
use super::Budget;
use super::Loader;
use crate::{DTypeKind, Device, Tensor};
use std::collections::{HashMap, HashSet};
use std::mem::size_of;

/// A set of memo keys. Picklers number them from 0, one per memoized value, so a key is
/// below the stream's length: those are bits (a `torch.save` stream looks one up per value),
/// any other is hashed.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    /// Keys below this are bits.
    near: usize,
    /// Grown to the largest key inserted, not sized for `near` at once: a large stream that
    /// fetches few keys (or none) costs no more than those.
    bits: Vec<u64>,
    far: HashSet<u32, foldhash::fast::RandomState>,
}

impl Keys {
    /// Room for the keys below `near` as bits, at most 2 MiB of them (16M keys, a memo far
    /// larger than any checkpoint's): a huge stream's keys past that are hashed.
    pub(crate) fn new(near: usize) -> Keys {
        Keys {
            near: near.min(1 << 24),
            bits: Vec::new(),
            far: HashSet::default(),
        }
    }

    pub(crate) fn insert(&mut self, key: u32) {
        let (word, bit) = (key as usize / 64, key % 64);
        if key as usize >= self.near {
            self.far.insert(key);
            return;
        }
        if word >= self.bits.len() {
            // Doubling: keys arrive in increasing order, and `near` bounds the growth.
            let len = (word + 1)
                .max(self.bits.len() * 2)
                .min(self.near.div_ceil(64));
            self.bits.resize(len, 0);
        }
        if let Some(w) = self.bits.get_mut(word) {
            *w |= 1 << bit;
        }
    }

    /// The bytes it holds; with `grown`, once the hashed keys' table next doubles (its slots a
    /// power of two, an eighth spare, a byte of control each).
    fn held(&self, grown: bool) -> u64 {
        let far = match grown {
            true => doubled(self.far.capacity()),
            false => self.far.capacity(),
        };
        (self.bits.capacity() as u64)
            .saturating_mul(8)
            .saturating_add(table_bytes(far, size_of::<u32>()))
    }

    /// Whether inserting `key` may grow the hashed keys' table.
    fn grows(&self, key: u32) -> bool {
        key as usize >= self.near && self.far.len() == self.far.capacity()
    }

    fn contains(&self, key: u32) -> bool {
        let (word, bit) = (key as usize / 64, key % 64);
        if key as usize >= self.near {
            return self.far.contains(&key);
        }
        self.bits.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }
}

/// What `_rebuild_tensor`'s `set_` says of a tensor it rebuilds: torch checks, in signed 64-bit
/// arithmetic, that the view fits its storage (`computeStorageNbytes`, `checkInBoundsForStorage`).
pub fn set_storage(tensor: &Tensor) -> Result<(), String> {
    let imp = tensor.tensor_impl();
    // `_rebuild_meta_tensor_no_storage` sets no storage; `_rebuild_qtensor` sets a quantized
    // tensor's by the quantized storage's own accounting (sub-byte elements packed), which
    // `set_`'s itemsize check does not apply to.
    if *imp.device() == Device::Meta || imp.dtype().kind() == DTypeKind::Quantized {
        return Ok(());
    }
    let layout = imp.layout();
    let (sizes, strides) = (layout.sizes(), layout.strides());
    if layout.numel() == 0 {
        return Ok(());
    }
    // torch's itemsize: a byte for its sub-byte dtypes (quint4x2, …).
    let itemsize = imp.dtype().element_size().unwrap_or(1);
    let needed = sizes
        .iter()
        .zip(strides)
        .try_fold(
            i64::try_from(layout.storage_offset()).ok(),
            |acc, (&size, &stride)| {
                let step = i64::try_from(size - 1)
                    .ok()?
                    .checked_mul(i64::try_from(stride).ok()?)?;
                Some(acc?.checked_add(step))
            },
        )
        .flatten()
        .and_then(|last| {
            last.checked_add(1)?
                .checked_mul(i64::try_from(itemsize).ok()?)
        });
    let Some(needed) = needed else {
        return Err(format!(
            "Storage size calculation overflowed with sizes={sizes:?} and strides={strides:?}"
        ));
    };
    let have = imp.storage().nbytes();
    if u64::try_from(needed).unwrap_or(u64::MAX) > have {
        return Err(format!(
            "setStorage: sizes {sizes:?}, strides {strides:?}, storage offset {}, and itemsize \
             {itemsize} requiring a storage size of {needed} are out of bounds for storage of \
             size {have}",
            layout.storage_offset()
        ));
    }
    Ok(())
}

/// Which `persistent_load` the unpickler has: what `torch.load` gives it for the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistent {
    /// None: the weights-only unpickler's own, which refuses every id.
    Refused,
    /// A zip archive's `data.pkl`: `('storage', storage_type, key, location, numel)`.
    Zip,
    /// A legacy file's object: `('storage', storage_type, key, location, numel, view)`.
    Legacy,
}

/// What torch's weights-only unpickler does with a stream: `Ok` where it reads to STOP, else
/// torch's message.
pub type Verdict = Result<(), String>;

/// Replays `stream` (which may run on past its STOP) through torch's weights-only unpickler,
/// holding no more memory than `budget` leaves: its verdict, or the overrun that kept it
/// from one.
pub fn replay(stream: &[u8], persistent: Persistent, budget: &Budget) -> Result<Verdict, Overrun> {
    replay_holding(stream, persistent, budget).0
}

/// [`replay`], and the bytes its lists reached: freed when it ends, but resident until the
/// allocator hands them back.
pub(crate) fn replay_holding(
    stream: &[u8],
    persistent: Persistent,
    budget: &Budget,
) -> (Result<Verdict, Overrun>, u64) {
    let gets = match memo_gets(stream, budget) {
        Ok(gets) => gets,
        Err(overrun) => {
            let reached = overrun.needed.saturating_sub(budget.memory_held);
            return (Err(overrun), reached);
        }
    };
    let mut machine = Machine::new(stream, persistent, Some(gets), budget);
    let run = machine.run();
    (ended(run), machine.held())
}

/// [`replay`] of a stream the pickle machine read to its STOP without a refusal, given the
/// memo keys that reading fetched ([`Unpickled::fetched`](super::Unpickled::fetched)): they
/// hold every key the replay fetches, so the stream is not stepped over again to find them.
/// Up to where the replay stops (at STOP, a FRAME, or sooner) both read the same opcodes:
/// neither has met a FRAME, and every operand the replay reads the machine read whole.
pub(crate) fn replay_read(
    stream: &[u8],
    persistent: Persistent,
    fetched: Keys,
    budget: &Budget,
) -> Result<Verdict, Overrun> {
    ended(Machine::new(stream, persistent, Some(fetched), budget).run())
}

fn ended(run: Result<(), Stop>) -> Result<Verdict, Overrun> {
    match run {
        Ok(()) => Ok(Ok(())),
        Err(Stop::Refused(message)) => Ok(Err(message)),
        Err(Stop::Overrun(overrun)) => Err(overrun),
    }
}

/// The memo keys the replay will fetch (BINGET, LONG_BINGET), found by stepping over its
/// opcodes as its readers consume them (a short `read` ends it, `read_up_to` takes what is
/// there, a GLOBAL's lines run to a newline or the end): the replay memoizes only these.
/// `torch.save` memoizes every value and fetches a handful (the globals, the device strings),
/// so a hundred thousand tensors' values no longer stay alive in the memo. Where this pass
/// reads further than the replay (a GLOBAL name that does not decode), it only finds more.
/// A stream of fetches of keys past its own length (which no memo holds) would grow the set
/// without bound: it is held to `budget`.
fn memo_gets(stream: &[u8], budget: &Budget) -> Result<Keys, Overrun> {
    let mut gets = Keys::new(stream.len());
    let fetch = |gets: &mut Keys, key: u32, at: usize| {
        if gets.grows(key) {
            let needed = budget.memory_held.saturating_add(gets.held(true));
            if needed > budget.max_memory {
                return Err(Overrun { needed, at });
            }
        }
        gets.insert(key);
        Ok(())
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b = stream.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    };
    let line_end = |at: usize| -> usize {
        let rest = stream.get(at..).unwrap_or_default();
        at + rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1)
    };
    let mut pos = 0usize;
    while let Some(&op) = stream.get(pos) {
        let at = pos;
        pos += 1;
        // Bytes the operand takes; `None` where the replay's read fails or it stops.
        let operand: Option<usize> = match op {
            GLOBAL => Some(line_end(line_end(pos)) - pos),
            BININT | LONG_BINPUT => u32_at(pos).map(|_| 4),
            BINFLOAT => stream
                .get(pos..pos.saturating_add(8))
                .filter(|b| b.len() == 8)
                .map(|_| 8),
            BININT1 | BINPUT | PROTO => stream.get(pos).map(|_| 1),
            BININT2 => stream
                .get(pos..pos.saturating_add(2))
                .filter(|b| b.len() == 2)
                .map(|_| 2),
            BINUNICODE => u32_at(pos).map(|len| 4usize.saturating_add(len as usize)),
            SHORT_BINSTRING | LONG1 => stream.get(pos).map(|&len| 1 + usize::from(len)),
            BINGET => match stream.get(pos) {
                Some(&key) => {
                    fetch(&mut gets, u32::from(key), at)?;
                    Some(1)
                }
                None => None,
            },
            LONG_BINGET => match u32_at(pos) {
                Some(key) => {
                    fetch(&mut gets, key, at)?;
                    Some(4)
                }
                None => None,
            },
            NEWOBJ | REDUCE | BUILD | APPEND | APPENDS | SETITEM | SETITEMS | MARK | TUPLE
            | TUPLE1 | TUPLE2 | TUPLE3 | NONE | NEWFALSE | NEWTRUE | EMPTY_TUPLE | EMPTY_LIST
            | EMPTY_DICT | EMPTY_SET | BINPERSID => Some(0),
            // STOP, or an opcode the replay refuses: it reads no further.
            _ => None,
        };
        let Some(operand) = operand else { break };
        pos = pos.saturating_add(operand);
    }
    Ok(gets)
}

/// The kind of a value the weights-only unpickler would hold: enough to decide every check
/// it makes (types, hashability, a persistent id's tag, a list's length).
#[derive(Debug, Clone, Copy)]
enum V<'a> {
    None,
    Bool,
    Int(Option<i64>),
    Float,
    /// A short string, as the stream holds it (a persistent id's tag is compared); a longer
    /// one is only a string.
    Str(&'a [u8]),
    LongStr,
    /// Bytes: only `_codecs.encode` makes them, and its result is not worked out (never a
    /// persistent id's tag, then).
    Bytes,
    /// A tuple, by what any check reads of it: its items are not kept (a hundred thousand
    /// tensors' tuples would each cost an allocation).
    Tuple(Tuple<'a>),
    /// Its length, at this place in [`Machine::sizes`] (shared by every copy of the list):
    /// SETITEM on a list assigns an index.
    List(usize),
    /// A plain dict, and how many items were set in it, at this place in
    /// [`Machine::sizes`] (BUILD skips a falsy state).
    Dict(usize),
    Set,
    /// An allowlisted global.
    Global(G),
    /// An instance of an allowlisted class.
    Object(Type),
    /// What `persistent_load` returns: a `TypedStorage`.
    Storage,
}

/// What the checks read of a tuple: its length, whether it hashes (its items are immutable
/// kinds, so this is known when it is made), and its first two items (a persistent id's
/// tag and storage type, `_rebuild_from_type_v2`'s type).
#[derive(Debug, Clone, Copy)]
struct Tuple<'a> {
    len: usize,
    hashable: bool,
    head: [Item<'a>; 2],
}

impl<'a> Tuple<'a> {
    const EMPTY: Tuple<'static> = Tuple {
        len: 0,
        hashable: true,
        head: [Item::Missing, Item::Missing],
    };

    fn of(items: &[V<'a>]) -> Tuple<'a> {
        let item = |i: usize| items.get(i).map_or(Item::Missing, Item::of);
        Tuple {
            len: items.len(),
            hashable: items.iter().all(hashable),
            head: [item(0), item(1)],
        }
    }

    fn get(&self, i: usize) -> Option<&Item<'a>> {
        self.head
            .get(i)
            .filter(|item| !matches!(item, Item::Missing))
    }
}

/// A tuple's item, as much of it as the checks read: a global, a string's text, an int's
/// value (for their messages), else the item's type.
#[derive(Debug, Clone, Copy)]
enum Item<'a> {
    Missing,
    Global(G),
    Str(&'a [u8]),
    Int(i64),
    Other(&'static str),
}

impl<'a> Item<'a> {
    fn of(v: &V<'a>) -> Item<'a> {
        match v {
            V::Global(g) => Item::Global(*g),
            V::Str(s) => Item::Str(s),
            V::Int(Some(i)) => Item::Int(*i),
            other => Item::Other(type_name(other)),
        }
    }

    /// [`describe`] of the item it was made from.
    fn describe(&self, names: &Names) -> String {
        match self {
            Item::Global(g) => names.full(*g).to_owned(),
            Item::Str(s) => String::from_utf8_lossy(s).into_owned(),
            Item::Int(i) => i.to_string(),
            Item::Other(name) => (*name).to_owned(),
            Item::Missing => "missing".to_owned(),
        }
    }
}

impl<'a> V<'a> {
    /// Text already checked to decode: kept only when short enough to be a tag.
    fn text(bytes: &'a [u8]) -> V<'a> {
        match bytes.len() <= 64 {
            true => V::Str(bytes),
            false => V::LongStr,
        }
    }
}

/// The allowlisted classes whose instances a stream can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Tensor,
    Parameter,
    OrderedDict,
    Counter,
    Size,
    Device,
    Bytearray,
    Complex,
    Set,
    Layout,
    UntypedStorage,
}

impl Type {
    fn python(self) -> &'static str {
        match self {
            Type::Tensor => "<class 'torch.Tensor'>",
            Type::Parameter => "<class 'torch.nn.parameter.Parameter'>",
            Type::OrderedDict => "<class 'collections.OrderedDict'>",
            Type::Counter => "<class 'collections.Counter'>",
            Type::Size => "<class 'torch.Size'>",
            Type::Device => "<class 'torch.device'>",
            Type::Bytearray => "<class 'bytearray'>",
            Type::Complex => "<class 'complex'>",
            Type::Set => "<class 'set'>",
            Type::Layout => "<class 'torch.layout'>",
            Type::UntypedStorage => "<class 'torch.storage.UntypedStorage'>",
        }
    }
}

/// An allowlisted global: its full name's place in [`Names`], and what it is to the
/// unpickler (decided once, at its GLOBAL: `torch.save` calls the same two globals for every
/// tensor). Plain data: values holding it are copied and dropped for nothing.
#[derive(Debug, Clone, Copy)]
struct G {
    name: u32,
    kind: Global,
}

/// The full names of the globals resolved, each once: the allowlist is a fixed table, so
/// this stays small however many GLOBALs a stream has.
#[derive(Default)]
struct Names {
    full: Vec<Box<str>>,
    index: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
}

impl Names {
    fn intern(&mut self, full: String) -> G {
        let kind = global(&full);
        if let Some(&name) = self.index.get(full.as_str()) {
            return G { name, kind };
        }
        // As many as the allowlist has names: far fewer than u32::MAX.
        let name = u32::try_from(self.full.len()).unwrap_or(u32::MAX);
        let full: Box<str> = full.into();
        self.index.insert(full.clone(), name);
        self.full.push(full);
        G { name, kind }
    }

    fn full(&self, g: G) -> &str {
        self.full.get(g.name as usize).map_or("", |full| full)
    }
}

/// What an allowlisted global is to the unpickler: a class it may create, a function it may
/// call (and what the call returns), or neither.
#[derive(Debug, Clone, Copy)]
enum Global {
    Class(Type),
    Function(Type),
    /// Returns bytes (`_codecs.encode`).
    Encode,
    /// `torch._tensor._rebuild_from_type_v2`: a tensor of the type its second argument names.
    FromType,
    /// A dtype, a qscheme, a legacy storage class (`StorageType`): not callable.
    Value,
}

fn global(full: &str) -> Global {
    match full {
        "collections.OrderedDict" => Global::Class(Type::OrderedDict),
        "collections.Counter" => Global::Class(Type::Counter),
        "torch.nn.parameter.Parameter" => Global::Class(Type::Parameter),
        "torch.Size" => Global::Class(Type::Size),
        "torch.device" => Global::Class(Type::Device),
        "builtins.bytearray" => Global::Class(Type::Bytearray),
        "builtins.set" => Global::Class(Type::Set),
        "builtins.complex" => Global::Class(Type::Complex),
        "torch.storage.UntypedStorage" | "torch.storage.TypedStorage" => {
            Global::Class(Type::UntypedStorage)
        }
        "torch.serialization._get_layout" => Global::Function(Type::Layout),
        "_codecs.encode" => Global::Encode,
        "torch._tensor._rebuild_from_type_v2" => Global::FromType,
        "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state" => {
            Global::Function(Type::Parameter)
        }
        _ if full.starts_with("torch._utils._rebuild_") => Global::Function(Type::Tensor),
        "torch.nested._internal.nested_tensor._rebuild_njt" => Global::Function(Type::Tensor),
        // torch.Tensor and the tensor classes (torch.FloatTensor, torch.cuda.sparse.…).
        _ if full == "torch.Tensor" || full.ends_with("Tensor") => Global::Class(Type::Tensor),
        _ => Global::Value,
    }
}

/// Modules the weights-only unpickler refuses whatever the allowlist says.
const BLOCKED: [&str; 4] = ["sys", "os", "posix", "nt"];

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<V<'a>>,
    /// Where each open MARK began on `stack`: torch's unpickler moves the stack aside at a
    /// MARK (`metastack`), so nothing below the last mark can be popped; kept as positions in
    /// one stack, a MARK costs no allocation.
    marks: Vec<usize>,
    memo: HashMap<u32, V<'a>, foldhash::fast::RandomState>,
    /// The keys worth memoizing (every key when `None`): a value never fetched is not kept.
    gets: Option<Keys>,
    names: Names,
    persistent: Persistent,
    /// Each list's length and each dict's count of items set, where its values point.
    sizes: Vec<u64>,
    /// The read's budget: every list the replay keeps is grown through [`Machine::room`],
    /// which holds them, with what the read held before, to `max_memory`.
    budget: Budget,
    /// Bytes of the lists it grew out of: freed, but resident until the allocator hands them
    /// back, so they count as the pickle machine's do.
    outgrown: u64,
}

/// Why a replay stopped before STOP.
enum Stop {
    /// torch's unpickler refuses the stream: its message.
    Refused(String),
    /// The replay would hold more than the budget allows: the stream is not judged.
    Overrun(Overrun),
}

impl From<String> for Stop {
    fn from(message: String) -> Stop {
        Stop::Refused(message)
    }
}

impl From<&str> for Stop {
    fn from(message: &str) -> Stop {
        Stop::Refused(message.to_owned())
    }
}

/// A replay that would have held `needed` bytes, more than the budget left it, at byte `at`
/// of its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun {
    /// The bytes the read would hold at once (what the read held before the replay, and the
    /// replay's own).
    pub needed: u64,
    /// The stream offset of the opcode that needed them.
    pub at: usize,
}

impl Overrun {
    /// The read's refusal: `--max-memory` names it, for the weights-only reading of `member`.
    pub(crate) fn into_error(
        self,
        path: &std::path::Path,
        member: &str,
        budget: &Budget,
    ) -> crate::Error {
        crate::Error::MemoryBudget {
            path: path.to_owned(),
            needed: self.needed,
            limit: budget.max_memory,
            what: format!(
                "the weights-only reading torch.load gives {member} (at byte {})",
                self.at
            ),
        }
    }
}

/// Python's exceptions, as `torch.load` lets them out.
fn eof() -> String {
    "EOFError: the stream ends before its STOP".into()
}
fn index_error(what: &str) -> String {
    format!("IndexError: {what}")
}

impl<'a> Machine<'a> {
    fn new(
        data: &'a [u8],
        persistent: Persistent,
        gets: Option<Keys>,
        budget: &Budget,
    ) -> Machine<'a> {
        Machine {
            data,
            pos: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::default(),
            gets,
            names: Names::default(),
            persistent,
            sizes: Vec::new(),
            budget: *budget,
            outgrown: 0,
        }
    }

    /// The bytes the replay's lists hold (the memo's and the memo keys' tables as
    /// [`table_bytes`] counts them), and the lists they grew out of.
    fn held(&self) -> u64 {
        slice_bytes::<V<'a>>(self.stack.capacity())
            .saturating_add(slice_bytes::<usize>(self.marks.capacity()))
            .saturating_add(slice_bytes::<u64>(self.sizes.capacity()))
            .saturating_add(table_bytes(self.memo.capacity(), size_of::<(u32, V<'a>)>()))
            .saturating_add(self.gets.as_ref().map_or(0, |gets| gets.held(false)))
            .saturating_add(self.outgrown)
    }

    /// Room for one more item in the list `pick` chooses, doubling it only where the
    /// replay would then hold no more than its budget (the old and the new list at once, as
    /// while they are copied). Inlined, as nearly every opcode pushes: only a full list
    /// takes the call.
    #[inline]
    fn room<T>(&mut self, pick: impl Fn(&mut Self) -> &mut Vec<T>) -> Result<(), Stop> {
        let list = pick(self);
        if list.len() < list.capacity() {
            return Ok(());
        }
        self.double(pick)
    }

    #[cold]
    #[inline(never)]
    fn double<T>(&mut self, pick: impl Fn(&mut Self) -> &mut Vec<T>) -> Result<(), Stop> {
        let old = pick(self).capacity();
        let more = old.max(4);
        let needed = self
            .held()
            .saturating_add((more as u64).saturating_mul(2 * size_of::<T>() as u64));
        self.check(needed)?;
        pick(self).reserve_exact(more);
        self.outgrown = self.outgrown.saturating_add(slice_bytes::<T>(old));
        Ok(())
    }

    /// Refuses to hold `needed` bytes beside what the read held before, past the budget.
    fn check(&self, needed: u64) -> Result<(), Stop> {
        let needed = needed.saturating_add(self.budget.memory_held);
        if needed > self.budget.max_memory {
            return Err(Stop::Overrun(Overrun {
                needed,
                at: self.pos.saturating_sub(1),
            }));
        }
        Ok(())
    }

    #[inline]
    fn push(&mut self, v: V<'a>) -> Result<(), Stop> {
        self.room(|m| &mut m.stack)?;
        self.stack.push(v);
        Ok(())
    }

    /// A new list's or dict's size, zero: its place in [`Machine::sizes`].
    fn new_size(&mut self) -> Result<usize, Stop> {
        self.room(|m| &mut m.sizes)?;
        self.sizes.push(0);
        Ok(self.sizes.len() - 1)
    }

    fn grow(&mut self, size: usize, by: u64) {
        if let Some(size) = self.sizes.get_mut(size) {
            *size = size.saturating_add(by);
        }
    }

    /// [`Machine::room`] for one more memo entry: a full table doubles.
    fn memo_room(&mut self) -> Result<(), Stop> {
        if self.memo.len() < self.memo.capacity() {
            return Ok(());
        }
        let entry = size_of::<(u32, V<'a>)>();
        let (old, grown) = (self.memo.capacity(), doubled(self.memo.capacity()));
        let needed = self.held().saturating_add(table_bytes(grown, entry));
        self.check(needed)?;
        self.memo.reserve(grown - self.memo.len());
        self.outgrown = self.outgrown.saturating_add(table_bytes(old, entry));
        Ok(())
    }

    fn read(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end =
            end.ok_or_else(|| format!("struct.error: unpack requires a buffer of {n} bytes"))?;
        let data: &'a [u8] = self.data;
        let bytes = data.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(bytes)
    }

    /// `read(n)` where a short read is not an error (Python slices what is there).
    fn read_up_to(&mut self, n: usize) -> &'a [u8] {
        let end = self.pos.saturating_add(n).min(self.data.len());
        let data: &'a [u8] = self.data;
        let bytes = data.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        bytes
    }

    fn byte(&mut self) -> Result<u8, String> {
        match self.read_up_to(1) {
            [b] => Ok(*b),
            _ => Err(index_error("index out of range")),
        }
    }

    fn u32_le(&mut self) -> Result<u32, String> {
        let b = self.read(4)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// `readline()[:-1]`: to the newline or the end, less its last byte.
    fn line(&mut self) -> Result<String, String> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let line = rest.get(..len.saturating_sub(1)).unwrap_or_default();
        self.pos += len;
        String::from_utf8(line.to_vec())
            .map_err(|_| "UnicodeDecodeError: a GLOBAL's name is not UTF-8".to_owned())
    }

    /// Where the current stack (the part above the last mark) begins.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Result<V<'a>, String> {
        if self.stack.len() <= self.floor() {
            return Err(index_error("pop from empty list"));
        }
        self.stack
            .pop()
            .ok_or_else(|| index_error("pop from empty list"))
    }

    /// [`Self::top`], to read.
    fn peek(&self) -> Result<&V<'a>, String> {
        self.stack
            .get(self.floor()..)
            .and_then(<[V<'a>]>::last)
            .ok_or_else(|| index_error("list index out of range"))
    }

    fn top(&mut self) -> Result<&mut V<'a>, String> {
        let floor = self.floor();
        self.stack
            .get_mut(floor..)
            .and_then(|current| current.last_mut())
            .ok_or_else(|| index_error("list index out of range"))
    }

    /// Closes the last mark: where its items begin on the stack, the stack below it (to the
    /// mark before) now the current one.
    fn pop_mark(&mut self) -> Result<usize, String> {
        self.marks
            .pop()
            .ok_or_else(|| index_error("pop from empty list"))
    }

    fn run(&mut self) -> Result<(), Stop> {
        loop {
            let Some(&op) = self.data.get(self.pos) else {
                return Err(eof().into());
            };
            self.pos += 1;
            match op {
                GLOBAL => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let full = resolve(&module, &name)?;
                    let g = self.names.intern(full);
                    self.push(V::Global(g))?;
                }
                NEWOBJ => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let made = match &cls {
                        V::Global(g) => match g.kind {
                            Global::Class(t) => Some(t),
                            _ => None,
                        },
                        _ => None,
                    };
                    let Some(t) = made else {
                        return Err(format!(
                            "Can only create new object for nn.Parameter or classes allowlisted via `add_safe_globals` but got {}",
                            describe(&cls, &self.names)
                        ).into());
                    };
                    iterable(&args)?;
                    self.push(V::Object(t))?;
                }
                REDUCE => {
                    let args = self.pop()?;
                    let g = match self.peek()? {
                        V::Global(g) => *g,
                        func => {
                            let func = describe(func, &self.names);
                            return Err(format!(
                                "Trying to call reduce for unrecognized function {func}"
                            )
                            .into());
                        }
                    };
                    iterable(&args)?;
                    let result = match g.kind {
                        Global::Class(Type::Set) => V::Set,
                        Global::Class(t) | Global::Function(t) => V::Object(t),
                        Global::Encode => V::Bytes,
                        Global::FromType => from_type(&args, &self.names)?,
                        Global::Value => {
                            let full = self.names.full(g);
                            return Err(format!("TypeError: '{full}' is not callable").into());
                        }
                    };
                    *self.top()? = result;
                }
                BUILD => {
                    let state = self.pop()?;
                    build(self.peek()?, &state, &self.sizes)?;
                }
                APPEND => {
                    self.pop()?;
                    let list = *self.peek()?;
                    let V::List(len) = list else {
                        let got = type_name(&list);
                        return Err(format!("Can only append to lists, but got {got}").into());
                    };
                    self.grow(len, 1);
                }
                APPENDS => {
                    let start = self.pop_mark()?;
                    let added = self.stack.len().saturating_sub(start);
                    self.stack.truncate(start);
                    let list = *self.peek()?;
                    let V::List(len) = list else {
                        let got = type_name(&list);
                        return Err(format!("Can only extend lists, but got {got}").into());
                    };
                    self.grow(len, added as u64);
                }
                SETITEM => {
                    let _value = self.pop()?;
                    let key = self.pop()?;
                    let target = *self.peek()?;
                    set_item(&target, &key, &mut self.sizes)?;
                }
                SETITEMS => {
                    let start = self.pop_mark()?;
                    let floor = self.floor();
                    let (below, items) = self.stack.split_at(start.min(self.stack.len()));
                    let target = below.get(floor..).and_then(<[V]>::last);
                    for pair in items.chunks(2) {
                        let [key, _value] = pair else {
                            return Err(index_error("list index out of range").into());
                        };
                        let target =
                            target.ok_or_else(|| index_error("list index out of range"))?;
                        set_item(target, key, &mut self.sizes)?;
                    }
                    self.stack.truncate(start);
                }
                MARK => {
                    self.room(|m| &mut m.marks)?;
                    self.marks.push(self.stack.len());
                }
                TUPLE => {
                    let start = self.pop_mark()?;
                    let start = start.min(self.stack.len());
                    let tuple = Tuple::of(self.stack.get(start..).unwrap_or_default());
                    self.stack.truncate(start);
                    self.push(V::Tuple(tuple))?;
                }
                TUPLE1 | TUPLE2 | TUPLE3 => {
                    let n = usize::from(op - TUPLE1 + 1);
                    let at = self
                        .stack
                        .len()
                        .checked_sub(n)
                        .filter(|&at| at >= self.floor())
                        .ok_or_else(|| index_error("list index out of range"))?;
                    let tuple = Tuple::of(self.stack.get(at..).unwrap_or_default());
                    self.stack.truncate(at);
                    self.push(V::Tuple(tuple))?;
                }
                NONE => self.push(V::None)?,
                NEWFALSE | NEWTRUE => self.push(V::Bool)?,
                // One `()`, as in Python: `torch.save` writes one per tensor.
                EMPTY_TUPLE => self.push(V::Tuple(Tuple::EMPTY))?,
                EMPTY_LIST => {
                    let list = self.new_size()?;
                    self.push(V::List(list))?;
                }
                EMPTY_DICT => {
                    let dict = self.new_size()?;
                    self.push(V::Dict(dict))?;
                }
                EMPTY_SET => self.push(V::Set)?,
                BININT => {
                    let b = self.read(4)?;
                    let v = i32::from_le_bytes(b.try_into().unwrap_or_default());
                    self.push(V::Int(Some(v.into())))?;
                }
                BININT1 => {
                    let v = self.byte()?;
                    self.push(V::Int(Some(v.into())))?;
                }
                BININT2 => {
                    let b = self.read(2)?;
                    let v = u16::from_le_bytes(b.try_into().unwrap_or_default());
                    self.push(V::Int(Some(v.into())))?;
                }
                BINFLOAT => {
                    self.read(8)?;
                    self.push(V::Float)?;
                }
                BINUNICODE => {
                    let len = self.u32_le()?;
                    let bytes = self.read_up_to(len as usize);
                    if !surrogatepass(bytes) {
                        return Err("UnicodeDecodeError: BINUNICODE is not UTF-8".into());
                    }
                    self.push(V::text(bytes))?;
                }
                SHORT_BINSTRING => {
                    let len = self.byte()?;
                    let bytes = self.read_up_to(len.into());
                    // torch.load passes encoding="utf-8": a `str`, strictly decoded.
                    if std::str::from_utf8(bytes).is_err() {
                        return Err("UnicodeDecodeError: SHORT_BINSTRING is not UTF-8".into());
                    }
                    self.push(V::text(bytes))?;
                }
                BINPERSID => {
                    let pid = self.pop()?;
                    let loaded = self.persistent_load(&pid)?;
                    self.push(loaded)?;
                }
                BINGET | LONG_BINGET => {
                    let index = if op == BINGET {
                        self.byte()?.into()
                    } else {
                        self.u32_le()?
                    };
                    let value = self
                        .memo
                        .get(&index)
                        .copied()
                        .ok_or_else(|| format!("KeyError: {index}"))?;
                    self.push(value)?;
                }
                BINPUT | LONG_BINPUT => {
                    let index = if op == BINPUT {
                        self.byte()?.into()
                    } else {
                        self.u32_le()?
                    };
                    // A value never fetched is not kept (nor cloned); the empty stack still
                    // fails as torch's does.
                    let keep = self.gets.as_ref().is_none_or(|gets| gets.contains(index));
                    let top = self.peek()?;
                    if keep {
                        let top = *top;
                        self.memo_room()?;
                        self.memo.insert(index, top);
                    }
                }
                LONG1 => {
                    let n = self.byte()?;
                    let bytes = self.read_up_to(n.into());
                    let value = (bytes.len() <= 8).then(|| {
                        let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
                            0xff
                        } else {
                            0
                        };
                        let mut le = [fill; 8];
                        le.get_mut(..bytes.len())
                            .unwrap_or_default()
                            .copy_from_slice(bytes);
                        i64::from_le_bytes(le)
                    });
                    self.push(V::Int(value))?;
                }
                // Any protocol is read on; only a warning tells it is not 2.
                PROTO => {
                    self.byte()?;
                }
                STOP => {
                    self.pop()?;
                    return Ok(());
                }
                other => return Err(format!("Unsupported operand {other}").into()),
            }
        }
    }

    /// BINPERSID: the unpickler's check, then the `persistent_load` torch.load installs.
    fn persistent_load(&self, pid: &V<'a>) -> Result<V<'a>, String> {
        let items: &Tuple<'a> = match pid {
            V::Tuple(items) => items,
            V::Int(_) => &Tuple::EMPTY,
            other => {
                return Err(format!(
                    "persistent_load id must be tuple or int, but got {}",
                    type_name(other)
                ))
            }
        };
        if let Some(tag) = items.get(0) {
            if !matches!(tag, Item::Str(b"storage")) {
                return Err(format!(
                    "Only persistent_load of storage is allowed, but got {}",
                    tag.describe(&self.names)
                ));
            }
        }
        let fields = match self.persistent {
            Persistent::Refused => {
                return Err("unsupported persistent id encountered".into());
            }
            Persistent::Zip => 5,
            Persistent::Legacy => 6,
        };
        if !matches!(pid, V::Tuple(_)) {
            return Err("TypeError: a persistent id is an int, not a tuple".into());
        }
        if items.len != fields {
            return Err(format!(
                "ValueError: a storage's persistent id has {} fields, not {fields}",
                items.len
            ));
        }
        match items.get(1) {
            Some(Item::Global(g))
                if self.names.full(*g).ends_with("Storage")
                    && self.names.full(*g) != "torch.storage.TypedStorage" =>
            {
                Ok(V::Storage)
            }
            other => Err(format!(
                "AttributeError: the storage type of a persistent id is {}",
                other.map_or("missing".into(), |item| item.describe(&self.names))
            )),
        }
    }
}

/// GLOBAL as the weights-only unpickler judges it: torch's Python 2 name mapping, the
/// blocked modules, then the allowlist.
fn resolve(module: &str, name: &str) -> Result<String, String> {
    let (module, name) = python2_names(module, name);
    let full = format!("{module}.{name}");
    if BLOCKED.contains(&module) {
        return Err(format!(
            "Trying to load unsupported GLOBAL {full} whose module {module} is blocked."
        ));
    }
    if resolves(Loader::Python, module, name) {
        return Ok(full);
    }
    if NESTED.contains(&full.as_str()) {
        return Err(
            "``torch.nested`` and ``torch._dynamo`` must be imported to load nested jagged tensors (NJTs)"
                .into(),
        );
    }
    if DTENSOR_REGISTERS.contains(&full.as_str()) {
        return Err("``torch.distributed.tensor`` must be imported to load DTensors".into());
    }
    let shown = full.strip_prefix("builtins.").unwrap_or(&full);
    Err(format!(
        "Unsupported global: GLOBAL {shown} was not an allowed global by default. Please use \
         `torch.serialization.add_safe_globals([{shown}])` or the \
         `torch.serialization.safe_globals([{shown}])` context manager to allowlist this global \
         if you trust this class/function."
    ))
}

/// Names whose refusal says which module to import first.
const NESTED: [&str; 1] = ["torch._dynamo.decorators._DimRange"];

/// `torch._utils.NAME_MAPPING`, else `IMPORT_MAPPING`: the weights-only unpickler maps every
/// GLOBAL, whatever the protocol.
fn python2_names<'a>(module: &'a str, name: &'a str) -> (&'a str, &'a str) {
    match (module, name) {
        ("__builtin__", "xrange") => ("builtins", "range"),
        ("__builtin__", "reduce") => ("functools", "reduce"),
        ("__builtin__", "intern") => ("sys", "intern"),
        ("__builtin__", "unichr") => ("builtins", "chr"),
        ("__builtin__", "unicode" | "basestring") => ("builtins", "str"),
        ("__builtin__", "long") => ("builtins", "int"),
        ("itertools", "izip") => ("builtins", "zip"),
        ("itertools", "imap") => ("builtins", "map"),
        ("itertools", "ifilter") => ("builtins", "filter"),
        ("itertools", "ifilterfalse") => ("itertools", "filterfalse"),
        ("itertools", "izip_longest") => ("itertools", "zip_longest"),
        ("UserDict", "IterableUserDict" | "UserDict") => ("collections", "UserDict"),
        ("UserList", "UserList") => ("collections", "UserList"),
        ("UserString", "UserString") => ("collections", "UserString"),
        ("exceptions", "StandardError") => ("builtins", "Exception"),
        ("__builtin__", _) => ("builtins", name),
        ("copy_reg", _) => ("copyreg", name),
        ("Queue", _) => ("queue", name),
        ("repr", _) => ("reprlib", name),
        ("_abcoll", _) => ("collections.abc", name),
        ("UserDict" | "UserList" | "UserString", _) => ("collections", name),
        ("whichdb", _) => ("dbm", name),
        ("StringIO" | "cStringIO", _) => ("io", name),
        _ => (module, name),
    }
}

/// `func(*args)` / `cls.__new__(cls, *args)` need an iterable.
fn iterable(args: &V) -> Result<(), String> {
    match args {
        V::Tuple(_) | V::List(_) | V::Dict(_) | V::Set | V::Str(_) | V::LongStr | V::Bytes => {
            Ok(())
        }
        V::Object(Type::OrderedDict | Type::Counter | Type::Size | Type::Set) => Ok(()),
        other => Err(format!(
            "TypeError: argument after * must be an iterable, not {}",
            type_name(other)
        )),
    }
}

/// `_rebuild_from_type_v2(func, new_type, args, state)`: a tensor, made a `new_type`.
fn from_type<'a>(args: &V<'a>, names: &Names) -> Result<V<'a>, String> {
    let new_type = match args {
        V::Tuple(items) => items.get(1),
        _ => None,
    };
    match new_type {
        Some(Item::Global(g)) if names.full(*g) == "torch.nn.parameter.Parameter" => {
            Ok(V::Object(Type::Parameter))
        }
        Some(Item::Global(g)) if matches!(g.kind, Global::Class(Type::Tensor)) => {
            Ok(V::Object(Type::Tensor))
        }
        other => Err(format!(
            "TypeError: _rebuild_from_type_v2 cannot make a tensor a {}",
            other.map_or("missing type".into(), |item| item.describe(names))
        )),
    }
}

/// BUILD: a tensor's state is `set_`'s (a parameter's `__setstate__`'s) arguments; an
/// `OrderedDict`'s or `Counter`'s updates its `__dict__`; another allowlisted type takes a
/// state only through a `__dict__`, which it lacks.
fn build(inst: &V, state: &V, sizes: &[u64]) -> Result<(), String> {
    let t = match inst {
        V::Object(t) => *t,
        V::Set => Type::Set,
        V::Storage => Type::UntypedStorage,
        other => {
            return Err(format!(
                "Can only build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but got {}",
                type_name(other)
            ))
        }
    };
    let mapping = matches!(
        state,
        V::Dict(_) | V::List(_) | V::Tuple(_) | V::Object(Type::OrderedDict | Type::Counter)
    );
    match t {
        Type::Tensor | Type::Parameter if matches!(state, V::Tuple(_)) => Ok(()),
        // A tensor's BUILD is `set_(*state)`: a list unpacks like a tuple, and any empty
        // iterable is no arguments (`set_()` empties the tensor).
        Type::Tensor if matches!(state, V::List(_)) => Ok(()),
        Type::Tensor if matches!(state, V::Dict(_) | V::Str(_)) && falsy(state, sizes) => Ok(()),
        // `__dict__.update(state)` for an OrderedDict; for the other Python classes only a
        // truthy state updates it.
        Type::OrderedDict if mapping => Ok(()),
        Type::Counter | Type::UntypedStorage if mapping || falsy(state, sizes) => Ok(()),
        Type::Tensor | Type::Parameter | Type::OrderedDict | Type::Counter => Err(format!(
            "TypeError: {} is no state for BUILD on {}",
            type_name(state),
            t.python()
        )),
        _ if falsy(state, sizes) => Ok(()),
        _ => Err(format!(
            "AttributeError: {} has no __dict__ for BUILD to update",
            t.python()
        )),
    }
}

/// Python's truth value, where a kind tells it (a list's or dict's size is in `sizes`).
fn falsy(v: &V, sizes: &[u64]) -> bool {
    match v {
        V::None => true,
        V::Tuple(items) => items.len == 0,
        V::Str(s) => s.is_empty(),
        V::Int(Some(0)) => true,
        V::List(size) | V::Dict(size) => sizes.get(*size).is_none_or(|&n| n == 0),
        _ => false,
    }
}

/// `target[key] = value` (a list's or dict's size is in `sizes`).
fn set_item(target: &V, key: &V, sizes: &mut [u64]) -> Result<(), String> {
    match target {
        V::Dict(size) => {
            if hashable(key) {
                // Only whether any item was set is read: a count that never falls.
                if let Some(size) = sizes.get_mut(*size) {
                    *size = size.saturating_add(1);
                }
                Ok(())
            } else {
                Err(format!("TypeError: unhashable type: {}", type_name(key)))
            }
        }
        V::Object(Type::OrderedDict | Type::Counter) => {
            if hashable(key) {
                Ok(())
            } else {
                Err(format!("TypeError: unhashable type: {}", type_name(key)))
            }
        }
        V::List(size) => {
            let len = sizes.get(*size).copied().unwrap_or(0);
            let len = i64::try_from(len).unwrap_or(i64::MAX);
            match key {
                V::Int(Some(i)) if (-len..len).contains(i) => Ok(()),
                V::Int(_) | V::Bool => Err(index_error("list assignment index out of range")),
                other => Err(format!(
                    "TypeError: list indices must be integers or slices, not {}",
                    type_name(other)
                )),
            }
        }
        other => Err(format!(
            "TypeError: {} does not support item assignment",
            type_name(other)
        )),
    }
}

fn hashable(v: &V) -> bool {
    match v {
        V::List(_) | V::Dict(_) | V::Set => false,
        V::Object(Type::OrderedDict | Type::Counter | Type::Bytearray | Type::Set) => false,
        V::Tuple(items) => items.hashable,
        _ => true,
    }
}

/// `type(v)` as Python prints it.
fn type_name(v: &V) -> &'static str {
    match v {
        V::None => "<class 'NoneType'>",
        V::Bool => "<class 'bool'>",
        V::Int(_) => "<class 'int'>",
        V::Float => "<class 'float'>",
        V::Str(_) | V::LongStr => "<class 'str'>",
        V::Bytes => "<class 'bytes'>",
        V::Tuple(_) => "<class 'tuple'>",
        V::List(_) => "<class 'list'>",
        V::Dict(_) => "<class 'dict'>",
        V::Set => "<class 'set'>",
        V::Global(g) => match g.kind {
            Global::Class(_) => "<class 'type'>",
            Global::Value => "<class 'object'>",
            _ => "<class 'function'>",
        },
        V::Object(t) => t.python(),
        V::Storage => "<class 'torch.storage.TypedStorage'>",
    }
}

/// A value as torch's messages show it: a global by name, a string quoted, else its type.
fn describe(v: &V, names: &Names) -> String {
    match v {
        V::Global(g) => names.full(*g).to_owned(),
        V::Str(s) => String::from_utf8_lossy(s).into_owned(),
        V::Int(Some(i)) => i.to_string(),
        other => type_name(other).to_owned(),
    }
}

/// Whether `bytes` decode as UTF-8 with surrogates allowed (`"surrogatepass"`), which Rust's
/// `str` refuses.
fn surrogatepass(bytes: &[u8]) -> bool {
    // A short ASCII string (a tensor's name, a storage key) is settled without the general
    // validator's setup.
    if bytes.len() <= 32 && bytes.iter().all(u8::is_ascii) {
        return true;
    }
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(_) => return true,
            Err(e) => match rest.get(e.valid_up_to()..).unwrap_or_default() {
                // ED A0..BF 80..BF: an encoded surrogate.
                [0xed, 0xa0..=0xbf, 0x80..=0xbf, tail @ ..] => rest = tail,
                _ => return false,
            },
        }
    }
}

#[cfg(test)]
mod tests;
