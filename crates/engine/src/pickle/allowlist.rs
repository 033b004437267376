//! Which globals tensorplay interprets: PyTorch's `weights_only` allowlist
//! (`torch/_weights_only_unpickler.py`). Everything else is unsafe and stays a name.

use crate::DType;

/// What an allowlisted global is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// `collections.OrderedDict`, `collections.Counter`
    Dict,
    /// `_codecs.encode`: protocol 2's way of writing bytes.
    CodecsEncode,
    /// `builtins.set` / `builtins.frozenset`
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
    /// or untyped (`None`: `torch.storage.UntypedStorage`, `torch.UntypedStorage`).
    Storage(Option<DType>),
    /// A dtype: `torch.float32`…
    Dtype(DType),
    /// A quantization scheme: `torch.per_tensor_affine`…
    QScheme,
    /// `torch.jit._pickle.build_*list` / `restore_type_tag`: the first argument, unchanged.
    JitIdentity,
}

/// How the machine treats a global.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Allowlisted and interpreted.
    Known(Known),
    /// A TorchScript class (`__torch__.*`): compiled from the archive's own code by
    /// TorchScript's loader, not imported from Python; kept opaque, not unsafe.
    TorchScript,
    /// Anything else: recorded, never called.
    Unsafe,
}

/// Python 2 module names as `pickle`'s `fix_imports` maps them.
pub fn map_module(module: &str) -> &str {
    match module {
        "__builtin__" => "builtins",
        "copy_reg" => "copyreg",
        other => other,
    }
}

/// Classifies `module.name` (module already mapped).
pub fn classify(module: &str, name: &str) -> Class {
    use Known::*;
    if module == "__torch__" || module.starts_with("__torch__.") {
        return Class::TorchScript;
    }
    let known = match (module, name) {
        ("collections", "OrderedDict" | "Counter") => Dict,
        ("_codecs", "encode") => CodecsEncode,
        ("builtins", "set" | "frozenset") => Set,
        ("builtins", "bytearray") => Bytearray,
        ("builtins", "complex") => Opaque,
        ("torch._utils", "_rebuild_tensor") => RebuildTensor,
        ("torch._utils", "_rebuild_tensor_v2") => RebuildTensorV2,
        ("torch._utils", "_rebuild_tensor_v3") => RebuildTensorV3,
        ("torch._utils", "_rebuild_parameter") => RebuildParameter,
        ("torch._utils", "_rebuild_parameter_with_state") => RebuildParameterWithState,
        ("torch._utils", "_rebuild_qtensor") => RebuildQTensor,
        ("torch._utils", "_rebuild_sparse_tensor") => RebuildSparse,
        ("torch._utils", "_rebuild_meta_tensor_no_storage") => RebuildMetaNoStorage,
        ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor") => RebuildDeviceFromCpu,
        (
            "torch._utils",
            "_rebuild_wrapper_subclass"
            | "_rebuild_device_tensor_from_numpy"
            | "_rebuild_nested_tensor",
        ) => Opaque,
        ("torch._tensor", "_rebuild_from_type_v2") => RebuildFromTypeV2,
        ("torch.nn.parameter", "Parameter") => ParameterClass,
        ("torch.serialization", "_get_layout") => GetLayout,
        ("torch.storage", "UntypedStorage" | "_LegacyStorage") => Storage(None),
        ("torch.storage", "TypedStorage") => Opaque,
        ("torch.jit._pickle", n) if n.starts_with("build_") || n == "restore_type_tag" => {
            JitIdentity
        }
        ("torch", "Size") => Size,
        ("torch", "device") => Device,
        ("torch", "Tensor") => Opaque,
        ("torch", "UntypedStorage") => Storage(None),
        (
            "torch",
            "per_tensor_affine"
            | "per_tensor_symmetric"
            | "per_channel_affine"
            | "per_channel_symmetric"
            | "per_channel_affine_float_qparams",
        ) => QScheme,
        ("torch", n) => {
            // The sub-byte safetensors-only dtypes have no `torch.<name>`.
            if let Some(dtype) = DType::from_name(n).filter(|d| d.bits().is_multiple_of(8)) {
                Dtype(dtype)
            } else if let Some(storage) = n.strip_suffix("Storage") {
                match storage_dtype(storage) {
                    Some(dtype) => Storage(Some(dtype)),
                    None => return Class::Unsafe,
                }
            } else if n.strip_suffix("Tensor").and_then(storage_dtype).is_some() {
                Opaque
            } else {
                return Class::Unsafe;
            }
        }
        _ => return Class::Unsafe,
    };
    Class::Known(known)
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

    #[test]
    fn dangerous_names_are_unsafe() {
        for (m, n) in [
            ("posix", "system"),
            ("os", "system"),
            ("nt", "system"),
            ("builtins", "eval"),
            ("builtins", "exec"),
            ("builtins", "getattr"),
            ("importlib", "import_module"),
            ("subprocess", "Popen"),
            ("torch", "load"),
            ("torch", "_C"),
            ("torch.serialization", "load"),
            ("__main__", "Net"),
            ("torch.nn.modules.linear", "Linear"),
            ("torch._utils", "_rebuild_anything_new"),
        ] {
            assert_eq!(classify(m, n), Class::Unsafe, "{m}.{n}");
        }
    }

    #[test]
    fn pytorch_names_are_interpreted() {
        assert_eq!(
            classify("torch", "FloatStorage"),
            Class::Known(Known::Storage(Some(DType::Float32)))
        );
        assert_eq!(
            classify("torch", "ComplexHalfStorage"),
            Class::Known(Known::Storage(Some(DType::Complex32)))
        );
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
        assert_eq!(
            classify("torch", "FloatTensor"),
            Class::Known(Known::Opaque)
        );
        assert_eq!(
            classify(map_module("__builtin__"), "set"),
            Class::Known(Known::Set)
        );
        assert_eq!(
            classify("__torch__.torch.nn.modules.linear", "Linear"),
            Class::TorchScript
        );
        assert_eq!(classify("__torch__", "SmallModule"), Class::TorchScript);
        assert_eq!(classify("__torch__x", "Evil"), Class::Unsafe);
    }
}
