//! The opcode interpreter: Python's `pickle._Unpickler`, with every call replaced by either
//! an interpretation of an allowlisted name or an opaque object.

use super::allowlist::{classify, map_module, Class, Known};
use super::heap::{Heap, Id, Node, TensorSpec};
use super::memo::Memo;
use super::{Budget, UnsafeGlobal};
use crate::error::{Error, Result};
use crate::DType;
use std::path::Path;

/// The result of running one pickle stream.
#[derive(Debug)]
pub struct Unpickled {
    /// Every value built.
    pub heap: Heap,
    /// The value `STOP` returned.
    pub root: Id,
    /// Bytes consumed, `STOP` included.
    pub len: u64,
    /// Globals outside the allowlist, in stream order.
    pub unsafe_globals: Vec<UnsafeGlobal>,
    /// Persistent ids in the order the stream loads them.
    pub persistent: Vec<Id>,
    /// Whether TorchScript classes (`__torch__.*`) appear.
    pub torchscript_classes: bool,
}

/// Runs one pickle stream from the start of `bytes`, stopping at its `STOP`.
/// `member` and `base` (the stream's offset within the member) name positions in errors.
pub fn unpickle(
    bytes: &[u8],
    path: &Path,
    member: &str,
    base: u64,
    budget: &Budget,
) -> Result<Unpickled> {
    let mut m = Machine {
        bytes,
        pos: 0,
        op_pos: 0,
        // Roughly one value per 8 bytes of stream; saves regrowing the heap.
        heap: Heap::with_capacity((bytes.len() / 8).min(budget.max_nodes)),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo::default(),
        ops: 0,
        budget,
        path,
        member,
        base,
        unsafe_globals: Vec::new(),
        persistent: Vec::new(),
        torchscript_classes: false,
    };
    let root = m.run()?;
    Ok(Unpickled {
        heap: m.heap,
        root,
        len: m.pos as u64,
        unsafe_globals: m.unsafe_globals,
        persistent: m.persistent,
        torchscript_classes: m.torchscript_classes,
    })
}

/// How deep `_rebuild_from_type_v2` may nest calls to rebuild functions.
const MAX_REBUILD_NESTING: u32 = 8;

struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    op_pos: usize,
    heap: Heap,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: Memo,
    ops: u64,
    budget: &'a Budget,
    path: &'a Path,
    member: &'a str,
    base: u64,
    unsafe_globals: Vec<UnsafeGlobal>,
    persistent: Vec<Id>,
    torchscript_classes: bool,
}

impl Machine<'_> {
    fn err(&self, detail: impl Into<String>) -> Error {
        Error::Pickle {
            path: self.path.to_owned(),
            member: self.member.to_owned(),
            position: self.base + self.op_pos as u64,
            detail: detail.into(),
        }
    }

    // ---- reading operands ----

    fn take(&mut self, n: u64) -> Result<&[u8]> {
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
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn line(&mut self) -> Result<&[u8]> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| self.err("text operand has no terminating newline"))?;
        let line = rest.get(..n).unwrap_or_default();
        self.pos += n + 1;
        Ok(line)
    }

    fn line_str(&mut self) -> Result<String> {
        let line = self.line()?;
        match std::str::from_utf8(line) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(self.err("text operand is not UTF-8")),
        }
    }

    fn utf8(&self, bytes: &[u8]) -> Result<String> {
        String::from_utf8(bytes.to_vec()).map_err(|_| self.err("string is not valid UTF-8"))
    }

    // ---- stack, marks, memo ----

    fn alloc(&mut self, node: Node) -> Result<Id> {
        let max = self.budget.max_nodes;
        self.heap
            .push(node, max)
            .ok_or_else(|| self.err(format!("more than {max} values: budget exceeded")))
    }

    fn push_id(&mut self, id: Id) -> Result<()> {
        if self.stack.len() >= self.budget.max_stack {
            return Err(self.err(format!(
                "stack deeper than {}: budget exceeded",
                self.budget.max_stack
            )));
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
        if self.memo.len() >= self.budget.max_memo && !self.memo.contains(key) {
            return Err(self.err(format!(
                "memo larger than {}: budget exceeded",
                self.budget.max_memo
            )));
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> Result<()> {
        let id = self
            .memo
            .get(key)
            .ok_or_else(|| self.err(format!("memo key {key} was never stored")))?;
        self.push_id(id)
    }

    // ---- the loop ----

    fn run(&mut self) -> Result<Id> {
        loop {
            self.op_pos = self.pos;
            let Some(&op) = self.bytes.get(self.pos) else {
                return Err(self.err("stream ends without STOP (truncated?)"));
            };
            self.pos += 1;
            self.ops += 1;
            if self.ops > self.budget.max_ops {
                return Err(self.err(format!(
                    "more than {} opcodes: budget exceeded",
                    self.budget.max_ops
                )));
            }
            match op {
                b'.' => return self.pop(),
                b'(' => {
                    if self.marks.len() >= self.budget.max_stack {
                        return Err(self.err("too many MARKs: budget exceeded"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top()?;
                    self.push_id(top)?;
                }
                // Constants and scalars.
                b'N' => self.push(Node::None)?,
                0x88 => self.push(Node::Bool(true))?,
                0x89 => self.push(Node::Bool(false))?,
                b'K' => {
                    let v = self.u8()?;
                    self.push(Node::Int(i64::from(v)))?
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.array()?);
                    self.push(Node::Int(i64::from(v)))?
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.array()?);
                    self.push(Node::Int(i64::from(v)))?
                }
                0x8a => {
                    let n = self.u8()?;
                    let bytes = self.take(u64::from(n))?.to_vec();
                    self.push(long_from_le(bytes))?
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.array()?);
                    let n =
                        u64::try_from(n).map_err(|_| self.err("LONG4 with a negative length"))?;
                    let bytes = self.take(n)?.to_vec();
                    self.push(long_from_le(bytes))?
                }
                b'I' | b'L' => {
                    let text = self.line_str()?;
                    let node = match text.as_str() {
                        "01" if op == b'I' => Node::Bool(true),
                        "00" if op == b'I' => Node::Bool(false),
                        t => {
                            let t = t.strip_suffix('L').unwrap_or(t);
                            match t.parse() {
                                Ok(v) => Node::Int(v),
                                Err(_) => long_from_le(decimal_to_le(t).ok_or_else(|| {
                                    self.err(format!("integer literal {t:?} is malformed"))
                                })?),
                            }
                        }
                    };
                    self.push(node)?
                }
                b'F' => {
                    let text = self.line_str()?;
                    let v: f64 = text
                        .trim()
                        .parse()
                        .map_err(|_| self.err(format!("float literal {text:?} is malformed")))?;
                    self.push(Node::Float(v))?
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.array()?);
                    self.push(Node::Float(v))?
                }
                // Strings and bytes.
                b'X' | 0x8c | 0x8d => {
                    let raw = self.counted(op)?;
                    let text = self.utf8(&raw)?;
                    self.push(Node::Str(text))?
                }
                // Python 2 `str`: bytes that PyTorch's loader decodes as text.
                b'T' | b'U' => {
                    let raw = self.counted(op)?;
                    self.push(Node::Str(String::from_utf8_lossy(&raw).into_owned()))?
                }
                b'B' | b'C' | 0x8e | 0x96 => {
                    let raw = self.counted(op)?;
                    self.push(Node::Bytes(raw))?
                }
                b'V' => {
                    let line = self.line()?.to_vec();
                    let s = raw_unicode_escape(&line)
                        .ok_or_else(|| self.err("malformed UNICODE escape"))?;
                    self.push(Node::Str(s))?
                }
                b'S' => {
                    let line = self.line()?.to_vec();
                    let s = python_string_literal(&line)
                        .ok_or_else(|| self.err("malformed STRING literal"))?;
                    self.push(Node::Str(s))?
                }
                // Containers.
                b')' => self.push(Node::Tuple(Vec::new()))?,
                b']' => self.push(Node::List(Vec::new()))?,
                b'}' => self.push(Node::Dict(Vec::new()))?,
                0x8f => self.push(Node::Set(Vec::new()))?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items))?
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Node::Tuple(items))?
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items))?
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    self.push(Node::Dict(pairs))?
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Node::Set(items))?
                }
                b'a' => {
                    let value = self.pop()?;
                    let target = self.top()?;
                    self.extend(target, vec![value])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let target = self.top()?;
                    self.extend(target, items)?;
                }
                0x90 => {
                    let items = self.pop_mark()?;
                    let target = self.top()?;
                    self.extend(target, items)?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let target = self.top()?;
                    self.set_items(target, vec![(key, value)])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    let target = self.top()?;
                    self.set_items(target, pairs)?;
                }
                // Memo.
                b'p' | b'q' | b'r' | 0x94 => {
                    let key = self.memo_key(op)?;
                    self.memo_put(key)?
                }
                b'g' | b'h' | b'j' => {
                    let key = self.memo_key(op)?;
                    self.memo_get(key)?
                }
                // Names and calls: nothing is imported, nothing is called.
                b'c' => {
                    let module = self.line_str()?;
                    let name = self.line_str()?;
                    let id = self.global(&module, &name)?;
                    self.push_id(id)?
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(module), Some(name)) = (
                        self.heap.str(module).map(str::to_owned),
                        self.heap.str(name).map(str::to_owned),
                    ) else {
                        return Err(self.err("STACK_GLOBAL needs two strings"));
                    };
                    let id = self.global(&module, &name)?;
                    self.push_id(id)?
                }
                0x82..=0x84 => {
                    let code = match op {
                        0x82 => u32::from(self.u8()?),
                        0x83 => u32::from(u16::from_le_bytes(self.array()?)),
                        _ => self.u32()?,
                    };
                    // The copyreg extension registry maps codes to arbitrary globals.
                    let id = self.global("copyreg", &format!("extension code {code}"))?;
                    self.push_id(id)?
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let id = self.call(callable, args, 0)?;
                    self.push_id(id)?
                }
                0x81 => {
                    let args = self.pop()?;
                    let class = self.pop()?;
                    let id = self.new_object(class, args)?;
                    self.push_id(id)?
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let class = self.pop()?;
                    let id = self.new_object(class, args)?;
                    self.push_id(id)?
                }
                b'i' => {
                    let module = self.line_str()?;
                    let name = self.line_str()?;
                    let items = self.pop_mark()?;
                    let class = self.global(&module, &name)?;
                    let args = self.alloc(Node::Tuple(items))?;
                    let id = self.new_object(class, args)?;
                    self.push_id(id)?
                }
                b'o' => {
                    let mut items = self.pop_mark()?;
                    if items.is_empty() {
                        return Err(self.err("OBJ without a class"));
                    }
                    let class = items.remove(0);
                    let args = self.alloc(Node::Tuple(items))?;
                    let id = self.new_object(class, args)?;
                    self.push_id(id)?
                }
                b'b' => {
                    let state = self.pop()?;
                    let target = self.top()?;
                    if let Some(Node::Object { state: slot, .. }) = self.heap.get_mut(target) {
                        *slot = Some(state);
                    }
                    // Dicts (an OrderedDict's `_metadata`), tensors (Parameter state) and the
                    // rest would run `__setstate__`; their contents are already known.
                }
                b'P' => {
                    let text = self.line_str()?;
                    let pid = self.alloc(Node::Str(text))?;
                    self.persistent_id(pid)?
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.persistent_id(pid)?
                }
                // Framing.
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(self.err(format!("unsupported pickle protocol {proto}")));
                    }
                }
                0x95 => {
                    self.u64()?;
                }
                0x98 => {
                    self.top()?;
                }
                0x97 => {
                    return Err(self.err(
                        "NEXT_BUFFER: out-of-band buffers are not part of any checkpoint format",
                    ))
                }
                other => return Err(self.err(format!("unknown opcode 0x{other:02x}"))),
            }
        }
    }

    /// The operand of a length-prefixed string or bytes opcode.
    fn counted(&mut self, op: u8) -> Result<Vec<u8>> {
        let n = match op {
            b'U' | b'C' | 0x8c => u64::from(self.u8()?),
            b'X' | b'B' => u64::from(self.u32()?),
            b'T' => {
                let n = i32::from_le_bytes(self.array()?);
                u64::try_from(n).map_err(|_| self.err("BINSTRING with a negative length"))?
            }
            _ => self.u64()?,
        };
        Ok(self.take(n)?.to_vec())
    }

    /// The key a memo opcode names (MEMOIZE: the next free one).
    fn memo_key(&mut self, op: u8) -> Result<u64> {
        match op {
            b'q' | b'h' => Ok(u64::from(self.u8()?)),
            b'r' | b'j' => Ok(u64::from(self.u32()?)),
            0x94 => Ok(self.memo.len() as u64),
            _ => {
                let text = self.line_str()?;
                text.parse()
                    .map_err(|_| self.err(format!("memo key {text:?} is not a number")))
            }
        }
    }

    fn pairs(&self, items: Vec<Id>) -> Result<Vec<(Id, Id)>> {
        if !items.len().is_multiple_of(2) {
            return Err(self.err("odd number of items for a dict"));
        }
        Ok(items.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect())
    }

    fn extend(&mut self, target: Id, items: Vec<Id>) -> Result<()> {
        match self.heap.get_mut(target) {
            Some(Node::List(list) | Node::Set(list)) => list.extend(items),
            Some(Node::Object { items: slot, .. }) => {
                slot.extend(items.into_iter().map(|v| (None, v)))
            }
            _ => {
                return Err(self.err("APPEND/ADDITEMS on a value that is not a list, set or object"))
            }
        }
        Ok(())
    }

    fn set_items(&mut self, target: Id, pairs: Vec<(Id, Id)>) -> Result<()> {
        match self.heap.get_mut(target) {
            Some(Node::Dict(dict)) => dict.extend(pairs),
            Some(Node::Object { items: slot, .. }) => {
                slot.extend(pairs.into_iter().map(|(k, v)| (Some(k), v)))
            }
            _ => return Err(self.err("SETITEM on a value that is not a dict or object")),
        }
        Ok(())
    }

    fn persistent_id(&mut self, pid: Id) -> Result<()> {
        let id = self.alloc(Node::Persistent(pid))?;
        self.persistent.push(id);
        self.push_id(id)
    }

    /// A global becomes a name; outside the allowlist it is also recorded.
    fn global(&mut self, module: &str, name: &str) -> Result<Id> {
        let module = map_module(module);
        match classify(module, name) {
            Class::Unsafe => self.unsafe_globals.push(UnsafeGlobal {
                module: module.to_owned(),
                name: name.to_owned(),
                member: self.member.to_owned(),
                position: self.base + self.op_pos as u64,
            }),
            Class::TorchScript => self.torchscript_classes = true,
            Class::Known(_) => {}
        }
        self.alloc(Node::Global {
            module: module.to_owned(),
            name: name.to_owned(),
        })
    }

    fn known(&self, id: Id) -> Option<Known> {
        match self.heap.get(id) {
            Node::Global { module, name } => match classify(module, name) {
                Class::Known(k) => Some(k),
                _ => None,
            },
            _ => None,
        }
    }

    fn dtype_of(&self, id: Id) -> Option<DType> {
        match self.known(id) {
            Some(Known::Dtype(d)) => Some(d),
            _ => None,
        }
    }

    fn opaque(&mut self, class: Id, args: Id) -> Result<Id> {
        self.alloc(Node::Object {
            class,
            args,
            state: None,
            items: Vec::new(),
        })
    }

    fn new_object(&mut self, class: Id, args: Id) -> Result<Id> {
        match self.known(class) {
            Some(Known::Dict) => self.alloc(Node::Dict(Vec::new())),
            Some(Known::Set) => self.alloc(Node::Set(Vec::new())),
            _ => self.opaque(class, args),
        }
    }

    /// REDUCE: interprets allowlisted callables; anything else becomes an opaque object.
    fn call(&mut self, callable: Id, args: Id, depth: u32) -> Result<Id> {
        let Some(known) = self.known(callable) else {
            return self.opaque(callable, args);
        };
        let a: Vec<Id> = match self.heap.seq(args) {
            Some(items) => items.to_vec(),
            None => return Err(self.err("call arguments are not a tuple")),
        };
        let arg = |i: usize| a.get(i).copied();
        let node = match known {
            Known::Dict => {
                let mut pairs = Vec::new();
                if let Some(items) = arg(0).and_then(|i| self.heap.seq(i)) {
                    for &pair in items {
                        match self.heap.seq(pair) {
                            Some(&[k, v]) => pairs.push((k, v)),
                            _ => return Err(self.err("OrderedDict item is not a pair")),
                        }
                    }
                }
                Node::Dict(pairs)
            }
            Known::Set => Node::Set(
                arg(0)
                    .and_then(|i| self.heap.seq(i))
                    .map(<[Id]>::to_vec)
                    .unwrap_or_default(),
            ),
            Known::CodecsEncode => {
                let text = arg(0)
                    .and_then(|i| self.heap.str(i))
                    .ok_or_else(|| self.err("_codecs.encode needs a string"))?;
                let latin1 = arg(1).and_then(|i| self.heap.str(i)).is_some_and(|e| {
                    e.eq_ignore_ascii_case("latin1") || e.eq_ignore_ascii_case("latin-1")
                });
                let bytes = if latin1 {
                    text.chars()
                        .map(|c| u8::try_from(u32::from(c)))
                        .collect::<std::result::Result<Vec<u8>, _>>()
                        .map_err(|_| self.err("_codecs.encode: character outside latin-1"))?
                } else {
                    text.as_bytes().to_vec()
                };
                Node::Bytes(bytes)
            }
            Known::Bytearray => match arg(0).map(|i| self.heap.get(i)) {
                Some(Node::Bytes(b)) => Node::Bytes(b.clone()),
                _ => Node::Bytes(Vec::new()),
            },
            Known::Size | Known::JitIdentity => {
                return arg(0).ok_or_else(|| self.err("call needs an argument"));
            }
            Known::GetLayout => {
                return arg(0).ok_or_else(|| self.err("_get_layout needs an argument"))
            }
            Known::Device => {
                let kind = arg(0)
                    .and_then(|i| self.heap.str(i))
                    .ok_or_else(|| self.err("torch.device needs a device type"))?;
                let text = match arg(1).and_then(|i| self.heap.int(i)) {
                    Some(index) => format!("{kind}:{index}"),
                    None => kind.to_owned(),
                };
                Node::Str(text)
            }
            Known::RebuildTensor | Known::RebuildTensorV2 | Known::RebuildQTensor => {
                let requires_grad_at = match known {
                    Known::RebuildTensor => None,
                    Known::RebuildTensorV2 => Some(4),
                    _ => Some(5),
                };
                Node::Tensor(Box::new(self.tensor_args(&a, requires_grad_at, None)?))
            }
            Known::RebuildTensorV3 => {
                let dtype = arg(6)
                    .and_then(|i| self.dtype_of(i))
                    .ok_or_else(|| self.err("_rebuild_tensor_v3: 7th argument is not a dtype"))?;
                Node::Tensor(Box::new(self.tensor_args(&a, Some(4), Some(dtype))?))
            }
            Known::RebuildMetaNoStorage => {
                let dtype = arg(0).and_then(|i| self.dtype_of(i)).ok_or_else(|| {
                    self.err("_rebuild_meta_tensor_no_storage: first argument is not a dtype")
                })?;
                let (Some(sizes), Some(strides)) = (
                    arg(1).and_then(|i| self.heap.u64s(i)),
                    arg(2).and_then(|i| self.heap.u64s(i)),
                ) else {
                    return Err(self.err("_rebuild_meta_tensor_no_storage: size and stride must be tuples of non-negative integers"));
                };
                Node::Tensor(Box::new(TensorSpec {
                    storage: None,
                    offset: 0,
                    sizes,
                    strides,
                    requires_grad: arg(3).and_then(|i| self.heap.truthy(i)).unwrap_or(false),
                    dtype: Some(dtype),
                    is_parameter: false,
                    device: Some("meta".into()),
                }))
            }
            Known::RebuildParameter | Known::RebuildParameterWithState => {
                let mut spec = self.tensor_at(arg(0), "_rebuild_parameter")?;
                spec.is_parameter = true;
                spec.requires_grad = arg(1)
                    .and_then(|i| self.heap.truthy(i))
                    .unwrap_or(spec.requires_grad);
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildDeviceFromCpu => {
                let mut spec = self.tensor_at(arg(0), "_rebuild_device_tensor_from_cpu_tensor")?;
                spec.device = arg(2).and_then(|i| self.heap.str(i)).map(str::to_owned);
                spec.requires_grad = arg(3)
                    .and_then(|i| self.heap.truthy(i))
                    .unwrap_or(spec.requires_grad);
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildFromTypeV2 => {
                if depth >= MAX_REBUILD_NESTING {
                    return Err(self.err("_rebuild_from_type_v2 nested too deeply"));
                }
                let (Some(func), Some(inner_args)) = (arg(0), arg(2)) else {
                    return Err(self.err("_rebuild_from_type_v2 needs (func, type, args, state)"));
                };
                let result = self.call(func, inner_args, depth + 1)?;
                let is_parameter =
                    arg(1).and_then(|t| self.known(t)) == Some(Known::ParameterClass);
                if let (true, Some(Node::Tensor(spec))) = (is_parameter, self.heap.get_mut(result))
                {
                    spec.is_parameter = true;
                }
                return Ok(result);
            }
            Known::RebuildSparse => {
                // The components (indices, values…) are ordinary tensors; keep them as a tuple.
                return arg(1)
                    .ok_or_else(|| self.err("_rebuild_sparse_tensor needs (layout, data)"));
            }
            Known::Storage(_)
            | Known::Dtype(_)
            | Known::QScheme
            | Known::ParameterClass
            | Known::Opaque => {
                return self.opaque(callable, args);
            }
        };
        self.alloc(node)
    }

    fn tensor_at(&self, id: Option<Id>, what: &str) -> Result<TensorSpec> {
        match id.map(|i| self.heap.get(i)) {
            Some(Node::Tensor(spec)) => Ok((**spec).clone()),
            _ => Err(self.err(format!("{what}: first argument is not a tensor"))),
        }
    }

    /// (storage, storage_offset, size, stride, [requires_grad …]) of the rebuild functions.
    fn tensor_args(
        &self,
        a: &[Id],
        requires_grad_at: Option<usize>,
        dtype: Option<DType>,
    ) -> Result<TensorSpec> {
        let storage = match a.first().map(|&i| (i, self.heap.get(i))) {
            Some((i, Node::Persistent(_))) => i,
            _ => {
                return Err(
                    self.err("tensor rebuild: first argument is not a storage (persistent id)")
                )
            }
        };
        let offset = a
            .get(1)
            .and_then(|&i| self.heap.int(i))
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| {
                self.err("tensor rebuild: storage offset is not a non-negative integer")
            })?;
        let (Some(sizes), Some(strides)) = (
            a.get(2).and_then(|&i| self.heap.u64s(i)),
            a.get(3).and_then(|&i| self.heap.u64s(i)),
        ) else {
            return Err(
                self.err("tensor rebuild: size and stride must be tuples of non-negative integers")
            );
        };
        let requires_grad = requires_grad_at
            .and_then(|at| a.get(at))
            .and_then(|&i| self.heap.truthy(i))
            .unwrap_or(false);
        Ok(TensorSpec {
            storage: Some(storage),
            offset,
            sizes,
            strides,
            requires_grad,
            dtype,
            is_parameter: false,
            device: None,
        })
    }
}

/// A LONG1/LONG4 operand: an `Int` when it fits 64 bits.
fn long_from_le(bytes: Vec<u8>) -> Node {
    if bytes.is_empty() {
        return Node::Int(0);
    }
    if bytes.len() <= 8 {
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut full = [if negative { 0xff } else { 0 }; 8];
        full.get_mut(..bytes.len())
            .unwrap_or_default()
            .copy_from_slice(&bytes);
        return Node::Int(i64::from_le_bytes(full));
    }
    Node::BigInt(bytes)
}

/// A decimal literal as little-endian two's-complement bytes (for integers past 64 bits).
fn decimal_to_le(text: &str) -> Option<Vec<u8>> {
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
fn raw_unicode_escape(line: &[u8]) -> Option<String> {
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
        out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
        i += 2 + width;
    }
    Some(out)
}

/// Decodes protocol 0's `STRING` operand: a quoted Python 2 `repr` with backslash escapes.
fn python_string_literal(line: &[u8]) -> Option<String> {
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
