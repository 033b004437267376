//! `torch.export` archives (`.pt2`, `torch.export.save`): a zip read by PyTorch's own zip
//! reader, marked by an `archive_format` record holding `pt2`.
//!
//! `torch.export.load` (torch 2.9.1, `pt2_archive/_package.py`) reads, for each program
//! `models/<name>.json`, its weights and its constants in one of two layouts:
//! - raw members (`data/weights/weight_0`, `data/constants/tensor_0`): each an untyped storage's
//!   bytes, described by `data/weights/<name>_weights_config.json` and
//!   `data/constants/<name>_constants_config.json` (fqn → member, dtype, sizes, strides, storage
//!   offset, device); fqns naming one member share its storage;
//! - `torch.save` archives nested as members (`data/weights/<name>.pt`,
//!   `data/constants/<name>.pt`), as torch 2.6 to 2.8 wrote them.
//!
//! (Archives from before torch 2.7, with no folder, are [`flat`]'s.)
//!
//! Both are rebuilt here without running anything: configs are parsed as data, nested archives
//! go through the `torch.save` reader and its non-executing pickle machine. The example inputs
//! (`data/sample_inputs/<name>.pt`), which `torch.export.load` unpickles too, are audited the
//! same way; their tensors are inputs, not weights, and are not listed. The program's JSON is
//! read for the names its signature gives weights and constants, and for the strings torch
//! evaluates ([`expr`]).
//!
//! Member names are looked up as torch looks them up: whether a layout or config exists is asked
//! of `get_all_records()`, by exact name; a member is read through PyTorch's reader, ignoring
//! case (names are unique that way). A member torch hands to `torch.load(weights_only=False)`
//! (a `use_pickle` payload, a nested archive) is read as `torch.load` reads any bytes, whatever
//! pickle protocol it starts with.

mod expr;
pub(super) mod flat;
use super::json::Entries;
use super::table::{Accepts, Row, ZipKind};
use super::torch::archive::{self, Archive};
use super::torch::{legacy, tar};
use super::{sink, NewStorage, Scope, Sink};
use crate::error::{Error, Result};
use crate::pickle::{unpickle, Loader, UnsafeGlobal};
use crate::{DType, DataPtr, Device, Format, HostBuffer, Layout, Storage, TensorImpl};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

const ARCHIVE_FORMAT: &str = "archive_format";
const ARCHIVE_VERSION: &str = "archive_version";
const MODELS_DIR: &str = "models/";
const DATA_DIR: &str = "data/";
const WEIGHTS_DIR: &str = "data/weights/";
const CONSTANTS_DIR: &str = "data/constants/";
const AOTINDUCTOR_DIR: &str = "data/aotinductor/";
const TENSOR_CONSTANT_PREFIX: &str = "tensor_";
const CUSTOM_OBJ_PREFIX: &str = "custom_obj_";

/// `torch.export.save`'s archives, by their records.
pub(crate) const ROW: Row = Row {
    what: "a torch.export archive",
    loader: "torch.export.load",
    extensions: &["pt2"],
    accepts: Accepts::Records(ZipKind {
        archive: archive::archive_of,
        claims: is_pt2,
        read: read_archive,
    }),
};

/// Whether the archive's records mark it a `torch.export` archive, as torch's
/// `is_pt2_package` decides: an `archive_format` record under its folder. Any other content
/// there is refused: `torch.export.load` would refuse it and `torch.load` has no use for it.
pub(crate) fn is_pt2(archive: &Archive<'_>) -> Result<bool> {
    let Some(entry) = archive.entry(ARCHIVE_FORMAT) else {
        return Ok(false);
    };
    let value = archive.inflate(entry)?;
    if *value != *b"pt2" {
        let shown = String::from_utf8_lossy(value.get(..32).unwrap_or(&value)).into_owned();
        return Err(archive.err(
            &entry.name,
            format!("archive format {shown:?} is not \"pt2\""),
        ));
    }
    Ok(true)
}

/// Reads a `torch.export` archive through `sink`. A refusal names what `torch.export.load`
/// would have run: the globals named before it, and those of every member under `data/` the
/// reading did not reach that `torch.load` would unpickle.
pub(crate) fn read_archive(mut archive: Archive<'_>, sink: &mut Sink<'_>) -> Result<Format> {
    let first_global = sink.global_mark();
    match read_programs(&mut archive, sink) {
        Ok(()) => Ok(Format::Pt2),
        Err(e) => {
            let mut globals = sink.take_unsafe_globals(first_global);
            globals.extend(globals_of_loadable_members(&mut archive));
            Err(e.with_unsafe_globals(globals))
        }
    }
}

fn read_programs(archive: &mut Archive<'_>, sink: &mut Sink<'_>) -> Result<()> {
    archive.read(ARCHIVE_FORMAT)?;
    let version_name = archive.full_name(ARCHIVE_VERSION);
    match archive.read(ARCHIVE_VERSION)?.as_deref() {
        Some(b"0") => {}
        Some(other) => {
            let shown = String::from_utf8_lossy(other.get(..32).unwrap_or(other)).into_owned();
            return Err(archive.err(
                &version_name,
                format!("archive version {shown:?} is not the \"0\" torch 2.9.1 reads"),
            ));
        }
        None => return Err(archive.err(&version_name, "record is missing")),
    }
    let names = relative_names(archive);
    if let Some(compiled) = names.iter().find(|n| n.starts_with(AOTINDUCTOR_DIR)) {
        // Compiled shared objects that torch.export.load would dlopen: not read here.
        return Err(archive.err(
            &archive.full_name(compiled),
            "AOTInductor compiled code is not supported",
        ));
    }
    let models = model_names(archive, &names)?;
    if models.is_empty() {
        return Err(archive.err("zip", "no models/<name>.json: no exported program"));
    }
    let mut seen = HashSet::new();
    for model in &models {
        let mut reader = ModelReader {
            archive: &mut *archive,
            sink: &mut *sink,
            model,
            seen: &mut seen,
        };
        reader.read()?;
    }
    // Any other pickle in the archive (extra files) is audited as torch.load's would be.
    archive::audit_other_pickles(archive, Loader::Python, sink)
}

/// The globals of every member under `data/` that `torch.load` would unpickle (a zip, a tar, a
/// pickle stream: a nested archive, a `use_pickle` payload, example inputs), each read as
/// `torch.load` reads it, whether or not that reading is refused. Raw tensor bytes, which torch
/// never unpickles, are passed over by their first bytes; a member past the budget is too.
fn globals_of_loadable_members(archive: &mut Archive<'_>) -> Vec<UnsafeGlobal> {
    let mut globals = Vec::new();
    for name in relative_names(archive) {
        // PyTorch's reader finds members ignoring ASCII case.
        let in_data = name
            .get(..DATA_DIR.len())
            .is_some_and(|dir| dir.eq_ignore_ascii_case(DATA_DIR));
        if !in_data {
            continue;
        }
        let Ok(Some(bytes)) = archive.read(&name) else {
            continue;
        };
        // Judged whole, as torch.load judges it: a first opcode may run past any window.
        let loadable = bytes.starts_with(b"PK\x03\x04")
            || tar::opens(&bytes)
            || super::pickle_start::begins_pickle(&bytes);
        if !loadable {
            continue;
        }
        let full = archive.full_name(&name);
        let buffer = HostBuffer::from_vec(archive.path().join(&full), bytes.into_owned());
        let scope = Scope::default().member(full.clone());
        let (read, named) = sink::apart(archive.meter, scope, |s| torch_load(&buffer, s));
        globals.extend(named);
        if let Err(e) = read {
            globals.extend(e.nested_in(&full).unsafe_globals().iter().cloned());
        }
    }
    globals
}

/// Entry names relative to the archive's folder, in directory order.
fn relative_names(archive: &Archive<'_>) -> Vec<String> {
    let folder = format!("{}/", archive.prefix);
    archive
        .zip
        .entries()
        .iter()
        .filter_map(|e| e.name.strip_prefix(&folder).map(str::to_owned))
        .collect()
}

/// The programs: `models/<name>.json`, as `torch.export.load` finds them.
fn model_names(archive: &Archive<'_>, names: &[String]) -> Result<Vec<String>> {
    let mut models = Vec::new();
    for name in names.iter().filter(|n| n.starts_with(MODELS_DIR)) {
        let model = name
            .strip_prefix(MODELS_DIR)
            .and_then(|m| m.strip_suffix(".json"))
            .filter(|m| !m.is_empty() && !m.contains('/'))
            .ok_or_else(|| {
                archive.err(
                    &archive.full_name(name),
                    "member under models/ is not models/<name>.json",
                )
            })?;
        models.push(model.to_owned());
    }
    Ok(models)
}

/// One program's weights, constants and example inputs.
pub(crate) struct ModelReader<'r, 'a, 's> {
    pub archive: &'r mut Archive<'a>,
    pub sink: &'r mut Sink<'s>,
    pub model: &'r str,
    /// Tensor names given so far, across programs.
    pub seen: &'r mut HashSet<String>,
}

/// Where a program's tensors are described.
#[derive(Clone, Copy)]
enum Payload {
    Weights,
    Constants,
}

impl Payload {
    fn dir(self) -> &'static str {
        match self {
            Payload::Weights => WEIGHTS_DIR,
            Payload::Constants => CONSTANTS_DIR,
        }
    }

    fn config(self, model: &str) -> String {
        match self {
            Payload::Weights => format!("{WEIGHTS_DIR}{model}_weights_config.json"),
            Payload::Constants => format!("{CONSTANTS_DIR}{model}_constants_config.json"),
        }
    }
}

impl ModelReader<'_, '_, '_> {
    fn read(&mut self) -> Result<()> {
        let program = format!("{MODELS_DIR}{}.json", self.model);
        let signature = self.signature(&program)?;
        let first = self.sink.tensor_mark();
        self.payload(Payload::Weights)?;
        self.payload(Payload::Constants)?;
        self.check_signature(first, &signature, &program)?;
        let inputs = format!("data/sample_inputs/{}.pt", self.model);
        match self.archive.read(&inputs)? {
            Some(bytes) => {
                let bytes = bytes.into_owned();
                self.nested(&inputs, bytes, false)?;
            }
            None => {
                return Err(self
                    .archive
                    .err(&self.archive.full_name(&inputs), "record is missing"))
            }
        }
        Ok(())
    }

    /// Every weight and constant the program's signature names must be among the tensors read
    /// since `first`: torch's deserializer would fail on one missing.
    pub(crate) fn check_signature(
        &self,
        first: usize,
        signature: &[String],
        program: &str,
    ) -> Result<()> {
        let named: HashSet<&str> = self
            .sink
            .tensors_since(first)
            .iter()
            .map(|t| t.name())
            .collect();
        let prefix = self.name_prefix();
        if let Some(missing) = signature
            .iter()
            .find(|n| !named.contains(format!("{prefix}{n}").as_str()))
        {
            return Err(self.archive.err(
                &self.archive.full_name(program),
                format!("the signature names '{missing}', which neither the weights nor the constants hold"),
            ));
        }
        Ok(())
    }

    /// Names in the program are the fqns of its "model"; other programs' are prefixed.
    fn name_prefix(&self) -> String {
        if self.model == "model" {
            String::new()
        } else {
            format!("{}.", self.model)
        }
    }

    /// A JSON record of the archive, parsed once the budget admits what parsing it takes;
    /// `what` names it in the error ("malformed config JSON").
    fn json<T: serde::de::DeserializeOwned>(&mut self, name: &str, what: &str) -> Result<T> {
        let full = self.archive.full_name(name);
        let bytes = self
            .archive
            .read(name)?
            .ok_or_else(|| self.archive.err(&full, "record is missing"))?;
        let cost = (bytes.len() as u64).saturating_mul(crate::load::json::COST_PER_BYTE);
        self.archive
            .meter
            .check(self.archive.path(), cost, || format!("parsing {full}"))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            self.archive
                .err(&full, format!("malformed {what} JSON: {e}"))
        })
    }

    /// The parameter, buffer and tensor constant names of the program's signature. Every
    /// string of the program that torch would evaluate and that is not an expression torch
    /// writes is recorded as a call of `sympy.sympify`, the `eval` torch runs it through.
    pub(crate) fn signature(&mut self, program: &str) -> Result<Vec<String>> {
        let value: serde_json::Value = self.json(program, "program")?;
        let full = self.archive.full_name(program);
        let text = self.archive.read(program)?.unwrap_or_default();
        let (evaluated, signature) = read_program(&value, &text, &full);
        self.sink.add_unsafe_globals(evaluated);
        drop(text);
        signature.map_err(|e| {
            self.archive
                .err(&full, format!("malformed program JSON: {e}"))
        })
    }

    /// Whether `get_all_records()` lists `name` (relative to the archive's folder): torch
    /// chooses a layout by asking it, comparing names exactly.
    fn listed(&self, name: &str) -> bool {
        let full = self.archive.full_name(name);
        self.archive.zip.entries().iter().any(|e| e.name == full)
    }

    /// The program's weights or constants, in whichever layout torch picks: the nested
    /// archive when one is named exactly so, else the config, which must be named exactly so.
    fn payload(&mut self, payload: Payload) -> Result<()> {
        let legacy = format!("{}{}.pt", payload.dir(), self.model);
        if self.listed(&legacy) {
            let bytes = self.archive.read(&legacy)?.unwrap_or_default().into_owned();
            return self.nested(&legacy, bytes, true);
        }
        let config_name = payload.config(self.model);
        let full = self.archive.full_name(&config_name);
        if !self.listed(&config_name) {
            return Err(self.archive.err(&full, "record is missing"));
        }
        let config: PayloadConfig = self.json(&config_name, "config")?;
        if let Some(dup) = config.config.first_duplicate() {
            return Err(self
                .archive
                .err(&full, format!("'{dup}' is described twice")));
        }
        // One storage per member, shared by every fqn that names it.
        let mut storages: HashMap<String, Arc<Storage>> = HashMap::new();
        for (fqn, meta) in config.config.0 {
            let at = |detail: String| format!("'{fqn}': {detail}");
            if let Payload::Constants = payload {
                // Read as torch reads it whatever `use_pickle` says.
                if meta.path_name.starts_with(CUSTOM_OBJ_PREFIX) {
                    self.custom_object(&meta.path_name)?;
                    continue;
                }
            }
            if meta.use_pickle {
                // torch.load(weights_only=False) runs it: its globals are named in the refusal.
                let member = joined(payload.dir(), &meta.path_name);
                let globals = self.audit_torch_load(&member)?;
                let refused = self.archive.err(
                    &full,
                    at("pickled tensor payloads (tensor subclasses) are not supported".into()),
                );
                return Err(refused.with_unsafe_globals(globals));
            }
            if let Payload::Constants = payload {
                if !meta.path_name.starts_with(TENSOR_CONSTANT_PREFIX) {
                    return Err(self.archive.err(
                        &full,
                        at(format!(
                            "member '{}' is neither a tensor nor a custom object",
                            meta.path_name
                        )),
                    ));
                }
            }
            let tensor = meta
                .tensor_meta
                .as_ref()
                .ok_or_else(|| self.archive.err(&full, at("no tensor_meta".into())))?;
            let spec = Spec::parse(tensor).map_err(|e| self.archive.err(&full, at(e)))?;
            let member = joined(payload.dir(), &meta.path_name);
            let storage = match storages.get(&meta.path_name) {
                Some(storage) => {
                    // torch views the first fqn's flat tensor: a second dtype would be ignored.
                    if storage.dtype() != spec.dtype || *storage.device() != spec.device {
                        return Err(self.archive.err(
                            &full,
                            at(format!(
                                "shares member '{}' with another tensor of a different dtype or device",
                                meta.path_name
                            )),
                        ));
                    }
                    Arc::clone(storage)
                }
                None => {
                    let storage = self.storage(&member, &spec)?;
                    storages.insert(meta.path_name.clone(), Arc::clone(&storage));
                    storage
                }
            };
            let name = format!("{}{fqn}", self.name_prefix());
            let layout = Layout::new(&spec.sizes, &spec.strides, spec.offset)
                .map_err(|e| self.archive.err(&full, at(e.to_string())))?;
            let end = layout
                .byte_range(spec.dtype)
                .map_err(|e| self.archive.err(&full, at(e.to_string())))?
                .map_or(0, |r| r.end);
            if end > storage.nbytes() {
                return Err(self.archive.err(
                    &self.archive.full_name(&member),
                    format!(
                        "holds {} bytes but '{fqn}' ({} {:?}, strides {:?}, offset {}) needs {end}",
                        storage.nbytes(),
                        spec.dtype,
                        spec.sizes,
                        spec.strides,
                        spec.offset
                    ),
                ));
            }
            self.name(&full, &name)?;
            let is_param = matches!(payload, Payload::Weights) && meta.is_param;
            let imp = TensorImpl::new(
                layout,
                spec.dtype,
                spec.device.clone(),
                tensor.requires_grad,
                is_param,
                storage,
            );
            self.sink.add_tensor(name, Arc::new(imp));
        }
        Ok(())
    }

    /// Claims a tensor name, refusing one given twice.
    fn name(&mut self, part: &str, name: &str) -> Result<()> {
        if !self.seen.insert(name.to_owned()) {
            return Err(self
                .archive
                .err(part, format!("tensor '{name}' is described twice")));
        }
        let cost = (name.len() as u64).saturating_add(64);
        self.archive.meter.hold(self.archive.path(), cost, || {
            format!("the tensor names of {part}")
        })
    }

    /// A raw member as one untyped storage of `spec`'s dtype, on `spec`'s device.
    fn storage(&mut self, member: &str, spec: &Spec) -> Result<Arc<Storage>> {
        let full = self.archive.full_name(member);
        let (index, entry) = self
            .archive
            .indexed(member)
            .ok_or_else(|| self.archive.err(&full, "weight member is missing"))?;
        let (size, stored, start) = (entry.size, entry.is_stored(), entry.data_start());
        let element = spec.dtype.bits() / 8;
        // torch.frombuffer needs whole elements; an empty member would become zeros silently.
        if !spec.dtype.bits().is_multiple_of(8) || element == 0 || !size.is_multiple_of(element) {
            return Err(self.archive.err(
                &full,
                format!("{} bytes are not whole {} elements", size, spec.dtype),
            ));
        }
        let data_ptr = if stored {
            self.archive.mark_read(index);
            let end = start.checked_add(size).ok_or(Error::Overflow {
                what: "weight member end",
            })?;
            DataPtr::host(Arc::clone(self.archive.buffer), start..end)?
        } else {
            let bytes = self.archive.read_at(index)?.into_owned();
            self.archive.meter.hold(self.archive.path(), size, || {
                format!("weight member {full}")
            })?;
            DataPtr::heap(self.archive.path(), bytes)
        };
        Ok(self.sink.add_storage(NewStorage {
            key: member.into(),
            dtype: spec.dtype,
            nbytes: size,
            location: spec.device.to_string().into(),
            data_ptr,
            saved_alone: false,
        }))
    }

    /// A member `torch.export.load` hands to `torch.load(weights_only=False)` that no tensor is
    /// taken from: read as torch.load reads it, its globals returned (named under the member).
    fn audit_torch_load(&mut self, member: &str) -> Result<Vec<UnsafeGlobal>> {
        let full = self.archive.full_name(member);
        let bytes = self
            .archive
            .read(member)?
            .ok_or_else(|| self.archive.err(&full, "pickled payload member is missing"))?
            .into_owned();
        let buffer = HostBuffer::from_vec(self.archive.path().join(&full), bytes);
        let scope = Scope::default().member(full.clone());
        let (read, globals) = sink::apart(self.archive.meter, scope, |s| torch_load(&buffer, s));
        match read {
            Ok(_) => Ok(globals),
            Err(e) => Err(e.nested_in(&full).with_unsafe_globals(globals)),
        }
    }

    /// A `torch.save` file nested as a member, read as `torch.load` reads it (a zip archive, or
    /// a legacy stream whose first pickle runs whatever it is): its tensors kept when `keep` (a
    /// state dict or constants in the older layout), its pickles' globals always.
    pub(crate) fn nested(&mut self, member: &str, bytes: Vec<u8>, keep: bool) -> Result<()> {
        let full = self.archive.full_name(member);
        self.archive
            .meter
            .hold(self.archive.path(), bytes.len() as u64, || {
                format!("nested archive {full}")
            })?;
        // Errors inside name the file and the member as one path.
        let buffer = HostBuffer::from_vec(self.archive.path().join(&full), bytes);
        let first = self.sink.tensor_mark();
        // Storage keys are prefixed with the member: the weights' and the constants' archives
        // both number theirs from 0, and a key names one storage of the checkpoint. A global's
        // member names the nested archive too (`<member>/<its pickle>`), whether the reading
        // went through or was refused.
        let scope = Scope::default()
            .keys(format!("{member}/"))
            .member(full.clone());
        let read = if keep {
            torch_load(&buffer, &mut self.sink.nested(scope))
        } else {
            let meter = self.archive.meter;
            match sink::apart(meter, Scope::default(), |s| torch_load(&buffer, s)) {
                (Ok(format), globals) => {
                    self.sink.nested(scope).add_unsafe_globals(globals);
                    Ok(format)
                }
                (Err(e), globals) => Err(e.with_unsafe_globals(globals)),
            }
        };
        let format = read.map_err(|e| e.nested_in(&full))?;
        if !matches!(format, Format::PytorchZip | Format::PytorchLegacy) {
            return Err(self.archive.err(
                &full,
                format!("nested archive is {format}, not a torch.save archive"),
            ));
        }
        if keep && self.model != "model" {
            return Err(self.archive.err(
                &full,
                "a nested payload for a program other than \"model\" is not supported",
            ));
        }
        let names: Vec<String> = self
            .sink
            .tensors_since(first)
            .iter()
            .map(|t| t.name().to_owned())
            .collect();
        for name in names {
            self.name(&full, &name)?;
        }
        Ok(())
    }

    /// A custom object constant: TorchScript's pickle, audited, never run.
    fn custom_object(&mut self, path_name: &str) -> Result<()> {
        let member = joined(CONSTANTS_DIR, path_name);
        let full = self.archive.full_name(&member);
        let bytes = self
            .archive
            .read(&member)?
            .ok_or_else(|| self.archive.err(&full, "custom object member is missing"))?;
        let budget = self.archive.meter.pickle_budget();
        let unpickled = unpickle(
            &bytes,
            self.archive.path(),
            &full,
            0,
            Loader::TorchScript,
            &budget,
        )?;
        self.sink.add_unsafe_globals(unpickled.unsafe_globals);
        Ok(())
    }
}

/// A program's JSON (`value`, parsed from `text`, member `full`): every string torch would
/// evaluate that is not an expression torch writes, as a call of `sympy.sympify`, and the
/// parameter, buffer and tensor constant names of its signature.
fn read_program(
    value: &serde_json::Value,
    text: &[u8],
    full: &str,
) -> (Vec<UnsafeGlobal>, std::result::Result<Vec<String>, String>) {
    let evaluated = expr::refused(value, text)
        .into_iter()
        .map(|refused| UnsafeGlobal {
            module: "sympy".into(),
            name: "sympify".into(),
            member: format!(
                "{full}: {} {:?} ({})",
                refused.field, refused.shown, refused.reason
            ),
            position: refused.position.unwrap_or(0),
            payload: refused.sha256,
        })
        .collect();
    let signature = Program::deserialize(value)
        .map(|parsed| {
            parsed
                .graph_module
                .signature
                .input_specs
                .into_iter()
                .filter_map(|spec| {
                    spec.parameter
                        .map(|p| p.parameter_name)
                        .or(spec.buffer.map(|b| b.buffer_name))
                        .or(spec.tensor_constant.map(|c| c.tensor_constant_name))
                })
                .collect()
        })
        .map_err(|e| e.to_string());
    (evaluated, signature)
}

/// [`read_program`] over bytes, as a fuzzer drives it: the evaluated strings found and the
/// signature's names, or why the JSON is refused.
pub(crate) fn check_program(
    text: &[u8],
) -> std::result::Result<(Vec<UnsafeGlobal>, Vec<String>), String> {
    let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    let (evaluated, signature) = read_program(&value, text, "models/model.json");
    Ok((evaluated, signature?))
}

/// What `torch.load` makes of bytes: a zip archive (`_is_zipfile`), else an old tar archive,
/// else a legacy stream, whose pickles it unpickles whatever their protocol.
fn torch_load(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let bytes = buffer.bytes();
    if bytes.starts_with(b"PK\x03\x04") {
        archive::read_into(buffer, sink)
    } else if tar::opens(bytes) {
        tar::read_into(buffer, sink)
    } else {
        legacy::read_into(buffer, sink)
    }
}

/// `os.path.join(dir, name)`, as torch builds a payload's member name: a name starting with
/// `/` replaces the folder.
fn joined(dir: &str, name: &str) -> String {
    if name.starts_with('/') {
        return name.to_owned();
    }
    format!("{dir}{name}")
}

/// A tensor's description in a config, checked.
struct Spec {
    dtype: DType,
    sizes: Vec<u64>,
    strides: Vec<u64>,
    offset: u64,
    device: Device,
}

impl Spec {
    fn parse(meta: &TensorMeta) -> std::result::Result<Spec, String> {
        let dtype =
            scalar_type(meta.dtype).ok_or_else(|| format!("unknown scalar type {}", meta.dtype))?;
        if meta.layout != STRIDED {
            return Err(format!("layout {} is not strided", meta.layout));
        }
        let ints = |what: &str, v: &[SymInt]| -> std::result::Result<Vec<u64>, String> {
            v.iter().map(|s| s.concrete(what)).collect()
        };
        let device = match (meta.device.kind.as_str(), meta.device.index) {
            (kind, None) => Device::parse(kind),
            (kind, Some(i)) if i >= 0 => Device::parse(&format!("{kind}:{i}")),
            (_, Some(i)) => return Err(format!("device index {i} is negative")),
        };
        Ok(Spec {
            dtype,
            sizes: ints("size", &meta.sizes)?,
            strides: ints("stride", &meta.strides)?,
            offset: meta.storage_offset.concrete("storage offset")?,
            device,
        })
    }
}

/// `torch._export.serde.schema.Layout.Strided`.
const STRIDED: i64 = 7;

/// `torch._export.serde.schema.ScalarType` as torch 2.9.1 numbers it.
fn scalar_type(code: i64) -> Option<DType> {
    Some(match code {
        1 => DType::UInt8,
        2 => DType::Int8,
        3 => DType::Int16,
        4 => DType::Int32,
        5 => DType::Int64,
        6 => DType::Float16,
        7 => DType::Float32,
        8 => DType::Float64,
        9 => DType::Complex32,
        10 => DType::Complex64,
        11 => DType::Complex128,
        12 => DType::Bool,
        13 => DType::BFloat16,
        28 => DType::UInt16,
        29 => DType::Float8E4m3fn,
        30 => DType::Float8E5m2,
        31 => DType::Float8E4m3fnuz,
        32 => DType::Float8E5m2fnuz,
        _ => return None,
    })
}

/// `PayloadConfig`: fqn → payload, in file order, duplicates kept to be refused.
#[derive(Deserialize)]
struct PayloadConfig {
    config: Entries<PayloadMeta>,
}

#[derive(Deserialize)]
struct PayloadMeta {
    path_name: String,
    #[serde(default)]
    is_param: bool,
    #[serde(default)]
    use_pickle: bool,
    tensor_meta: Option<TensorMeta>,
}

#[derive(Deserialize)]
struct TensorMeta {
    dtype: i64,
    sizes: Vec<SymInt>,
    #[serde(default)]
    requires_grad: bool,
    device: JsonDevice,
    strides: Vec<SymInt>,
    storage_offset: SymInt,
    layout: i64,
}

#[derive(Deserialize)]
struct JsonDevice {
    #[serde(rename = "type")]
    kind: String,
    index: Option<i64>,
}

/// A `SymInt` union: only `as_int` has a value a stored weight can have.
#[derive(Deserialize)]
struct SymInt {
    as_int: Option<i64>,
}

impl SymInt {
    fn concrete(&self, what: &str) -> std::result::Result<u64, String> {
        match self.as_int {
            Some(v) => u64::try_from(v).map_err(|_| format!("{what} {v} is negative")),
            None => Err(format!("{what} is symbolic, not an integer")),
        }
    }
}

/// What of `models/<name>.json` names the weights: its signature's input specs.
#[derive(Deserialize)]
struct Program {
    graph_module: GraphModule,
}

#[derive(Deserialize)]
struct GraphModule {
    signature: Signature,
}

#[derive(Deserialize)]
struct Signature {
    input_specs: Vec<InputSpec>,
}

#[derive(Deserialize)]
struct InputSpec {
    parameter: Option<ParameterSpec>,
    buffer: Option<BufferSpec>,
    tensor_constant: Option<ConstantSpec>,
}

#[derive(Deserialize)]
struct ParameterSpec {
    parameter_name: String,
}

#[derive(Deserialize)]
struct BufferSpec {
    buffer_name: String,
}

#[derive(Deserialize)]
struct ConstantSpec {
    tensor_constant_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(json: &str) -> TensorMeta {
        serde_json::from_str(json).expect("tensor meta")
    }

    const FLOAT_2X3: &str = r#"{"dtype": 7, "sizes": [{"as_int": 2}, {"as_int": 3}],
        "requires_grad": true, "device": {"type": "cuda", "index": 1},
        "strides": [{"as_int": 3}, {"as_int": 1}], "storage_offset": {"as_int": 4}, "layout": 7}"#;

    #[test]
    fn a_tensor_meta_gives_dtype_layout_and_device() {
        let spec = Spec::parse(&meta(FLOAT_2X3)).expect("valid");
        assert_eq!(spec.dtype, DType::Float32);
        assert_eq!(
            (spec.sizes, spec.strides, spec.offset),
            (vec![2, 3], vec![3, 1], 4)
        );
        assert_eq!(spec.device, Device::Cuda(Some(1)));
    }

    #[test]
    fn what_no_stored_weight_can_be_is_refused() {
        for (from, to, expected) in [
            (r#""dtype": 7"#, r#""dtype": 0"#, "unknown scalar type 0"),
            (
                r#""layout": 7"#,
                r#""layout": 1"#,
                "layout 1 is not strided",
            ),
            (
                r#"{"as_int": 2}"#,
                r#"{"as_int": -2}"#,
                "size -2 is negative",
            ),
            (
                r#"{"as_int": 2}"#,
                r#"{"as_expr": {"expr_str": "s0"}}"#,
                "size is symbolic",
            ),
            (
                r#""index": 1"#,
                r#""index": -1"#,
                "device index -1 is negative",
            ),
        ] {
            let json = FLOAT_2X3.replacen(from, to, 1);
            let err = Spec::parse(&meta(&json)).err().expect("refused");
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn scalar_types_follow_torchs_numbering() {
        assert_eq!(scalar_type(5), Some(DType::Int64));
        assert_eq!(scalar_type(13), Some(DType::BFloat16));
        assert_eq!(scalar_type(28), Some(DType::UInt16));
        assert_eq!(scalar_type(32), Some(DType::Float8E5m2fnuz));
        assert_eq!(scalar_type(14), None);
    }
}
