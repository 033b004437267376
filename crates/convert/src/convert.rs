//! A checkpoint written as safetensors, without running anything: the safe way out of a
//! pickle. Every tensor becomes its own contiguous record in logical order (views are cloned
//! out of their storages, recorded devices are dropped: safetensors holds host bytes); names
//! that are exactly the same view (tied weights) are written once, and the others recorded in
//! `__metadata__` as `{removed: kept}`, the convention `safetensors.torch.save_model` uses.
//! With a target dtype, floating-point tensors are cast as `Tensor.to(dtype)` casts them
//! ([`crate::cast`]). The output is re-read and every tensor's elements compared with the
//! input's (cast, where it was) before it is renamed into place. A TorchScript archive is
//! written as its module's `state_dict()`: its parameters and buffers, not the constants of
//! its code or the attributes it keeps besides (which `load_state_dict` would not expect).

use crate::cast::{cast_into, casts};
use safetensors::tensor::{Dtype, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tensorplay_engine::elements::Elements;
use tensorplay_engine::load;
use tensorplay_engine::numeric::scan_checkpoint;
use tensorplay_engine::{Checkpoint, DType, Format, HeldAs, Tensor};

/// Choices for a conversion.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Globals (`module.name`) the input's pickles may reference; any other is a refusal.
    pub allow_globals: Vec<String>,
    /// Write tensors holding NaN or ±Inf instead of refusing them.
    pub allow_nonfinite: bool,
    /// Split the output into shards of at most this many tensor bytes (a tensor larger than
    /// that gets a shard of its own), with a `.index.json` as transformers writes it.
    pub max_shard_size: Option<u64>,
    /// Cast every floating-point tensor to this dtype (one of [`crate::cast::FLOATS`]);
    /// other tensors are written as they are.
    pub dtype: Option<DType>,
}

/// What a conversion wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// Names written, in input order.
    pub written: Vec<String>,
    /// Tied names left out, each with the name written for it.
    pub aliases: BTreeMap<String, String>,
    /// Names that were views of a larger storage or not contiguous, now their own record.
    pub cloned: Vec<String>,
    /// A TorchScript archive's tensors its module's `state_dict()` does not list, left out,
    /// each with what the module holds it as.
    pub outside_state_dict: Vec<(String, HeldAs)>,
    /// Bytes of tensor data written.
    pub bytes: u64,
    /// The files written: the output, or the shards and then the index.
    pub files: Vec<PathBuf>,
}

/// Why a checkpoint was not converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// Its pickles reference globals that were not allowed.
    #[error("{path}: references {} outside the allowlist: {}; pass --allow-global NAME for each one you trust (nothing is executed either way)", plural(.globals.len()), .globals.join(", "))]
    UnsafeGlobals {
        /// The input.
        path: PathBuf,
        /// `module.name` of each.
        globals: Vec<String>,
    },
    /// A tensor holds NaN or ±Inf.
    #[error("{path}: tensor '{tensor}' holds {count} non-finite values; pass --allow-nonfinite to write it anyway")]
    NonFinite {
        /// The input.
        path: PathBuf,
        /// Its name.
        tensor: String,
        /// How many.
        count: u64,
    },
    /// Casting to a narrower dtype turns finite values into ±Inf.
    #[error("{path}: tensor '{tensor}': {count} of its finite values overflow {dtype}; pass --allow-nonfinite to write them as ±Inf")]
    Overflow {
        /// The input.
        path: PathBuf,
        /// Its name.
        tensor: String,
        /// The target dtype.
        dtype: DType,
        /// How many.
        count: u64,
    },
    /// The target dtype is not a floating-point dtype safetensors stores.
    #[error("--dtype {0}: expected float16, bfloat16, float32 or float64")]
    TargetDtype(DType),
    /// A tensor is not plain strided values: safetensors would hold its parts, or bytes that
    /// differ from what it reads.
    #[error("{path}: tensor '{tensor}' {what}, which safetensors cannot store")]
    Kind {
        /// The input.
        path: PathBuf,
        /// Its name.
        tensor: String,
        /// What it is.
        what: String,
    },
    /// safetensors has no code for the dtype.
    #[error("{path}: tensor '{tensor}' is {dtype}, which safetensors cannot store")]
    Dtype {
        /// The input.
        path: PathBuf,
        /// Its name.
        tensor: String,
        /// PyTorch's name of it.
        dtype: DType,
    },
    /// The bytes are not there (meta tensors) or do not cover the view.
    #[error("{path}: tensor '{tensor}' has no readable bytes ({why})")]
    NoBytes {
        /// The input.
        path: PathBuf,
        /// Its name.
        tensor: String,
        /// What is missing.
        why: &'static str,
    },
    /// The output would replace the input.
    #[error("{0}: the output is the input; write the conversion to another file")]
    SameFile(PathBuf),
    /// Writing failed.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The output.
        path: PathBuf,
        /// The writer's reason.
        source: safetensors::SafeTensorError,
    },
    /// Re-reading the output failed or it differs from the input.
    #[error("{path}: the written file does not hold the input's tensors: {why}")]
    Verify {
        /// The output.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// A file operation around the write failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The reason.
        source: std::io::Error,
    },
}

/// Whether a tensor of the input is written: every one but a TorchScript archive's tensors
/// its module's `state_dict()` does not list.
fn is_written(tensor: &Tensor) -> bool {
    tensor.held_as().is_none_or(HeldAs::in_state_dict)
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 global".to_owned()
    } else {
        format!("{n} globals")
    }
}

/// The safetensors code of a dtype, when safetensors has one. torch's `float4_e2m1fn_x2`
/// (two values a byte) is `F4`, whose shape counts values: [`safetensors_shape`].
fn safetensors_dtype(dtype: DType) -> Option<Dtype> {
    if dtype == DType::Float4E2m1fnX2 {
        return Some(Dtype::F4);
    }
    const CODES: &[&str] = &[
        "BOOL",
        "U8",
        "I8",
        "I16",
        "U16",
        "I32",
        "U32",
        "I64",
        "U64",
        "F16",
        "BF16",
        "F32",
        "F64",
        "C64",
        "F8_E4M3",
        "F8_E5M2",
        "F8_E4M3FNUZ",
        "F8_E5M2FNUZ",
        "F8_E8M0",
    ];
    let code = CODES
        .iter()
        .find(|c| DType::from_safetensors_code(c) == Some(dtype))?;
    serde_json::from_value(serde_json::Value::String((*code).to_owned())).ok()
}

/// A tensor's shape as a safetensors header gives it: `F4` counts values, two a byte, where
/// torch's `float4_e2m1fn_x2` counts bytes (the last dimension doubles).
fn safetensors_shape(dtype: DType, sizes: &[u64]) -> Option<Vec<usize>> {
    let mut shape = sizes
        .iter()
        .map(|&s| usize::try_from(s).ok())
        .collect::<Option<Vec<_>>>()?;
    if dtype == DType::Float4E2m1fnX2 {
        let last = shape.last_mut()?;
        *last = last.checked_mul(2)?;
    }
    Some(shape)
}

/// One tensor as the writer sees it: its elements gathered in logical order on demand, so
/// memory holds at most one non-contiguous tensor at a time.
struct Record<'a> {
    tensor: &'a Tensor,
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
    /// The dtype its elements are cast to, when they are.
    cast: Option<DType>,
}

impl View for Record<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let imp = self.tensor.tensor_impl();
        if let Some(to) = self.cast {
            let mut out = Vec::with_capacity(self.len);
            for element in Elements::of(self.tensor).into_iter().flatten().flatten() {
                cast_into(imp.dtype(), to, element, &mut out);
            }
            return Cow::Owned(out);
        }
        if imp.layout().is_contiguous() {
            if let Some(bytes) = imp.view_bytes() {
                return Cow::Borrowed(bytes);
            }
        }
        // Checked readable in `records`; a short gather would fail verification anyway.
        let mut out = Vec::with_capacity(self.len);
        for element in Elements::of(self.tensor).into_iter().flatten().flatten() {
            out.extend_from_slice(element);
        }
        Cow::Owned(out)
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// Writes `ckpt` to `out` as safetensors, verified, or refuses with the reason.
pub fn to_safetensors(
    ckpt: &Checkpoint,
    out: &Path,
    options: &ConvertOptions,
) -> Result<Converted, ConvertError> {
    let path = || ckpt.path.clone();
    if same_file(&ckpt.path, out) {
        return Err(ConvertError::SameFile(out.to_owned()));
    }
    let refused: Vec<String> = ckpt
        .unsafe_globals
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .filter(|g| !options.allow_globals.contains(g))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !refused.is_empty() {
        return Err(ConvertError::UnsafeGlobals {
            path: path(),
            globals: refused,
        });
    }
    if !options.allow_nonfinite {
        let scans = scan_checkpoint(ckpt, None);
        for (i, t) in ckpt
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| is_written(t))
        {
            if let Some(found) = scans.get(&i).filter(|s| !s.is_clean()) {
                return Err(ConvertError::NonFinite {
                    path: path(),
                    tensor: t.name().to_owned(),
                    count: found.total(),
                });
            }
        }
    }
    if let Some(c) = ckpt.composites.first() {
        return Err(ConvertError::Kind {
            path: path(),
            tensor: c.name.clone(),
            what: format!("is {}", c.layout),
        });
    }
    // The storage of a tensor with a lazy bit holds the values before conjugation/negation.
    let lazy = ckpt.tensors.iter().filter(|t| is_written(t)).find_map(|t| {
        let imp = t.tensor_impl();
        let bit = if imp.is_conj() {
            "has its conjugate bit set"
        } else if imp.is_neg() {
            "has its negative bit set"
        } else {
            return None;
        };
        Some((t.name().to_owned(), bit))
    });
    if let Some((tensor, bit)) = lazy {
        return Err(ConvertError::Kind {
            path: path(),
            tensor,
            what: bit.to_owned(),
        });
    }
    if let Some(target) = options.dtype.filter(|d| !casts(*d)) {
        return Err(ConvertError::TargetDtype(target));
    }
    let (records, aliases, cloned) = records(ckpt, options)?;
    // A GGUF file's metadata is summarised (an array's length, a long string's size), not its
    // values: nothing of it is carried over as if it were.
    let mut metadata: HashMap<String, String> = ckpt
        .metadata
        .iter()
        .filter(|_| ckpt.format != Format::Gguf)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    metadata
        .entry("format".to_owned())
        .or_insert_with(|| "pt".to_owned());
    for (removed, kept) in &aliases {
        metadata.insert(removed.clone(), kept.clone());
    }
    let written: Vec<String> = records.iter().map(|(n, _)| n.clone()).collect();
    let bytes = records
        .iter()
        .fold(0u64, |acc, (_, r)| acc.saturating_add(r.len as u64));

    let shards = shard(records, options.max_shard_size);
    let files = if shards.len() == 1 {
        let records = shards.into_iter().flatten();
        write_one(
            ckpt,
            records,
            metadata,
            out,
            &written,
            &aliases,
            options.dtype,
        )?
    } else {
        write_sharded(
            ckpt,
            shards,
            &metadata,
            out,
            &written,
            &aliases,
            options.dtype,
        )?
    };
    let outside_state_dict = ckpt
        .tensors
        .iter()
        .filter_map(|t| Some((t.name().to_owned(), t.held_as()?)))
        .filter(|(_, held)| !held.in_state_dict())
        .collect();
    Ok(Converted {
        written,
        aliases,
        cloned,
        outside_state_dict,
        bytes,
        files,
    })
}

/// Records in order, cut into shards of at most `max` bytes each (one shard without a max).
fn shard(records: Vec<(String, Record<'_>)>, max: Option<u64>) -> Vec<Vec<(String, Record<'_>)>> {
    let Some(max) = max else {
        return vec![records];
    };
    let mut shards: Vec<Vec<(String, Record<'_>)>> = vec![Vec::new()];
    let mut size = 0u64;
    for (name, record) in records {
        let len = record.len as u64;
        if size.saturating_add(len) > max && shards.last().is_some_and(|s| !s.is_empty()) {
            shards.push(Vec::new());
            size = 0;
        }
        size = size.saturating_add(len);
        if let Some(last) = shards.last_mut() {
            last.push((name, record));
        }
    }
    shards
}

/// One safetensors file: written beside `out`, verified, renamed into place.
fn write_one<'a>(
    ckpt: &Checkpoint,
    records: impl IntoIterator<Item = (String, Record<'a>)>,
    metadata: HashMap<String, String>,
    out: &Path,
    written: &[String],
    aliases: &BTreeMap<String, String>,
    target: Option<DType>,
) -> Result<Vec<PathBuf>, ConvertError> {
    let temp = temporary_beside(out);
    let result = serialize(records, metadata, &temp, out)
        .and_then(|()| verify(ckpt, &temp, out, written, aliases, target));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    rename(&temp, out)?;
    Ok(vec![out.to_owned()])
}

/// Shards `NAME-0000K-of-0000N.safetensors` and `NAME.safetensors.index.json`, as
/// transformers names them: written into a folder beside `out`, the set verified through its
/// index, then each file renamed into place, the index last.
fn write_sharded(
    ckpt: &Checkpoint,
    shards: Vec<Vec<(String, Record<'_>)>>,
    metadata: &HashMap<String, String>,
    out: &Path,
    written: &[String],
    aliases: &BTreeMap<String, String>,
    target: Option<DType>,
) -> Result<Vec<PathBuf>, ConvertError> {
    let file_name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = file_name
        .strip_suffix(".safetensors")
        .unwrap_or(&file_name)
        .to_owned();
    let index_name = format!("{stem}.safetensors.index.json");
    let staging = temporary_beside(out);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ConvertError::Io { path, source }
    };
    std::fs::create_dir(&staging).map_err(io(&staging))?;
    let n = shards.len();
    let mut names = Vec::with_capacity(n + 1);
    let mut weight_map = BTreeMap::new();
    let mut total = 0u64;
    let result = (|| {
        for (k, records) in shards.into_iter().enumerate() {
            let shard_name = format!("{stem}-{:05}-of-{n:05}.safetensors", k + 1);
            for (name, record) in &records {
                weight_map.insert(name.clone(), shard_name.clone());
                total = total.saturating_add(record.len as u64);
            }
            serialize(records, metadata.clone(), &staging.join(&shard_name), out)?;
            names.push(shard_name);
        }
        let index = serde_json::json!({
            "metadata": {"total_size": total},
            "weight_map": weight_map,
        });
        let text = serde_json::to_string_pretty(&index).unwrap_or_default() + "\n";
        let index_path = staging.join(&index_name);
        std::fs::write(&index_path, text).map_err(io(&index_path))?;
        names.push(index_name.clone());
        verify(ckpt, &index_path, out, written, aliases, target)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    let dir = out.parent().unwrap_or_else(|| Path::new(""));
    let mut files = Vec::with_capacity(names.len());
    for name in &names {
        let target = dir.join(name);
        rename(&staging.join(name), &target)?;
        files.push(target);
    }
    let _ = std::fs::remove_dir(&staging);
    Ok(files)
}

fn serialize<'a>(
    records: impl IntoIterator<Item = (String, Record<'a>)>,
    metadata: HashMap<String, String>,
    path: &Path,
    out: &Path,
) -> Result<(), ConvertError> {
    let io = |source| ConvertError::Io {
        path: path.to_owned(),
        source,
    };
    // The safetensors writer renames a private (0600) file into place; the output gets the
    // mode any new file gets here (0666 less the umask), read off a file made first.
    let mode = std::fs::File::create(path)
        .and_then(|file| file.metadata())
        .map_err(io)?
        .permissions();
    safetensors::tensor::serialize_to_file(records, Some(metadata), path).map_err(|source| {
        ConvertError::Write {
            path: out.to_owned(),
            source,
        }
    })?;
    std::fs::set_permissions(path, mode).map_err(io)
}

fn rename(from: &Path, to: &Path) -> Result<(), ConvertError> {
    std::fs::rename(from, to).map_err(|source| ConvertError::Io {
        path: to.to_owned(),
        source,
    })
}

type Records<'a> = (
    Vec<(String, Record<'a>)>,
    BTreeMap<String, String>,
    Vec<String>,
);

/// What makes two names the very same view: storage, offset, sizes, strides, dtype.
type ViewKey<'a> = (usize, u64, &'a [u64], &'a [u64], DType);

/// The records to write, the tied names left out and the views cloned.
fn records<'a>(
    ckpt: &'a Checkpoint,
    options: &ConvertOptions,
) -> Result<Records<'a>, ConvertError> {
    // Names that are the very same view: one record.
    let mut ties: BTreeMap<ViewKey<'_>, Vec<&str>> = BTreeMap::new();
    for t in ckpt.tensors.iter().filter(|t| is_written(t)) {
        let imp = t.tensor_impl();
        let l = imp.layout();
        ties.entry((
            imp.storage().id().index(),
            l.storage_offset(),
            l.sizes(),
            l.strides(),
            imp.dtype(),
        ))
        .or_default()
        .push(t.name());
    }
    let mut aliases = BTreeMap::new();
    for names in ties.values() {
        // save_model's choice: the first name in sorted order is kept.
        let mut sorted = names.clone();
        sorted.sort_unstable();
        if let Some((kept, rest)) = sorted.split_first() {
            for removed in rest {
                aliases.insert((*removed).to_owned(), (*kept).to_owned());
            }
        }
    }
    let mut records = Vec::new();
    let mut cloned = Vec::new();
    for t in ckpt
        .tensors
        .iter()
        .filter(|t| is_written(t) && !aliases.contains_key(t.name()))
    {
        let imp = t.tensor_impl();
        let name = || t.name().to_owned();
        let cast = options
            .dtype
            .filter(|to| casts(imp.dtype()) && *to != imp.dtype());
        let written_dtype = cast.unwrap_or(imp.dtype());
        let dtype = safetensors_dtype(written_dtype).ok_or_else(|| ConvertError::Dtype {
            path: ckpt.path.clone(),
            tensor: name(),
            dtype: imp.dtype(),
        })?;
        let no_bytes = |why| ConvertError::NoBytes {
            path: ckpt.path.clone(),
            tensor: name(),
            why,
        };
        if Elements::of(t).is_none() {
            return Err(no_bytes("its storage holds no bytes in memory"));
        }
        let bytes = imp
            .layout()
            .numel()
            .checked_mul(written_dtype.bits() / 8)
            .and_then(|n| usize::try_from(n).ok());
        let len = bytes.ok_or_else(|| no_bytes("its size does not fit in memory"))?;
        if imp.view_bytes().is_none() {
            return Err(no_bytes("the view reaches past its storage"));
        }
        if let Some(to) = cast.filter(|_| !options.allow_nonfinite) {
            let mut scratch = Vec::with_capacity(8);
            let mut overflows = 0u64;
            for element in Elements::of(t).into_iter().flatten().flatten() {
                scratch.clear();
                if cast_into(imp.dtype(), to, element, &mut scratch) == Some(false) {
                    overflows += 1;
                }
            }
            if overflows > 0 {
                return Err(ConvertError::Overflow {
                    path: ckpt.path.clone(),
                    tensor: name(),
                    dtype: to,
                    count: overflows,
                });
            }
        }
        if written_dtype == DType::Float4E2m1fnX2 && imp.layout().sizes().is_empty() {
            return Err(ConvertError::Kind {
                path: ckpt.path.clone(),
                tensor: name(),
                what: "is a float4_e2m1fn_x2 scalar (F4 holds two values a byte)".to_owned(),
            });
        }
        let shape = safetensors_shape(written_dtype, imp.layout().sizes())
            .ok_or_else(|| no_bytes("its shape does not fit in memory"))?;
        let whole = imp.storage().nbytes() == len as u64;
        if !imp.layout().is_contiguous() || !whole {
            cloned.push(name());
        }
        records.push((
            name(),
            Record {
                tensor: t,
                dtype,
                shape,
                len,
                cast,
            },
        ));
    }
    Ok((records, aliases, cloned))
}

/// Reads the written file back and compares every tensor, element by element in logical
/// order, with the input tensor it was written from (cast to `target` where it was).
fn verify(
    input: &Checkpoint,
    temp: &Path,
    out: &Path,
    written: &[String],
    aliases: &BTreeMap<String, String>,
    target: Option<DType>,
) -> Result<(), ConvertError> {
    let fail = |why: String| ConvertError::Verify {
        path: out.to_owned(),
        why,
    };
    let back = load::open(temp).map_err(|e| fail(e.to_string()))?;
    if back.tensors.len() != written.len() {
        return Err(fail(format!(
            "{} tensors read back, {} written",
            back.tensors.len(),
            written.len()
        )));
    }
    let by_name: HashMap<&str, &Tensor> = back.tensors.iter().map(|t| (t.name(), t)).collect();
    for t in input.tensors.iter().filter(|t| is_written(t)) {
        let name = aliases.get(t.name()).map_or(t.name(), String::as_str);
        let copy = by_name
            .get(name)
            .copied()
            .ok_or_else(|| fail(format!("tensor '{name}' is missing")))?;
        let (a, b) = (t.tensor_impl(), copy.tensor_impl());
        let cast = target.filter(|to| casts(a.dtype()) && *to != a.dtype());
        if cast.unwrap_or(a.dtype()) != b.dtype() || a.layout().sizes() != b.layout().sizes() {
            return Err(fail(format!("tensor '{name}' changed dtype or shape")));
        }
        let mut expected = Vec::with_capacity(8);
        let same = match (Elements::of(t), Elements::of(copy)) {
            (Some(x), Some(y)) => x.zip(y).all(|(x, y)| match (x, y, cast) {
                (Some(x), Some(y), Some(to)) => {
                    expected.clear();
                    cast_into(a.dtype(), to, x, &mut expected).is_some() && expected == y
                }
                (Some(x), Some(y), None) => x == y,
                _ => false,
            }),
            _ => false,
        };
        if !same {
            return Err(fail(format!("tensor '{}' holds other values", t.name())));
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `dir/.name.tensorplay-PID.tmp`: beside the target so the rename stays on one filesystem.
fn temporary_beside(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "converted.safetensors".to_owned());
    out.with_file_name(format!(".{name}.tensorplay-{}.tmp", std::process::id()))
}
