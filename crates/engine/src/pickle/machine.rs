//! The opcode interpreter: Python's `pickle._Unpickler`, with every call replaced by either
//! an interpretation of an allowlisted name or an opaque object.

use super::allowlist::{map_module, resolves, Class, Loader};
use super::budget::{grown_list, slice_bytes, Growth};
use super::dict_keys;
use super::heap::{Global, Heap, Id, Node, Object, TensorSpec};
use super::inline::{Inline, InlineArray};
use super::literals::{
    decimal_to_le, long_from_le, python_string_literal, raw_unicode_escape, utf8_surrogatepass,
};
use super::memo::Memo;
use super::opcodes::*;
use super::storage_bytes::BytesStorage;
use super::weights_only::Keys;
use super::{Budget, UnsafeGlobal};
use crate::error::{Error, Result};
use std::path::Path;
use thin_vec::ThinVec;

/// The result of running one pickle stream.
#[derive(Debug)]
pub struct Unpickled {
    /// Every value built.
    pub heap: Heap,
    /// The value `STOP` returned.
    pub root: Id,
    /// Bytes consumed, `STOP` included.
    pub len: u64,
    /// Bytes its values were charged against the memory budget (they are still held).
    pub bytes: u64,
    /// Globals outside the allowlist, in stream order.
    pub unsafe_globals: Vec<UnsafeGlobal>,
    /// Persistent ids in the order the stream loads them.
    pub persistent: Vec<Id>,
    /// Whether TorchScript classes (`__torch__.*`) appear.
    pub torchscript_classes: bool,
    /// Arrays whose bytes lie in the stream ([`Inline`]), in stream order: each is a tensor
    /// whose storage is an untyped storage keyed [`InlineArray::key`], among `persistent`.
    pub inline: Vec<InlineArray>,
    /// How many objects had data after their BUILD ([`Inline`]), arrays or not.
    pub inlined: usize,
    /// Storages `torch.storage._load_from_bytes` returns, in stream order (not among
    /// `persistent`: the stream loads no persistent id for them).
    pub bytes_storages: Vec<BytesStorage>,
    /// The memo keys GET, BINGET and LONG_BINGET fetched (those that fit 32 bits), for the
    /// weights-only replay ([`super::weights_only::replay_read`]).
    pub(crate) fetched: Keys,
}

/// Runs one pickle stream from the start of `bytes`, stopping at its `STOP`.
/// `member` and `base` (the stream's offset within the member) name positions in errors;
/// globals `loader` would not resolve from its own table are recorded as unsafe.
pub fn unpickle(
    bytes: &[u8],
    path: &Path,
    member: &str,
    base: u64,
    loader: Loader,
    budget: &Budget,
) -> Result<Unpickled> {
    run_stream(bytes, path, member, base, loader, budget, None)
}

/// [`unpickle`] for a format that writes data into the stream after a BUILD ([`Inline`]):
/// `inline` says how much follows each object and what it becomes.
pub fn unpickle_inline(
    bytes: &[u8],
    path: &Path,
    member: &str,
    base: u64,
    budget: &Budget,
    inline: &dyn Inline,
) -> Result<Unpickled> {
    run_stream(
        bytes,
        path,
        member,
        base,
        Loader::Python,
        budget,
        Some(inline),
    )
}

fn run_stream(
    bytes: &[u8],
    path: &Path,
    member: &str,
    base: u64,
    loader: Loader,
    budget: &Budget,
    inline: Option<&dyn Inline>,
) -> Result<Unpickled> {
    let mut m = Machine::new(bytes, path, member, base, loader, budget, Reading::Buffered);
    m.inline = inline;
    // A pickle refused part-way has still named its globals: a loader that got that far ran them.
    let read = m.run().and_then(|root| m.no_repeated_keys().map(|()| root));
    m.hash_payloads();
    let root = match read {
        Ok(root) => root,
        Err(e) => {
            let mut globals = std::mem::take(&mut m.unsafe_globals);
            // Frames that disagree with the opcodes are read differently by the C unpickler
            // as its file object buffers them: name what the other reading resolves too.
            if m.framing_anomaly {
                let mut other = Machine::new(
                    bytes,
                    path,
                    member,
                    base,
                    loader,
                    budget,
                    Reading::Sequential,
                );
                other.inline = inline;
                let read = other.run();
                other.hash_payloads();
                let mut more = std::mem::take(&mut other.unsafe_globals);
                if let Err(e) = read {
                    more.extend(e.unsafe_globals().iter().cloned());
                }
                // A global both readings name at one place is named once (looked up, not
                // compared pairwise: a stream may name thousands of long globals).
                let named: std::collections::HashSet<_> = globals
                    .iter()
                    .map(|h| {
                        (
                            h.position,
                            h.member.as_str(),
                            h.module.as_str(),
                            h.name.as_str(),
                        )
                    })
                    .collect();
                more.retain(|g| {
                    !named.contains(&(
                        g.position,
                        g.member.as_str(),
                        g.module.as_str(),
                        g.name.as_str(),
                    ))
                });
                globals.append(&mut more);
            }
            return Err(e.with_unsafe_globals(globals));
        }
    };
    Ok(Unpickled {
        heap: m.heap,
        root,
        len: m.pos as u64,
        bytes: m.heap_bytes,
        unsafe_globals: m.unsafe_globals,
        persistent: m.persistent,
        torchscript_classes: m.torchscript_classes,
        inline: m.inline_arrays,
        inlined: m.inlined,
        bytes_storages: m.bytes_storages,
        fetched: m.fetched,
    })
}

/// How CPython's C unpickler gets the stream's bytes, which decides how it reads frames that
/// disagree with the opcodes (`pickle.dump` never writes such frames; either reading is refused).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// From a file object without `peek` (`io.BytesIO`, as `torch.load` reads a zip's
    /// `data.pkl`): a FRAME's bytes become the buffer; a read running past the buffer's end
    /// takes fresh bytes from the file's position, the buffer's end, dropping the rest of it.
    Buffered,
    /// From bytes or a peeking file holding them all (`pickle.loads`, `torch.load` of a small
    /// file): frames only batch reads, every read goes on where the last one stopped.
    Sequential,
}

pub(super) struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    op_pos: usize,
    pub(super) heap: Heap,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: Memo,
    /// The one value of each of None, False, True, `()` and BININT1's 0–255, once made: a
    /// stream repeats them for every tensor (offsets, sizes, flags), and being immutable they are
    /// shared by id as the memo shares values, so a million tensors do not make millions.
    shared_scalars: [Option<Id>; SHARED_SCALARS],
    ops: u64,
    /// Bytes the heap's values and the recorded globals take (they are never freed while
    /// the stream runs); the stack, marks and memo are counted as they stand ([`Machine::room`]).
    heap_bytes: u64,
    /// Bytes of the lists the heap, stack, marks and memo grew out of: freed, but a freed
    /// block stays resident until the allocator hands it back, so a list doubled to its size
    /// is charged twice over (a 2 MB stream's memo once peaked 40 % past its budget).
    outgrown: u64,
    budget: &'a Budget,
    path: &'a Path,
    member: &'a str,
    base: u64,
    pub(super) loader: Loader,
    unsafe_globals: Vec<UnsafeGlobal>,
    persistent: Vec<Id>,
    torchscript_classes: bool,
    /// Where the current FRAME ends, while one is open, as the pure-Python unpickler holds it.
    frame_end: Option<usize>,
    /// The first problem read past (the stream's frames disagree with its opcodes, a call
    /// that cannot be interpreted), refused at the stream's end.
    frame_mismatch: Option<Error>,
    /// Whether the frames disagreed with the opcodes: the C readings may differ.
    framing_anomaly: bool,
    reading: Reading,
    /// The end of the C unpickler's buffer while it holds a FRAME's bytes ([`Reading::Buffered`]).
    buffer_end: Option<usize>,
    /// What a format writes after a BUILD, when the stream's format writes anything.
    inline: Option<&'a dyn Inline>,
    inline_arrays: Vec<InlineArray>,
    inlined: usize,
    pub(super) bytes_storages: Vec<BytesStorage>,
    fetched: Keys,
}

impl<'a> Machine<'a> {
    fn new(
        bytes: &'a [u8],
        path: &'a Path,
        member: &'a str,
        base: u64,
        loader: Loader,
        budget: &'a Budget,
        reading: Reading,
    ) -> Machine<'a> {
        Machine {
            bytes,
            pos: 0,
            op_pos: 0,
            // Roughly one value per 8 bytes of stream; saves regrowing the heap.
            heap: Heap::with_capacity(bytes.len() / 8),
            stack: Vec::new(),
            marks: Vec::new(),
            // Picklers memoize most values: a `torch.save` stream has a key per 13 bytes or so.
            // Room only, charged as its slots are written: at most an eighth of the budget's.
            memo: Memo::with_capacity((bytes.len() / 12).min(memo_room(budget))),
            shared_scalars: [None; SHARED_SCALARS],
            ops: 0,
            heap_bytes: 0,
            outgrown: 0,
            budget,
            path,
            member,
            base,
            loader,
            unsafe_globals: Vec::new(),
            persistent: Vec::new(),
            torchscript_classes: false,
            frame_end: None,
            frame_mismatch: None,
            framing_anomaly: false,
            reading,
            buffer_end: None,
            inline: None,
            inline_arrays: Vec::new(),
            inlined: 0,
            bytes_storages: Vec::new(),
            // Keys are numbered in order, so they lie below the stream's length.
            fetched: Keys::new(bytes.len()),
        }
    }

    /// Gives the globals recorded their payload: the hash of the stream as read, up to where
    /// reading stopped (the call's arguments with it; not the bytes after the stream).
    fn hash_payloads(&mut self) {
        if self.unsafe_globals.is_empty() {
            return;
        }
        let read = self.bytes.get(..self.pos).unwrap_or(self.bytes);
        let payload = crate::unsafe_global::sha256_hex(read);
        for global in &mut self.unsafe_globals {
            global.payload.clone_from(&payload);
        }
    }

    /// Refuses a dict holding one key twice ([`dict_keys`]), once every value is built.
    fn no_repeated_keys(&self) -> Result<()> {
        match dict_keys::repeated_key(&self.heap) {
            None => Ok(()),
            Some(key) => Err(Error::RepeatedKey {
                path: self.path.to_owned(),
                member: self.member.to_owned(),
                key: dict_keys::key_text(&self.heap, key),
            }),
        }
    }

    pub(super) fn err(&self, detail: impl Into<String>) -> Error {
        Error::Pickle {
            path: self.path.to_owned(),
            member: self.member.to_owned(),
            position: self.position(),
            detail: detail.into(),
        }
    }

    /// A refusal for one of the reader's fixed limits (`what` went past it).
    #[cold]
    fn limit(&self, what: String) -> Error {
        Error::PickleLimit {
            path: self.path.to_owned(),
            member: self.member.to_owned(),
            position: self.position(),
            what,
        }
    }

    /// Where the current opcode starts within the member.
    pub(super) fn position(&self) -> u64 {
        self.base.saturating_add(self.op_pos as u64)
    }

    fn unknown(&self, op: u8) -> Error {
        self.err(format!("unknown opcode 0x{op:02x}"))
    }

    // ---- reading operands ----

    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        // Past the buffer's end the C unpickler reads `n` fresh bytes from the file's position.
        if let Some(end) = self.buffer_end {
            if usize::try_from(n).map_or(true, |n| self.pos.saturating_add(n) > end) {
                self.framing_anomaly |= self.pos != end;
                self.pos = end;
                self.buffer_end = None;
            }
        }
        let start = self.pos;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                self.err(format!(
                    "operand of {n} bytes runs past the end of the stream"
                ))
            })?;
        self.pos = end;
        Ok(self.bytes.get(start..end).unwrap_or_default())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let taken = self.take(N as u64)?;
        // `take` returns exactly N bytes, so the fallback is never used.
        Ok(taken.try_into().unwrap_or([0; N]))
    }

    fn u8(&mut self) -> Result<u8> {
        let [b] = self.array()?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A signed 4-byte length (LONG4, BINSTRING); `what` names the opcode if it is negative.
    fn signed_len(&mut self, what: &str) -> Result<u64> {
        let n = i32::from_le_bytes(self.array()?);
        u64::try_from(n).map_err(|_| self.err(format!("{what} with a negative length")))
    }

    fn line(&mut self) -> Result<&'a [u8]> {
        // A line that runs past the buffer's end: the C unpickler reads the line from the
        // file's position, the buffer's end, dropping what the buffer held of it.
        if let Some(end) = self.buffer_end {
            let held = self.bytes.get(self.pos..end).unwrap_or_default();
            if !held.contains(&b'\n') {
                self.framing_anomaly |= self.pos != end;
                self.pos = end;
                self.buffer_end = None;
            }
        }
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| self.err("text operand has no terminating newline"))?;
        let line = rest.get(..n).unwrap_or_default();
        // The newline lies within `rest`, so this cannot pass the end of the stream.
        self.pos += n + 1;
        Ok(line)
    }

    fn line_str(&mut self) -> Result<&'a str> {
        let line = self.line()?;
        std::str::from_utf8(line).map_err(|_| self.err("text operand is not UTF-8"))
    }

    /// GLOBAL and INST's operand: a module line, then a name line.
    fn name_lines(&mut self) -> Result<(&'a str, &'a str)> {
        let module = self.line_str()?;
        let name = self.line_str()?;
        Ok((module, name))
    }

    // ---- stack, marks, memo ----

    /// Counts `bytes` more of values against the read's memory budget. Inlined, its refusal
    /// kept apart: it runs for every value made.
    #[inline]
    pub(super) fn charge(&mut self, bytes: u64) -> Result<()> {
        self.heap_bytes = self.heap_bytes.saturating_add(bytes);
        self.room(0)
    }

    /// Refuses unless what the stream holds, with `extra` bytes more, fits the budget: its
    /// values, its stack, marks and memo as allocated (room and gaps included), and the lists
    /// they grew out of.
    #[inline]
    fn room(&self, extra: u64) -> Result<()> {
        let lists = slice_bytes::<Id>(self.stack.capacity())
            .saturating_add(slice_bytes::<usize>(self.marks.capacity()))
            .saturating_add(self.memo.bytes())
            .saturating_add(self.outgrown);
        let needed = self
            .budget
            .memory_held
            .saturating_add(self.heap_bytes)
            .saturating_add(lists)
            .saturating_add(extra);
        if needed > self.budget.max_memory {
            return Err(self.over_budget(needed));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn over_budget(&self, needed: u64) -> Error {
        Error::MemoryBudget {
            path: self.path.to_owned(),
            needed,
            limit: self.budget.max_memory,
            what: format!(
                "the values pickle {} builds (at byte {})",
                self.member,
                self.position()
            ),
        }
    }

    /// Room for a list to grow into, the old one held while it is copied; then charged as
    /// outgrown.
    fn grow(&mut self, growth: Growth) -> Result<()> {
        if growth.new > 0 {
            self.room(growth.new)?;
            self.outgrown = self.outgrown.saturating_add(growth.old);
        }
        Ok(())
    }

    /// [`Machine::grow`] for a value's own list (a list, dict or object filled after it was
    /// made): its new list is charged with the values, the old one as outgrown.
    fn grow_value(&mut self, growth: Growth) -> Result<()> {
        self.grow(growth)?;
        self.heap_bytes = self
            .heap_bytes
            .saturating_add(growth.new)
            .saturating_sub(growth.old);
        Ok(())
    }

    pub(super) fn alloc(&mut self, node: Node) -> Result<Id> {
        self.charge(node_bytes(&node))?;
        self.grow(self.heap.growth())?;
        self.heap
            .push(node)
            .ok_or_else(|| self.limit(format!("more than {} values", Id::MAX - 1)))
    }

    /// Inlined: nearly every opcode pushes. Only a full stack is charged again, for the
    /// stack it grows into.
    #[inline]
    fn push_id(&mut self, id: Id) -> Result<()> {
        if self.stack.len() == self.stack.capacity() {
            self.grow(grown_list::<Id>(self.stack.len(), self.stack.capacity()))?;
        }
        self.stack.push(id);
        Ok(())
    }

    fn push(&mut self, node: Node) -> Result<()> {
        let id = self.alloc(node)?;
        self.push_id(id)
    }

    fn frame_floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Result<Id> {
        if self.stack.len() <= self.frame_floor() {
            return Err(self.err("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    /// The top `n` items, in stack order.
    fn pop_n(&mut self, n: usize) -> Result<Vec<Id>> {
        match self.stack.len().checked_sub(n) {
            Some(at) if at >= self.frame_floor() => Ok(self.stack.split_off(at)),
            _ => Err(self.err("stack underflow")),
        }
    }

    fn top(&self) -> Result<Id> {
        if self.stack.len() <= self.frame_floor() {
            return Err(self.err("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.err("no MARK on the stack"))?;
        if mark > self.stack.len() {
            return Err(self.err("stack underflow below MARK"));
        }
        Ok(self.stack.split_off(mark))
    }

    fn memo_put(&mut self, key: u64) -> Result<()> {
        let top = self.top()?;
        self.grow(self.memo.growth(key))?;
        self.memo.insert(key, top);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> Result<()> {
        if let Ok(key) = u32::try_from(key) {
            self.fetched.insert(key);
        }
        let id = self
            .memo
            .get(key)
            .ok_or_else(|| self.err(format!("memo key {key} was never stored")))?;
        self.push_id(id)
    }

    // ---- the loop ----

    fn run(&mut self) -> Result<Id> {
        loop {
            let op = self.next_op()?;
            if op == STOP {
                self.frame_boundary();
                let root = self.pop()?;
                return match self.frame_mismatch.take() {
                    Some(refusal) => Err(refusal),
                    None => Ok(root),
                };
            }
            // The first problem is the refusal, whatever stopped the stream after it.
            if let Err(e) = self.step(op) {
                return Err(self.frame_mismatch.take().unwrap_or(e));
            }
            self.frame_boundary();
        }
    }

    /// CPython's C unpickler ignores where frames end (`load_frame` only checks that the
    /// frame's bytes exist, then rewinds); the pure-Python one reads each frame as a buffer of
    /// its own and fails when one read runs past it or a frame starts inside another.
    /// `pickle.dump` writes neither. Such a stream is read on as the C unpickler reads it, so
    /// every global it would resolve is named, and refused at its end.
    fn frame_boundary(&mut self) {
        match self.frame_end {
            Some(end) if self.pos > end => {
                let at = self.base.saturating_add(end as u64);
                self.frame_mismatch(format!(
                    "an opcode runs past the end of its FRAME at byte {at}: pickle.dump never \
                     writes this, and CPython's C and pure-Python unpicklers may read it \
                     differently"
                ));
                self.frame_end = None;
            }
            Some(end) if self.pos == end => self.frame_end = None,
            _ => {}
        }
    }

    /// Keeps the first framing mismatch, refused once the stream has been read.
    fn frame_mismatch(&mut self, detail: String) {
        self.framing_anomaly = true;
        let refusal = self.err(detail);
        self.refuse_at_end(refusal);
    }

    /// Keeps the first problem CPython reads past, to refuse the stream at its end.
    fn refuse_at_end(&mut self, refusal: Error) {
        if self.frame_mismatch.is_none() {
            self.frame_mismatch = Some(refusal);
        }
    }

    /// Reads the next opcode and charges it to the budget.
    fn next_op(&mut self) -> Result<u8> {
        // At the buffer's end the C unpickler reads the opcode, and what follows it, from the
        // file's position: where every frame `pickle.dump` writes ends.
        if let Some(end) = self.buffer_end {
            if self.pos >= end {
                self.framing_anomaly |= self.pos != end;
                self.pos = end;
                self.buffer_end = None;
            }
        }
        self.op_pos = self.pos;
        let Some(&op) = self.bytes.get(self.pos) else {
            return Err(self.err("stream ends without STOP (truncated?)"));
        };
        self.pos += 1;
        self.ops += 1;
        if self.ops > self.budget.max_ops {
            return Err(self.limit(format!("more than {} opcodes", self.budget.max_ops)));
        }
        Ok(op)
    }

    /// Runs one opcode other than STOP, by family. Inlined into the loop: it runs once per
    /// opcode, and its own frame cost as much as the dispatch.
    #[inline(always)]
    fn step(&mut self, op: u8) -> Result<()> {
        match op {
            MARK | POP | POP_MARK | DUP => self.stack_op(op),
            NONE | NEWTRUE | NEWFALSE | INT | BININT | BININT1 | BININT2 | LONG | LONG1 | LONG4
            | FLOAT | BINFLOAT => self.scalar(op),
            STRING | BINSTRING | SHORT_BINSTRING | UNICODE | BINUNICODE | SHORT_BINUNICODE
            | BINUNICODE8 | BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => self.string(op),
            EMPTY_TUPLE | EMPTY_LIST | EMPTY_DICT | EMPTY_SET | TUPLE | TUPLE1 | TUPLE2
            | TUPLE3 | LIST | DICT | FROZENSET => self.new_container(op),
            APPEND | APPENDS | ADDITEMS | SETITEM | SETITEMS => self.fill_container(op),
            PUT | BINPUT | LONG_BINPUT | MEMOIZE | GET | BINGET | LONG_BINGET => self.memo_op(op),
            GLOBAL | STACK_GLOBAL | EXT1 | EXT2 | EXT4 => self.name_op(op),
            REDUCE | NEWOBJ | NEWOBJ_EX | INST | OBJ => self.call_op(op),
            BUILD => self.build(),
            PERSID | BINPERSID => self.persistent_id(op),
            PROTO | FRAME | NEXT_BUFFER | READONLY_BUFFER => self.protocol_op(op),
            _ => Err(self.unknown(op)),
        }
    }

    fn stack_op(&mut self, op: u8) -> Result<()> {
        match op {
            MARK => {
                self.grow(grown_list::<usize>(self.marks.len(), self.marks.capacity()))?;
                self.marks.push(self.stack.len());
            }
            POP => {
                self.pop()?;
            }
            POP_MARK => {
                self.pop_mark()?;
            }
            DUP => {
                let top = self.top()?;
                self.push_id(top)?;
            }
            _ => return Err(self.unknown(op)),
        }
        Ok(())
    }

    /// None, bools, integers and floats.
    fn scalar(&mut self, op: u8) -> Result<()> {
        let (shared, node) = match op {
            NONE => (SHARED_NONE, Node::None),
            NEWFALSE => (SHARED_FALSE, Node::Bool(false)),
            NEWTRUE => (SHARED_TRUE, Node::Bool(true)),
            BININT1 => {
                let v = self.u8()?;
                (SHARED_BININT1 + usize::from(v), Node::Int(i64::from(v)))
            }
            _ => return self.other_scalar(op),
        };
        self.push_shared(shared, node)
    }

    /// Pushes the one value kept in slot `shared` of [`SHARED_SCALARS`], made from `node`
    /// the first time.
    fn push_shared(&mut self, shared: usize, node: Node) -> Result<()> {
        match self.shared_scalars.get(shared).copied().flatten() {
            Some(id) => self.push_id(id),
            None => {
                let id = self.alloc(node)?;
                if let Some(slot) = self.shared_scalars.get_mut(shared) {
                    *slot = Some(id);
                }
                self.push_id(id)
            }
        }
    }

    /// The scalars made anew each time: wider integers and floats.
    fn other_scalar(&mut self, op: u8) -> Result<()> {
        let node = match op {
            BININT2 => Node::Int(i64::from(u16::from_le_bytes(self.array()?))),
            BININT => Node::Int(i64::from(i32::from_le_bytes(self.array()?))),
            LONG1 => {
                let n = self.u8()?;
                long_from_le(self.take(u64::from(n))?)
            }
            LONG4 => {
                let n = self.signed_len("LONG4")?;
                long_from_le(self.take(n)?)
            }
            INT | LONG => self.int_literal(op)?,
            FLOAT => {
                let text = self.line_str()?;
                let v = text
                    .trim()
                    .parse()
                    .map_err(|_| self.err(format!("float literal {text:?} is malformed")))?;
                Node::Float(v)
            }
            BINFLOAT => Node::Float(f64::from_be_bytes(self.array()?)),
            _ => return Err(self.unknown(op)),
        };
        self.push(node)
    }

    /// INT and LONG's decimal line; protocol 0 writes `True`/`False` as INT `01`/`00`.
    fn int_literal(&mut self, op: u8) -> Result<Node> {
        let t = match self.line_str()? {
            "01" if op == INT => return Ok(Node::Bool(true)),
            "00" if op == INT => return Ok(Node::Bool(false)),
            t => t.strip_suffix('L').unwrap_or(t),
        };
        if let Ok(v) = t.parse() {
            return Ok(Node::Int(v));
        }
        let bytes = decimal_to_le(t)
            .ok_or_else(|| self.err(format!("integer literal {t:?} is malformed")))?;
        Ok(long_from_le(&bytes))
    }

    /// Text and bytes.
    fn string(&mut self, op: u8) -> Result<()> {
        let node = match op {
            BINUNICODE | SHORT_BINUNICODE | BINUNICODE8 => {
                let raw = self.counted(op)?;
                let text =
                    utf8_surrogatepass(raw).ok_or_else(|| self.err("string is not valid UTF-8"))?;
                Node::Str(text.into())
            }
            // Python 2 `str`: bytes that PyTorch's loader decodes as text.
            BINSTRING | SHORT_BINSTRING => {
                Node::Str(String::from_utf8_lossy(self.counted(op)?).into())
            }
            BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                Node::Bytes(self.counted(op)?.into())
            }
            UNICODE => {
                let text = raw_unicode_escape(self.line()?);
                Node::Str(
                    text.ok_or_else(|| self.err("malformed UNICODE escape"))?
                        .into(),
                )
            }
            STRING => {
                let text = python_string_literal(self.line()?);
                Node::Str(
                    text.ok_or_else(|| self.err("malformed STRING literal"))?
                        .into(),
                )
            }
            _ => return Err(self.unknown(op)),
        };
        self.push(node)
    }

    /// The operand of a length-prefixed string or bytes opcode.
    fn counted(&mut self, op: u8) -> Result<&'a [u8]> {
        let n = match op {
            SHORT_BINSTRING | SHORT_BINBYTES | SHORT_BINUNICODE => u64::from(self.u8()?),
            BINUNICODE | BINBYTES => u64::from(self.u32()?),
            BINSTRING => self.signed_len("BINSTRING")?,
            BINUNICODE8 | BINBYTES8 | BYTEARRAY8 => self.u64()?,
            _ => return Err(self.unknown(op)),
        };
        self.take(n)
    }

    /// Tuples, lists, dicts and sets, empty or from the stack.
    fn new_container(&mut self, op: u8) -> Result<()> {
        let node = match op {
            // One empty tuple, as in Python: `torch.save` writes one per tensor.
            EMPTY_TUPLE => {
                return self.push_shared(SHARED_EMPTY_TUPLE, Node::Tuple(Box::default()))
            }
            EMPTY_LIST => Node::List(ThinVec::new()),
            EMPTY_DICT => Node::Dict(ThinVec::new()),
            EMPTY_SET => Node::Set(ThinVec::new()),
            TUPLE => Node::Tuple(self.pop_mark()?.into()),
            TUPLE1 => Node::Tuple(self.pop_n(1)?.into()),
            TUPLE2 => Node::Tuple(self.pop_n(2)?.into()),
            TUPLE3 => Node::Tuple(self.pop_n(3)?.into()),
            LIST => Node::List(self.pop_mark()?.into()),
            DICT => {
                let items = self.pop_mark()?;
                Node::Dict(self.pairs(&items)?.into())
            }
            FROZENSET => Node::Set(self.pop_mark()?.into()),
            _ => return Err(self.unknown(op)),
        };
        self.push(node)
    }

    /// Items added to the container below them, which stays on the stack.
    fn fill_container(&mut self, op: u8) -> Result<()> {
        match op {
            APPEND => {
                let value = self.pop()?;
                self.append_to_top(vec![value])
            }
            // ADDITEMS fills a set as APPENDS fills a list.
            APPENDS | ADDITEMS => {
                let items = self.pop_mark()?;
                self.append_to_top(items)
            }
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.set_on_top(vec![(key, value)])
            }
            SETITEMS => {
                let items = self.pop_mark()?;
                let pairs = self.pairs(&items)?;
                self.set_on_top(pairs)
            }
            _ => Err(self.unknown(op)),
        }
    }

    fn pairs(&self, items: &[Id]) -> Result<Vec<(Id, Id)>> {
        let (pairs, odd) = items.as_chunks::<2>();
        if !odd.is_empty() {
            return Err(self.err("odd number of items for a dict"));
        }
        Ok(pairs.iter().map(|&[k, v]| (k, v)).collect())
    }

    /// On any other target CPython calls its own `append`/`extend` or `__setitem__` (a
    /// tensor's, an opaque object's), which may well succeed and read on: so does this
    /// machine, dropping the items, so every later global is named; refused at the end.
    fn append_to_top(&mut self, items: Vec<Id>) -> Result<()> {
        let target = self.top()?;
        self.grow_value(self.heap.get(target).filled_with(items.len()))?;
        match self.heap.get_mut(target) {
            Some(Node::List(list) | Node::Set(list)) => list.extend(items),
            Some(Node::Object(object)) => object.items.extend(items.into_iter().map(|v| (None, v))),
            _ => self.refuse_at_end(
                self.err("APPEND/ADDITEMS on a value that is not a list, set or object"),
            ),
        }
        Ok(())
    }

    fn set_on_top(&mut self, pairs: Vec<(Id, Id)>) -> Result<()> {
        let target = self.top()?;
        self.grow_value(self.heap.get(target).filled_with(pairs.len()))?;
        match self.heap.get_mut(target) {
            Some(Node::Dict(dict)) => dict.extend(pairs),
            Some(Node::Object(object)) => object
                .items
                .extend(pairs.into_iter().map(|(k, v)| (Some(k), v))),
            _ => self.refuse_at_end(self.err("SETITEM on a value that is not a dict or object")),
        }
        Ok(())
    }

    fn memo_op(&mut self, op: u8) -> Result<()> {
        let key = match op {
            PUT | GET => {
                let text = self.line_str()?;
                text.parse()
                    .map_err(|_| self.err(format!("memo key {text:?} is not a number")))?
            }
            BINPUT | BINGET => u64::from(self.u8()?),
            LONG_BINPUT | LONG_BINGET => u64::from(self.u32()?),
            // Picklers number MEMOIZE entries in order: the key is the next free one.
            MEMOIZE => self.memo.len() as u64,
            _ => return Err(self.unknown(op)),
        };
        match op {
            GET | BINGET | LONG_BINGET => self.memo_get(key),
            _ => self.memo_put(key),
        }
    }

    /// Names of globals; nothing is imported.
    fn name_op(&mut self, op: u8) -> Result<()> {
        let id = match op {
            GLOBAL => {
                let (module, name) = self.name_lines()?;
                self.global(module, name)?
            }
            STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                let (Some(module), Some(name)) = (
                    self.heap.str(module).map(str::to_owned),
                    self.heap.str(name).map(str::to_owned),
                ) else {
                    return Err(self.err("STACK_GLOBAL needs two strings"));
                };
                self.global(&module, &name)?
            }
            EXT1 | EXT2 | EXT4 => {
                let code = match op {
                    EXT1 => u32::from(self.u8()?),
                    EXT2 => u32::from(u16::from_le_bytes(self.array()?)),
                    _ => self.u32()?,
                };
                // The copyreg extension registry maps codes to arbitrary globals.
                self.global("copyreg", &format!("extension code {code}"))?
            }
            _ => return Err(self.unknown(op)),
        };
        self.push_id(id)
    }

    /// A global becomes a name; one the loader would not resolve from its table is also
    /// recorded, whole (a dotted name is one path, not a module and an attribute).
    fn global(&mut self, module: &str, name: &str) -> Result<Id> {
        let module = map_module(module);
        if !resolves(self.loader, module, name) {
            let global = UnsafeGlobal {
                module: module.to_owned(),
                name: name.to_owned(),
                member: self.member.to_owned(),
                position: self.position(),
                // Set once the stream has been read.
                payload: String::new(),
            };
            self.charge(global_bytes(&global))?;
            self.unsafe_globals.push(global);
        }
        let global = Global::new(module, name);
        if global.class() == Class::TorchScript {
            self.torchscript_classes = true;
        }
        self.alloc(Node::Global(Box::new(global)))
    }

    /// Calls and instantiations: interpreted when allowlisted, otherwise opaque; never made.
    fn call_op(&mut self, op: u8) -> Result<()> {
        let id = match op {
            REDUCE => {
                let args = self.pop()?;
                let callable = self.pop()?;
                match self.call(callable, args, 0) {
                    Ok(id) => id,
                    // An allowlisted call tensorplay cannot make sense of (a tensor rebuilt
                    // over what an unsafe global returns, say): Python calls
                    // the real function, which may well succeed, and runs on. So does this
                    // machine, the value kept opaque, so every later global is named; the
                    // stream is refused at its end.
                    Err(e @ Error::Pickle { .. }) => {
                        self.refuse_at_end(e);
                        self.opaque(callable, args)?
                    }
                    Err(e) => return Err(e),
                }
            }
            NEWOBJ | NEWOBJ_EX => {
                if op == NEWOBJ_EX {
                    // Keyword arguments only matter to a class that would really be built.
                    self.pop()?;
                }
                let args = self.pop()?;
                let class = self.pop()?;
                self.new_object(class, args)?
            }
            INST => {
                let (module, name) = self.name_lines()?;
                let items = self.pop_mark()?;
                let class = self.global(module, name)?;
                let args = self.alloc(Node::Tuple(items.into()))?;
                self.new_object(class, args)?
            }
            OBJ => {
                let items = self.pop_mark()?;
                let Some((&class, rest)) = items.split_first() else {
                    return Err(self.err("OBJ without a class"));
                };
                let args = self.alloc(Node::Tuple(rest.into()))?;
                self.new_object(class, args)?
            }
            _ => return Err(self.unknown(op)),
        };
        self.push_id(id)
    }

    fn build(&mut self) -> Result<()> {
        let state = self.pop()?;
        let target = self.top()?;
        if let Some(Node::Object(object)) = self.heap.get_mut(target) {
            // A second BUILD merges into the first (`__dict__.update`, or `__setstate__`
            // again): keeping either alone would read fields Python replaced or kept.
            if object.state.replace(state).is_some() {
                return Err(self.err("BUILD sets the state of one object twice"));
            }
        }
        // Dicts (an OrderedDict's `_metadata`), tensors (Parameter state) and the rest
        // would run `__setstate__`; their contents are already known.
        match self.inline {
            Some(inline) => self.inline_data(inline, target),
            None => Ok(()),
        }
    }

    /// Reads past the data a format wrote after the BUILD of `target` and, when it is an
    /// array, puts the tensor in the object's place on the stack, as joblib's
    /// `NumpyUnpickler.load_build` puts the array there (the memo keeps the object).
    fn inline_data(&mut self, inline: &dyn Inline, target: Id) -> Result<()> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let at = self.base.saturating_add(self.pos as u64);
        let Some(inlined) = inline.after_build(&self.heap, target, rest, at)? else {
            return Ok(());
        };
        // joblib ends the FRAME before an array's bytes (`commit_frame(force=True)`): its
        // pure-Python unpickler reads them from the file, after the frame's bytes.
        if self.frame_end.is_some_and(|end| end != self.pos) {
            return Err(self.err(
                "data follows a BUILD inside a FRAME: joblib ends the frame before an array's \
                 bytes, and its unpickler would read them from after the frame",
            ));
        }
        self.frame_end = None;
        self.buffer_end = None;
        self.take(inlined.len)?;
        self.inlined += 1;
        for global in &inlined.globals {
            self.charge(global_bytes(global))?;
        }
        self.unsafe_globals.extend(inlined.globals);
        let Some(array) = inlined.array else {
            return Ok(());
        };
        let tensor = self.inline_tensor(&array)?;
        self.pop()?;
        self.push_id(tensor)?;
        self.inline_arrays.push(array);
        Ok(())
    }

    /// The tensor an inline array is, over an untyped storage keyed by where its bytes start,
    /// described as a `torch.save` persistent id is so the storages are read as any other.
    fn inline_tensor(&mut self, array: &InlineArray) -> Result<Id> {
        let numel = i64::try_from(array.nbytes)
            .map_err(|_| self.err(format!("an array of {} bytes", array.nbytes)))?;
        let fields = [
            Node::Str("storage".into()),
            Node::Global(Box::new(Global::new("torch.storage", "UntypedStorage"))),
            Node::Str(array.key().into()),
            Node::Str("cpu".into()),
            Node::Int(numel),
        ];
        let mut ids = Vec::with_capacity(fields.len());
        for field in fields {
            ids.push(self.alloc(field)?);
        }
        let pid = self.alloc(Node::Tuple(ids.into()))?;
        let persistent = self.alloc(Node::Persistent(pid))?;
        self.persistent.push(persistent);
        let mut spec = TensorSpec::new(Some(persistent), 0, &array.sizes, &array.strides)
            .ok_or_else(|| self.err("an array of too many dimensions"))?;
        spec.dtype = Some(array.dtype);
        self.alloc(Node::Tensor(Box::new(spec)))
    }

    /// PERSID, BINPERSID: the archive, not the pickle, says what the id stands for.
    fn persistent_id(&mut self, op: u8) -> Result<()> {
        let pid = match op {
            PERSID => {
                let text = self.line_str()?;
                self.alloc(Node::Str(text.into()))?
            }
            BINPERSID => self.pop()?,
            _ => return Err(self.unknown(op)),
        };
        let id = self.alloc(Node::Persistent(pid))?;
        self.persistent.push(id);
        self.push_id(id)
    }

    /// The protocol header, framing and protocol 5's out-of-band buffers.
    fn protocol_op(&mut self, op: u8) -> Result<()> {
        match op {
            PROTO => {
                let proto = self.u8()?;
                if proto > 5 {
                    return Err(self.err(format!("unsupported pickle protocol {proto}")));
                }
            }
            // Frames only batch reads; the whole stream is already in memory. A frame whose
            // bytes do not exist is refused by the C unpickler at once, but the pure-Python one
            // (`joblib.load`'s) reads what there is and runs on: read on, refused at the end.
            FRAME => {
                let len = self.u64()?;
                let pos = self.pos;
                // Buffered, a frame inside the buffer only rewinds; one past it is read from
                // the file's position, the buffer's end.
                let in_buffer = self.buffer_end.is_some_and(|limit| {
                    usize::try_from(len)
                        .ok()
                        .and_then(|len| pos.checked_add(len))
                        .is_some_and(|frame_end| frame_end <= limit)
                });
                let start = match self.buffer_end {
                    Some(limit) if !in_buffer => limit,
                    _ => pos,
                };
                // Read from elsewhere than where the frame begins: the other reading differs,
                // even if this one fails here.
                self.framing_anomaly |= start != pos;
                let end = match usize::try_from(len)
                    .ok()
                    .and_then(|len| start.checked_add(len))
                    .filter(|&end| end <= self.bytes.len())
                {
                    Some(end) => end,
                    None => {
                        self.frame_mismatch(format!(
                            "FRAME of {len} bytes runs past the end of the stream: CPython's C \
                             unpickler refuses it, its pure-Python one (joblib.load's) reads \
                             what there is"
                        ));
                        self.bytes.len().max(start)
                    }
                };
                if self.frame_end.is_some() {
                    self.frame_mismatch(
                        "a FRAME begins before the current frame ends: CPython's C unpickler \
                         reads on, its pure-Python unpickler refuses"
                            .into(),
                    );
                }
                if self.reading == Reading::Buffered && !in_buffer {
                    if start != pos {
                        self.frame_mismatch(
                            "a FRAME runs past the frame it begins in: CPython's C unpickler \
                             reads it from after that frame"
                                .into(),
                        );
                    }
                    self.pos = start;
                    self.buffer_end = Some(end);
                }
                self.frame_end = Some(self.pos.saturating_add(end - start));
            }
            // Read-only is a property of an in-band buffer only Python would care about.
            READONLY_BUFFER => {
                self.top()?;
            }
            NEXT_BUFFER => {
                return Err(self
                    .err("NEXT_BUFFER: out-of-band buffers are not part of any checkpoint format"))
            }
            _ => return Err(self.unknown(op)),
        }
        Ok(())
    }
}

/// None, False, True, the empty tuple and the 256 values of BININT1.
const SHARED_SCALARS: usize = SHARED_BININT1 + 256;
const SHARED_NONE: usize = 0;
const SHARED_FALSE: usize = 1;
const SHARED_TRUE: usize = 2;
const SHARED_EMPTY_TUPLE: usize = 3;
const SHARED_BININT1: usize = 4;

/// The dense memo slots a stream starts with room for: at most an eighth of what the budget
/// has left.
fn memo_room(budget: &Budget) -> usize {
    let room = budget.max_memory.saturating_sub(budget.memory_held) / 8;
    usize::try_from(room / std::mem::size_of::<u32>() as u64).unwrap_or(usize::MAX)
}

/// What an allocation of `len` bytes takes from the allocator: its size class (mimalloc's
/// bins are up to a quarter apart) and a header. Values are charged so, not by their length:
/// a stream of thousands of 28 KB strings once held 5 % more than it was charged, and the
/// process passed the budget it was refused at.
fn block(len: u64) -> u64 {
    match len {
        0 => 0,
        len => len.saturating_add(len / 4).saturating_add(16),
    }
}

/// What a recorded global takes: its strings and its record.
fn global_bytes(global: &UnsafeGlobal) -> u64 {
    block(global.module.len() as u64)
        .saturating_add(block(global.name.len() as u64))
        .saturating_add(block(global.member.len() as u64))
        .saturating_add(std::mem::size_of::<UnsafeGlobal>() as u64)
}

/// What a value takes on the heap: its slot and whatever it owns.
fn node_bytes(node: &Node) -> u64 {
    let owned = match node {
        Node::None
        | Node::Bool(_)
        | Node::Int(_)
        | Node::Float(_)
        | Node::Persistent(_)
        | Node::Tensor(_) => 0,
        Node::BigInt(bytes) | Node::Bytes(bytes) => bytes.len() as u64,
        Node::Str(text) => text.len() as u64,
        Node::List(items) | Node::Set(items) => slice_bytes::<Id>(items.len()),
        Node::Tuple(items) => slice_bytes::<Id>(items.len()),
        Node::Dict(pairs) => slice_bytes::<(Id, Id)>(pairs.len()),
        Node::Global(g) => (g.module.len() as u64)
            .saturating_add(g.name.len() as u64)
            .saturating_add(std::mem::size_of::<Global>() as u64),
        Node::Object(object) => slice_bytes::<(Option<Id>, Id)>(object.items.len())
            .saturating_add(std::mem::size_of::<Object>() as u64),
        Node::Composite(spec) => {
            let roles = spec
                .components
                .iter()
                .fold(0u64, |acc, (role, _)| acc.saturating_add(role.len() as u64));
            slice_bytes::<(String, Id)>(spec.components.len())
                .saturating_add(roles)
                .saturating_add(slice_bytes::<u64>(spec.sizes.as_ref().map_or(0, Vec::len)))
                .saturating_add(spec.subclass.as_ref().map_or(0, |s| s.len() as u64))
                .saturating_add(std::mem::size_of::<super::heap::CompositeSpec>() as u64)
        }
    };
    block(owned).saturating_add(std::mem::size_of::<Node>() as u64)
}
