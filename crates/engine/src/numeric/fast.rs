//! The fast path: a branch-free test per dtype on each element's raw little-endian word, run
//! over fixed-size chunks with counters so the compiler can vectorise it.

use super::{Class, NonFinite};
use crate::dtype::DType;

/// Elements per chunk: each chunk is tested in one branch-free pass; only a chunk with a hit
/// is counted, and searched for the first index.
const CHUNK: usize = 256;

/// What the branch-free check found in one element (at most one flag is set).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Flags {
    nan: bool,
    pos: bool,
    neg: bool,
}

impl Flags {
    #[inline(always)]
    pub(super) fn any(self) -> bool {
        self.nan | self.pos | self.neg
    }

    /// The class of a flagged element.
    pub(super) fn class(self) -> Class {
        if self.nan {
            Class::Nan
        } else if self.pos {
            Class::PosInf
        } else if self.neg {
            Class::NegInf
        } else {
            Class::Finite
        }
    }
}

/// The IEEE rule on one width, from the element's little-endian bytes: exponent all ones is
/// non-finite; NaN when the mantissa is not 0.
macro_rules! ieee_flags {
    ($name:ident, $word:ty, $exponent:expr, $mantissa:expr, $sign:expr) => {
        #[inline(always)]
        fn $name(w: &[u8; std::mem::size_of::<$word>()]) -> Flags {
            let bits = <$word>::from_le_bytes(*w);
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

/// A format whose only special encoding is NaN: the byte patterns `is_nan` accepts.
#[inline(always)]
fn nan_only(is_nan: impl Fn(u8) -> bool + Copy) -> impl Fn(&[u8; 1]) -> Flags + Copy {
    move |&[b]: &[u8; 1]| Flags {
        nan: is_nan(b),
        pos: false,
        neg: false,
    }
}

/// A scan over elements `N` bytes wide, given the per-element tests for one dtype.
pub(super) trait ElementScan {
    /// What the scan produces.
    type Output;
    /// Runs the scan with `hit` (cheap: is the element non-finite at all) and `check` (which
    /// kind).
    fn scan<const N: usize>(
        self,
        hit: impl Fn(&[u8; N]) -> bool + Copy,
        check: impl Fn(&[u8; N]) -> Flags + Copy,
    ) -> Self::Output;
}

/// Runs `scan` with the element width and tests of `dtype`; `None` for dtypes with no
/// non-finite encodings (or not scannable).
pub(super) fn with_check<S: ElementScan>(dtype: DType, scan: S) -> Option<S::Output> {
    Some(match dtype {
        DType::Float32 => real(scan, f32_flags),
        DType::Float64 => real(scan, f64_flags),
        DType::Float16 => real(scan, f16_flags),
        DType::BFloat16 => real(scan, bf16_flags),
        DType::Float8E5m2 => real(scan, e5m2_flags),
        DType::Float8E4m3fn => real(scan, nan_only(|b| b & 0x7f == 0x7f)),
        DType::Float8E4m3fnuz | DType::Float8E5m2fnuz => real(scan, nan_only(|b| b == 0x80)),
        DType::Float8E8m0fnu => real(scan, nan_only(|b| b == 0xff)),
        DType::Complex32 => complex::<S, 4, 2>(scan, f16_flags),
        DType::BComplex32 => complex::<S, 4, 2>(scan, bf16_flags),
        DType::Complex64 => complex::<S, 8, 4>(scan, f32_flags),
        DType::Complex128 => complex::<S, 16, 8>(scan, f64_flags),
        _ => return None,
    })
}

/// A real dtype: an element is a hit when `check` flags it.
#[inline(always)]
fn real<S: ElementScan, const N: usize>(
    scan: S,
    check: impl Fn(&[u8; N]) -> Flags + Copy,
) -> S::Output {
    scan.scan(move |w| check(w).any(), check)
}

/// A complex dtype of `N` bytes over its `H`-byte part format `part`: NaN if either part is;
/// otherwise the first infinite part's sign.
#[inline(always)]
fn complex<S: ElementScan, const N: usize, const H: usize>(
    scan: S,
    part: impl Fn(&[u8; H]) -> Flags + Copy,
) -> S::Output {
    const { assert!(N == 2 * H) };
    // The real part is the first H bytes, the imaginary part the last H.
    let parts = move |w: &[u8; N]| -> (Flags, Flags) {
        (
            w.first_chunk::<H>().map_or(Flags::default(), part),
            w.last_chunk::<H>().map_or(Flags::default(), part),
        )
    };
    scan.scan(
        move |w| {
            let (re, im) = parts(w);
            re.any() | im.any()
        },
        move |w| {
            let (re, im) = parts(w);
            let nan = re.nan | im.nan;
            let re_inf = re.pos | re.neg;
            Flags {
                nan,
                pos: !nan & (re.pos | (!re_inf & im.pos)),
                neg: !nan & (re.neg | (!re_inf & im.neg)),
            }
        },
    )
}

/// Counts a run of whole elements ([`count`]), built for AVX2 where the CPU has it: the same
/// loop over twice as many lanes, which keeps up with what two threads read from memory where
/// the baseline's 16-byte vectors took a tenth longer than a plain sum of the bytes.
#[inline(always)]
pub(super) fn scan_words<const N: usize>(
    words: &[[u8; N]],
    hit: impl Fn(&[u8; N]) -> bool,
    check: impl Fn(&[u8; N]) -> Flags,
) -> NonFinite {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, the one feature `count_avx2` is built for.
        return unsafe { count_avx2(words, hit, check) };
    }
    count(words, hit, check)
}

/// [`count`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn count_avx2<const N: usize>(
    words: &[[u8; N]],
    hit: impl Fn(&[u8; N]) -> bool,
    check: impl Fn(&[u8; N]) -> Flags,
) -> NonFinite {
    count(words, hit, check)
}

/// Counts a run of whole elements, chunk by chunk; `first` is relative to the run's start.
///
/// Each chunk is first reduced to one "any non-finite" bit, branch-free (the common, clean
/// case costs one vectorised pass); a chunk with a hit is counted with counters, branch-free
/// again, and the first chunk with a hit is searched for the first index.
#[inline(always)]
fn count<const N: usize>(
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

/// A contiguous run of bytes.
struct Contiguous<'a>(&'a [u8]);

impl ElementScan for Contiguous<'_> {
    type Output = NonFinite;

    fn scan<const N: usize>(
        self,
        hit: impl Fn(&[u8; N]) -> bool + Copy,
        check: impl Fn(&[u8; N]) -> Flags + Copy,
    ) -> NonFinite {
        // A trailing partial element is not an element: only whole ones are scanned.
        let (words, _partial) = self.0.as_chunks::<N>();
        scan_words(words, hit, check)
    }
}

/// Fast path: counts the non-finite elements of a contiguous little-endian run of `dtype`
/// elements, `first` counting from the start of `bytes`.
///
/// Branch-free per dtype on the raw bits (for `float32`, `(bits & 0x7f80_0000) == 0x7f80_0000`
/// is non-finite, NaN when the mantissa is not 0), in fixed-size chunks with counters; the
/// first index is located only in the first chunk with a hit. A trailing partial element is
/// ignored. Dtypes without non-finite encodings (sub-byte and MX float4/float6) and dtypes
/// that are not [`scannable`](super::scannable) scan clean. Never panics.
pub fn scan_bytes(dtype: DType, bytes: &[u8]) -> NonFinite {
    with_check(dtype, Contiguous(bytes)).unwrap_or_default()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::numeric::{classify, classify_element, scannable};
    use proptest::prelude::*;

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

    const COMPLEX: [DType; 4] = [
        DType::Complex32,
        DType::BComplex32,
        DType::Complex64,
        DType::Complex128,
    ];

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
                DType::BComplex32 => [
                    (0x3f80, Finite),
                    (0x7fc0, Nan),
                    (0xff81, Nan),
                    (0x7f80, PosInf),
                    (0xff80, NegInf),
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
        for dtype in COMPLEX {
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
    pub(in crate::numeric) fn special_bytes(
        len: std::ops::Range<usize>,
    ) -> impl Strategy<Value = Vec<u8>> {
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

    /// [`Contiguous`] through the baseline loop alone.
    struct Portable<'a>(&'a [u8]);

    impl ElementScan for Portable<'_> {
        type Output = NonFinite;

        fn scan<const N: usize>(
            self,
            hit: impl Fn(&[u8; N]) -> bool + Copy,
            check: impl Fn(&[u8; N]) -> Flags + Copy,
        ) -> NonFinite {
            count(self.0.as_chunks::<N>().0, hit, check)
        }
    }

    pub(in crate::numeric) fn scannable_dtype() -> impl Strategy<Value = DType> {
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
            let expected = reference(dtype, &bytes);
            prop_assert_eq!(scan_bytes(dtype, &bytes), expected);
            // The loop as built for any CPU, whichever one `scan_bytes` chose here.
            let portable = with_check(dtype, Portable(&bytes)).unwrap_or_default();
            prop_assert_eq!(portable, expected);
        }

        #[test]
        fn random_complex_patterns_match_the_reference(
            parts in proptest::collection::vec((f64_bits(), f64_bits()), 0..300),
        ) {
            for dtype in COMPLEX {
                let bytes: Vec<u8> = parts
                    .iter()
                    .flat_map(|&(re, im)| {
                        // Narrow the parts keeping their top bits (sign and exponent).
                        let (re, im) = match dtype {
                            DType::Complex32 | DType::BComplex32 => (re >> 48, im >> 48),
                            DType::Complex64 => (re >> 32, im >> 32),
                            _ => (re, im),
                        };
                        complex_bytes(dtype, re, im)
                    })
                    .collect();
                prop_assert_eq!(scan_bytes(dtype, &bytes), reference(dtype, &bytes));
            }
        }
    }
}
