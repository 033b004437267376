//! GGML's tensor types and GGUF's metadata value types, by the numbers a file stores.

use crate::DType;

/// One GGML tensor type: elements per block and bytes per block, and the dtype of its
/// elements where a block is one element of a dtype the engine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub bytes: u64,
    pub dtype: Option<DType>,
}

impl GgmlType {
    /// Stored in blocks of several elements: read as the blocks' bytes.
    pub fn is_blocks(self) -> bool {
        self.dtype.is_none()
    }
}

/// `QK_K`: the elements of a K-quant super-block.
const QK_K: u64 = 256;

const fn plain(id: u32, name: &'static str, dtype: DType, bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block: 1,
        bytes,
        dtype: Some(dtype),
    }
}

const fn blocks(id: u32, name: &'static str, block: u64, bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block,
        bytes,
        dtype: None,
    }
}

/// Every type of `GGMLQuantizationType` with its entry of `GGML_QUANT_SIZES`, as gguf-py
/// 0.19.0 lists them (`gguf/constants.py`); the ids ggml has retired (4, 5: Q4_2 and Q4_3;
/// 31-33 and 36-38: the repacked Q4_0 and IQ4_NL layouts) are no type to either reader.
/// BF16 is an element of bfloat16 here, though gguf-py hands its data over as bytes.
#[rustfmt::skip]
pub(crate) const GGML_TYPES: &[GgmlType] = &[
    plain(0, "F32", DType::Float32, 4),
    plain(1, "F16", DType::Float16, 2),
    blocks(2, "Q4_0", 32, 2 + 16),
    blocks(3, "Q4_1", 32, 2 + 2 + 16),
    blocks(6, "Q5_0", 32, 2 + 4 + 16),
    blocks(7, "Q5_1", 32, 2 + 2 + 4 + 16),
    blocks(8, "Q8_0", 32, 2 + 32),
    blocks(9, "Q8_1", 32, 4 + 4 + 32),
    blocks(10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4),
    blocks(11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
    blocks(12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12),
    blocks(13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12),
    blocks(14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16),
    blocks(15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8),
    blocks(16, "IQ2_XXS", QK_K, 2 + QK_K / 4),
    blocks(17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
    blocks(18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8),
    blocks(19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
    blocks(20, "IQ4_NL", 32, 2 + 16),
    blocks(21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
    blocks(22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
    blocks(23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64),
    plain(24, "I8", DType::Int8, 1),
    plain(25, "I16", DType::Int16, 2),
    plain(26, "I32", DType::Int32, 4),
    plain(27, "I64", DType::Int64, 8),
    plain(28, "F64", DType::Float64, 8),
    blocks(29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
    plain(30, "BF16", DType::BFloat16, 2),
    blocks(34, "TQ1_0", QK_K, 2 + 4 * 13),
    blocks(35, "TQ2_0", QK_K, 2 + 64),
    blocks(39, "MXFP4", 32, 1 + 16),
    blocks(40, "NVFP4", 64, 4 + 32),
    blocks(41, "Q1_0", 128, 2 + 16),
];

/// The GGML type a tensor info's type number names.
pub(crate) fn ggml_type(id: u32) -> Option<GgmlType> {
    GGML_TYPES.iter().copied().find(|t| t.id == id)
}

/// A metadata value's type (`GGUFValueType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// The type a value's type number names: 0 to 12, in `GGUFValueType`'s order.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The name gguf-py gives it, lower-cased (`uint32`, `string`, `array`).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            U32 => "uint32",
            I32 => "int32",
            F32 => "float32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "uint64",
            I64 => "int64",
            F64 => "float64",
        }
    }

    /// Bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub fn size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes a value of this type takes: a string's length, an array's element
    /// type and count.
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 4 + 8,
            fixed => fixed.size().unwrap_or(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_plain_types_are_one_element_of_their_dtype() {
        let mut ids: Vec<u32> = GGML_TYPES.iter().map(|t| t.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), GGML_TYPES.len());
        for t in GGML_TYPES {
            match t.dtype {
                Some(d) => assert_eq!(
                    (t.block, d.element_size()),
                    (1, Some(t.bytes)),
                    "{}",
                    t.name
                ),
                None => assert!(t.block > 1, "{}", t.name),
            }
        }
        assert_eq!(ggml_type(8).map(|t| (t.block, t.bytes)), Some((32, 34)));
        assert_eq!(ggml_type(14).map(|t| t.bytes), Some(210));
        assert_eq!(ggml_type(4), None);
    }

    #[test]
    fn value_types_round_trip_their_numbers() {
        for id in 0..13 {
            assert!(ValueType::from_id(id).is_some(), "{id}");
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(9), Some(ValueType::Array));
        assert_eq!(ValueType::Array.min_size(), 12);
    }
}
