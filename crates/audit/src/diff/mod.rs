//! What changed between two checkpoints, tensor by tensor: the question a pull request that
//! touches a checkpoint asks. Tensors are matched by name; a removed and an added tensor of
//! one dtype, shape and content are reported as a rename.

use crate::manifest::{Manifest, TensorEntry};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use tensorplay_engine::elements::{max_abs_difference, Elements};
use tensorplay_engine::{Checkpoint, Tensor};

/// Choices for a comparison.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiffOptions {
    /// Compare every common tensor's values too (content hashes, and the largest absolute
    /// difference for floats).
    pub values: bool,
}

/// Everything that differs between two checkpoints. Reports are data; the CLI renders them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// The checkpoint compared from.
    pub old: Side,
    /// The checkpoint compared to.
    pub new: Side,
    /// Tensors only the new checkpoint has (renames excluded).
    pub added: Vec<TensorEntry>,
    /// Tensors only the old checkpoint has (renames excluded).
    pub removed: Vec<TensorEntry>,
    /// A removed and an added tensor with the same dtype, shape and content.
    pub renamed: Vec<Rename>,
    /// Metadata changes of tensors present on both sides, by name then field.
    pub changed: Vec<Change>,
    /// Tensors whose storage is shared with different tensors than before: ties made or
    /// broken.
    pub sharing: Vec<SharingChange>,
    /// With `values`: common tensors of one dtype and shape whose contents differ.
    pub values: Vec<ValueChange>,
    /// With `values`: common tensors whose contents could not be compared (bytes not in
    /// memory, sub-byte dtypes), so `same` is not claimed for them.
    pub values_not_compared: Vec<String>,
    /// Whether values were compared.
    pub values_compared: bool,
    /// Tensors present on both sides with nothing reported.
    pub unchanged: usize,
    /// Whether nothing differs.
    pub same: bool,
}

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The path as given, or the label the caller gave it (`tensorplay diff --old-label`).
    pub path: String,
    /// Its container format.
    pub format: &'static str,
    /// Tensor count.
    pub tensors: usize,
    /// Storage count.
    pub storages: usize,
    /// Bytes of all storages: what the file carries.
    pub storage_bytes: u64,
}

/// A tensor that looks renamed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rename {
    /// Its old name.
    pub from: String,
    /// Its new name.
    pub to: String,
}

/// What can change about a tensor present on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// Element type.
    Dtype,
    /// Sizes.
    Shape,
    /// Compared only when the shapes agree: the same shape laid out differently.
    Strides,
    /// The device its storage is on.
    Device,
    /// Whether it is trainable.
    RequiresGrad,
}

impl Field {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            Field::Dtype => "dtype",
            Field::Shape => "shape",
            Field::Strides => "strides",
            Field::Device => "device",
            Field::RequiresGrad => "requires_grad",
        }
    }
}

/// One field of one tensor that changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The tensor.
    pub tensor: String,
    /// What changed.
    pub field: Field,
    /// Before, as printed.
    pub old: String,
    /// After.
    pub new: String,
}

/// A tie made or broken.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharingChange {
    /// The tensor.
    pub tensor: String,
    /// The other tensors viewing its storage before.
    pub old: Vec<String>,
    /// And now.
    pub new: Vec<String>,
}

/// A tensor whose values changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValueChange {
    /// The tensor.
    pub tensor: String,
    /// SHA-256 of its elements in logical order, before.
    pub old_sha256: String,
    /// And after.
    pub new_sha256: String,
    /// For floats: the largest absolute difference (infinite where a NaN meets a number).
    pub max_abs_difference: Option<f64>,
}

impl Diff {
    /// Storage bytes added (negative: removed).
    pub fn bytes_delta(&self) -> i128 {
        i128::from(self.new.storage_bytes) - i128::from(self.old.storage_bytes)
    }
}

/// Compares two checkpoints that were read.
pub fn diff(old: &Checkpoint, new: &Checkpoint, options: DiffOptions) -> Diff {
    let (old_layout, new_layout) = (Manifest::of(old), Manifest::of(new));
    let (old_by_name, new_by_name) = (old_layout.by_name(), new_layout.by_name());
    let removed: Vec<&str> = old_layout
        .tensors
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| !new_by_name.contains_key(n))
        .collect();
    let added: Vec<&str> = new_layout
        .tensors
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| !old_by_name.contains_key(n))
        .collect();
    let renamed = renames(old, new, &removed, &added, &old_by_name, &new_by_name);
    let renamed_from: BTreeSet<&str> = renamed.iter().map(|r| r.from.as_str()).collect();
    let renamed_to: BTreeSet<&str> = renamed.iter().map(|r| r.to.as_str()).collect();

    let common: Vec<&str> = old_layout
        .tensors
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| new_by_name.contains_key(n))
        .collect();
    let mut changed = Vec::new();
    for name in &common {
        changed.extend(field_changes(old_by_name[name], new_by_name[name]));
    }
    let sharing = sharing_changes(old, new, &common);
    let (values, values_not_compared) = if options.values {
        value_changes(old, new, &common, &old_by_name, &new_by_name)
    } else {
        (Vec::new(), Vec::new())
    };

    let touched = changed
        .iter()
        .map(|c| c.tensor.as_str())
        .chain(sharing.iter().map(|s| s.tensor.as_str()))
        .chain(values.iter().map(|v| v.tensor.as_str()))
        .chain(values_not_compared.iter().map(String::as_str))
        .collect::<BTreeSet<&str>>()
        .len();
    let entries = |names: Vec<&str>, skip: &BTreeSet<&str>, by: &BTreeMap<&str, &TensorEntry>| {
        names
            .into_iter()
            .filter(|n| !skip.contains(n))
            .filter_map(|n| by.get(n).map(|e| (*e).clone()))
            .collect::<Vec<TensorEntry>>()
    };
    let added = entries(added, &renamed_to, &new_by_name);
    let removed = entries(removed, &renamed_from, &old_by_name);
    let same = added.is_empty()
        && removed.is_empty()
        && renamed.is_empty()
        && touched == 0
        && old.storages.len() == new.storages.len()
        && side(old).storage_bytes == side(new).storage_bytes;
    Diff {
        old: side(old),
        new: side(new),
        added,
        removed,
        renamed,
        changed,
        sharing,
        values,
        values_not_compared,
        values_compared: options.values,
        unchanged: common.len() - touched,
        same,
    }
}

fn side(ckpt: &Checkpoint) -> Side {
    Side {
        path: ckpt.path.display().to_string(),
        format: ckpt.format.name(),
        tensors: ckpt.tensors.len(),
        storages: ckpt.storages.len(),
        storage_bytes: ckpt
            .storages
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(s.nbytes())),
    }
}

fn field_changes(old: &TensorEntry, new: &TensorEntry) -> Vec<Change> {
    let mut out = Vec::new();
    let mut push = |field, a: String, b: String| {
        if a != b {
            out.push(Change {
                tensor: old.name.clone(),
                field,
                old: a,
                new: b,
            });
        }
    };
    push(Field::Dtype, old.dtype.clone(), new.dtype.clone());
    push(Field::Shape, dims(&old.shape), dims(&new.shape));
    if old.shape == new.shape {
        let strides = |e: &TensorEntry| e.strides.as_deref().map(dims).unwrap_or_default();
        push(Field::Strides, strides(old), strides(new));
    }
    push(Field::Device, old.device.clone(), new.device.clone());
    push(
        Field::RequiresGrad,
        old.requires_grad.to_string(),
        new.requires_grad.to_string(),
    );
    out
}

/// `[2, 3]`, as PyTorch prints sizes.
pub fn dims(d: &[u64]) -> String {
    let inner: Vec<String> = d.iter().map(u64::to_string).collect();
    format!("[{}]", inner.join(", "))
}

/// For each name, the other names viewing the same storage.
fn peers(ckpt: &Checkpoint) -> BTreeMap<&str, Vec<String>> {
    let by_storage = ckpt.tensors_by_storage();
    ckpt.tensors
        .iter()
        .map(|t| {
            let id = t.storage_index();
            let others = by_storage
                .get(id)
                .into_iter()
                .flatten()
                .filter(|n| **n != t.name())
                .map(|n| (*n).to_owned())
                .collect();
            (t.name(), others)
        })
        .collect()
}

fn sharing_changes(old: &Checkpoint, new: &Checkpoint, common: &[&str]) -> Vec<SharingChange> {
    let (old_peers, new_peers) = (peers(old), peers(new));
    common
        .iter()
        .filter_map(|name| {
            let (a, b) = (old_peers.get(name)?, new_peers.get(name)?);
            (a != b).then(|| SharingChange {
                tensor: (*name).to_owned(),
                old: a.clone(),
                new: b.clone(),
            })
        })
        .collect()
}

fn renames(
    old: &Checkpoint,
    new: &Checkpoint,
    removed: &[&str],
    added: &[&str],
    old_by_name: &BTreeMap<&str, &TensorEntry>,
    new_by_name: &BTreeMap<&str, &TensorEntry>,
) -> Vec<Rename> {
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for from in removed {
        let (Some(a), Some(ta)) = (old_by_name.get(from), old.tensor(from)) else {
            continue;
        };
        let mut hash_a = None;
        for to in added {
            let Some(b) = new_by_name.get(to) else {
                continue;
            };
            if taken.contains(to) || a.dtype != b.dtype || a.shape != b.shape {
                continue;
            }
            let Some(tb) = new.tensor(to) else { continue };
            let ha = hash_a.get_or_insert_with(|| content_hash(ta));
            if ha.is_some() && *ha == content_hash(tb) {
                taken.insert(*to);
                out.push(Rename {
                    from: (*from).to_owned(),
                    to: (*to).to_owned(),
                });
                break;
            }
        }
    }
    out
}

type ValueOutcome = (Vec<ValueChange>, Vec<String>);

fn value_changes(
    old: &Checkpoint,
    new: &Checkpoint,
    common: &[&str],
    old_by_name: &BTreeMap<&str, &TensorEntry>,
    new_by_name: &BTreeMap<&str, &TensorEntry>,
) -> ValueOutcome {
    let pairs: Vec<(&str, &Tensor, &Tensor)> = common
        .iter()
        .filter(|n| {
            let (a, b) = (old_by_name[*n], new_by_name[*n]);
            a.dtype == b.dtype && a.shape == b.shape
        })
        .filter_map(|n| Some((*n, old.tensor(n)?, new.tensor(n)?)))
        .collect();
    use rayon::prelude::*;
    let outcomes: Vec<_> = pairs
        .par_iter()
        .map(|(name, a, b)| match (content_hash(a), content_hash(b)) {
            (Some(ha), Some(hb)) if ha == hb => Ok(None),
            (Some(ha), Some(hb)) => Ok(Some(ValueChange {
                tensor: (*name).to_owned(),
                old_sha256: ha,
                new_sha256: hb,
                max_abs_difference: max_abs_difference(a, b),
            })),
            _ => Err((*name).to_owned()),
        })
        .collect();
    let mut changes = Vec::new();
    let mut not_compared = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(Some(c)) => changes.push(c),
            Ok(None) => {}
            Err(name) => not_compared.push(name),
        }
    }
    (changes, not_compared)
}

/// SHA-256 of a tensor's elements in logical order; `None` when they cannot all be read.
fn content_hash(tensor: &Tensor) -> Option<String> {
    let mut hasher = Sha256::new();
    let mut buffer = Vec::with_capacity(1 << 16);
    for element in Elements::of(tensor)? {
        buffer.extend_from_slice(element?);
        if buffer.len() >= 1 << 16 {
            hasher.update(&buffer);
            buffer.clear();
        }
    }
    hasher.update(&buffer);
    Some(format!("{:x}", hasher.finalize()))
}
