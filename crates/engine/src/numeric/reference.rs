//! The reference rule: one element at a time, with branches, decoding each format the
//! obvious way. The fast path is tested against it.

use crate::dtype::DType;

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
/// Dtypes that are not [`scannable`](super::scannable), and those without special encodings, are always
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
        DType::BComplex32 => Class::of_complex(
            classify(DType::BFloat16, bits & 0xffff),
            classify(DType::BFloat16, (bits >> 16) & 0xffff),
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
/// Too few bytes, sub-byte dtypes and dtypes that are not [`scannable`](super::scannable) give
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_reference_decodes_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), f32::powi(2.0, -24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * f32::powi(2.0, -24));
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
    }
}
