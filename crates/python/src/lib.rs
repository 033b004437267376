//! `tensorplay._tensorplay`: the command and its audit inside Python. The pure-Python package
//! (python/tensorplay/) is the API; this module only crosses the boundary: argument lists in,
//! reports and rendered text out, failures as the package's exceptions, never a panic.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use std::ffi::OsString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use tensorplay::embed::{self, Failure, Rendering};
use tensorplay_engine::load::live::{self, LiveStorage, LiveTensor};
use tensorplay_engine::{DType, HostBuffer};

pyo3::import_exception!(tensorplay.errors, UsageError);
pyo3::import_exception!(tensorplay.errors, ReadError);
pyo3::import_exception!(tensorplay.errors, InternalError);

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

/// One file's layout facts, as [`Report::layouts`] gives them.
#[derive(IntoPyObject)]
struct Layout {
    fragmentation_score: Option<f64>,
    fragmentation_threshold: f64,
    size_bins: Vec<(Option<u32>, usize)>,
    segments: Vec<(u64, &'static str, Vec<(u64, u64, Option<usize>)>)>,
}

/// `tensorplay audit ARGS`: the report (nothing printed), or the command's error.
#[pyfunction]
fn audit(py: Python<'_>, args: Vec<PathBuf>) -> PyResult<Report> {
    guarded(|| {
        py.detach(|| embed::audit(&os_args(args)))
            .map(Report)
            .map_err(raise)
    })
}

/// Arguments as the command gets them: taken as paths, so what is not UTF-8 stays as it was.
fn os_args(args: Vec<PathBuf>) -> Vec<OsString> {
    args.into_iter().map(PathBuf::into_os_string).collect()
}

/// `tensorplay inspect ARGS`: the text it prints and its JSON document.
#[pyfunction]
fn inspect(py: Python<'_>, args: Vec<PathBuf>) -> PyResult<(String, String)> {
    guarded(|| py.detach(|| embed::inspect(&os_args(args))).map_err(raise))
}

/// One storage as `tensorplay._live` describes it: key, dtype name, nbytes, device, the
/// address of its bytes when they may be read in place (else `None`), and the object that
/// keeps them allocated.
type StorageRow = (String, String, u64, String, Option<usize>, Py<PyAny>);

/// One tensor: name, storage index, sizes, strides, storage offset, dtype name, device,
/// requires_grad, is a parameter.
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
);

fn dtype(name: &str) -> PyResult<DType> {
    DType::from_name(name).ok_or_else(|| PyTypeError::new_err(format!("unknown dtype {name:?}")))
}

/// The audit of tensors living in this process, as `audit ARGS` would judge a file holding
/// them; shown as `label`. CPU storages whose address is given are read in place (NaN/Inf).
#[pyfunction]
fn audit_live(
    args: Vec<PathBuf>,
    label: String,
    storages: Vec<StorageRow>,
    tensors: Vec<TensorRow>,
) -> PyResult<Report> {
    let mut live_storages = Vec::with_capacity(storages.len());
    for (key, dtype_name, nbytes, location, address, owner) in storages {
        let bytes = match (address, usize::try_from(nbytes)) {
            (Some(address), Ok(len)) if address != 0 && len > 0 => {
                // SAFETY: `tensorplay._live` gives the address only of a CPU storage's
                // `data_ptr()`, `nbytes` long, with the storage object as `owner`: the buffer
                // holds it, so the bytes stay allocated while they are read. The GIL is held
                // for the whole audit (no `detach`), so no Python code changes them meanwhile;
                // a thread of the caller's writing them outside Python is documented as unsafe
                // in docs/python.md, as for any reader of a tensor's memory.
                Some(unsafe {
                    HostBuffer::borrowed(&label, address as *const u8, len, Box::new(owner))
                })
            }
            _ => None,
        };
        live_storages.push(LiveStorage {
            key,
            dtype: dtype(&dtype_name)?,
            nbytes,
            location,
            bytes,
        });
    }
    let mut live_tensors = Vec::with_capacity(tensors.len());
    for (name, storage, sizes, strides, offset, dtype_name, device, grad, parameter) in tensors {
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
        });
    }
    guarded(|| {
        let ckpt = live::checkpoint(Path::new(&label), live_storages, live_tensors)
            .map_err(|e| ReadError::new_err(e.to_string()))?;
        embed::audit_checkpoint(&os_args(args), &ckpt, &label)
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

/// The compiled half of the `tensorplay` package.
#[pymodule]
mod _tensorplay {
    #[pymodule_export]
    use super::{audit, audit_live, combine, inspect, run, Report};
}
