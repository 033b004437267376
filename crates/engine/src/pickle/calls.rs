//! What REDUCE, NEWOBJ, INST and OBJ make: an interpretation when the callable is on the
//! allowlist, otherwise an opaque object. Nothing is ever called.

use super::allowlist::{classify, Class, Known};
use super::heap::{Id, Node, TensorSpec};
use super::machine::Machine;
use crate::error::Result;
use crate::DType;

/// How deep `_rebuild_from_type_v2` may nest calls to rebuild functions.
const MAX_REBUILD_NESTING: u32 = 8;

impl Machine<'_> {
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

    /// NEWOBJ, INST, OBJ: `class(*args)`, interpreted only for dict and set classes.
    pub(super) fn new_object(&mut self, class: Id, args: Id) -> Result<Id> {
        match self.known(class) {
            Some(Known::Dict) => self.alloc(Node::Dict(Vec::new())),
            Some(Known::Set) => self.alloc(Node::Set(Vec::new())),
            _ => self.opaque(class, args),
        }
    }

    /// REDUCE: interprets allowlisted callables; anything else becomes an opaque object.
    pub(super) fn call(&mut self, callable: Id, args: Id, depth: u32) -> Result<Id> {
        let Some(known) = self.known(callable) else {
            return self.opaque(callable, args);
        };
        let a: Vec<Id> = match self.heap.seq(args) {
            Some(items) => items.to_vec(),
            None => return Err(self.err("call arguments are not a tuple")),
        };
        let arg = |i: usize| a.get(i).copied();
        let node = match known {
            Known::Dict => self.ordered_dict(&a)?,
            Known::Set => Node::Set(
                arg(0)
                    .and_then(|i| self.heap.seq(i))
                    .map(<[Id]>::to_vec)
                    .unwrap_or_default(),
            ),
            Known::CodecsEncode => self.codecs_encode(&a)?,
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
            Known::Device => self.device(&a)?,
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
            Known::RebuildMetaNoStorage => Node::Tensor(Box::new(self.meta_tensor(&a)?)),
            Known::RebuildParameter | Known::RebuildParameterWithState => {
                let mut spec = self.tensor_at(arg(0), "_rebuild_parameter")?;
                spec.is_parameter = true;
                self.override_requires_grad(&mut spec, arg(1));
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildDeviceFromCpu => {
                let mut spec = self.tensor_at(arg(0), "_rebuild_device_tensor_from_cpu_tensor")?;
                spec.device = arg(2).and_then(|i| self.heap.str(i)).map(str::to_owned);
                self.override_requires_grad(&mut spec, arg(3));
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildFromTypeV2 => return self.rebuild_from_type_v2(&a, depth),
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

    /// `OrderedDict(items)`: a dict of the (key, value) pairs of its first argument, if any.
    fn ordered_dict(&self, a: &[Id]) -> Result<Node> {
        let mut pairs = Vec::new();
        if let Some(items) = a.first().and_then(|&i| self.heap.seq(i)) {
            for &pair in items {
                match self.heap.seq(pair) {
                    Some(&[k, v]) => pairs.push((k, v)),
                    _ => return Err(self.err("OrderedDict item is not a pair")),
                }
            }
        }
        Ok(Node::Dict(pairs))
    }

    /// `_codecs.encode(text, encoding)`: how protocol 2 writes `bytes`.
    fn codecs_encode(&self, a: &[Id]) -> Result<Node> {
        let text = a
            .first()
            .and_then(|&i| self.heap.str(i))
            .ok_or_else(|| self.err("_codecs.encode needs a string"))?;
        let latin1 = a
            .get(1)
            .and_then(|&i| self.heap.str(i))
            .is_some_and(|e| e.eq_ignore_ascii_case("latin1") || e.eq_ignore_ascii_case("latin-1"));
        let bytes = if latin1 {
            text.chars()
                .map(|c| u8::try_from(u32::from(c)))
                .collect::<std::result::Result<Vec<u8>, _>>()
                .map_err(|_| self.err("_codecs.encode: character outside latin-1"))?
        } else {
            text.as_bytes().to_vec()
        };
        Ok(Node::Bytes(bytes))
    }

    /// `torch.device(type[, index])`, kept as its text (`cuda:0`).
    fn device(&self, a: &[Id]) -> Result<Node> {
        let kind = a
            .first()
            .and_then(|&i| self.heap.str(i))
            .ok_or_else(|| self.err("torch.device needs a device type"))?;
        let text = match a.get(1).and_then(|&i| self.heap.int(i)) {
            Some(index) => format!("{kind}:{index}"),
            None => kind.to_owned(),
        };
        Ok(Node::Str(text))
    }

    /// `_rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad)`.
    fn meta_tensor(&self, a: &[Id]) -> Result<TensorSpec> {
        let dtype = a.first().and_then(|&i| self.dtype_of(i)).ok_or_else(|| {
            self.err("_rebuild_meta_tensor_no_storage: first argument is not a dtype")
        })?;
        let (Some(sizes), Some(strides)) = (
            a.get(1).and_then(|&i| self.heap.u64s(i)),
            a.get(2).and_then(|&i| self.heap.u64s(i)),
        ) else {
            return Err(self.err("_rebuild_meta_tensor_no_storage: size and stride must be tuples of non-negative integers"));
        };
        Ok(TensorSpec {
            storage: None,
            offset: 0,
            sizes,
            strides,
            requires_grad: a.get(3).and_then(|&i| self.heap.truthy(i)).unwrap_or(false),
            dtype: Some(dtype),
            is_parameter: false,
            device: Some("meta".into()),
        })
    }

    /// `_rebuild_from_type_v2(func, type, args, state)`: the tensor `func(*args)` makes,
    /// marked a parameter when `type` is `Parameter`.
    fn rebuild_from_type_v2(&mut self, a: &[Id], depth: u32) -> Result<Id> {
        if depth >= MAX_REBUILD_NESTING {
            return Err(self.err("_rebuild_from_type_v2 nested too deeply"));
        }
        let (Some(&func), Some(&inner_args)) = (a.first(), a.get(2)) else {
            return Err(self.err("_rebuild_from_type_v2 needs (func, type, args, state)"));
        };
        let result = self.call(func, inner_args, depth + 1)?;
        let is_parameter = a.get(1).and_then(|&t| self.known(t)) == Some(Known::ParameterClass);
        if let (true, Some(Node::Tensor(spec))) = (is_parameter, self.heap.get_mut(result)) {
            spec.is_parameter = true;
        }
        Ok(result)
    }

    /// A `requires_grad` argument, where one is given, replaces the tensor's own.
    fn override_requires_grad(&self, spec: &mut TensorSpec, arg: Option<Id>) {
        spec.requires_grad = arg
            .and_then(|i| self.heap.truthy(i))
            .unwrap_or(spec.requires_grad);
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
