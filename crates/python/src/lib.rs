//! `tensorplay._tensorplay`: the command and its audit inside Python. The pure-Python package
//! (python/tensorplay/) is the API; this module only crosses the boundary: typed options in,
//! reports, records and rendered text out, failures as the package's exceptions, never a
//! panic.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use tensorplay::embed::{self, AuditOptions, Failure, OptionError, Rendering, Scope};
use tensorplay_engine::load::live::{self, LiveStorage, LiveTensor};
use tensorplay_engine::{DType, DTypeKind, HostBuffer, Owner};

pyo3::import_exception!(tensorplay._errors, UsageError);
pyo3::import_exception!(tensorplay._errors, ReadError);
pyo3::import_exception!(tensorplay._errors, InternalError);

fn raise(failure: Failure) -> PyErr {
    match failure {
        Failure::Usage(message) => UsageError::new_err(message),
        Failure::Error(lines) => ReadError::new_err(lines.join("\n")),
    }
}

/// `work`'s result, a panic in it turned into `InternalError`: no panic crosses into Python.
fn guarded<T>(work: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let text = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(InternalError::new_err(format!(
            "internal error: {text} (please report this)"
        )))
    })
}

/// Runs the `tensorplay` command with `argv` (the program name first) and returns its exit
/// code: the wheel's `tensorplay` script. Output goes to this process's stdout and stderr as
/// the binary's does.
#[pyfunction]
fn run(py: Python<'_>, argv: Vec<PathBuf>) -> PyResult<u8> {
    // Paths, not strings: arguments that are not UTF-8 reach the command as they were.
    guarded(|| Ok(py.detach(|| tensorplay::run(argv))))
}

/// An audit's report, rendered on demand by the command's renderers.
#[pyclass(frozen, module = "tensorplay._tensorplay")]
struct Report(embed::Report);

fn rendering(kind: &str, color: bool, verbose: bool) -> PyResult<Rendering> {
    Ok(match kind {
        "human" => Rendering::Human { color, verbose },
        "json" => Rendering::Json,
        "junit" => Rendering::Junit,
        "sarif" => Rendering::Sarif,
        "html" => Rendering::Html,
        "gitlab" => Rendering::GitlabCodequality,
        other => {
            return Err(PyTypeError::new_err(format!(
                "report format {other:?}: expected human, json, junit, sarif, html or gitlab"
            )))
        }
    })
}

#[pymethods]
impl Report {
    /// The report as `kind` (human, json, junit, sarif, html, gitlab).
    #[pyo3(signature = (kind, color = false, verbose = false))]
    fn render(&self, py: Python<'_>, kind: &str, color: bool, verbose: bool) -> PyResult<String> {
        let rendering = rendering(kind, color, verbose)?;
        guarded(|| {
            py.detach(|| embed::render(&self.0, rendering))
                .map_err(raise)
        })
    }

    /// Writes the report as `kind` to `path`, whole or not at all.
    fn write(&self, py: Python<'_>, kind: &str, path: PathBuf) -> PyResult<()> {
        let rendering = rendering(kind, false, false)?;
        guarded(|| {
            py.detach(|| embed::write(&path, &embed::render(&self.0, rendering)?))
                .map_err(raise)
        })
    }

    /// Writes the JUnit report to `path`, the cases of file `i` linking `files[i]` (its path
    /// where that is `None`): the pytest plugin links each live audit's test file.
    fn write_junit(
        &self,
        py: Python<'_>,
        path: PathBuf,
        files: Vec<Option<String>>,
    ) -> PyResult<()> {
        guarded(|| {
            py.detach(|| embed::write(&path, &embed::render_junit(&self.0, &files)?))
                .map_err(raise)
        })
    }

    /// The report as the JSON report holds it, as Python objects (dicts, lists, str, int,
    /// float, bool, None) made from the report itself, not from its text.
    #[getter]
    fn data(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = guarded(|| {
            serde_json::to_value(&self.0).map_err(|e| InternalError::new_err(e.to_string()))
        })?;
        python_value(py, &value).map(Bound::unbind)
    }

    /// Whether nothing fails the run at its fail-on level.
    #[getter]
    fn passed(&self) -> bool {
        self.0.summary.passed
    }

    /// What the HTML report draws of each file, which the JSON report leaves out: TP301's
    /// score and threshold, storage sizes in log2 bins `(log2 or None, count)`, and the
    /// simulated allocator's segments `(size, pool, [(offset, size, storage or None)])`;
    /// `None` for a file that could not be read.
    #[getter]
    fn layouts(&self) -> Vec<Option<Layout>> {
        self.0
            .files
            .iter()
            .map(|file| {
                file.layout.as_ref().map(|l| Layout {
                    fragmentation_score: l.fragmentation_score,
                    fragmentation_threshold: l.fragmentation_threshold,
                    size_bins: l.size_bins.iter().map(|b| (b.log2, b.count)).collect(),
                    segments: l
                        .segments
                        .iter()
                        .map(|s| {
                            let blocks = s.blocks.iter().map(|b| (b.offset, b.size, b.storage));
                            (s.size, s.pool, blocks.collect())
                        })
                        .collect(),
                })
            })
            .collect()
    }
}

/// `value` as the Python object `json.loads` makes of its text.
fn python_value<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.into_pyobject(py)?.into_any(),
            (_, Some(i), _) => i.into_pyobject(py)?.into_any(),
            (_, _, x) => x.unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(python_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(entries) => {
            let dict = PyDict::new(py);
            for (key, item) in entries {
                dict.set_item(key, python_value(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// One file's layout facts, as [`Report::layouts`] gives them.
#[derive(IntoPyObject)]
struct Layout {
    fragmentation_score: Option<f64>,
    fragmentation_threshold: f64,
    size_bins: Vec<(Option<u32>, usize)>,
    segments: Vec<(u64, &'static str, Vec<Block>)>,
}

/// A segment's block: offset, size, and the storage it holds (`None` when free).
type Block = (u64, u64, Option<usize>);

/// An audit's options, checked: built by [`options`] from a function's keyword arguments.
#[pyclass(frozen, module = "tensorplay._tensorplay")]
struct Options(AuditOptions);

/// The options `options` (keyword arguments of the API function `function`; `None` values
/// left at their defaults) give in `scope` (`"files"`, or `"live"` for live tensors, which
/// take no file options). `TypeError` names an argument the function does not take or a
/// value of the wrong kind, `UsageError` a value the option refuses: both name `function`.
#[pyfunction]
fn options(function: &str, scope: &str, options: &Bound<'_, PyDict>) -> PyResult<Options> {
    let scope = match scope {
        "files" => Scope::Files,
        "live" => Scope::Live,
        other => return Err(PyTypeError::new_err(format!("unknown scope {other:?}"))),
    };
    let mut entries = Vec::with_capacity(options.len());
    let mut shown = std::collections::HashMap::new();
    for (name, value) in options.iter() {
        let name: String = name.extract()?;
        if value.is_none() {
            continue;
        }
        shown.insert(name.clone(), value.repr()?.to_string());
        let json = json(&value).map_err(|what| {
            PyTypeError::new_err(format!("{function}(): {name}={}: {what}", shown[&name]))
        })?;
        entries.push((name, json));
    }
    AuditOptions::from_entries(scope, entries)
        .map(Options)
        .map_err(|e| match e {
            OptionError::Unexpected { name, accepted } => PyTypeError::new_err(format!(
                "{function}() got an unexpected keyword argument '{name}'; it accepts {}",
                accepted.join(", ")
            )),
            OptionError::Kind { name, detail } => PyTypeError::new_err(format!(
                "{function}(): {name}={}: {detail}",
                shown.get(&name).map_or("", String::as_str)
            )),
            OptionError::Value { name, detail } => UsageError::new_err(format!(
                "{function}(): {name}={}: {detail}",
                shown.get(&name).map_or("", String::as_str)
            )),
        })
}

/// A keyword argument's value as the options read it: `None`, a bool, an int, a float, a
/// str, a path (`os.PathLike`, as its str), or a list, tuple or set of these.
fn json(value: &Bound<'_, PyAny>) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<u64>() {
            return Ok(n.into());
        }
        return value
            .extract::<i64>()
            .map(Value::from)
            .map_err(|_| "an int out of range".to_owned());
    }
    if let Ok(x) = value.cast::<PyFloat>() {
        return serde_json::Number::from_f64(x.value())
            .map(Value::Number)
            .ok_or_else(|| "not a finite number".to_owned());
    }
    if let Ok(text) = value.cast::<PyString>() {
        return text
            .to_cow()
            .map(|t| Value::from(t.into_owned()))
            .map_err(|e| e.to_string());
    }
    if value.hasattr("__fspath__").unwrap_or(false) {
        let path = value
            .call_method0("__fspath__")
            .map_err(|e| e.to_string())?;
        return match path.cast::<PyString>() {
            Ok(text) => text
                .to_cow()
                .map(|t| Value::from(t.into_owned()))
                .map_err(|e| e.to_string()),
            Err(_) => Err("expected a str path (this os.PathLike gives bytes)".to_owned()),
        };
    }
    let is_collection = value.is_instance_of::<PyList>()
        || value.is_instance_of::<PyTuple>()
        || value.is_instance_of::<PySet>()
        || value.is_instance_of::<PyFrozenSet>();
    if is_collection {
        let mut items = Vec::new();
        for item in value.try_iter().map_err(|e| e.to_string())? {
            items.push(json(&item.map_err(|e| e.to_string())?)?);
        }
        return Ok(Value::Array(items));
    }
    let kind = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Err(format!("a {kind} is not a value any option takes"))
}

/// `tensorplay audit PATHS` with `options` (only part `partition`, `K/N`, of them when
/// given): the report (nothing printed), or the command's error.
#[pyfunction]
#[pyo3(signature = (paths, options, partition = None))]
fn audit(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    options: &Options,
    partition: Option<String>,
) -> PyResult<Report> {
    guarded(|| {
        py.detach(|| embed::audit(&paths, &options.0, partition.as_deref()))
            .map(Report)
            .map_err(raise)
    })
}

/// `tensorplay inspect PATH` (only `tensor` when given): the text it prints and its JSON
/// document.
#[pyfunction]
#[pyo3(signature = (path, tensor = None))]
fn inspect(py: Python<'_>, path: PathBuf, tensor: Option<String>) -> PyResult<(String, String)> {
    guarded(|| {
        py.detach(|| embed::inspect(&path, tensor.as_deref()))
            .map_err(raise)
    })
}

/// One tensor: name, storage index, sizes, strides, storage offset, dtype name, device,
/// requires_grad, is a parameter, data_ptr, the object it is (`id(tensor)`).
type TensorRow = (
    String,
    usize,
    Vec<u64>,
    Vec<u64>,
    u64,
    String,
    String,
    bool,
    bool,
    u64,
    u64,
);

fn dtype(name: &str) -> PyResult<DType> {
    DType::from_name(name).ok_or_else(|| PyTypeError::new_err(format!("unknown dtype {name:?}")))
}

/// The audit of tensors living in this process with `options`, as `audit` would judge a
/// file holding them; shown as `label`. CPU storages are read in place (NaN/Inf).
#[pyfunction]
fn audit_live<'py>(
    py: Python<'py>,
    options: &Options,
    label: String,
    storages: Vec<(String, String, Bound<'py, PyAny>)>,
    tensors: Vec<TensorRow>,
) -> PyResult<Report> {
    let torch = py.import("torch")?;
    let base = torch.getattr("_C")?.getattr("StorageBase")?;
    let kinds = StorageKinds {
        untyped: torch.getattr("UntypedStorage")?,
        nbytes: base.getattr("nbytes")?,
        data_ptr: base.getattr("data_ptr")?,
        device: base.getattr("device")?.getattr("__get__")?,
    };
    let mut live_storages = Vec::with_capacity(storages.len());
    for (key, dtype_name, storage) in storages {
        live_storages.push(live_storage(&kinds, &label, key, &dtype_name, storage)?);
    }
    let mut live_tensors = Vec::with_capacity(tensors.len());
    for (
        name,
        storage,
        sizes,
        strides,
        offset,
        dtype_name,
        device,
        grad,
        parameter,
        data_ptr,
        object,
    ) in tensors
    {
        live_tensors.push(LiveTensor {
            name,
            storage,
            sizes,
            strides,
            storage_offset: offset,
            dtype: dtype(&dtype_name)?,
            device,
            requires_grad: grad,
            is_parameter: parameter,
            data_ptr,
            object: Some(object),
        });
    }
    guarded(|| {
        let ckpt = live::checkpoint(Path::new(&label), live_storages, live_tensors)
            .map_err(|e| ReadError::new_err(e.to_string()))?;
        embed::audit_checkpoint(&options.0, &ckpt, &label)
            .map(Report)
            .map_err(raise)
    })
}

/// One storage of a loaded checkpoint: its bytes copied into a `bytearray` torch can take
/// without another copy (`None` for a storage without bytes: meta).
#[pyclass(frozen, get_all, module = "tensorplay._tensorplay")]
struct LoadedStorage {
    key: String,
    nbytes: u64,
    /// The location as saved (`cuda:1`, `cpu`, `meta`).
    location: String,
    data: Option<Py<PyByteArray>>,
}

/// One dense tensor of a loaded checkpoint, its storage by index into the storages.
#[pyclass(frozen, get_all, module = "tensorplay._tensorplay")]
struct LoadedTensor {
    name: String,
    storage: usize,
    sizes: Vec<u64>,
    strides: Vec<u64>,
    storage_offset: u64,
    dtype: String,
    device: String,
    requires_grad: bool,
    is_parameter: bool,
    is_conj: bool,
    is_neg: bool,
}

/// What `tensorplay.safe_load` builds tensors from: the audit of the file `path` with
/// `options` (its report) and,
/// from the same reading, its storages and dense tensors. A checkpoint holding what a dense
/// tensor cannot carry (sparse, nested, subclass and quantized tensors, a distributed
/// checkpoint's chunks) is refused with `ReadError` naming the first such tensor: building
/// its parts as plain tensors would not be what torch.load gives.
#[pyfunction]
fn load(
    py: Python<'_>,
    path: PathBuf,
    options: &Options,
) -> PyResult<(Report, Vec<LoadedStorage>, Vec<LoadedTensor>)> {
    let loaded = guarded(|| py.detach(|| embed::load(&path, &options.0)).map_err(raise))?;
    let ckpt = &loaded.checkpoint;
    let refuse = |what: String| {
        ReadError::new_err(format!(
            "{}: {what}: tensorplay builds dense (strided) tensors only",
            ckpt.path.display()
        ))
    };
    if !ckpt.format.safe_load() {
        return Err(ReadError::new_err(format!(
            "{}: a {} checkpoint: safe_load builds tensors from torch.save and safetensors \
             checkpoints only, the formats whose reading is checked against torch.load and \
             safetensors' own",
            ckpt.path.display(),
            ckpt.format
        )));
    }
    if let Some(composite) = ckpt.composites.first() {
        return Err(refuse(format!(
            "'{}' is a {} tensor",
            composite.name, composite.layout
        )));
    }
    if let Some(chunked) = ckpt.chunked.first() {
        return Err(refuse(format!(
            "'{}' is saved in chunks of a distributed checkpoint",
            chunked.name
        )));
    }
    let mut storages = Vec::with_capacity(ckpt.storages.len());
    for storage in &ckpt.storages {
        let data_ptr = storage.data_ptr();
        let bytes = match (data_ptr.owner(), data_ptr.bytes()) {
            (Owner::None(_), _) => None,
            (_, Some(bytes)) => Some(PyByteArray::new(py, bytes).unbind()),
            (_, None) => {
                return Err(refuse(format!(
                    "storage {} holds no bytes in memory",
                    storage.key()
                )))
            }
        };
        storages.push(LoadedStorage {
            key: storage.key().to_owned(),
            nbytes: storage.nbytes(),
            location: storage.location().to_owned(),
            data: bytes,
        });
    }
    let mut tensors = Vec::with_capacity(ckpt.tensors.len());
    for tensor in &ckpt.tensors {
        let imp = tensor.tensor_impl();
        if imp.dtype().kind() == DTypeKind::Quantized {
            return Err(refuse(format!(
                "'{}' is a quantized ({}) tensor",
                tensor.name(),
                imp.dtype().name()
            )));
        }
        let layout = imp.layout();
        tensors.push(LoadedTensor {
            name: tensor.name().to_owned(),
            storage: imp.storage().id().index(),
            sizes: layout.sizes().to_vec(),
            strides: layout.strides().to_vec(),
            storage_offset: layout.storage_offset(),
            dtype: imp.dtype().name().to_owned(),
            device: imp.device().to_string(),
            requires_grad: imp.requires_grad(),
            is_parameter: imp.is_parameter(),
            is_conj: imp.is_conj(),
            is_neg: imp.is_neg(),
        });
    }
    Ok((Report(loaded.report), storages, tensors))
}

/// `torch.UntypedStorage`, and the methods of its compiled base class that report its
/// memory (looked up once: an audit may describe 100 000 storages).
struct StorageKinds<'py> {
    untyped: Bound<'py, PyAny>,
    nbytes: Bound<'py, PyAny>,
    data_ptr: Bound<'py, PyAny>,
    device: Bound<'py, PyAny>,
}

/// A storage of `audit_live`: its size, device and address asked of the storage object
/// itself, which must be exactly a `torch.UntypedStorage`, through the methods of its compiled
/// base class (a type Python cannot patch), so no caller of this private function can make the
/// audit read an address of its choosing. Host bytes are borrowed in place, the storage their
/// owner.
fn live_storage(
    kinds: &StorageKinds<'_>,
    label: &str,
    key: String,
    dtype_name: &str,
    storage: Bound<'_, PyAny>,
) -> PyResult<LiveStorage> {
    if !storage.get_type().is(&kinds.untyped) {
        return Err(PyTypeError::new_err(format!(
            "storage {key}: expected a torch.UntypedStorage, not {}",
            storage.get_type().name()?
        )));
    }
    let nbytes: u64 = kinds.nbytes.call1((&storage,))?.extract()?;
    let location = kinds.device.call1((&storage,))?.str()?.to_string();
    // torch spells the host device `cpu`, without an index. Other storages' addresses are
    // not read: a fake tensor's storage warns that asking is a bug.
    let on_host = location == "cpu";
    let address: usize = match on_host {
        true => kinds.data_ptr.call1((&storage,))?.extract()?,
        false => 0,
    };
    let bytes = match usize::try_from(nbytes) {
        Ok(len) if on_host && address != 0 && len > 0 => {
            // SAFETY: `address` and `len` are the data pointer and size torch's own code
            // reports for a `torch.UntypedStorage` on the CPU, checked above; the buffer holds the storage
            // as its owner, so the bytes stay allocated while they are read. The GIL is held
            // for the whole audit (no `detach`), so no Python code changes or resizes them
            // meanwhile; a thread of the caller's writing them outside Python is documented
            // as unsafe in docs/python.md, as for any reader of a tensor's memory.
            Some(unsafe {
                HostBuffer::borrowed(label, address as *const u8, len, Box::new(storage.unbind()))
            })
        }
        _ => None,
    };
    Ok(LiveStorage {
        key,
        dtype: dtype(dtype_name)?,
        nbytes,
        location,
        bytes,
    })
}

/// Writes `text` to `path` whole or not at all, as the command writes its reports.
#[pyfunction]
fn write_text(py: Python<'_>, path: PathBuf, text: &str) -> PyResult<()> {
    guarded(|| py.detach(|| embed::write(&path, text)).map_err(raise))
}

/// `tensorplay merge` of the parts' JSON reports (texts, in any order): the merged report,
/// `ReadError` where merge exits 2 (a part refused, a checkpoint no part judged).
#[pyfunction]
fn merge(py: Python<'_>, parts: Vec<String>) -> PyResult<Report> {
    guarded(|| {
        py.detach(|| embed::merge(&parts))
            .map(Report)
            .map_err(raise)
    })
}

/// One report of the files of `reports`, judged at the first one's fail-on level.
#[pyfunction]
fn combine(reports: Vec<Bound<'_, Report>>) -> PyResult<Report> {
    let reports: Vec<&embed::Report> = reports.iter().map(|r| &r.get().0).collect();
    guarded(|| Ok(Report(embed::combine(&reports))))
}

/// The codes `selectors` name (codes, code prefixes such as `TP1`, or names), each once in
/// code order: the command's `--select`/`--ignore` resolver. `UsageError` with its "did you
/// mean" for one that names no rule.
#[pyfunction]
fn select_rules(selectors: Vec<String>) -> PyResult<Vec<&'static str>> {
    guarded(|| {
        embed::select(&selectors)
            .map(|codes| codes.iter().map(|c| c.as_str()).collect())
            .map_err(raise)
    })
}

/// Every rule as `(code, name, tags)`, in code order: the command's registry.
#[pyfunction]
fn rules() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    embed::rules()
        .into_iter()
        .map(|(code, name, tags)| (code, name, tags.to_vec()))
        .collect()
}

/// The compiled half of the `tensorplay` package.
#[pymodule]
mod _tensorplay {
    #[pymodule_export]
    use super::{
        audit, audit_live, combine, inspect, load, merge, options, rules, run, select_rules,
        write_text, LoadedStorage, LoadedTensor, Options, Report,
    };
}
