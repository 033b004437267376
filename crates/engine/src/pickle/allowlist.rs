//! Which globals tensorplay interprets, and which ones a loader resolves safely.
//!
//! A global is judged on its full dotted name, `module.name`, looked up exactly — never by
//! prefix. Python's unpickler (protocol ≥ 4) walks a dotted name attribute by attribute, so
//! `torch.jit._pickle` + `build_intlist.__globals__` reaches a function's globals and from
//! there `exec`; only a name that is exactly in a table is safe.
//!
//! `torch.load` resolves exactly the names of `_get_allowed_globals()`
//! (`torch/_weights_only_unpickler.py`): `weights_only` below is that table, name for name. A
//! TorchScript archive is read by `torch.jit.load`'s own unpickler, which also resolves the
//! classes compiled from the archive's code (`__torch__.*`), its list helpers
//! (`torch.jit._pickle`) and a storage class per scalar type: `torchscript_only`. Those
//! names are safe only in a TorchScript archive; anywhere else `torch.load` would import them.

use crate::DType;

/// What an allowlisted global is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// `collections.OrderedDict`, `collections.Counter`
    Dict,
    /// `_codecs.encode`: protocol 2's way of writing bytes.
    CodecsEncode,
    /// `builtins.set`
    Set,
    /// `builtins.bytearray`
    Bytearray,
    /// `builtins.complex`, `torch.Tensor`, `torch.FloatTensor`… and other safe names
    /// that build nothing tensorplay needs to see inside.
    Opaque,
    /// `torch._utils._rebuild_tensor`
    RebuildTensor,
    /// `torch._utils._rebuild_tensor_v2`
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3`
    RebuildTensorV3,
    /// `torch._utils._rebuild_parameter`
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state`
    RebuildParameterWithState,
    /// `torch._tensor._rebuild_from_type_v2`
    RebuildFromTypeV2,
    /// `torch._utils._rebuild_qtensor`
    RebuildQTensor,
    /// `torch._utils._rebuild_sparse_tensor`
    RebuildSparse,
    /// `torch._utils._rebuild_nested_tensor`
    RebuildNested,
    /// `torch._utils._rebuild_wrapper_subclass`
    RebuildWrapperSubclass,
    /// `torch._utils._rebuild_meta_tensor_no_storage`
    RebuildMetaNoStorage,
    /// `torch._utils._rebuild_device_tensor_from_cpu_tensor`
    RebuildDeviceFromCpu,
    /// `torch.nn.parameter.Parameter`
    ParameterClass,
    /// `torch.Size`
    Size,
    /// `torch.device`
    Device,
    /// `torch.serialization._get_layout`
    GetLayout,
    /// A storage class: typed (`torch.FloatStorage`, TorchScript's `torch.BFloat16Storage`)
    /// or untyped (`None`: `torch.storage.UntypedStorage`).
    Storage(Option<DType>),
    /// A dtype: `torch.float32`…
    Dtype(DType),
    /// A quantization scheme: `torch.per_tensor_affine`…
    QScheme,
    /// TorchScript's `torch.jit._pickle.build_*list` / `restore_type_tag` /
    /// `build_tensor_from_id`: the first argument, unchanged.
    JitIdentity,
}

/// What a global is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// In a loader's table, and interpreted.
    Known(Known),
    /// A TorchScript class (`__torch__.*`): compiled from the archive's own code by
    /// TorchScript's loader, not imported from Python; kept opaque.
    TorchScript,
    /// In no table: recorded, never called.
    Unsafe,
}

/// The loader that would read a pickle, which decides the names it resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loader {
    /// `torch.load`: Python's unpickler (`torch.save` zips, legacy files, bare pickles).
    Python,
    /// `torch.jit.load`: TorchScript's unpickler, for the pickles of a TorchScript archive.
    TorchScript,
}

/// Python 2 module names as `pickle`'s `fix_imports` maps them.
pub fn map_module(module: &str) -> &str {
    match module {
        "__builtin__" => "builtins",
        "copy_reg" => "copyreg",
        other => other,
    }
}

/// What `module.name` (module already mapped) is, in any loader's table.
pub fn classify(module: &str, name: &str) -> Class {
    match with_full_name(module, name, weights_only) {
        Some(known) => Class::Known(known),
        None => torchscript_only(module, name).unwrap_or(Class::Unsafe),
    }
}

/// Whether `loader` resolves `module.name` (module already mapped) from its own table;
/// anything else it would import and call.
pub fn resolves(loader: Loader, module: &str, name: &str) -> bool {
    with_full_name(module, name, |full| {
        weights_only(full).is_some()
            || (loader == Loader::Python && IMPORT_TORCH_REGISTERS.contains(&full))
    }) || (loader == Loader::TorchScript && torchscript_only(module, name).is_some())
}

/// What `import torch.distributed.tensor` registers (torch 2.15.0's list, 2.9.1's and two more).
pub(crate) const DTENSOR_REGISTERS: [&str; 9] = [
    "torch.distributed.device_mesh.DeviceMesh",
    "torch.distributed.tensor._dtensor_spec.DTensorSpec",
    "torch.distributed.tensor._dtensor_spec.ShardOrderEntry",
    "torch.distributed.tensor._dtensor_spec.TensorMeta",
    "torch.distributed.tensor.DTensor",
    "torch.distributed.tensor.placement_types.Partial",
    "torch.distributed.tensor.placement_types.Replicate",
    "torch.distributed.tensor.placement_types.Shard",
    "torch.distributed.tensor.placement_types._StridedShard",
];

/// What `import torch` itself adds to the safe globals (`add_safe_globals`), which
/// `torch.load(weights_only=True)` then resolves like its own table: torch.nested's (torch
/// 2.9.1) and the device mesh layouts (torch 2.15.0). Resolved, so never named unsafe; still
/// modelled as what they are not in the table for (opaque, never called).
pub(crate) const IMPORT_TORCH_REGISTERS: [&str; 4] = [
    "torch.nested._internal.nested_tensor.NestedTensor",
    "torch.nested._internal.nested_tensor._rebuild_njt",
    "torch.distributed._mesh_layout._FlatLayout",
    "torch.distributed._mesh_layout._MeshLayout",
];

/// `f` of the dotted path a loader resolves (PyTorch's table keys on `f"{module}.{name}"`),
/// joined on the stack when it is short: a pickle calls its globals once per tensor.
fn with_full_name<R>(module: &str, name: &str, f: impl FnOnce(&str) -> R) -> R {
    let mut buf = [0u8; 128];
    let len = module.len() + 1 + name.len();
    if let Some(out) = buf.get_mut(..len) {
        let (m, rest) = out.split_at_mut(module.len());
        m.copy_from_slice(module.as_bytes());
        if let Some((dot, n)) = rest.split_first_mut() {
            *dot = b'.';
            n.copy_from_slice(name.as_bytes());
        }
        // Two strings joined by an ASCII dot are UTF-8.
        if let Ok(full) = std::str::from_utf8(out) {
            return f(full);
        }
    }
    f(&format!("{module}.{name}"))
}

/// `torch.load`'s table: `_get_allowed_globals()` of torch 2.9.1, name for name, and the one
/// name torch 2.15.0 adds, `torch.bcomplex32` (a dtype; `dtype` below). torch 2.15 also drops
/// `_rebuild_nested_tensor`, which stays: a file either version loads is read.
fn weights_only(full: &str) -> Option<Known> {
    use Known::*;
    Some(match full {
        "collections.OrderedDict" | "collections.Counter" => Dict,
        "torch.nn.parameter.Parameter" => ParameterClass,
        "torch.serialization._get_layout" => GetLayout,
        "torch.Size" => Size,
        "torch.Tensor" => Opaque,
        "torch.device" => Device,
        "_codecs.encode" => CodecsEncode,
        "builtins.bytearray" => Bytearray,
        "builtins.set" => Set,
        "builtins.complex" => Opaque,
        "torch.storage.UntypedStorage" => Storage(None),
        "torch.storage.TypedStorage" => Opaque,
        "torch.per_tensor_affine"
        | "torch.per_tensor_symmetric"
        | "torch.per_channel_affine"
        | "torch.per_channel_symmetric"
        | "torch.per_channel_affine_float_qparams" => QScheme,
        // `_tensor_rebuild_functions()`
        "torch._utils._rebuild_parameter" => RebuildParameter,
        "torch._utils._rebuild_parameter_with_state" => RebuildParameterWithState,
        "torch._utils._rebuild_qtensor" => RebuildQTensor,
        "torch._utils._rebuild_tensor" => RebuildTensor,
        "torch._utils._rebuild_tensor_v2" => RebuildTensorV2,
        "torch._utils._rebuild_tensor_v3" => RebuildTensorV3,
        "torch._utils._rebuild_sparse_tensor" => RebuildSparse,
        "torch._utils._rebuild_meta_tensor_no_storage" => RebuildMetaNoStorage,
        "torch._utils._rebuild_device_tensor_from_cpu_tensor" => RebuildDeviceFromCpu,
        "torch._utils._rebuild_nested_tensor" => RebuildNested,
        "torch._utils._rebuild_wrapper_subclass" => RebuildWrapperSubclass,
        "torch._utils._rebuild_device_tensor_from_numpy" => Opaque,
        "torch._tensor._rebuild_from_type_v2" => RebuildFromTypeV2,
        _ => return torch_class(full),
    })
}

/// The legacy storage classes (`torch._storage_classes`) as `torch.<prefix>Storage`;
/// `torch.cuda` has all but the quantized ones.
const LEGACY_STORAGES: [&str; 17] = [
    "BFloat16",
    "Bool",
    "Byte",
    "Char",
    "ComplexDouble",
    "ComplexFloat",
    "Double",
    "Float",
    "Half",
    "Int",
    "Long",
    "QInt32",
    "QInt8",
    "QUInt2x4",
    "QUInt4x2",
    "QUInt8",
    "Short",
];

/// The tensor classes (`torch._tensor_classes`) as `torch.<prefix>Tensor`, also under
/// `torch.cuda`; the sparse ones (`torch.sparse`, `torch.cuda.sparse`) have no `Bool`.
const TENSOR_CLASSES: [&str; 10] = [
    "BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short",
];

/// Dtypes, legacy storage classes and tensor classes of `weights_only`.
fn torch_class(full: &str) -> Option<Known> {
    let (module, attr) = full.rsplit_once('.')?;
    let storage = |cuda: bool| {
        let prefix = attr.strip_suffix("Storage")?;
        let listed = LEGACY_STORAGES.contains(&prefix) && !(cuda && prefix.starts_with('Q'));
        listed
            .then(|| storage_dtype(prefix))
            .flatten()
            .map(|d| Known::Storage(Some(d)))
    };
    let tensor_class = |sparse: bool| {
        let prefix = attr.strip_suffix("Tensor")?;
        (TENSOR_CLASSES.contains(&prefix) && !(sparse && prefix == "Bool")).then_some(Known::Opaque)
    };
    match module {
        "torch" => dtype(attr)
            .or_else(|| storage(false))
            .or_else(|| tensor_class(false)),
        "torch.cuda" => storage(true).or_else(|| tensor_class(false)),
        "torch.sparse" | "torch.cuda.sparse" => tensor_class(true),
        _ => None,
    }
}

/// `torch.<attr>` as a dtype: every torch dtype tensorplay knows (`str(dtype)` names), and
/// the sub-byte `int1`…`int7`, `uint1`…`uint7`, which no tensor can be saved with.
fn dtype(attr: &str) -> Option<Known> {
    // The sub-byte safetensors-only dtypes have no `torch.<name>`.
    if let Some(dtype) = DType::from_name(attr).filter(|d| d.bits().is_multiple_of(8)) {
        return Some(Known::Dtype(dtype));
    }
    let bits = attr
        .strip_prefix("uint")
        .or_else(|| attr.strip_prefix("int"))?;
    matches!(bits, "1" | "2" | "3" | "4" | "5" | "6" | "7").then_some(Known::Opaque)
}

/// What `torch.jit.load`'s unpickler resolves beyond `weights_only`
/// (`Unpickler::readGlobal`, which compares module and name apart): TorchScript classes,
/// its list helpers, and a storage class for every scalar type (`toString(ScalarType)`).
fn torchscript_only(module: &str, name: &str) -> Option<Class> {
    match (module, name) {
        (
            "torch.jit._pickle",
            "build_intlist"
            | "build_tensorlist"
            | "build_doublelist"
            | "build_boollist"
            | "build_tensor_from_id"
            | "restore_type_tag",
        ) => Some(Class::Known(Known::JitIdentity)),
        ("torch", _) => {
            let dtype = storage_dtype(name.strip_suffix("Storage")?)?;
            Some(Class::Known(Known::Storage(Some(dtype))))
        }
        _ => {
            // A class compiled from the archive's code, by its qualified name: identifiers
            // joined by dots under `__torch__`.
            with_full_name(module, name, |path| {
                let mut parts = path.split('.');
                (parts.next() == Some("__torch__") && parts.all(is_identifier))
                    .then_some(Class::TorchScript)
            })
        }
    }
}

/// An ASCII identifier, as TorchScript names its classes (`___torch_mangle_0` included).
fn is_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The dtype of a storage class, from its name without the `Storage` suffix: the legacy
/// Python classes (`Float`, `Long`…) and TorchScript's `toString(ScalarType)` names.
pub fn storage_dtype(prefix: &str) -> Option<DType> {
    use DType::*;
    Some(match prefix {
        "Double" => Float64,
        "Float" => Float32,
        "Half" => Float16,
        "BFloat16" => BFloat16,
        "Long" => Int64,
        "Int" => Int32,
        "Short" => Int16,
        "Char" => Int8,
        "Byte" => UInt8,
        "Bool" => Bool,
        "ComplexHalf" => Complex32,
        "ComplexFloat" => Complex64,
        "ComplexDouble" => Complex128,
        "QInt8" => QInt8,
        "QUInt8" => QUInt8,
        "QInt32" => QInt32,
        "QUInt4x2" => QUInt4x2,
        "QUInt2x4" => QUInt2x4,
        "UInt16" => UInt16,
        "UInt32" => UInt32,
        "UInt64" => UInt64,
        "Float8_e5m2" => Float8E5m2,
        "Float8_e4m3fn" => Float8E4m3fn,
        "Float8_e5m2fnuz" => Float8E5m2fnuz,
        "Float8_e4m3fnuz" => Float8E4m3fnuz,
        "Float8_e8m0fnu" => Float8E8m0fnu,
        "Float4_e2m1fn_x2" => Float4E2m1fnX2,
        "Bits8" => Bits8,
        "Bits16" => Bits16,
        "Bits1x8" => Bits1x8,
        "Bits2x4" => Bits2x4,
        "Bits4x2" => Bits4x2,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Loader::{Python, TorchScript};

    /// `sorted(torch._weights_only_unpickler._get_allowed_globals())`, torch 2.9.1, and
    /// `torch.bcomplex32` (torch 2.15.0).
    const TORCH_TABLE: &str = "\
        _codecs.encode builtins.bytearray builtins.complex builtins.set collections.Counter
        collections.OrderedDict torch.BFloat16Storage torch.BFloat16Tensor torch.BoolStorage
        torch.BoolTensor torch.ByteStorage torch.ByteTensor torch.CharStorage torch.CharTensor
        torch.ComplexDoubleStorage torch.ComplexFloatStorage torch.DoubleStorage
        torch.DoubleTensor torch.FloatStorage torch.FloatTensor torch.HalfStorage
        torch.HalfTensor torch.IntStorage torch.IntTensor torch.LongStorage torch.LongTensor
        torch.QInt32Storage torch.QInt8Storage torch.QUInt2x4Storage torch.QUInt4x2Storage
        torch.QUInt8Storage torch.ShortStorage torch.ShortTensor torch.Size torch.Tensor
        torch._tensor._rebuild_from_type_v2 torch._utils._rebuild_device_tensor_from_cpu_tensor
        torch._utils._rebuild_device_tensor_from_numpy
        torch._utils._rebuild_meta_tensor_no_storage torch._utils._rebuild_nested_tensor
        torch._utils._rebuild_parameter torch._utils._rebuild_parameter_with_state
        torch._utils._rebuild_qtensor torch._utils._rebuild_sparse_tensor
        torch._utils._rebuild_tensor torch._utils._rebuild_tensor_v2
        torch._utils._rebuild_tensor_v3 torch._utils._rebuild_wrapper_subclass torch.bcomplex32
        torch.bfloat16
        torch.bits16 torch.bits1x8 torch.bits2x4 torch.bits4x2 torch.bits8 torch.bool
        torch.complex128 torch.complex32 torch.complex64 torch.cuda.BFloat16Storage
        torch.cuda.BFloat16Tensor torch.cuda.BoolStorage torch.cuda.BoolTensor
        torch.cuda.ByteStorage torch.cuda.ByteTensor torch.cuda.CharStorage
        torch.cuda.CharTensor torch.cuda.ComplexDoubleStorage torch.cuda.ComplexFloatStorage
        torch.cuda.DoubleStorage torch.cuda.DoubleTensor torch.cuda.FloatStorage
        torch.cuda.FloatTensor torch.cuda.HalfStorage torch.cuda.HalfTensor
        torch.cuda.IntStorage torch.cuda.IntTensor torch.cuda.LongStorage
        torch.cuda.LongTensor torch.cuda.ShortStorage torch.cuda.ShortTensor
        torch.cuda.sparse.BFloat16Tensor torch.cuda.sparse.ByteTensor
        torch.cuda.sparse.CharTensor torch.cuda.sparse.DoubleTensor
        torch.cuda.sparse.FloatTensor torch.cuda.sparse.HalfTensor torch.cuda.sparse.IntTensor
        torch.cuda.sparse.LongTensor torch.cuda.sparse.ShortTensor torch.device torch.float16
        torch.float32 torch.float4_e2m1fn_x2 torch.float64 torch.float8_e4m3fn
        torch.float8_e4m3fnuz torch.float8_e5m2 torch.float8_e5m2fnuz torch.float8_e8m0fnu
        torch.int1 torch.int16 torch.int2 torch.int3 torch.int32 torch.int4 torch.int5
        torch.int6 torch.int64 torch.int7 torch.int8 torch.nn.parameter.Parameter
        torch.per_channel_affine torch.per_channel_affine_float_qparams
        torch.per_channel_symmetric torch.per_tensor_affine torch.per_tensor_symmetric
        torch.qint32 torch.qint8 torch.quint2x4 torch.quint4x2 torch.quint8
        torch.serialization._get_layout torch.sparse.BFloat16Tensor torch.sparse.ByteTensor
        torch.sparse.CharTensor torch.sparse.DoubleTensor torch.sparse.FloatTensor
        torch.sparse.HalfTensor torch.sparse.IntTensor torch.sparse.LongTensor
        torch.sparse.ShortTensor torch.storage.TypedStorage torch.storage.UntypedStorage
        torch.uint1 torch.uint16 torch.uint2 torch.uint3 torch.uint32 torch.uint4 torch.uint5
        torch.uint6 torch.uint64 torch.uint7 torch.uint8";

    /// Each name is in no table: unsafe whichever loader reads it.
    fn assert_unsafe_everywhere(names: &[(&str, &str)]) {
        for &(m, n) in names {
            assert_eq!(classify(m, n), Class::Unsafe, "{m:?}.{n:?}");
            assert!(!resolves(Python, m, n), "{m:?}.{n:?}");
            assert!(!resolves(TorchScript, m, n), "{m:?}.{n:?}");
        }
    }

    fn torch_table() -> Vec<(&'static str, &'static str)> {
        TORCH_TABLE
            .split_whitespace()
            .map(|full| full.rsplit_once('.').expect("dotted"))
            .collect()
    }

    #[test]
    fn every_name_of_torchs_table_is_resolved_by_both_loaders() {
        let table = torch_table();
        assert_eq!(table.len(), 145);
        for (m, n) in table {
            assert!(matches!(classify(m, n), Class::Known(_)), "{m}.{n}");
            assert!(resolves(Python, m, n), "{m}.{n}");
            assert!(resolves(TorchScript, m, n), "{m}.{n}");
        }
    }

    #[test]
    fn python_resolves_nothing_outside_torchs_table() {
        // Every name the table's families could spell, under every module they use.
        let table: Vec<String> = TORCH_TABLE.split_whitespace().map(String::from).collect();
        let mut attrs: Vec<String> = DType::ALL.iter().map(|d| d.name().to_owned()).collect();
        for prefix in LEGACY_STORAGES
            .iter()
            .chain(&TENSOR_CLASSES)
            .copied()
            .chain([
                "ComplexHalf",
                "UInt16",
                "Float8_e4m3fn",
                "Bits8",
                "Untyped",
                "Typed",
                "_Legacy",
            ])
        {
            attrs.push(format!("{prefix}Storage"));
            attrs.push(format!("{prefix}Tensor"));
        }
        attrs
            .extend(["half", "float", "long", "cfloat", "int0", "int8x", "uint"].map(String::from));
        for module in [
            "torch",
            "torch.cuda",
            "torch.sparse",
            "torch.cuda.sparse",
            "torch.storage",
            "torch.jit._pickle",
        ] {
            for attr in &attrs {
                let full = format!("{module}.{attr}");
                assert_eq!(
                    resolves(Python, module, attr),
                    table.contains(&full),
                    "{full}"
                );
            }
        }
    }

    #[test]
    fn dangerous_names_are_unsafe_for_both_loaders() {
        assert_unsafe_everywhere(&[
            ("posix", "system"),
            ("os", "system"),
            ("nt", "system"),
            ("builtins", "eval"),
            ("builtins", "exec"),
            ("builtins", "getattr"),
            ("builtins", "frozenset"),
            ("importlib", "import_module"),
            ("subprocess", "Popen"),
            ("torch", "load"),
            ("torch", "_C"),
            ("torch", "UntypedStorage"),
            ("torch.storage", "_LegacyStorage"),
            ("torch.serialization", "load"),
            ("__main__", "Net"),
            ("torch.nn.modules.linear", "Linear"),
            ("torch._utils", "_rebuild_anything_new"),
            ("torch.jit._pickle", "build_anything"),
            ("torch.jit", "load"),
        ]);
    }

    /// The old allowlist took `torch.jit._pickle.build_*` by prefix.
    #[test]
    fn a_name_sharing_a_prefix_with_an_allowlisted_one_is_unsafe() {
        assert_unsafe_everywhere(&[
            ("torch.jit._pickle", "build_"),
            ("torch.jit._pickle", "build_intlistx"),
            ("torch.jit._pickle", "build_exec"),
            ("torch._utils", "_rebuild_tensor_v2x"),
            ("torch", "FloatStorageX"),
            ("torch", "float32x"),
            ("collections", "OrderedDictX"),
            ("torch.jit._picklex", "build_intlist"),
            ("torch.jit", "_pickle"),
            ("__torch__x", "Evil"),
        ]);
    }

    /// Protocol 4 resolves `a.b.c` attribute by attribute: a name reaching past an
    /// allowlisted one is judged whole, and is in no table.
    #[test]
    fn a_dotted_attribute_path_past_an_allowlisted_name_is_unsafe() {
        assert_unsafe_everywhere(&[
            ("torch.jit._pickle", "build_intlist.__globals__"),
            (
                "torch.jit._pickle",
                "build_intlist.__builtins__.__getitem__",
            ),
            ("torch.jit._pickle", "restore_type_tag.__globals__"),
            ("torch._utils", "_rebuild_tensor_v2.__globals__"),
            ("collections", "OrderedDict.fromkeys"),
            ("builtins", "set.__init__"),
            ("torch", "Size.__class__.__base__.__subclasses__"),
            ("torch", "FloatStorage.__module__"),
            // TorchScript's unpickler compares module and name apart: a dotted split of
            // its own names resolves nothing there either.
            ("torch", "jit._pickle.build_intlist"),
            ("torch.jit", "_pickle.build_intlist"),
            ("torch", "cuda.ComplexHalfStorage"),
        ]);
        // A qualified TorchScript name stays one for TorchScript; Python would import it.
        assert!(!resolves(Python, "__torch__", "Evil.__init__"));
        // What `import torch` registers, torch.load resolves; TorchScript's unpickler does not.
        for (m, n) in [
            ("torch.distributed._mesh_layout", "_MeshLayout"),
            ("torch.nested._internal.nested_tensor", "_rebuild_njt"),
        ] {
            assert!(
                resolves(Python, m, n) && !resolves(TorchScript, m, n),
                "{m}.{n}"
            );
            assert_eq!(
                classify(m, n),
                Class::Unsafe,
                "modelled as before: never called"
            );
        }
        // The same full path split elsewhere is the same object: PyTorch's table keys on it.
        assert_eq!(
            classify("torch", "_utils._rebuild_tensor_v2"),
            Class::Known(Known::RebuildTensorV2)
        );
        assert!(resolves(Python, "torch", "_utils._rebuild_tensor_v2"));
    }

    #[test]
    fn torchscript_names_are_safe_only_in_a_torchscript_archive() {
        for (m, n) in [
            ("__torch__", "Evil"),
            ("__torch__", "SmallModule"),
            ("__torch__.torch.nn.modules.linear", "Linear"),
            ("__torch__.___torch_mangle_3", "Module"),
        ] {
            assert_eq!(classify(m, n), Class::TorchScript, "{m}.{n}");
            assert!(resolves(TorchScript, m, n), "{m}.{n}");
            assert!(!resolves(Python, m, n), "{m}.{n}");
        }
        for (m, n, known) in [
            ("torch.jit._pickle", "build_intlist", Known::JitIdentity),
            (
                "torch.jit._pickle",
                "build_tensor_from_id",
                Known::JitIdentity,
            ),
            ("torch.jit._pickle", "restore_type_tag", Known::JitIdentity),
            (
                "torch",
                "ComplexHalfStorage",
                Known::Storage(Some(DType::Complex32)),
            ),
            (
                "torch",
                "Float8_e4m3fnStorage",
                Known::Storage(Some(DType::Float8E4m3fn)),
            ),
        ] {
            assert_eq!(classify(m, n), Class::Known(known), "{m}.{n}");
            assert!(resolves(TorchScript, m, n), "{m}.{n}");
            assert!(!resolves(Python, m, n), "{m}.{n}");
        }
        // Not a qualified TorchScript name.
        assert_unsafe_everywhere(&[
            ("__torch__", ""),
            ("__torch__", "Evil "),
            ("__torch__", "1Evil"),
            ("__torch__..x", "Evil"),
            ("__torch__", "Évil"),
        ]);
    }

    /// GLOBAL's operands are the bytes of two lines up to `\n`, as Python reads them
    /// (`readline()[:-1]`): no trimming, no Unicode normalization.
    #[test]
    fn whitespace_and_lookalike_characters_make_another_name() {
        assert_unsafe_everywhere(&[
            ("torch._utils", "_rebuild_tensor_v2\r"),
            ("torch._utils", " _rebuild_tensor_v2"),
            ("torch._utils ", "_rebuild_tensor_v2"),
            ("torch._utils", "_rebuild_tensor_v2\0"),
            ("torch._utils", "_rebuild_tensor_v2\t"),
            ("collections", "OrderedDict\u{200b}"),
            ("collections", "Ordered\u{202e}Dict"),
            // Fullwidth `ｔorch`, Cyrillic `с` in `collections`, NFKC-equal but other bytes.
            ("\u{ff54}orch", "Size"),
            ("\u{0441}ollections", "OrderedDict"),
            ("torch", "ﬂoat32"),
            ("Torch", "Size"),
            ("torch", "size"),
            ("__torch__\u{00a0}", "Evil"),
            ("__torch__", "Evil\r"),
        ]);
    }

    #[test]
    fn pytorch_names_are_interpreted() {
        assert_eq!(
            classify("torch", "FloatStorage"),
            Class::Known(Known::Storage(Some(DType::Float32)))
        );
        assert_eq!(
            classify("torch.cuda", "HalfStorage"),
            Class::Known(Known::Storage(Some(DType::Float16)))
        );
        assert_eq!(classify("torch.cuda", "QInt8Storage"), Class::Unsafe);
        assert_eq!(
            classify("torch.storage", "UntypedStorage"),
            Class::Known(Known::Storage(None))
        );
        assert_eq!(
            classify("torch", "float8_e4m3fn"),
            Class::Known(Known::Dtype(DType::Float8E4m3fn))
        );
        assert_eq!(
            classify("torch", "bfloat16"),
            Class::Known(Known::Dtype(DType::BFloat16))
        );
        assert_eq!(classify("torch", "uint4"), Class::Known(Known::Opaque));
        assert_eq!(classify("torch", "float4_e2m1fn"), Class::Unsafe);
        assert_eq!(
            classify("torch", "FloatTensor"),
            Class::Known(Known::Opaque)
        );
        assert_eq!(classify("torch.sparse", "BoolTensor"), Class::Unsafe);
        assert_eq!(
            classify(map_module("__builtin__"), "set"),
            Class::Known(Known::Set)
        );
    }
}
