//! Element types, named as PyTorch names them.

use std::fmt;

/// Declares [`DType`] and its per-dtype facts from one table, so a dtype cannot be
/// added without its name, width and kind.
macro_rules! dtypes {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $bits:literal bits, $kind:ident;)*) => {
        /// The element type of a tensor or storage.
        ///
        /// Names follow `str(torch.<dtype>)` without the `torch.` prefix. The sub-byte
        /// micro-scaling codes of safetensors that PyTorch has no dtype for (`F6_E2M3`,
        /// `F6_E3M2`, and `F4` as the header declares it) take the OCP MX names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum DType {
            $($(#[$doc])* #[doc = concat!("`", $name, "`")] $variant,)*
        }

        impl DType {
            /// Every dtype, in declaration order.
            pub const ALL: &'static [DType] = &[$(DType::$variant),*];

            /// The PyTorch name (`float32`, `bfloat16`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $(DType::$variant => $name,)*
                }
            }

            /// Bits one element occupies in memory. Only the safetensors micro-scaling
            /// types are narrower than a byte; PyTorch's packed types count one byte per element.
            pub fn bits(self) -> u64 {
                match self {
                    $(DType::$variant => $bits,)*
                }
            }

            /// How the element's bits are interpreted.
            pub fn kind(self) -> DTypeKind {
                match self {
                    $(DType::$variant => DTypeKind::$kind,)*
                }
            }
        }
    };
}

dtypes! {
    Bool = "bool", 8 bits, Bool;
    UInt8 = "uint8", 8 bits, Integer;
    Int8 = "int8", 8 bits, Integer;
    Int16 = "int16", 16 bits, Integer;
    UInt16 = "uint16", 16 bits, Integer;
    Int32 = "int32", 32 bits, Integer;
    UInt32 = "uint32", 32 bits, Integer;
    Int64 = "int64", 64 bits, Integer;
    UInt64 = "uint64", 64 bits, Integer;
    Float16 = "float16", 16 bits, Float;
    BFloat16 = "bfloat16", 16 bits, Float;
    Float32 = "float32", 32 bits, Float;
    Float64 = "float64", 64 bits, Float;
    Complex32 = "complex32", 32 bits, Complex;
    /// Two `bfloat16` parts (torch 2.15).
    BComplex32 = "bcomplex32", 32 bits, Complex;
    Complex64 = "complex64", 64 bits, Complex;
    Complex128 = "complex128", 128 bits, Complex;
    Float8E4m3fn = "float8_e4m3fn", 8 bits, Float;
    Float8E5m2 = "float8_e5m2", 8 bits, Float;
    Float8E4m3fnuz = "float8_e4m3fnuz", 8 bits, Float;
    Float8E5m2fnuz = "float8_e5m2fnuz", 8 bits, Float;
    Float8E8m0fnu = "float8_e8m0fnu", 8 bits, Float;
    /// Two 4-bit floats packed in one byte element (PyTorch).
    Float4E2m1fnX2 = "float4_e2m1fn_x2", 8 bits, Float;
    /// One 4-bit float per element: safetensors' `F4` as its header counts elements. The
    /// tensor read from it is `float4_e2m1fn_x2`, as torch reads it.
    Float4E2m1fn = "float4_e2m1fn", 4 bits, Float;
    /// One 6-bit float per element (safetensors `F6_E2M3`).
    Float6E2m3fn = "float6_e2m3fn", 6 bits, Float;
    /// One 6-bit float per element (safetensors `F6_E3M2`).
    Float6E3m2fn = "float6_e3m2fn", 6 bits, Float;
    QInt8 = "qint8", 8 bits, Quantized;
    QUInt8 = "quint8", 8 bits, Quantized;
    QInt32 = "qint32", 32 bits, Quantized;
    QUInt4x2 = "quint4x2", 8 bits, Quantized;
    QUInt2x4 = "quint2x4", 8 bits, Quantized;
    Bits8 = "bits8", 8 bits, Integer;
    Bits16 = "bits16", 16 bits, Integer;
    Bits1x8 = "bits1x8", 8 bits, Integer;
    Bits2x4 = "bits2x4", 8 bits, Integer;
    Bits4x2 = "bits4x2", 8 bits, Integer;
}

/// How a dtype's bits are interpreted; later rules (numeric health) dispatch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DTypeKind {
    /// `bool`
    Bool,
    /// Signed or unsigned integers, and the opaque `bits*` types.
    Integer,
    /// Real floating point of any width.
    Float,
    /// A pair of floats.
    Complex,
    /// Quantized integers with separate scale and zero point.
    Quantized,
}

use DType::*;

impl DType {
    /// The dtype with this PyTorch name, if any.
    pub fn from_name(name: &str) -> Option<DType> {
        Self::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Bits one logical element takes in its storage's bytes. PyTorch's sub-byte quantized
    /// types count one byte per element in `itemsize` and `nbytes`, but pack two (`quint4x2`)
    /// or four (`quint2x4`) elements per byte, element `i` in byte `i / per_byte`; their
    /// storages hold that many bytes (each row rounded up to a byte), no more.
    pub fn packed_bits(self) -> u64 {
        match self {
            QUInt4x2 => 4,
            QUInt2x4 => 2,
            other => other.bits(),
        }
    }

    /// Bytes per element, as `torch.dtype.itemsize`; `None` for sub-byte types.
    pub fn element_size(self) -> Option<u64> {
        let bits = self.bits();
        bits.is_multiple_of(8).then_some(bits / 8)
    }

    /// The dtype a safetensors header code (`"F32"`, `"BF16"`, …) stands for.
    pub fn from_safetensors_code(code: &str) -> Option<DType> {
        Some(match code {
            "BOOL" => Bool,
            "U8" => UInt8,
            "I8" => Int8,
            "I16" => Int16,
            "U16" => UInt16,
            "I32" => Int32,
            "U32" => UInt32,
            "I64" => Int64,
            "U64" => UInt64,
            "F16" => Float16,
            "BF16" => BFloat16,
            "F32" => Float32,
            "F64" => Float64,
            "C64" => Complex64,
            "F8_E4M3" => Float8E4m3fn,
            "F8_E5M2" => Float8E5m2,
            "F8_E4M3FNUZ" => Float8E4m3fnuz,
            "F8_E5M2FNUZ" => Float8E5m2fnuz,
            "F8_E8M0" => Float8E8m0fnu,
            "F4" => Float4E2m1fn,
            "F6_E2M3" => Float6E2m3fn,
            "F6_E3M2" => Float6E3m2fn,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &d in DType::ALL {
            assert!(seen.insert(d.name()), "duplicate name {}", d.name());
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float"), None);
    }

    #[test]
    fn element_sizes_match_pytorch_itemsize() {
        let expected = [
            (Bool, 1),
            (BFloat16, 2),
            (Float16, 2),
            (Float32, 4),
            (Float64, 8),
            (Complex32, 4),
            (BComplex32, 4),
            (Complex64, 8),
            (Complex128, 16),
            (Float8E4m3fn, 1),
            (Float4E2m1fnX2, 1),
            (QInt32, 4),
            (QUInt4x2, 1),
            (Int64, 8),
            (UInt16, 2),
        ];
        for (d, size) in expected {
            assert_eq!(d.element_size(), Some(size), "{d}");
        }
        assert_eq!(Float4E2m1fn.element_size(), None);
        assert_eq!(Float6E3m2fn.bits(), 6);
        assert_eq!((QUInt4x2.packed_bits(), QUInt2x4.packed_bits()), (4, 2));
        assert_eq!(QUInt8.packed_bits(), 8);
    }

    #[test]
    fn every_safetensors_code_of_the_crate_maps_to_a_dtype_of_the_same_width() {
        use safetensors::Dtype as S;
        let codes = [
            S::BOOL,
            S::F4,
            S::F6_E2M3,
            S::F6_E3M2,
            S::U8,
            S::I8,
            S::F8_E5M2,
            S::F8_E4M3,
            S::F8_E8M0,
            S::F8_E4M3FNUZ,
            S::F8_E5M2FNUZ,
            S::I16,
            S::U16,
            S::F16,
            S::BF16,
            S::I32,
            S::U32,
            S::F32,
            S::C64,
            S::F64,
            S::I64,
            S::U64,
        ];
        for code in codes {
            let text = serde_json::to_value(code).expect("dtype serialises");
            let text = text.as_str().expect("dtype serialises as a string");
            let d = DType::from_safetensors_code(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(d.bits(), code.bitsize() as u64, "{text}");
        }
        assert_eq!(DType::from_safetensors_code("F128"), None);
    }
}
