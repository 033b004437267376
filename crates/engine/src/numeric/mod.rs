//! Numeric health: finding NaN and ±Inf in floating tensors from their raw bits.
//!
//! Two implementations of one rule live here. [`classify`] and [`classify_element`]
//! (`reference.rs`) are the plain reference: one element at a time, with branches, decoding
//! each format the obvious way. [`scan_bytes`] (`fast.rs`) is the fast path: per dtype, a
//! branch-free test on the element's raw little-endian word, run over fixed-size chunks with
//! counters, so the compiler can vectorise it; only a chunk that has a hit is searched again
//! for the first index. The tests hold the two to the same answer on every float dtype.
//! [`scan_tensor`] (`tensor.rs`) applies the fast path to a view through its layout's walk;
//! [`scan_checkpoint`] (`checkpoint.rs`) scans every tensor of a checkpoint in parallel; a
//! storage left compressed in the file is inflated in fixed-size pieces and its views scanned
//! as they pass (`deferred.rs`), never held whole.
//!
//! Encodings (elements are little-endian in memory):
//!
//! | dtype | non-finite encodings |
//! |---|---|
//! | `float16`, `bfloat16`, `float32`, `float64`, `float8_e5m2` | IEEE: exponent all ones is Inf when the mantissa is 0, NaN otherwise (any payload, either sign) |
//! | `float8_e4m3fn` | NaN only `S.1111.111` (`0x7f`, `0xff`); no Inf |
//! | `float8_e4m3fnuz`, `float8_e5m2fnuz` | NaN only `0x80` (the would-be negative zero); no Inf |
//! | `float8_e8m0fnu` | NaN only `0xff`; no Inf, no sign |
//! | `float4_e2m1fn_x2`, `float4_e2m1fn`, `float6_e2m3fn`, `float6_e3m2fn` | none: always finite |
//! | `complex32`, `bcomplex32`, `complex64`, `complex128` | either part non-finite; counted once |
//!
//! A complex element counts once: as NaN if either part is NaN, otherwise with the sign of the
//! first infinite part.
//!
//! GGUF's quantised blocks are `uint8` tensors, no floats; their float16 scales (`d`, and
//! `m`/`dmin` where the type has one) are scanned instead, each scale one count and the first
//! index that of its block ([`scan_block_scales`], `scales.rs`).

mod checkpoint;
mod deferred;
mod fast;
mod non_finite;
mod reference;
mod scales;
mod tensor;

pub use checkpoint::{scan_checkpoint, scan_checkpoint_where};
pub use fast::scan_bytes;
pub use non_finite::NonFinite;
pub use reference::{classify, classify_element, Class};
pub use scales::{block_scales, scaled_blocks, scan_block_scales, scan_scale_bytes, BlockScales};
pub use tensor::scan_tensor;

use crate::dtype::DType;

/// Whether scanning applies: the float dtypes and the complex ones (each part checked).
/// The sub-byte and MX float4/float6 dtypes are scannable but have no non-finite encodings,
/// so they always scan clean. Integers, `bool`, quantized and `bits*` types are not scannable.
pub fn scannable(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Float16
            | DType::BFloat16
            | DType::Float32
            | DType::Float64
            | DType::Complex32
            | DType::BComplex32
            | DType::Complex64
            | DType::Complex128
            | DType::Float8E4m3fn
            | DType::Float8E5m2
            | DType::Float8E4m3fnuz
            | DType::Float8E5m2fnuz
            | DType::Float8E8m0fnu
            | DType::Float4E2m1fnX2
            | DType::Float4E2m1fn
            | DType::Float6E2m3fn
            | DType::Float6E3m2fn
    )
}
