//! Numeric health: finding NaN and ±Inf in floating tensors from their raw bits.
//!
//! Two implementations of one rule live here. [`classify`] and [`classify_element`] are the
//! plain reference: one element at a time, with branches, decoding each format the obvious
//! way. [`scan_bytes`] is the fast path the audit uses: per dtype, a branch-free test on the
//! element's raw little-endian word, run over fixed-size chunks with counters, so the compiler
//! can vectorise it; only a chunk that has a hit is searched again for the first index. The
//! tests hold the two to the same answer on every float dtype.
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
//! | `complex32`, `complex64`, `complex128` | either part non-finite; counted once |
//!
//! A complex element counts once: as NaN if either part is NaN, otherwise with the sign of the
//! first infinite part (real before imaginary).

use crate::dtype::DType;
use crate::tensor_impl::TensorImpl;

/// Counts of non-finite values in a floating tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NonFinite {
    /// Elements that are NaN (for complex: either part NaN).
    pub nan: u64,
    /// Elements that are +Inf (for complex: no NaN part, first infinite part positive).
    pub pos_inf: u64,
    /// Elements that are −Inf (for complex: no NaN part, first infinite part negative).
    pub neg_inf: u64,
    /// Logical (row-major) index of the first non-finite element.
    pub first: Option<u64>,
}

impl NonFinite {
    /// All non-finite elements: NaN, +Inf and −Inf together (saturating).
    pub fn total(&self) -> u64 {
        self.nan
            .saturating_add(self.pos_inf)
            .saturating_add(self.neg_inf)
    }

    /// Whether no element is non-finite.
    pub fn is_clean(&self) -> bool {
        self.total() == 0
    }

    /// Combines the counts of two consecutive chunks: `self` covers the elements before
    /// `later`, which starts at logical index `later_offset`. The first index of `self` wins;
    /// otherwise `later`'s, offset by `later_offset`. Counts saturate rather than wrap.
    pub fn merge(self, later: NonFinite, later_offset: u64) -> NonFinite {
        NonFinite {
            nan: self.nan.saturating_add(later.nan),
            pos_inf: self.pos_inf.saturating_add(later.pos_inf),
            neg_inf: self.neg_inf.saturating_add(later.neg_inf),
            first: self
                .first
                .or_else(|| later.first.map(|i| i.saturating_add(later_offset))),
        }
    }

    /// Counts `class` as one more element at logical index `index`.
    fn add(&mut self, class: Class, index: u64) {
        match class {
            Class::Finite => return,
            Class::Nan => self.nan = self.nan.saturating_add(1),
            Class::PosInf => self.pos_inf = self.pos_inf.saturating_add(1),
            Class::NegInf => self.neg_inf = self.neg_inf.saturating_add(1),
        }
        self.first.get_or_insert(index);
    }
}

/// What one element's bits are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A finite number (zero, subnormal, normal), or a dtype with no special encodings.
    Finite,
    /// Not a number, whatever its payload or sign.
    Nan,
    /// Positive infinity.
    PosInf,
    /// Negative infinity.
    NegInf,
}

impl Class {
    /// Whether the element is finite.
    pub fn is_finite(self) -> bool {
        self == Class::Finite
    }

    /// One class for a complex element from its parts: NaN if either part is NaN, otherwise
    /// the first infinite part (real before imaginary), otherwise finite.
    fn of_complex(re: Class, im: Class) -> Class {
        if re == Class::Nan || im == Class::Nan {
            Class::Nan
        } else if re != Class::Finite {
            re
        } else {
            im
        }
    }

    fn of_float(value: f64) -> Class {
        if value.is_nan() {
            Class::Nan
        } else if value == f64::INFINITY {
            Class::PosInf
        } else if value == f64::NEG_INFINITY {
            Class::NegInf
        } else {
            Class::Finite
        }
    }
}

/// Reference decoding of an IEEE binary16 value to f32, exactly (every f16 is an f32).
fn f16_to_f32(bits: u16) -> f32 {
    let negative = bits >> 15 == 1;
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = u32::from(bits & 0x3ff);
    let magnitude = if exponent == 0x1f {
        if mantissa == 0 {
            f32::INFINITY
        } else {
            f32::NAN
        }
    } else if exponent == 0 {
        // Subnormal (or zero): mantissa × 2^-24, exact in f32.
        mantissa as f32 * f32::powi(2.0, -24)
    } else {
        (1.0 + mantissa as f32 / 1024.0) * f32::powi(2.0, exponent - 15)
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// Reference, one element: classifies the element's raw bits, given as its little-endian value
/// in the low bits of `bits` (higher bits are ignored).
///
/// Complex elements hold the real part in the low half and the imaginary part in the high
/// half. A `complex128` element is 128 bits wide and cannot fit: for it, `bits` is one
/// `float64` part; [`classify_element`] takes whole elements of every dtype.
/// Dtypes that are not [`scannable`], and those without special encodings, are always
/// [`Class::Finite`].
pub fn classify(dtype: DType, bits: u64) -> Class {
    match dtype {
        DType::Float32 => Class::of_float(f64::from(f32::from_bits(bits as u32))),
        DType::Float64 | DType::Complex128 => Class::of_float(f64::from_bits(bits)),
        DType::BFloat16 => Class::of_float(f64::from(f32::from_bits(u32::from(bits as u16) << 16))),
        DType::Float16 => Class::of_float(f64::from(f16_to_f32(bits as u16))),
        // float8_e5m2 is the high byte of a float16.
        DType::Float8E5m2 => Class::of_float(f64::from(f16_to_f32(u16::from(bits as u8) << 8))),
        DType::Float8E4m3fn => {
            let exponent = (bits >> 3) & 0xf;
            let mantissa = bits & 0x7;
            if exponent == 0xf && mantissa == 0x7 {
                Class::Nan
            } else {
                Class::Finite
            }
        }
        DType::Float8E4m3fnuz | DType::Float8E5m2fnuz => {
            if bits as u8 == 0x80 {
                Class::Nan
            } else {
                Class::Finite
            }
        }
        DType::Float8E8m0fnu => {
            if bits as u8 == 0xff {
                Class::Nan
            } else {
                Class::Finite
            }
        }
        DType::Complex32 => Class::of_complex(
            classify(DType::Float16, bits & 0xffff),
            classify(DType::Float16, (bits >> 16) & 0xffff),
        ),
        DType::Complex64 => Class::of_complex(
            classify(DType::Float32, bits & 0xffff_ffff),
            classify(DType::Float32, bits >> 32),
        ),
        _ => Class::Finite,
    }
}

/// Reference, one element: classifies an element from its little-endian bytes (the first
/// [`DType::element_size`] bytes of `bytes`). Works for every dtype, `complex128` included.
/// Too few bytes, sub-byte dtypes and dtypes that are not [`scannable`] give
/// [`Class::Finite`].
pub fn classify_element(dtype: DType, bytes: &[u8]) -> Class {
    let Some(size) = dtype.element_size().and_then(|s| usize::try_from(s).ok()) else {
        return Class::Finite;
    };
    let Some(element) = bytes.get(..size) else {
        return Class::Finite;
    };
    let word = |part: &[u8]| {
        part.iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
    };
    if dtype == DType::Complex128 {
        let (re, im) = element.split_at(size / 2);
        return Class::of_complex(
            classify(DType::Float64, word(re)),
            classify(DType::Float64, word(im)),
        );
    }
    if size > 8 {
        return Class::Finite;
    }
    classify(dtype, word(element))
}

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

// ---------------------------------------------------------------------------------------------
// The fast path: branch-free checks on raw words.

/// Elements per chunk of the fast path: each chunk is tested in one branch-free pass; only a
/// chunk with a hit is counted, and searched for the first index.
const CHUNK: usize = 256;

/// What the branch-free check found in one element (at most one flag is set).
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    nan: bool,
    pos: bool,
    neg: bool,
}

impl Flags {
    #[inline(always)]
    fn any(self) -> bool {
        self.nan | self.pos | self.neg
    }
}

/// The IEEE rule on one width: exponent all ones is non-finite; NaN when the mantissa is not 0.
macro_rules! ieee_flags {
    ($name:ident, $word:ty, $exponent:expr, $mantissa:expr, $sign:expr) => {
        #[inline(always)]
        fn $name(bits: $word) -> Flags {
            let special = bits & $exponent == $exponent;
            let payload = bits & $mantissa != 0;
            let negative = bits & $sign != 0;
            Flags {
                nan: special & payload,
                pos: special & !payload & !negative,
                neg: special & !payload & negative,
            }
        }
    };
}

ieee_flags!(f16_flags, u16, 0x7c00, 0x03ff, 0x8000);
ieee_flags!(bf16_flags, u16, 0x7f80, 0x007f, 0x8000);
ieee_flags!(f32_flags, u32, 0x7f80_0000, 0x007f_ffff, 0x8000_0000);
ieee_flags!(
    f64_flags,
    u64,
    0x7ff0_0000_0000_0000,
    0x000f_ffff_ffff_ffff,
    0x8000_0000_0000_0000
);
ieee_flags!(e5m2_flags, u8, 0x7c, 0x03, 0x80);

#[inline(always)]
fn nan_only(nan: bool) -> Flags {
    Flags {
        nan,
        pos: false,
        neg: false,
    }
}

/// Complex: NaN if either part is; otherwise the first infinite part's sign.
#[inline(always)]
fn complex_flags(re: Flags, im: Flags) -> Flags {
    let nan = re.nan | im.nan;
    let re_inf = re.pos | re.neg;
    Flags {
        nan,
        pos: !nan & (re.pos | (!re_inf & im.pos)),
        neg: !nan & (re.neg | (!re_inf & im.neg)),
    }
}

/// Calls `$run::<N>($args…, hit, check)` with the element width of `$dtype`, its branch-free
/// check and a cheaper "is it non-finite at all" test (for complex: either part), or evaluates
/// `$otherwise` for dtypes with no non-finite encodings (or not scannable).
macro_rules! with_check {
    ($dtype:expr, $run:ident($($arg:expr),*), $otherwise:expr) => {{
        macro_rules! real {
            ($n:literal, $check:expr) => {{
                let check = $check;
                $run::<$n>($($arg,)* move |w: &[u8; $n]| check(w).any(), check)
            }};
        }
        match $dtype {
            DType::Float32 => real!(4, |w: &[u8; 4]| f32_flags(u32::from_le_bytes(*w))),
            DType::Float64 => real!(8, |w: &[u8; 8]| f64_flags(u64::from_le_bytes(*w))),
            DType::Float16 => real!(2, |w: &[u8; 2]| f16_flags(u16::from_le_bytes(*w))),
            DType::BFloat16 => real!(2, |w: &[u8; 2]| bf16_flags(u16::from_le_bytes(*w))),
            DType::Float8E5m2 => real!(1, |w: &[u8; 1]| e5m2_flags(w[0])),
            DType::Float8E4m3fn => real!(1, |w: &[u8; 1]| nan_only(w[0] & 0x7f == 0x7f)),
            DType::Float8E4m3fnuz | DType::Float8E5m2fnuz => {
                real!(1, |w: &[u8; 1]| nan_only(w[0] == 0x80))
            }
            DType::Float8E8m0fnu => real!(1, |w: &[u8; 1]| nan_only(w[0] == 0xff)),
            DType::Complex32 => $run::<4>(
                $($arg,)*
                |w: &[u8; 4]| {
                    let v = u32::from_le_bytes(*w);
                    f16_flags(v as u16).any() | f16_flags((v >> 16) as u16).any()
                },
                |w: &[u8; 4]| {
                    let v = u32::from_le_bytes(*w);
                    complex_flags(f16_flags(v as u16), f16_flags((v >> 16) as u16))
                },
            ),
            DType::Complex64 => $run::<8>(
                $($arg,)*
                |w: &[u8; 8]| {
                    let v = u64::from_le_bytes(*w);
                    f32_flags(v as u32).any() | f32_flags((v >> 32) as u32).any()
                },
                |w: &[u8; 8]| {
                    let v = u64::from_le_bytes(*w);
                    complex_flags(f32_flags(v as u32), f32_flags((v >> 32) as u32))
                },
            ),
            DType::Complex128 => $run::<16>(
                $($arg,)*
                |w: &[u8; 16]| {
                    let v = u128::from_le_bytes(*w);
                    f64_flags(v as u64).any() | f64_flags((v >> 64) as u64).any()
                },
                |w: &[u8; 16]| {
                    let v = u128::from_le_bytes(*w);
                    complex_flags(f64_flags(v as u64), f64_flags((v >> 64) as u64))
                },
            ),
            _ => $otherwise,
        }
    }};
}

/// Counts a run of whole elements, chunk by chunk; `first` is relative to the run's start.
///
/// Each chunk is first reduced to one "any non-finite" bit, branch-free (the common, clean
/// case costs one vectorised pass); a chunk with a hit is counted with counters, branch-free
/// again, and the first chunk with a hit is searched for the first index.
#[inline(always)]
fn scan_words<const N: usize>(
    words: &[[u8; N]],
    hit: impl Fn(&[u8; N]) -> bool,
    check: impl Fn(&[u8; N]) -> Flags,
) -> NonFinite {
    let mut out = NonFinite::default();
    let mut base = 0u64;
    for chunk in words.chunks(CHUNK) {
        let mut any = false;
        for word in chunk {
            any |= hit(word);
        }
        if any {
            // CHUNK fits in u16: narrow counters keep more lanes per vector.
            let (mut nan, mut pos, mut neg) = (0u16, 0u16, 0u16);
            for word in chunk {
                let flags = check(word);
                nan += u16::from(flags.nan);
                pos += u16::from(flags.pos);
                neg += u16::from(flags.neg);
            }
            if out.first.is_none() {
                out.first = chunk.iter().position(&hit).map(|i| base + i as u64);
            }
            out.nan += u64::from(nan);
            out.pos_inf += u64::from(pos);
            out.neg_inf += u64::from(neg);
        }
        base += chunk.len() as u64;
    }
    out
}

fn scan_slice<const N: usize>(
    bytes: &[u8],
    hit: impl Fn(&[u8; N]) -> bool,
    check: impl Fn(&[u8; N]) -> Flags,
) -> NonFinite {
    // A trailing partial element is not an element: only whole ones are scanned.
    let (words, _partial) = bytes.as_chunks::<N>();
    scan_words(words, hit, check)
}

/// Fast path: counts the non-finite elements of a contiguous little-endian run of `dtype`
/// elements, `first` counting from the start of `bytes`.
///
/// Branch-free per dtype on the raw bits (for `float32`, `(bits & 0x7f80_0000) == 0x7f80_0000`
/// is non-finite, NaN when the mantissa is not 0), in fixed-size chunks with counters; the
/// first index is located only in the first chunk with a hit. A trailing partial element is
/// ignored. Dtypes without non-finite encodings (sub-byte and MX float4/float6) and dtypes
/// that are not [`scannable`] scan clean. Never panics.
pub fn scan_bytes(dtype: DType, bytes: &[u8]) -> NonFinite {
    with_check!(dtype, scan_slice(bytes), NonFinite::default())
}

// ---------------------------------------------------------------------------------------------
// Tensors: contiguous through the fast path, strided views element by element.

/// One dimension of a strided walk.
#[derive(Debug, Clone, Copy)]
struct Dim {
    size: u64,
    /// Storage stride, in elements.
    stride: u64,
    /// Logical (row-major) stride: the product of the sizes after this dimension.
    logical: u64,
}

/// A strided view reduced to the dimensions worth walking: size-1 dimensions dropped,
/// broadcast (stride-0) dimensions folded into `repeat`, and neighbours that read storage
/// and logical order alike merged into one.
#[derive(Debug)]
struct Walk {
    /// Outer dimensions, walked as an odometer.
    outer: Vec<Dim>,
    /// The innermost dimension, read as one run per outer position.
    inner: Dim,
    /// How many times each reached element repeats through broadcast dimensions.
    repeat: u64,
}

impl Walk {
    /// `None` when an index product overflows (a layout that cannot exist).
    fn plan(sizes: &[u64], strides: &[u64]) -> Option<Walk> {
        // Logical strides, innermost first, then put back in order.
        let mut logical = Vec::with_capacity(sizes.len());
        let mut acc = 1u64;
        for &size in sizes.iter().rev() {
            logical.push(acc);
            acc = acc.checked_mul(size)?;
        }
        logical.reverse();

        let mut repeat = 1u64;
        let mut dims: Vec<Dim> = Vec::with_capacity(sizes.len());
        for ((&size, &stride), &logical) in sizes.iter().zip(strides).zip(&logical) {
            if size == 1 {
                continue;
            }
            if stride == 0 {
                // Broadcast: the same elements again; in logical order the first repeat
                // (index 0 here) comes first.
                repeat = repeat.checked_mul(size)?;
                continue;
            }
            if let Some(prev) = dims.last_mut() {
                if stride.checked_mul(size) == Some(prev.stride)
                    && logical.checked_mul(size) == Some(prev.logical)
                {
                    prev.size = prev.size.checked_mul(size)?;
                    prev.stride = stride;
                    prev.logical = logical;
                    continue;
                }
            }
            dims.push(Dim {
                size,
                stride,
                logical,
            });
        }
        let inner = dims.pop().unwrap_or(Dim {
            size: 1,
            stride: 1,
            logical: 0,
        });
        Some(Walk {
            outer: dims,
            inner,
            repeat,
        })
    }

    /// Visits every element the view reaches, in logical order, over `words`: the view's
    /// bytes from its storage offset. `None` when an index falls outside `words`.
    fn run<const N: usize>(
        &self,
        words: &[[u8; N]],
        hit: impl Fn(&[u8; N]) -> bool,
        check: impl Fn(&[u8; N]) -> Flags,
    ) -> Option<NonFinite> {
        let mut out = NonFinite::default();
        let mut index = vec![0u64; self.outer.len()];
        let inner_len = usize::try_from(self.inner.size).ok()?;
        loop {
            let mut element = 0u64;
            let mut logical = 0u64;
            for (&i, dim) in index.iter().zip(&self.outer) {
                element = element.checked_add(i.checked_mul(dim.stride)?)?;
                logical = logical.checked_add(i.checked_mul(dim.logical)?)?;
            }
            let start = usize::try_from(element).ok()?;
            let row = if self.inner.stride == 1 {
                let run = words.get(start..start.checked_add(inner_len)?)?;
                scan_words(run, &hit, &check)
            } else {
                let stride = usize::try_from(self.inner.stride).ok()?;
                let mut row = NonFinite::default();
                for j in 0..inner_len {
                    let at = j.checked_mul(stride)?.checked_add(start)?;
                    let flags = check(words.get(at)?);
                    if flags.any() {
                        let class = if flags.nan {
                            Class::Nan
                        } else if flags.pos {
                            Class::PosInf
                        } else {
                            Class::NegInf
                        };
                        row.add(class, j as u64);
                    }
                }
                row
            };
            if out.first.is_none() {
                if let Some(j) = row.first {
                    out.first = Some(logical.checked_add(j.checked_mul(self.inner.logical)?)?);
                }
            }
            out = out.merge(NonFinite { first: None, ..row }, 0);

            // Next outer position, last dimension fastest.
            let mut advanced = false;
            for (i, dim) in index.iter_mut().zip(&self.outer).rev() {
                *i += 1;
                if *i < dim.size {
                    advanced = true;
                    break;
                }
                *i = 0;
            }
            if !advanced {
                break;
            }
        }
        Some(NonFinite {
            nan: out.nan.saturating_mul(self.repeat),
            pos_inf: out.pos_inf.saturating_mul(self.repeat),
            neg_inf: out.neg_inf.saturating_mul(self.repeat),
            first: out.first,
        })
    }
}

fn walk_view<const N: usize>(
    bytes: &[u8],
    walk: &Walk,
    hit: impl Fn(&[u8; N]) -> bool,
    check: impl Fn(&[u8; N]) -> Flags,
) -> Option<NonFinite> {
    let (words, _partial) = bytes.as_chunks::<N>();
    walk.run(words, hit, check)
}

/// Scans a tensor's elements. Contiguous views go through [`scan_bytes`] on
/// [`TensorImpl::view_bytes`]; other views visit only the elements they reach (walking the
/// strides, `first` in logical row-major order; an element reached several times, as through a
/// broadcast dimension, counts each time). Memory used is proportional to the rank, never to
/// the element count.
///
/// `None` when the dtype is not [`scannable`], when the storage has no host bytes, or when the
/// view is inconsistent with its storage (see [`TensorImpl::verify_data_ptr_consistency`]).
pub fn scan_tensor(imp: &TensorImpl) -> Option<NonFinite> {
    let dtype = imp.dtype();
    if !scannable(dtype) {
        return None;
    }
    imp.verify_data_ptr_consistency("").ok()?;
    let bytes = imp.view_bytes()?;
    let layout = imp.layout();
    if layout.numel() == 0 || dtype.element_size().is_none() {
        // Nothing to read, or a sub-byte dtype: no non-finite encodings.
        return Some(NonFinite::default());
    }
    if layout.is_contiguous() {
        return Some(scan_bytes(dtype, bytes));
    }
    let walk = Walk::plan(layout.sizes(), layout.strides())?;
    with_check!(dtype, walk_view(bytes, &walk), Some(NonFinite::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_impl::tests::{storage_of, view as view_of};
    use crate::{DataPtr, Device, Layout, Storage};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Every dtype with byte-sized elements that has special encodings, plus the always-finite
    /// byte-wide float4 pair.
    const FLOAT8: [DType; 6] = [
        DType::Float8E4m3fn,
        DType::Float8E5m2,
        DType::Float8E4m3fnuz,
        DType::Float8E5m2fnuz,
        DType::Float8E8m0fnu,
        DType::Float4E2m1fnX2,
    ];

    /// The reference over a buffer: element by element through `classify_element`.
    fn reference(dtype: DType, bytes: &[u8]) -> NonFinite {
        let mut out = NonFinite::default();
        let Some(size) = dtype.element_size() else {
            return out;
        };
        if !scannable(dtype) {
            return out;
        }
        for (i, element) in bytes.chunks_exact(size as usize).enumerate() {
            out.add(classify_element(dtype, element), i as u64);
        }
        out
    }

    fn one(dtype: DType, bits: u64) -> Class {
        let size = dtype.element_size().unwrap() as usize;
        let bytes = &bits.to_le_bytes()[..size];
        let fast = scan_bytes(dtype, bytes);
        let class = if fast.nan == 1 {
            Class::Nan
        } else if fast.pos_inf == 1 {
            Class::PosInf
        } else if fast.neg_inf == 1 {
            Class::NegInf
        } else {
            Class::Finite
        };
        assert_eq!(fast.total(), u64::from(class != Class::Finite));
        assert_eq!(fast.first, (class != Class::Finite).then_some(0));
        class
    }

    fn assert_one(dtype: DType, bits: u64, expected: Class) {
        assert_eq!(
            classify(dtype, bits),
            expected,
            "{dtype} {bits:#x} reference"
        );
        assert_eq!(one(dtype, bits), expected, "{dtype} {bits:#x} fast path");
    }

    #[test]
    fn exhaustive_float16_and_bfloat16() {
        for dtype in [DType::Float16, DType::BFloat16] {
            let mut all = Vec::with_capacity(2 << 16);
            for bits in 0..=u16::MAX {
                assert_eq!(
                    one(dtype, u64::from(bits)),
                    classify(dtype, u64::from(bits)),
                    "{dtype} {bits:#06x}"
                );
                all.extend_from_slice(&bits.to_le_bytes());
            }
            let scan = scan_bytes(dtype, &all);
            assert_eq!(scan, reference(dtype, &all), "{dtype}");
            // 2 signs × (1 Inf + mantissa-many NaNs) per format.
            let mantissas: u64 = if dtype == DType::Float16 {
                1 << 10
            } else {
                1 << 7
            };
            assert_eq!(scan.pos_inf, 1);
            assert_eq!(scan.neg_inf, 1);
            assert_eq!(scan.nan, 2 * (mantissas - 1));
            assert_eq!(
                scan.first,
                Some(if dtype == DType::Float16 {
                    0x7c00
                } else {
                    0x7f80
                })
            );
        }
    }

    #[test]
    fn float16_reference_decodes_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), f32::powi(2.0, -24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * f32::powi(2.0, -24));
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn exhaustive_float8_variants() {
        for dtype in FLOAT8 {
            let all: Vec<u8> = (0..=u8::MAX).collect();
            for &b in &all {
                assert_eq!(
                    one(dtype, u64::from(b)),
                    classify(dtype, u64::from(b)),
                    "{dtype} {b:#04x}"
                );
            }
            let scan = scan_bytes(dtype, &all);
            assert_eq!(scan, reference(dtype, &all), "{dtype}");
            let expected = match dtype {
                DType::Float8E4m3fn => (2, 0, 0), // 0x7f, 0xff
                DType::Float8E5m2 => (6, 1, 1),   // 0x7d..=0x7f, 0xfd..=0xff; 0x7c, 0xfc
                DType::Float8E4m3fnuz | DType::Float8E5m2fnuz => (1, 0, 0), // 0x80
                DType::Float8E8m0fnu => (1, 0, 0), // 0xff
                _ => (0, 0, 0),
            };
            assert_eq!((scan.nan, scan.pos_inf, scan.neg_inf), expected, "{dtype}");
        }
    }

    #[test]
    fn sub_byte_and_mx_types_are_always_clean() {
        for dtype in [
            DType::Float4E2m1fn,
            DType::Float6E2m3fn,
            DType::Float6E3m2fn,
            DType::Float4E2m1fnX2,
        ] {
            assert!(scannable(dtype));
            assert!(scan_bytes(dtype, &[0xff; 300]).is_clean());
            for b in 0..=u8::MAX {
                assert_eq!(classify(dtype, u64::from(b)), Class::Finite);
            }
        }
    }

    #[test]
    fn scannable_is_floats_and_complex_only() {
        for &dtype in DType::ALL {
            use crate::DTypeKind;
            let expected = matches!(dtype.kind(), DTypeKind::Float | DTypeKind::Complex);
            assert_eq!(scannable(dtype), expected, "{dtype}");
            if !expected {
                assert!(scan_bytes(dtype, &[0xff; 64]).is_clean(), "{dtype}");
                assert_eq!(classify(dtype, u64::MAX), Class::Finite);
            }
        }
    }

    #[test]
    fn explicit_ieee_cases() {
        use Class::*;
        let f32_cases: [(u32, Class); 14] = [
            (0x7fc0_0000, Nan),    // quiet NaN
            (0x7f80_0001, Nan),    // signalling NaN
            (0x7fa0_1234, Nan),    // signalling NaN, payload
            (0xffc0_0000, Nan),    // negative quiet NaN
            (0xff80_0001, Nan),    // negative signalling NaN
            (0x7f80_0000, PosInf), // +Inf
            (0xff80_0000, NegInf), // -Inf
            (0x0000_0001, Finite), // smallest subnormal
            (0x807f_ffff, Finite), // largest negative subnormal
            (0x7f7f_ffff, Finite), // max finite
            (0xff7f_ffff, Finite), // min finite
            (0x0000_0000, Finite), // +0
            (0x8000_0000, Finite), // -0
            (f32::NAN.to_bits(), Nan),
        ];
        for (bits, class) in f32_cases {
            assert_one(DType::Float32, u64::from(bits), class);
        }
        let f64_cases: [(u64, Class); 11] = [
            (0x7ff8_0000_0000_0000, Nan),
            (0x7ff0_0000_0000_0001, Nan),
            (0xfff8_0000_0000_0000, Nan),
            (0xfff0_0000_dead_beef, Nan),
            (0x7ff0_0000_0000_0000, PosInf),
            (0xfff0_0000_0000_0000, NegInf),
            (0x0000_0000_0000_0001, Finite),
            (0x7fef_ffff_ffff_ffff, Finite),
            (0x0000_0000_0000_0000, Finite),
            (0x8000_0000_0000_0000, Finite),
            (f64::MIN_POSITIVE.to_bits(), Finite),
        ];
        for (bits, class) in f64_cases {
            assert_one(DType::Float64, bits, class);
        }
        let f16_cases: [(u16, Class); 9] = [
            (0x7e00, Nan),
            (0x7c01, Nan),
            (0xfe00, Nan),
            (0x7c00, PosInf),
            (0xfc00, NegInf),
            (0x0001, Finite),
            (0x7bff, Finite),
            (0x0000, Finite),
            (0x8000, Finite),
        ];
        for (bits, class) in f16_cases {
            assert_one(DType::Float16, u64::from(bits), class);
        }
        let bf16_cases: [(u16, Class); 9] = [
            (0x7fc0, Nan),
            (0x7f81, Nan),
            (0xffc1, Nan),
            (0x7f80, PosInf),
            (0xff80, NegInf),
            (0x0001, Finite),
            (0x7f7f, Finite),
            (0x0000, Finite),
            (0x8000, Finite),
        ];
        for (bits, class) in bf16_cases {
            assert_one(DType::BFloat16, u64::from(bits), class);
        }
    }

    #[test]
    fn explicit_float8_special_encodings() {
        use Class::*;
        let cases = [
            (DType::Float8E4m3fn, 0x7e, Finite), // max finite 448
            (DType::Float8E4m3fn, 0x7f, Nan),
            (DType::Float8E4m3fn, 0xff, Nan),
            (DType::Float8E4m3fn, 0x78, Finite), // would be Inf in IEEE; 256 here
            (DType::Float8E4m3fn, 0x80, Finite), // -0
            (DType::Float8E4m3fnuz, 0x80, Nan),
            (DType::Float8E4m3fnuz, 0x7f, Finite),
            (DType::Float8E4m3fnuz, 0xff, Finite),
            (DType::Float8E4m3fnuz, 0x00, Finite),
            (DType::Float8E5m2fnuz, 0x80, Nan),
            (DType::Float8E5m2fnuz, 0x7f, Finite),
            (DType::Float8E5m2fnuz, 0x7c, Finite),
            (DType::Float8E5m2fnuz, 0x00, Finite),
            (DType::Float8E5m2, 0x7c, PosInf),
            (DType::Float8E5m2, 0xfc, NegInf),
            (DType::Float8E5m2, 0x7d, Nan),
            (DType::Float8E5m2, 0x7e, Nan),
            (DType::Float8E5m2, 0xff, Nan),
            (DType::Float8E5m2, 0x7b, Finite), // max finite 57344
            (DType::Float8E5m2, 0x01, Finite), // subnormal
            (DType::Float8E5m2, 0x80, Finite), // -0
            (DType::Float8E8m0fnu, 0xff, Nan),
            (DType::Float8E8m0fnu, 0xfe, Finite),
            (DType::Float8E8m0fnu, 0x00, Finite),
            (DType::Float8E8m0fnu, 0x80, Finite),
        ];
        for (dtype, bits, class) in cases {
            assert_one(dtype, bits, class);
        }
    }

    fn complex_bytes(dtype: DType, re: u64, im: u64) -> Vec<u8> {
        let half = (dtype.element_size().unwrap() / 2) as usize;
        let mut bytes = re.to_le_bytes()[..half].to_vec();
        bytes.extend_from_slice(&im.to_le_bytes()[..half]);
        bytes
    }

    #[test]
    fn complex_counts_once_nan_first_then_first_infinite_part() {
        use Class::*;
        // (real, imaginary) per part width, as classes of f16/f32/f64 patterns.
        let parts = |dtype: DType| -> [(u64, Class); 5] {
            match dtype {
                DType::Complex32 => [
                    (0x3c00, Finite),
                    (0x7e00, Nan),
                    (0xfc01, Nan),
                    (0x7c00, PosInf),
                    (0xfc00, NegInf),
                ],
                DType::Complex64 => [
                    (0x3f80_0000, Finite),
                    (0x7fc0_0000, Nan),
                    (0xff80_0001, Nan),
                    (0x7f80_0000, PosInf),
                    (0xff80_0000, NegInf),
                ],
                _ => [
                    (0x3ff0_0000_0000_0000, Finite),
                    (0x7ff8_0000_0000_0000, Nan),
                    (0xfff0_0000_0000_0001, Nan),
                    (0x7ff0_0000_0000_0000, PosInf),
                    (0xfff0_0000_0000_0000, NegInf),
                ],
            }
        };
        for dtype in [DType::Complex32, DType::Complex64, DType::Complex128] {
            for (re, re_class) in parts(dtype) {
                for (im, im_class) in parts(dtype) {
                    let expected = match (re_class, im_class) {
                        (Nan, _) | (_, Nan) => Nan,
                        (Finite, c) => c,
                        (c, _) => c,
                    };
                    let bytes = complex_bytes(dtype, re, im);
                    assert_eq!(classify_element(dtype, &bytes), expected, "{dtype}");
                    let scan = scan_bytes(dtype, &bytes);
                    assert_eq!(scan, reference(dtype, &bytes), "{dtype} {re:#x} {im:#x}");
                    assert_eq!(scan.total(), u64::from(expected != Finite));
                }
            }
            // One NaN part, explicitly.
            let [(one_, _), (nan, _), _, (inf, _), (ninf, _)] = parts(dtype);
            let mut buf = complex_bytes(dtype, one_, one_);
            buf.extend(complex_bytes(dtype, one_, nan));
            buf.extend(complex_bytes(dtype, inf, nan));
            buf.extend(complex_bytes(dtype, ninf, inf));
            buf.extend(complex_bytes(dtype, one_, inf));
            let scan = scan_bytes(dtype, &buf);
            assert_eq!(
                scan,
                NonFinite {
                    nan: 2,
                    pos_inf: 1,
                    neg_inf: 1,
                    first: Some(1)
                },
                "{dtype}"
            );
        }
        assert_eq!(classify(DType::Complex32, 0x7e00_3c00), Nan);
        assert_eq!(classify(DType::Complex64, 0xff80_0000_0000_0000), NegInf);
    }

    #[test]
    fn partial_trailing_elements_are_ignored() {
        // Three bytes of a NaN f32 plus one whole NaN: only the whole one counts.
        let nan = 0x7fc0_0000u32.to_le_bytes();
        let mut bytes = nan.to_vec();
        bytes.extend_from_slice(&nan[..3]);
        assert_eq!(scan_bytes(DType::Float32, &bytes).nan, 1);
        assert!(scan_bytes(DType::Float32, &nan[..3]).is_clean());
        assert!(scan_bytes(DType::Complex128, &[0xff; 15]).is_clean());
        assert!(scan_bytes(DType::Float64, &[]).is_clean());
        assert_eq!(classify_element(DType::Float32, &nan[..3]), Class::Finite);
    }

    #[test]
    fn chunk_boundaries() {
        let n = 3 * CHUNK + 7;
        let positions = [
            0,
            1,
            CHUNK - 2,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            2 * CHUNK - 1,
            2 * CHUNK,
            3 * CHUNK - 1,
            3 * CHUNK,
            n - 1,
        ];
        let cases: [(DType, u64, u64); 4] = [
            (DType::Float32, 0x3f80_0000, 0xff80_0000),
            (DType::Float64, 0x3ff0_0000_0000_0000, 0x7ff8_0000_0000_0000),
            (DType::BFloat16, 0x3f80, 0x7f80),
            (DType::Float8E4m3fnuz, 0x38, 0x80),
        ];
        for (dtype, fine, bad) in cases {
            let size = dtype.element_size().unwrap() as usize;
            for &p in &positions {
                for &q in &positions {
                    let mut bytes = Vec::with_capacity(n * size);
                    for i in 0..n {
                        let bits = if i == p || i == q { bad } else { fine };
                        bytes.extend_from_slice(&bits.to_le_bytes()[..size]);
                    }
                    let scan = scan_bytes(dtype, &bytes);
                    assert_eq!(scan, reference(dtype, &bytes), "{dtype} {p} {q}");
                    assert_eq!(scan.first, Some(p.min(q) as u64));
                    assert_eq!(scan.total(), if p == q { 1 } else { 2 });
                }
            }
        }
    }

    #[test]
    fn merge_keeps_the_first_first() {
        let a = NonFinite {
            nan: 1,
            pos_inf: 0,
            neg_inf: 2,
            first: Some(5),
        };
        let b = NonFinite {
            nan: 3,
            pos_inf: 1,
            neg_inf: 0,
            first: Some(2),
        };
        let clean = NonFinite::default();
        assert_eq!(
            a.merge(b, 100),
            NonFinite {
                nan: 4,
                pos_inf: 1,
                neg_inf: 2,
                first: Some(5)
            }
        );
        assert_eq!(clean.merge(b, 100).first, Some(102));
        assert_eq!(clean.merge(clean, 7), clean);
        assert!(clean.is_clean());
        assert_eq!(a.total(), 3);
        let huge = NonFinite { nan: u64::MAX, ..a };
        assert_eq!(huge.merge(huge, u64::MAX).nan, u64::MAX);
        assert_eq!(huge.total(), u64::MAX);
    }

    // -----------------------------------------------------------------------------------------
    // Tensors.

    /// Reference for a view: gathers every element by its multi-index, in row-major order.
    fn gather_reference(imp: &TensorImpl) -> NonFinite {
        let dtype = imp.dtype();
        let size = dtype.element_size().unwrap();
        let bytes = imp.storage().data_ptr().bytes().unwrap();
        let layout = imp.layout();
        let mut out = NonFinite::default();
        for logical in 0..layout.numel() {
            let mut rest = logical;
            let mut element = layout.storage_offset();
            for (&s, &stride) in layout.sizes().iter().zip(layout.strides()).rev() {
                element += (rest % s) * stride;
                rest /= s;
            }
            let at = (element * size) as usize;
            out.add(
                classify_element(dtype, &bytes[at..at + size as usize]),
                logical,
            );
        }
        out
    }

    fn f32_storage(values: &[f32]) -> Arc<Storage> {
        storage_of(
            DType::Float32,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    #[test]
    fn transposed_2x3_reports_the_logical_first() {
        // Storage row-major [[1, NaN, 3], [-Inf, 5, 6]]; its transpose is
        // [[1, -Inf], [NaN, 5], [3, 6]]: the first non-finite is -Inf at logical 1,
        // though NaN comes first in storage.
        let s = f32_storage(&[1.0, f32::NAN, 3.0, f32::NEG_INFINITY, 5.0, 6.0]);
        let t = view_of(&s, &[3, 2], &[1, 3], 0);
        assert!(!t.layout().is_contiguous());
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(
            scan,
            NonFinite {
                nan: 1,
                pos_inf: 0,
                neg_inf: 1,
                first: Some(1)
            }
        );
        assert_eq!(scan, gather_reference(&t));
        // The storage itself, contiguous: NaN first.
        let c = view_of(&s, &[2, 3], &[3, 1], 0);
        assert_eq!(scan_tensor(&c).unwrap().first, Some(1));
        assert_eq!(scan_tensor(&c).unwrap(), gather_reference(&c));
    }

    #[test]
    fn every_other_element_visits_only_what_it_reaches() {
        // numbers[1::2] of nine: reaches 1, 3, 5, 7 only.
        let mut values = [0.0f32; 9];
        values[0] = f32::NAN;
        values[2] = f32::INFINITY;
        values[5] = f32::NEG_INFINITY;
        values[7] = f32::NAN;
        values[8] = f32::NAN;
        let s = f32_storage(&values);
        let t = view_of(&s, &[4], &[2], 1);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(
            scan,
            NonFinite {
                nan: 1,
                pos_inf: 0,
                neg_inf: 1,
                first: Some(2)
            }
        );
        assert_eq!(scan, gather_reference(&t));
    }

    #[test]
    fn broadcast_views_count_each_logical_element() {
        let s = f32_storage(&[1.0, f32::NAN, 2.0]);
        // expand a [3] to [1000, 3]: stride 0 outer.
        let t = view_of(&s, &[1000, 3], &[0, 1], 0);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(scan.nan, 1000);
        assert_eq!(scan.first, Some(1));
        assert_eq!(scan, gather_reference(&t));
        // [3] as a column broadcast along a row of 5: [3, 5] strides [1, 0].
        let t = view_of(&s, &[3, 5], &[1, 0], 0);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(scan, gather_reference(&t));
        assert_eq!(scan.first, Some(5));
        // A huge broadcast is not walked element by element.
        let t = view_of(&s, &[1 << 40, 1 << 20], &[0, 0], 1);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(scan.nan, 1 << 60);
        assert_eq!(scan.first, Some(0));
    }

    #[test]
    fn tensors_that_cannot_be_scanned() {
        // Not a float.
        let s = storage_of(DType::Int32, vec![0xff; 16]);
        assert_eq!(scan_tensor(&view_of(&s, &[4], &[1], 0)), None);
        // No host bytes.
        let meta = Arc::new(Storage::new(
            0,
            "0",
            DType::Float32,
            16,
            "meta",
            DataPtr::none(Device::Meta),
        ));
        assert_eq!(scan_tensor(&view_of(&meta, &[4], &[1], 0)), None);
        // A view past its storage.
        let s = f32_storage(&[f32::NAN; 4]);
        assert_eq!(scan_tensor(&view_of(&s, &[4], &[1], 1)), None);
        assert_eq!(scan_tensor(&view_of(&s, &[3], &[2], 0)), None);
        // A tensor whose dtype disagrees with its storage.
        let t = TensorImpl::new(
            Layout::contiguous(vec![2]).unwrap(),
            DType::Float64,
            Device::Cpu,
            false,
            false,
            Arc::clone(&s),
        );
        assert_eq!(scan_tensor(&t), None);
        // Empty views and sub-byte dtypes are clean.
        assert_eq!(
            scan_tensor(&view_of(&s, &[0, 3], &[1, 7], 0)),
            Some(NonFinite::default())
        );
        let f4 = storage_of(DType::Float4E2m1fn, vec![0xff; 4]);
        assert_eq!(
            scan_tensor(&view_of(&f4, &[4], &[2], 0)),
            Some(NonFinite::default())
        );
    }

    #[test]
    fn three_dimensional_permutes_and_slices_match_the_gather() {
        // 4x5x6 float64 storage with specials sprinkled in.
        let values: Vec<u64> = (0..120u64)
            .map(|i| match i % 17 {
                3 => 0x7ff8_0000_0000_0000,
                11 => 0xfff0_0000_0000_0000,
                13 => 0x7ff0_0000_0000_0000,
                _ => (i as f64).to_bits(),
            })
            .collect();
        let s = storage_of(
            DType::Float64,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        let views: [(&[u64], &[u64], u64); 6] = [
            (&[6, 5, 4], &[1, 6, 30], 0),        // full permute
            (&[4, 6, 5], &[30, 1, 6], 0),        // transpose of last two
            (&[2, 5, 3], &[60, 6, 2], 1),        // slices with steps
            (&[4, 5], &[30, 6], 5),              // x[:, :, 5]
            (&[3, 1, 2, 6], &[36, 99, 6, 1], 0), // contiguous rows, odd outer
            (&[2, 2, 6], &[30, 6, 1], 36),       // contiguous rows, strided between
        ];
        for (sizes, strides, offset) in views {
            let t = view_of(&s, sizes, strides, offset);
            assert_eq!(
                scan_tensor(&t).unwrap(),
                gather_reference(&t),
                "{sizes:?} {strides:?} {offset}"
            );
        }
    }

    // -----------------------------------------------------------------------------------------
    // Properties.

    /// f32 bit patterns, half of them with the exponent all ones.
    fn f32_bits() -> impl Strategy<Value = u32> {
        prop_oneof![any::<u32>(), any::<u32>().prop_map(|b| b | 0x7f80_0000)]
    }

    fn f64_bits() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            any::<u64>().prop_map(|b| b | 0x7ff0_0000_0000_0000)
        ]
    }

    /// Bytes rich in the special encodings of every format: half of them drawn from the
    /// bytes that make NaN, Inf, or their finite neighbours in some format. Generated from a
    /// seed (cheap for long buffers); shrinks by length.
    fn special_bytes(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
        const SPECIAL: [u8; 8] = [0xff, 0x7f, 0x80, 0x7c, 0xfc, 0xf0, 0x00, 0x7e];
        (len, any::<u64>()).prop_map(|(len, seed)| {
            let mut state = seed | 1;
            (0..len)
                .map(|_| {
                    // xorshift64
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    if state & 1 == 0 {
                        SPECIAL[(state >> 1) as usize % SPECIAL.len()]
                    } else {
                        (state >> 24) as u8
                    }
                })
                .collect()
        })
    }

    fn scannable_dtype() -> impl Strategy<Value = DType> {
        proptest::sample::select(DType::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn random_f32_patterns_match_the_reference(words in proptest::collection::vec(f32_bits(), 0..700)) {
            for &w in words.iter().take(16) {
                prop_assert_eq!(one(DType::Float32, u64::from(w)), classify(DType::Float32, u64::from(w)));
            }
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            prop_assert_eq!(scan_bytes(DType::Float32, &bytes), reference(DType::Float32, &bytes));
            let f = words.iter().position(|&w| !f32::from_bits(w).is_finite());
            prop_assert_eq!(scan_bytes(DType::Float32, &bytes).first, f.map(|i| i as u64));
        }

        #[test]
        fn random_f64_patterns_match_the_reference(words in proptest::collection::vec(f64_bits(), 0..700)) {
            for &w in words.iter().take(16) {
                prop_assert_eq!(one(DType::Float64, w), classify(DType::Float64, w));
            }
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let scan = scan_bytes(DType::Float64, &bytes);
            prop_assert_eq!(scan, reference(DType::Float64, &bytes));
            let nan = words.iter().filter(|&&w| f64::from_bits(w).is_nan()).count() as u64;
            prop_assert_eq!(scan.nan, nan);
        }

        #[test]
        fn random_buffers_match_the_reference_for_every_dtype(
            dtype in scannable_dtype(),
            bytes in special_bytes(0..2200),
        ) {
            prop_assert_eq!(scan_bytes(dtype, &bytes), reference(dtype, &bytes));
        }

        #[test]
        fn random_complex_patterns_match_the_reference(
            parts in proptest::collection::vec((f64_bits(), f64_bits()), 0..300),
        ) {
            for dtype in [DType::Complex32, DType::Complex64, DType::Complex128] {
                let bytes: Vec<u8> = parts
                    .iter()
                    .flat_map(|&(re, im)| {
                        // Narrow the parts keeping their top bits (sign and exponent).
                        let (re, im) = match dtype {
                            DType::Complex32 => (re >> 48, im >> 48),
                            DType::Complex64 => (re >> 32, im >> 32),
                            _ => (re, im),
                        };
                        complex_bytes(dtype, re, im)
                    })
                    .collect();
                prop_assert_eq!(scan_bytes(dtype, &bytes), reference(dtype, &bytes));
            }
        }

        #[test]
        fn random_strided_views_match_the_gather(
            dtype in proptest::sample::select(vec![
                DType::Float32, DType::Float16, DType::Float8E5m2, DType::Complex64, DType::Float64,
            ]),
            bytes in special_bytes(400..1600),
            dims in proptest::collection::vec((1u64..5, 0u64..9), 0..4),
            offset in 0u64..20,
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            let s = storage_of(dtype, bytes);
            let layout = Layout::new(sizes, strides, offset).unwrap();
            let t = TensorImpl::new(layout, dtype, Device::Cpu, false, false, Arc::clone(&s));
            match scan_tensor(&t) {
                Some(scan) => prop_assert_eq!(scan, gather_reference(&t)),
                None => prop_assert!(t.verify_data_ptr_consistency("t").is_err()),
            }
        }

        #[test]
        fn arbitrary_views_never_panic(
            dtype in scannable_dtype(),
            bytes in special_bytes(0..64),
            dims in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
            offset in any::<u64>(),
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            let s = storage_of(dtype, bytes);
            if let Ok(layout) = Layout::new(sizes, strides, offset) {
                let t = TensorImpl::new(layout, dtype, Device::Cpu, false, false, s);
                let _ = scan_tensor(&t);
            }
        }
    }
}
