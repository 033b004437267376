//! What REDUCE, NEWOBJ, INST and OBJ make: an interpretation when the callable is on the
//! allowlist, otherwise an opaque object. Nothing is ever called.

use super::allowlist::Known;
use super::heap::{CompositeSpec, Id, Node, Object, TensorSpec};
use super::machine::Machine;
use crate::error::Result;
use crate::DType;
use smallvec::SmallVec;
use thin_vec::ThinVec;

/// A DTensor's placements are described only this small (one per mesh dimension, a few
/// short fields each), so that describing them costs next to nothing.
const MAX_PLACEMENTS: usize = 16;
const MAX_PLACEMENT_FIELDS: usize = 4;
const MAX_PLACEMENT_TEXT: usize = 64;

/// How deep `_rebuild_from_type_v2` may nest calls to rebuild functions.
const MAX_REBUILD_NESTING: u32 = 8;

/// The layout name of a wrapper subclass.
const WRAPPER: &str = "wrapper";
/// Where torch defines jagged nested tensors and `_rebuild_njt`.
const NJT_MODULE: &str = "torch.nested._internal.nested_tensor";

impl Machine<'_> {
    fn known(&self, id: Id) -> Option<Known> {
        match self.heap.get(id) {
            Node::Global(g) => g.known(),
            _ => None,
        }
    }

    fn dtype_of(&self, id: Id) -> Option<DType> {
        match self.known(id) {
            Some(Known::Dtype(d)) => Some(d),
            _ => None,
        }
    }

    pub(super) fn opaque(&mut self, class: Id, args: Id) -> Result<Id> {
        self.alloc(Node::Object(Box::new(Object {
            class,
            args,
            state: None,
            items: Vec::new(),
        })))
    }

    /// NEWOBJ, INST, OBJ: `class(*args)`, interpreted only for dict and set classes.
    pub(super) fn new_object(&mut self, class: Id, args: Id) -> Result<Id> {
        match self.known(class) {
            Some(Known::Dict) => self.alloc(Node::Dict(ThinVec::new())),
            Some(Known::Set) => self.alloc(Node::Set(ThinVec::new())),
            _ => self.opaque(class, args),
        }
    }

    /// REDUCE: interprets allowlisted callables; anything else becomes an opaque object.
    pub(super) fn call(&mut self, callable: Id, args: Id, depth: u32) -> Result<Id> {
        let Some(known) = self.known(callable) else {
            // A storage `pickle.dump` wrote as `torch.storage._load_from_bytes(b)` (in a
            // REDUCE of its own, never a rebuild function's).
            if depth == 0 {
                if let Some(storage) = self.storage_from_bytes(callable, args)? {
                    return Ok(storage);
                }
            }
            return self.opaque(callable, args);
        };
        // Copied out of the heap the call adds to; on the stack for the usual few.
        let a: SmallVec<[Id; 8]> = match self.heap.seq(args) {
            Some(items) => SmallVec::from_slice(items),
            None => return Err(self.err("call arguments are not a tuple")),
        };
        let arg = |i: usize| a.get(i).copied();
        let node = match known {
            Known::Dict => self.ordered_dict(&a)?,
            Known::Set => Node::Set(
                arg(0)
                    .and_then(|i| self.heap.seq(i))
                    .map(ThinVec::from)
                    .unwrap_or_default(),
            ),
            Known::CodecsEncode => self.codecs_encode(&a)?,
            Known::Bytearray => match arg(0).map(|i| self.heap.get(i)) {
                Some(Node::Bytes(b)) => Node::Bytes(b.clone()),
                _ => Node::Bytes(Box::default()),
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
                let mut spec = self.tensor_args(&a, requires_grad_at, None)?;
                match known {
                    Known::RebuildTensorV2 => self.tensor_metadata(&mut spec, arg(6))?,
                    Known::RebuildQTensor => spec.quantizer = self.per_channel_tensors(arg(4)),
                    _ => {}
                }
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildTensorV3 => {
                let dtype = arg(6)
                    .and_then(|i| self.dtype_of(i))
                    .ok_or_else(|| self.err("_rebuild_tensor_v3: 7th argument is not a dtype"))?;
                let mut spec = self.tensor_args(&a, Some(4), Some(dtype))?;
                self.tensor_metadata(&mut spec, arg(7))?;
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildMetaNoStorage => Node::Tensor(Box::new(self.meta_tensor(&a)?)),
            Known::RebuildParameter | Known::RebuildParameterWithState => {
                // `nn.Parameter(sparse)`: the parameter wraps the whole composite.
                if let Some(Node::Composite(inner)) = arg(0).map(|i| self.heap.get(i)) {
                    let mut spec = (**inner).clone();
                    spec.is_parameter = true;
                    spec.requires_grad = arg(1)
                        .and_then(|i| self.heap.truthy(i))
                        .unwrap_or(spec.requires_grad);
                    return self.alloc(Node::Composite(Box::new(spec)));
                }
                let mut spec = self.tensor_at(arg(0), "_rebuild_parameter")?;
                spec.is_parameter = true;
                self.override_requires_grad(&mut spec, arg(1));
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildDeviceFromCpu => {
                let mut spec = self.tensor_at(arg(0), "_rebuild_device_tensor_from_cpu_tensor")?;
                spec.device = arg(2).and_then(|i| self.heap.str(i)).map(Box::from);
                self.override_requires_grad(&mut spec, arg(3));
                Node::Tensor(Box::new(spec))
            }
            Known::RebuildFromTypeV2 => return self.rebuild_from_type_v2(&a, depth),
            Known::RebuildSparse => Node::Composite(Box::new(self.sparse(&a)?)),
            Known::RebuildNested => Node::Composite(Box::new(self.nested(&a)?)),
            Known::RebuildWrapperSubclass => Node::Composite(Box::new(self.wrapper_subclass(&a)?)),
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
        let mut pairs = ThinVec::new();
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
        Ok(Node::Bytes(bytes.into()))
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
        Ok(Node::Str(text.into()))
    }

    /// `_rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad)`.
    fn meta_tensor(&self, a: &[Id]) -> Result<TensorSpec> {
        let dtype = a.first().and_then(|&i| self.dtype_of(i)).ok_or_else(|| {
            self.err("_rebuild_meta_tensor_no_storage: first argument is not a dtype")
        })?;
        let (Some(sizes), Some(strides)) = (
            a.get(1).and_then(|&i| self.heap.u64s::<Vec<u64>>(i)),
            a.get(2).and_then(|&i| self.heap.u64s::<Vec<u64>>(i)),
        ) else {
            return Err(self.err("_rebuild_meta_tensor_no_storage: size and stride must be tuples of non-negative integers"));
        };
        let mut spec = TensorSpec::new(None, 0, &sizes, &strides)
            .ok_or_else(|| self.err("_rebuild_meta_tensor_no_storage: too many dimensions"))?;
        spec.requires_grad = a.get(3).and_then(|&i| self.heap.truthy(i)).unwrap_or(false);
        spec.dtype = Some(dtype);
        spec.device = Some("meta".into());
        Ok(spec)
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
        if let Some(mut spec) = self.jagged(func, a.get(1).copied(), inner_args) {
            // Its other attributes (the metadata cache) are named from the state.
            spec.state = a.get(3).copied();
            return self.alloc(Node::Composite(Box::new(spec)));
        }
        let is_parameter = a.get(1).and_then(|&t| self.known(t)) == Some(Known::ParameterClass);
        if let (true, Some(Node::Tensor(spec))) = (is_parameter, self.heap.get_mut(result)) {
            spec.is_parameter = true;
        }
        // A subclass rebuilt by a function outside the allowlist (a jagged nested tensor's
        // `_rebuild_njt`) is an opaque object: its state, set as BUILD would set it, keeps
        // the inner tensors in view, by attribute name.
        let state = a.get(3).copied();
        if let (Some(Node::Object(object)), Some(state)) = (self.heap.get_mut(result), state) {
            object.state.get_or_insert(state);
        }
        // A wrapper subclass keeps its inner tensors in its state (`__dict__`, or
        // `(__dict__, slots)`): they are its components, by attribute name.
        if let Node::Composite(spec) = self.heap.get(result) {
            if spec.layout == WRAPPER {
                let inner = self.state_tensors(a.get(3).copied());
                let placements = self.dtensor_placements(spec, a.get(3).copied());
                let text = placements.iter().flatten();
                self.charge(text.fold(0u64, |acc, p| acc.saturating_add(p.len() as u64)))?;
                if let Some(Node::Composite(spec)) = self.heap.get_mut(result) {
                    spec.components.extend(inner);
                    spec.placements = placements;
                    spec.state = a.get(3).copied();
                }
            }
        }
        Ok(result)
    }

    /// The tensors among a BUILD-style state's attributes, by attribute name: a `__dict__`,
    /// or `(__dict__, slots)` where either may be `None` (DTensor keeps `_local_tensor` in
    /// a slot, its `__dict__` being `None`).
    fn state_tensors(&self, state: Option<Id>) -> Vec<(String, Id)> {
        let Some(state) = state else {
            return Vec::new();
        };
        self.heap
            .state_attrs(state)
            .filter(|&(_, v)| matches!(self.heap.get(v), Node::Tensor(_) | Node::Composite(_)))
            .filter_map(|(k, v)| Some((self.heap.str(k)?.to_owned(), v)))
            .collect()
    }

    /// A DTensor's placements, from its state's `_spec` (a `DTensorSpec` whose BUILD state
    /// holds `placements`, a tuple of `placement_types` objects), printed as Python's
    /// dataclass repr does. `None` when any part is not that plain data: the placements are
    /// described, never needed to read the tensor.
    fn dtensor_placements(&self, spec: &CompositeSpec, state: Option<Id>) -> Option<Vec<String>> {
        if spec.subclass.as_deref() != Some("torch.distributed.tensor.DTensor") {
            return None;
        }
        let slots = match self.heap.get(state?) {
            Node::Tuple(parts) => *parts.get(1)?,
            _ => return None,
        };
        let dtensor_spec = self.attr(slots, "_spec")?;
        let Node::Object(spec) = self.heap.get(dtensor_spec) else {
            return None;
        };
        let spec_state = spec.state.as_ref()?;
        let Node::Tuple(items) = self.heap.get(self.attr(*spec_state, "placements")?) else {
            return None;
        };
        if items.len() > MAX_PLACEMENTS {
            return None;
        }
        items.iter().map(|&p| self.placement(p)).collect()
    }

    /// One placement: `Shard(dim=0)`, `Replicate()`, from its class and BUILD state.
    fn placement(&self, id: Id) -> Option<String> {
        let Node::Object(object) = self.heap.get(id) else {
            return None;
        };
        let (class, state) = (&object.class, &object.state);
        let Node::Global(global) = self.heap.get(*class) else {
            return None;
        };
        let (module, name) = (&global.module, &global.name);
        if module != "torch.distributed.tensor.placement_types" {
            return None;
        }
        let mut fields = Vec::new();
        if let Some(state) = state {
            let Node::Dict(pairs) = self.heap.get(*state) else {
                return None;
            };
            if pairs.len() > MAX_PLACEMENT_FIELDS {
                return None;
            }
            for &(k, v) in pairs {
                let value = match self.heap.get(v) {
                    Node::Int(i) => i.to_string(),
                    Node::Str(s) if s.len() <= MAX_PLACEMENT_TEXT => format!("'{s}'"),
                    _ => return None,
                };
                let key = self.heap.str(k).filter(|k| k.len() <= MAX_PLACEMENT_TEXT)?;
                fields.push(format!("{key}={value}"));
            }
        }
        Some(format!("{name}({})", fields.join(", ")))
    }

    /// The value of `key` in the dict `id`.
    fn attr(&self, id: Id, key: &str) -> Option<Id> {
        match self.heap.get(id) {
            Node::Dict(pairs) => pairs
                .iter()
                .find(|&&(k, _)| self.heap.str(k) == Some(key))
                .map(|&(_, v)| v),
            _ => None,
        }
    }

    /// `_rebuild_tensor_v2`/`_v3`'s metadata: `{"conj": True}`, `{"neg": True}`. Any other
    /// key is a bit tensorplay does not know, and so an error.
    fn tensor_metadata(&self, spec: &mut TensorSpec, metadata: Option<Id>) -> Result<()> {
        let pairs = match metadata.map(|m| self.heap.get(m)) {
            None | Some(Node::None) => return Ok(()),
            Some(Node::Dict(pairs)) => pairs,
            Some(_) => return Err(self.err("tensor rebuild: metadata is not a dict")),
        };
        for &(k, v) in pairs {
            let set = self
                .heap
                .truthy(v)
                .ok_or_else(|| self.err("tensor rebuild: metadata value is not a bool"))?;
            match self.heap.str(k) {
                Some("conj") => spec.is_conj = set,
                Some("neg") => spec.is_neg = set,
                other => {
                    return Err(self.err(format!(
                        "tensor rebuild: unknown metadata key {}",
                        other.unwrap_or("(not a string)")
                    )))
                }
            }
        }
        Ok(())
    }

    /// `_rebuild_sparse_tensor(layout, data)`: COO's `data` is `(indices, values, size[,
    /// is_coalesced])`; the compressed layouts' `(compressed_indices, plain_indices,
    /// values, size)`, whose index names follow the layout (rows compressed for CSR/BSR).
    fn sparse(&self, a: &[Id]) -> Result<CompositeSpec> {
        let layout = a
            .first()
            .and_then(|&i| self.heap.str(i))
            .map(|l| l.strip_prefix("torch.").unwrap_or(l));
        let data = a.get(1).and_then(|&i| self.heap.seq(i));
        let (Some(layout), Some(data)) = (layout, data) else {
            return Err(self.err("_rebuild_sparse_tensor needs (layout, data)"));
        };
        let (layout, roles): (&'static str, &[&str]) = match layout {
            "sparse_coo" => ("sparse_coo", &["indices", "values"]),
            "sparse_csr" => ("sparse_csr", &["crow_indices", "col_indices", "values"]),
            "sparse_bsr" => ("sparse_bsr", &["crow_indices", "col_indices", "values"]),
            "sparse_csc" => ("sparse_csc", &["ccol_indices", "row_indices", "values"]),
            "sparse_bsc" => ("sparse_bsc", &["ccol_indices", "row_indices", "values"]),
            other => {
                return Err(self.err(format!("_rebuild_sparse_tensor: unknown layout {other}")))
            }
        };
        let components = self.components("_rebuild_sparse_tensor", data, roles)?;
        let sizes = data
            .get(roles.len())
            .and_then(|&i| self.heap.u64s(i))
            .ok_or_else(|| self.err("_rebuild_sparse_tensor: size is not a tuple of sizes"))?;
        Ok(CompositeSpec {
            layout,
            sizes: Some(sizes),
            dtype: None,
            dtype_from: Some("values"),
            subclass: None,
            requires_grad: false,
            is_parameter: false,
            components,
            placements: None,
            state: None,
        })
    }

    /// The first `roles.len()` of `args`, each a tensor, named by its role.
    fn components(&self, call: &str, args: &[Id], roles: &[&str]) -> Result<Vec<(String, Id)>> {
        roles
            .iter()
            .enumerate()
            .map(|(i, role)| {
                let id = args
                    .get(i)
                    .copied()
                    .filter(|&c| matches!(self.heap.get(c), Node::Tensor(_)))
                    .ok_or_else(|| self.err(format!("{call}: {role} is not a tensor")))?;
                Ok(((*role).to_owned(), id))
            })
            .collect()
    }

    /// `_rebuild_nested_tensor(buffer, sizes, strides, storage_offsets)`: four tensors.
    fn nested(&self, a: &[Id]) -> Result<CompositeSpec> {
        let roles = ["buffer", "sizes", "strides", "storage_offsets"];
        let components = self.components("_rebuild_nested_tensor", a, &roles)?;
        Ok(CompositeSpec {
            layout: "nested",
            sizes: None,
            dtype: None,
            dtype_from: Some("buffer"),
            subclass: None,
            requires_grad: false,
            is_parameter: false,
            components,
            placements: None,
            state: None,
        })
    }

    /// A jagged nested tensor: `_rebuild_njt(constructor_kwargs)`, a global outside the
    /// allowlist (recorded, never called) whose keyword arguments hold its values, offsets
    /// and, where saved, lengths, read as the components torch names `_values`, `_offsets`,
    /// `_lengths`. `None` for any other call.
    fn jagged(&self, func: Id, class: Option<Id>, args: Id) -> Option<CompositeSpec> {
        let Node::Global(g) = self.heap.get(func) else {
            return None;
        };
        if (g.module.as_str(), g.name.as_str()) != (NJT_MODULE, "_rebuild_njt") {
            return None;
        }
        let kwargs = *self.heap.seq(args)?.first()?;
        let Node::Dict(pairs) = self.heap.get(kwargs) else {
            return None;
        };
        let tensor = |key: &str| {
            pairs.iter().find_map(|&(k, v)| {
                (self.heap.str(k) == Some(key) && matches!(self.heap.get(v), Node::Tensor(_)))
                    .then_some(v)
            })
        };
        let mut components = vec![
            ("_values".to_owned(), tensor("values")?),
            ("_offsets".to_owned(), tensor("offsets")?),
        ];
        components.extend(tensor("lengths").map(|l| ("_lengths".to_owned(), l)));
        let subclass = match class.map(|c| self.heap.get(c)) {
            Some(Node::Global(c)) => format!("{}.{}", c.module, c.name),
            _ => format!("{NJT_MODULE}.NestedTensor"),
        };
        Some(CompositeSpec {
            layout: "jagged",
            sizes: None,
            dtype: None,
            dtype_from: Some("_values"),
            subclass: Some(subclass),
            requires_grad: false,
            is_parameter: false,
            components,
            placements: None,
            state: None,
        })
    }

    /// `_rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout, device,
    /// requires_grad)`: an outer tensor with no storage of its own; its inner tensors come
    /// with `_rebuild_from_type_v2`'s state.
    fn wrapper_subclass(&self, a: &[Id]) -> Result<CompositeSpec> {
        let subclass = match a.first().map(|&i| self.heap.get(i)) {
            Some(Node::Global(g)) => format!("{}.{}", g.module, g.name),
            _ => return Err(self.err("_rebuild_wrapper_subclass: first argument is not a class")),
        };
        let dtype = a
            .get(1)
            .and_then(|&i| self.dtype_of(i))
            .ok_or_else(|| self.err("_rebuild_wrapper_subclass: second argument is not a dtype"))?;
        let sizes = a
            .get(2)
            .and_then(|&i| self.heap.u64s(i))
            .ok_or_else(|| self.err("_rebuild_wrapper_subclass: size is not a tuple of sizes"))?;
        Ok(CompositeSpec {
            layout: WRAPPER,
            sizes: Some(sizes),
            dtype: Some(dtype),
            dtype_from: None,
            subclass: Some(subclass),
            requires_grad: a.get(7).and_then(|&i| self.heap.truthy(i)).unwrap_or(false),
            is_parameter: false,
            components: Vec::new(),
            placements: None,
            state: None,
        })
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

    /// The scales and zero points of `_rebuild_qtensor`'s per-channel quantizer parameters
    /// `(qscheme, scales, zero_points, axis)`, where both are tensors (older files save lists).
    fn per_channel_tensors(&self, params: Option<Id>) -> Option<Box<[Id; 2]>> {
        let items = self.heap.seq(params?)?;
        let is_tensor = |i: Id| matches!(self.heap.get(i), Node::Tensor(_));
        match *items {
            [_, scales, zero_points, _] if is_tensor(scales) && is_tensor(zero_points) => {
                Some(Box::new([scales, zero_points]))
            }
            _ => None,
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
        // On the stack: the spec keeps both in one allocation.
        let dims = |at: usize| {
            a.get(at)
                .and_then(|&i| self.heap.u64s::<SmallVec<[u64; 8]>>(i))
        };
        let (Some(sizes), Some(strides)) = (dims(2), dims(3)) else {
            return Err(
                self.err("tensor rebuild: size and stride must be tuples of non-negative integers")
            );
        };
        let mut spec = TensorSpec::new(Some(storage), offset, &sizes, &strides)
            .ok_or_else(|| self.err("tensor rebuild: too many dimensions"))?;
        spec.requires_grad = requires_grad_at
            .and_then(|at| a.get(at))
            .and_then(|&i| self.heap.truthy(i))
            .unwrap_or(false);
        spec.dtype = dtype;
        Ok(spec)
    }
}
