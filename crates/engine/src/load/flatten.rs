//! Names for the tensors of a loaded object, the way a user iterates it: dict keys joined
//! with `.`, list and tuple items by index, object attributes by name, and `nn.Module`
//! state (`_parameters`, `_buffers`, `_modules`) as `state_dict()` names it.

use crate::pickle::{Budget, Heap, Id, Node};

/// What a root tensor (`torch.save(tensor)`) is called.
pub const ROOT_NAME: &str = "<root>";

/// Every tensor reachable from `root`, with its name, depth first in insertion order. A tensor
/// reached under two names is listed twice; cycles are followed once.
pub fn named_tensors(heap: &Heap, root: Id, budget: &Budget) -> Result<Vec<(String, Id)>, String> {
    let mut walk = Walk {
        heap,
        budget,
        visits: 0,
        path: Vec::new(),
        out: Vec::new(),
    };
    walk.visit(root, String::new())?;
    Ok(walk.out)
}

struct Walk<'a> {
    heap: &'a Heap,
    budget: &'a Budget,
    visits: usize,
    path: Vec<Id>,
    out: Vec<(String, Id)>,
}

impl Walk<'_> {
    fn visit(&mut self, id: Id, name: String) -> Result<(), String> {
        self.visits += 1;
        if self.visits > self.budget.max_visits {
            return Err(format!(
                "object graph has more than {} values to walk",
                self.budget.max_visits
            ));
        }
        if self.path.len() >= self.budget.max_depth {
            return Err(format!(
                "objects nested deeper than {}",
                self.budget.max_depth
            ));
        }
        if self.path.contains(&id) {
            return Ok(());
        }
        self.path.push(id);
        let result = self.children(id, &name);
        self.path.pop();
        result
    }

    fn children(&mut self, id: Id, name: &str) -> Result<(), String> {
        let heap = self.heap;
        match heap.get(id) {
            Node::Tensor(_) => {
                let name = if name.is_empty() {
                    ROOT_NAME.to_owned()
                } else {
                    name.to_owned()
                };
                self.out.push((name, id));
            }
            Node::Dict(pairs) => {
                for &(k, v) in pairs {
                    self.visit(v, join(name, &key_text(heap, k)))?;
                }
            }
            Node::List(items) | Node::Tuple(items) | Node::Set(items) => {
                for (i, &v) in items.iter().enumerate() {
                    self.visit(v, join(name, &i.to_string()))?;
                }
            }
            Node::Object { state, items, .. } => {
                if let Some(state) = *state {
                    self.object_state(state, name)?;
                }
                for (i, &(k, v)) in items.iter().enumerate() {
                    let key = k.map_or_else(|| i.to_string(), |k| key_text(heap, k));
                    self.visit(v, join(name, &key))?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// BUILD state: a dict of attributes, or `(dict, slots)`.
    fn object_state(&mut self, state: Id, name: &str) -> Result<(), String> {
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
                    return Ok(());
                }
                for &(k, v) in attrs {
                    self.visit(v, join(name, &key_text(heap, k)))?;
                }
                Ok(())
            }
            Node::Tuple(parts) => {
                for &part in parts {
                    self.object_state(part, name)?;
                }
                Ok(())
            }
            _ => self.visit(state, name.to_owned()),
        }
    }

    /// A container whose entries take the enclosing name directly (a module's `_parameters`).
    fn visit_flat(&mut self, id: Id, name: &str) -> Result<(), String> {
        match self.heap.get(id) {
            Node::Dict(pairs) => {
                for &(k, v) in pairs {
                    self.visit(v, join(name, &key_text(self.heap, k)))?;
                }
                Ok(())
            }
            _ => self.visit(id, name.to_owned()),
        }
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// A dict key as text: strings as they are, numbers in decimal, anything else as Python
/// would print it, roughly.
fn key_text(heap: &Heap, id: Id) -> String {
    match heap.get(id) {
        Node::Str(s) => s.clone(),
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
