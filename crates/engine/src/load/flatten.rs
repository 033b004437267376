//! Names for the tensors of a loaded object, the way a user iterates it: dict keys joined
//! with `.`, list and tuple items by index, object attributes by name, and `nn.Module`
//! state (`_parameters`, `_buffers`, `_modules`) as `state_dict()` names it. A TorchScript
//! class's `__getstate__` tuple (and a TorchBind object's, `torch.ScriptObject`'s state less
//! its class name) is named by index below the object, as a tuple value of a `state_dict()`
//! is; torch's quantized convolutions' weight and bias (items 10 and 11) as `weight` and
//! `bias`, their `state_dict()` names.

use super::torch::Declared;
use crate::pickle::{Budget, Heap, Id, Node};
use crate::{HeldAs, LeftOut};

/// What a root tensor (`torch.save(tensor)`) is called.
pub const ROOT_NAME: &str = "<root>";

/// Why a walk stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The object graph is beyond one of the walk's fixed limits: which.
    Graph(String),
    /// The names kept would bring what the read holds to `needed` bytes, over the budget.
    Memory { needed: u64 },
}

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Named {
    /// Strided tensors by name, each with what a TorchScript archive's object holds it as
    /// (`None` in any other walk).
    pub tensors: Vec<(String, Id, Option<HeldAs>)>,
    /// Sparse, nested and wrapper tensors by name; their components are among `tensors`
    /// as `name.role`.
    pub composites: Vec<(String, Id)>,
    /// Persistent ids the object itself holds (a storage saved as such), not through a tensor.
    pub storages: Vec<Id>,
    /// What holds no tensor: the outermost such values by name (`epoch`,
    /// `optimizer.param_groups`), the first [`MAX_LEFT_OUT`] of them, and how many in all.
    pub left_out: LeftOut,
    /// Byte strings that begin as a checkpoint does (`super::nested`), by name: read as
    /// nested archives once the object's own tensors are (or passed over as data).
    pub nested: Vec<(String, Id)>,
}

/// Names of values holding no tensor that a walk keeps.
pub(crate) const MAX_LEFT_OUT: usize = 100;

/// The names of a per-channel quantized tensor's scales and zero points below its own: the
/// accessors torch reads them with.
const QUANTIZER_ROLES: [&str; 2] = ["q_per_channel_scales", "q_per_channel_zero_points"];

/// Every tensor reachable from `root`, with its name, depth first in insertion order. A tensor
/// reached under two names is listed twice; cycles are followed once. `held` is what the read
/// already holds (the stream's values included): the names kept are charged on top of it,
/// and the bytes of names built count as work against the ops budget, so a long key reached
/// many times through shared containers can cost neither memory nor time without bound.
/// With `declared` (a TorchScript archive's classes), each tensor is told what it is held as.
pub(crate) fn named_tensors(
    heap: &Heap,
    root: Id,
    budget: &Budget,
    held: u64,
    declared: Option<&Declared>,
) -> Result<Named, Stop> {
    let mut walk = Walk {
        heap,
        budget,
        // A stream of many values (a few million tensors') is walked whole: visits beyond
        // twice its values are what shared containers multiply.
        max_visits: budget.max_visits.max(heap.len().saturating_mul(2)),
        visits: 0,
        held,
        built: 0,
        path: Vec::new(),
        declared,
        place: None,
        deferred: Vec::new(),
        out: Named::default(),
    };
    walk.visit(root, "")?;
    walk.module_attributes()?;
    Ok(walk.out)
}

struct Walk<'a> {
    heap: &'a Heap,
    budget: &'a Budget,
    max_visits: usize,
    visits: usize,
    /// Bytes the read holds, the names kept so far included.
    held: u64,
    /// Bytes of names built so far, kept or not.
    built: u64,
    path: Vec<Id>,
    declared: Option<&'a Declared>,
    /// The TorchScript object attribute (or `__getstate__` state) being walked: what it is
    /// held as, and the length of `path` with its object on it.
    place: Option<(HeldAs, usize)>,
    /// A module's attributes beyond `_parameters`, `_buffers` and `_modules` that may hold
    /// tensors (an anchor generator's `_wh_pairs`, a detection head's `stride`), by path:
    /// walked once the state is named, for the storages nothing else names.
    deferred: Vec<(Id, String)>,
    out: Named,
}

impl Walk<'_> {
    fn visit(&mut self, id: Id, name: &str) -> Result<(), Stop> {
        self.count_visit()?;
        if self.path.len() >= self.budget.max_depth {
            return Err(Stop::Graph(format!(
                "objects nested deeper than {}",
                self.budget.max_depth
            )));
        }
        if self.path.contains(&id) {
            return Ok(());
        }
        self.path.push(id);
        let result = self.children(id, name);
        self.path.pop();
        result
    }

    fn count_visit(&mut self) -> Result<(), Stop> {
        self.visits += 1;
        if self.visits > self.max_visits {
            return Err(Stop::Graph(format!(
                "object graph has more than {} values to walk",
                self.max_visits
            )));
        }
        Ok(())
    }

    /// Visits `id` as `prefix.key`. A value that holds no tensor is counted as left out, named
    /// while fewer than [`MAX_LEFT_OUT`] are (so that most scalars cost no name); a container
    /// found to hold none stands for everything under it.
    fn visit_child(
        &mut self,
        id: Id,
        prefix: &str,
        key: impl FnOnce() -> String,
    ) -> Result<(), Stop> {
        if holds_nothing(self.heap.get(id)) {
            self.count_visit()?;
            self.out.left_out.count += 1;
            if self.out.left_out.names.len() < MAX_LEFT_OUT {
                let name = self.join(prefix, key())?;
                self.charge(&name)?;
                self.out.left_out.names.push(name);
            }
            return Ok(());
        }
        let name = self.join(prefix, key())?;
        let (found, named, count) = (
            self.found(),
            self.out.left_out.names.len(),
            self.out.left_out.count,
        );
        self.visit(id, &name)?;
        if self.found() == found {
            let left_out = &mut self.out.left_out;
            left_out.names.truncate(named);
            left_out.count = count + 1;
            if named < MAX_LEFT_OUT {
                left_out.names.push(name);
            }
        }
        Ok(())
    }

    /// Walks the modules' other attributes (see [`Walk::deferred`]), keeping the tensors
    /// whose storage no tensor named so far views: torch reaches such a storage only by
    /// that attribute path (`head.anchors`, `anchor_generator._wh_pairs.0`), while a
    /// tensor a module also keeps as a parameter or buffer keeps its `state_dict()` name
    /// alone. Each attribute value is walked once, however many modules hold it.
    fn module_attributes(&mut self) -> Result<(), Stop> {
        let mut walked = std::collections::HashSet::new();
        let mut next = 0;
        while let Some((id, name)) = self.deferred.get(next).cloned() {
            next += 1;
            if !walked.insert(id) {
                continue;
            }
            let heap = self.heap;
            let named: std::collections::HashSet<String> = self
                .out
                .tensors
                .iter()
                .filter_map(|&(_, t, _)| storage_key(heap, t))
                .collect();
            let (tensors, composites, storages) = (
                self.out.tensors.len(),
                self.out.composites.len(),
                self.out.storages.len(),
            );
            let left_out = (self.out.left_out.names.len(), self.out.left_out.count);
            self.visit(id, &name)?;
            // What this attribute adds: only tensors on storages not named before (sparse,
            // nested and wrapper tensors are not among them: their components are left as
            // the state names them), and no left-out names (the module's state is what it
            // keeps).
            let dropped: Vec<String> = self
                .out
                .composites
                .drain(composites..)
                .map(|(name, _)| format!("{name}."))
                .collect();
            let mut kept = Vec::new();
            for entry in self.out.tensors.drain(tensors..) {
                let part = dropped.iter().any(|d| entry.0.starts_with(d.as_str()));
                if !part && storage_key(heap, entry.1).is_none_or(|key| !named.contains(&key)) {
                    kept.push(entry);
                }
            }
            self.out.tensors.extend(kept);
            self.out.storages.truncate(storages);
            self.out.left_out.names.truncate(left_out.0);
            self.out.left_out.count = left_out.1;
        }
        Ok(())
    }

    /// How many tensors, composites, storages and nested archives were found so far.
    fn found(&self) -> usize {
        self.out.tensors.len()
            + self.out.composites.len()
            + self.out.storages.len()
            + self.out.nested.len()
    }

    /// `prefix.key`, counted as work.
    fn join(&mut self, prefix: &str, key: String) -> Result<String, Stop> {
        // +1 for the dot; saturating: the sum only needs to pass the limit.
        let len = (prefix.len() as u64)
            .saturating_add(key.len() as u64)
            .saturating_add(1);
        self.built = self.built.saturating_add(len);
        if self.built > self.budget.max_ops {
            return Err(Stop::Graph(format!(
                "tensor names take more than {} bytes to build",
                self.budget.max_ops
            )));
        }
        Ok(join(prefix, key))
    }

    /// Keeps `name` for tensor `id`, charged against the memory budget.
    fn keep(&mut self, name: String, id: Id) -> Result<(), Stop> {
        self.charge(&name)?;
        let held_as = self.held_as();
        self.out.tensors.push((name, id, held_as));
        Ok(())
    }

    /// What the tensor being visited is held as: the attribute's declaration when it is the
    /// attribute's value, an attribute when it is inside one (a list of tensors); `None`
    /// outside a TorchScript object.
    fn held_as(&self) -> Option<HeldAs> {
        let (held_as, depth) = self.place?;
        Some(match held_as {
            HeldAs::SetState => held_as,
            _ if depth + 1 == self.path.len() => held_as,
            _ => HeldAs::Attribute,
        })
    }

    /// Visits `id` under `place` (its own object on `path`), then restores the enclosing one.
    fn visit_child_at(
        &mut self,
        place: Option<HeldAs>,
        id: Id,
        prefix: &str,
        key: impl FnOnce() -> String,
    ) -> Result<(), Stop> {
        let outer = self.place;
        if let Some(held_as) = place {
            self.place = Some((held_as, self.path.len()));
        }
        let result = self.visit_child(id, prefix, key);
        self.place = outer;
        result
    }

    /// Charges a kept name against the memory budget.
    fn charge(&mut self, name: &str) -> Result<(), Stop> {
        let entry = std::mem::size_of::<(String, Id)>() as u64;
        self.held = self
            .held
            .saturating_add(name.len() as u64)
            .saturating_add(entry);
        if self.held > self.budget.max_memory {
            return Err(Stop::Memory { needed: self.held });
        }
        Ok(())
    }

    fn children(&mut self, id: Id, name: &str) -> Result<(), Stop> {
        let heap = self.heap;
        match heap.get(id) {
            Node::Tensor(spec) => {
                let name = root_or(name);
                let Some(parts) = spec.quantizer.as_deref() else {
                    return self.keep(name, id);
                };
                self.keep(name.clone(), id)?;
                // The scales and zero points are held as their tensor is.
                let outer = self.place;
                self.place = self.held_as().map(|h| (h, self.path.len()));
                for (role, &part) in QUANTIZER_ROLES.iter().zip(parts) {
                    let part_name = self.join(&name, (*role).to_owned())?;
                    self.visit(part, &part_name)?;
                }
                self.place = outer;
            }
            Node::Composite(spec) => {
                let name = root_or(name);
                self.charge(&name)?;
                for (role, part) in &spec.components {
                    let part_name = self.join(&name, role.clone())?;
                    self.visit(*part, &part_name)?;
                }
                if let Some(state) = spec.state {
                    self.wrapper_state(state, &name, &spec.components)?;
                }
                self.out.composites.push((name, id));
            }
            Node::Persistent(_) => {
                self.charge("")?;
                self.out.storages.push(id);
            }
            Node::Bytes(bytes) if super::nested::may_be_nested(bytes) => {
                let name = root_or(name);
                self.charge(&name)?;
                self.out.nested.push((name, id));
            }
            Node::Dict(pairs) => {
                for &(k, v) in pairs {
                    self.visit_child(v, name, || key_text(heap, k))?;
                }
            }
            Node::List(_) | Node::Tuple(_) | Node::Set(_) => {
                let items = heap.items(id).unwrap_or_default();
                for (i, &v) in items.iter().enumerate() {
                    self.visit_child(v, name, || i.to_string())?;
                }
            }
            Node::Object(object) => {
                let (state, items) = (&object.state, &object.items);
                self.constructor_args(object.class, object.args, name)?;
                if let Some(state) = *state {
                    match class_name(heap, object.class) {
                        // `torch.ScriptObject.__setstate__((state, qualified name))`: a
                        // TorchBind object (`CellParamsBase`, `LinearPackedParamsBase`) as
                        // torch.save writes it; its state is its `__getstate__`.
                        Some(("torch", "ScriptObject")) => match heap.get(state) {
                            Node::Tuple(parts) if parts.len() == 2 => {
                                let (inner, qualified) = (parts[0], parts[1]);
                                if heap.str(qualified).is_some() {
                                    self.getstate(inner, name, ("torch", "ScriptObject"))?;
                                } else {
                                    self.object_state(state, name, None)?;
                                }
                            }
                            _ => self.object_state(state, name, None)?,
                        },
                        Some(class) if is_torchscript_class(class.0) => {
                            self.getstate(state, name, class)?;
                        }
                        _ => self.object_state(state, name, None)?,
                    }
                }
                for (i, &(k, v)) in items.iter().enumerate() {
                    let key = || k.map_or_else(|| i.to_string(), |k| key_text(heap, k));
                    self.visit_child(v, name, key)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// BUILD state: a dict of attributes, or `(dict, slots)`; a TorchScript object's
    /// attributes held as its `class` declares them.
    fn object_state(
        &mut self,
        state: Id,
        name: &str,
        class: Option<(&str, &str)>,
    ) -> Result<(), Stop> {
        let heap = self.heap;
        match heap.get(state) {
            Node::Dict(attrs) => {
                let module_parts = ["_parameters", "_buffers", "_modules"];
                let is_module = attrs
                    .iter()
                    .any(|&(k, _)| heap.str(k).is_some_and(|k| module_parts.contains(&k)));
                if is_module {
                    for part in module_parts {
                        if let Some(&(_, v)) =
                            attrs.iter().find(|&&(k, _)| heap.str(k) == Some(part))
                        {
                            self.visit_flat(v, name)?;
                        }
                    }
                    for &(k, v) in attrs.iter() {
                        let part = heap.str(k).is_some_and(|k| module_parts.contains(&k));
                        if !part && !holds_nothing(heap.get(v)) {
                            let path = self.join(name, key_text(heap, k))?;
                            self.deferred.push((v, path));
                        }
                    }
                    return Ok(());
                }
                let declarations = self
                    .declared
                    .zip(class)
                    .map(|(declared, (module, class))| declared.class(module, class));
                for &(k, v) in attrs {
                    let place = declarations.map(|d| d.held_as(heap.str(k).unwrap_or_default()));
                    self.visit_child_at(place, v, name, || key_text(heap, k))?;
                }
                Ok(())
            }
            // `(__dict__, slots)`, as `object.__reduce_ex__` gives it: both are attributes.
            Node::Tuple(parts) if is_dict_and_slots(heap, parts) => {
                for &part in parts {
                    self.object_state(part, name, class)?;
                }
                Ok(())
            }
            // Any other tuple (a Cython class's `__getstate__`: a KDTree's arrays, a bit
            // generator's `(state, seed_seq)`) is named by index, as its items are reached.
            Node::Tuple(parts) => {
                for (i, &part) in parts.iter().enumerate() {
                    self.visit_child(part, name, || i.to_string())?;
                }
                Ok(())
            }
            _ => self.visit(state, name),
        }
    }

    /// The arguments an object was constructed with that hold tensors (a scikit-learn
    /// `Tree(n_features, n_classes, n_outputs)`'s `n_classes`, a NumPy `RandomState`'s bit
    /// generator): by the attribute of the object that holds each, where the class is known,
    /// else as `__args__.<index>`. What holds none is not listed as left out: arguments are
    /// how an object is built (its class, a version), and its state names what it keeps.
    fn constructor_args(&mut self, class: Id, args: Id, name: &str) -> Result<(), Stop> {
        let heap = self.heap;
        let Some(items) = heap.items(args) else {
            return Ok(());
        };
        let names = class_name(heap, class).map_or(&[][..], |(m, c)| arg_names(m, c));
        for (i, &arg) in items.iter().enumerate() {
            if holds_nothing(heap.get(arg)) {
                continue;
            }
            let key = names
                .get(i)
                .map_or_else(|| format!("__args__.{i}"), |&n| n.to_owned());
            let name = self.join(name, key)?;
            let left_out = (self.out.left_out.names.len(), self.out.left_out.count);
            let found = self.found();
            self.visit(arg, &name)?;
            if self.found() == found {
                self.out.left_out.names.truncate(left_out.0);
                self.out.left_out.count = left_out.1;
            }
        }
        Ok(())
    }

    /// A wrapper subclass's state (`__dict__`, or `(__dict__, slots)`) beyond its components:
    /// tensors it keeps apart from its value, by attribute path (`w._spec.mesh._rank_map`).
    fn wrapper_state(
        &mut self,
        state: Id,
        name: &str,
        components: &[(String, Id)],
    ) -> Result<(), Stop> {
        let heap = self.heap;
        for (k, v) in heap.state_attrs(state) {
            let is_component = heap
                .str(k)
                .is_some_and(|k| components.iter().any(|(role, _)| role == k));
            if !is_component {
                self.visit_child(v, name, || key_text(heap, k))?;
            }
        }
        Ok(())
    }

    /// The state a TorchScript class's `__getstate__` returned (a tuple named by index, or by
    /// the fields torch names), or a module's attribute dict.
    fn getstate(&mut self, state: Id, name: &str, class: (&str, &str)) -> Result<(), Stop> {
        let heap = self.heap;
        match heap.get(state) {
            Node::Tuple(_) | Node::List(_) => {
                let fields = fields(class.0, class.1);
                let place = self.declared.map(|_| HeldAs::SetState);
                let items = heap.items(state).unwrap_or_default();
                for (i, &v) in items.iter().enumerate() {
                    let field = fields.iter().find(|&&(at, _)| at == i);
                    self.visit_child_at(place, v, name, || {
                        field.map_or_else(|| i.to_string(), |&(_, f)| f.to_owned())
                    })?;
                }
                Ok(())
            }
            _ => self.object_state(state, name, Some(class)),
        }
    }

    /// A container whose entries take the enclosing name directly (a module's `_parameters`).
    fn visit_flat(&mut self, id: Id, name: &str) -> Result<(), Stop> {
        let heap = self.heap;
        match heap.get(id) {
            Node::Dict(pairs) => {
                for &(k, v) in pairs {
                    self.visit_child(v, name, || key_text(heap, k))?;
                }
                Ok(())
            }
            _ => self.visit(id, name),
        }
    }
}

/// The `(module, name)` of an object's class, when it is a global.
fn class_name(heap: &Heap, class: Id) -> Option<(&str, &str)> {
    match heap.get(class) {
        Node::Global(g) => Some((g.module.as_str(), g.name.as_str())),
        _ => None,
    }
}

/// Whether a class of `module` is one a TorchScript archive's code defines (`__torch__`,
/// `__torch__.…`).
fn is_torchscript_class(module: &str) -> bool {
    module
        .strip_prefix("__torch__")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The items of a TorchScript class's `__getstate__` tuple that torch's `state_dict()` names:
/// torch's quantized convolutions (`_ConvNd.__getstate__`) return the weight and bias at 10
/// and 11, which their `_save_to_state_dict` saves as `weight` and `bias`.
fn fields(module: &str, class: &str) -> &'static [(usize, &'static str)] {
    const CONV: &[(usize, &str)] = &[(10, "weight"), (11, "bias")];
    let quantized = [
        "__torch__.torch.ao.nn.quantized.modules.conv",
        "__torch__.torch.ao.nn.intrinsic.quantized.modules.",
    ];
    let conv = class.starts_with("Conv");
    if conv && quantized.iter().any(|q| module.starts_with(q)) {
        CONV
    } else {
        &[]
    }
}

/// The attributes that hold a class's constructor arguments, by position, for the classes
/// whose pickles pass arrays to their constructor: scikit-learn's `Tree` (its
/// `__reduce__` is `(Tree, (n_features, n_classes, n_outputs), state)`) and NumPy's random
/// states, which take their bit generator (`RandomState._bit_generator`,
/// `Generator.bit_generator`).
fn arg_names(module: &str, class: &str) -> &'static [&'static str] {
    match (module, class) {
        ("sklearn.tree._tree", "Tree") => &["n_features", "n_classes", "n_outputs"],
        ("numpy.random._pickle", "__randomstate_ctor") => &["_bit_generator"],
        ("numpy.random._pickle", "__generator_ctor") => &["bit_generator"],
        _ => &[],
    }
}

/// The key of the storage a tensor views (its persistent id's third field), when it has one.
fn storage_key(heap: &Heap, tensor: Id) -> Option<String> {
    let Node::Tensor(spec) = heap.get(tensor) else {
        return None;
    };
    let Node::Persistent(pid) = heap.get(spec.storage?) else {
        return None;
    };
    match heap.get(*heap.seq(*pid)?.get(2)?) {
        Node::Str(s) => Some(String::from(&**s)),
        Node::Int(v) => Some(v.to_string()),
        _ => None,
    }
}

/// Whether a BUILD state tuple is `(__dict__, slots)`: two parts, each a dict or `None`.
fn is_dict_and_slots(heap: &Heap, parts: &[Id]) -> bool {
    parts.len() == 2
        && parts
            .iter()
            .all(|&p| matches!(heap.get(p), Node::Dict(_) | Node::None))
}

/// Whether a value can hold no tensor: a scalar, a string or a name.
fn holds_nothing(node: &Node) -> bool {
    matches!(
        node,
        Node::None
            | Node::Bool(_)
            | Node::Int(_)
            | Node::BigInt(_)
            | Node::Float(_)
            | Node::Str(_)
            | Node::Global(_)
    ) || matches!(node, Node::Bytes(b) if !super::nested::may_be_nested(b))
}

/// A tensor's name: the path to it, or [`ROOT_NAME`] for the saved object itself.
fn root_or(name: &str) -> String {
    if name.is_empty() {
        ROOT_NAME.to_owned()
    } else {
        name.to_owned()
    }
}

/// `prefix.key`; the key itself (no copy) at the top level.
fn join(prefix: &str, key: String) -> String {
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

/// A dict key as text: strings as they are, numbers in decimal, anything else as Python
/// would print it, roughly.
fn key_text(heap: &Heap, id: Id) -> String {
    match heap.get(id) {
        Node::Str(s) => String::from(&**s),
        Node::Int(v) => v.to_string(),
        Node::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        Node::None => "None".to_owned(),
        Node::Float(f) => f.to_string(),
        Node::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Node::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(|&i| key_text(heap, i)).collect();
            format!("({})", parts.join(", "))
        }
        _ => "?".to_owned(),
    }
}
