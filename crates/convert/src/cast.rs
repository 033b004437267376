//! Floating-point casts as PyTorch's `Tensor.to(dtype)` performs them on the CPU, bit for bit:
//! what `tensorplay convert --dtype` writes. A value reaches float16 and bfloat16 through
//! float32 (c10's `Half` and `BFloat16` are built from a `float`), rounding to nearest even;
//! NaN becomes the quiet NaN c10 writes.

use tensorplay_engine::elements::decoder;
use tensorplay_engine::DType;

/// The dtypes a cast reads and writes: PyTorch's floating-point types with a safetensors code.
pub const FLOATS: [DType; 4] = [
    DType::Float16,
    DType::BFloat16,
    DType::Float32,
    DType::Float64,
];

/// Whether `--dtype` casts tensors of this dtype (the others are written as they are, as
/// `Module.to(dtype)` leaves integer and boolean tensors alone).
pub fn casts(dtype: DType) -> bool {
    FLOATS.contains(&dtype)
}

/// One element of `from` (little-endian bytes) as `to`, appended to `out`; `false` when the
/// element is finite and its cast is not (it overflows `to`). `None` when either dtype is
/// not one of [`FLOATS`].
pub fn cast_into(from: DType, to: DType, element: &[u8], out: &mut Vec<u8>) -> Option<bool> {
    let value = decoder(from)?(element);
    let finite = match to {
        DType::Float64 => {
            out.extend_from_slice(&value.to_le_bytes());
            true
        }
        DType::Float32 => {
            // Round to nearest even, as a C cast from double does.
            let v = value as f32;
            out.extend_from_slice(&v.to_le_bytes());
            v.is_finite()
        }
        DType::Float16 => {
            let bits = f16_bits(value as f32);
            out.extend_from_slice(&bits.to_le_bytes());
            bits & 0x7c00 != 0x7c00
        }
        DType::BFloat16 => {
            let bits = bf16_bits(value as f32);
            out.extend_from_slice(&bits.to_le_bytes());
            bits & 0x7f80 != 0x7f80
        }
        _ => return None,
    };
    Some(finite || !value.is_finite())
}

/// c10's `fp16_ieee_from_fp32_value`: rounding done by float arithmetic, NaN as `0x7E00`.
fn f16_bits(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 2^112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 2^-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let bias = (shl1_w & 0xff00_0000).max(0x7100_0000);
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7c00;
    let mantissa_bits = bits & 0x0000_0fff;
    let nonsign = exp_bits + mantissa_bits;
    let half = if shl1_w > 0xff00_0000 {
        0x7e00
    } else {
        nonsign
    };
    // Both parts fit 16 bits: the sign shifted down, and a half's exponent and mantissa.
    ((sign >> 16) | half) as u16
}

/// c10's `round_to_nearest_even` for bfloat16: NaN as `0x7FC0`.
fn bf16_bits(f: f32) -> u16 {
    if f.is_nan() {
        return 0x7fc0;
    }
    let u = f.to_bits();
    let rounding_bias = ((u >> 16) & 1) + 0x7fff;
    (u.wrapping_add(rounding_bias) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast(from: DType, to: DType, element: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let finite = cast_into(from, to, element, &mut out).expect("floats");
        (out, finite)
    }

    #[test]
    fn float32_to_half_precision_rounds_to_nearest_even() {
        let f32 = DType::Float32;
        // 1 + 2^-11 lies halfway between two halves: the even one (1.0) wins.
        let halfway = (1.0f32 + 2f32.powi(-11)).to_le_bytes();
        assert_eq!(cast(f32, DType::Float16, &halfway).0, [0x00, 0x3c]);
        // Just above halfway rounds up.
        let above = (1.0f32 + 2f32.powi(-11) + 2f32.powi(-20)).to_le_bytes();
        assert_eq!(cast(f32, DType::Float16, &above).0, [0x01, 0x3c]);
        // The smallest subnormal half, and what underflows to zero.
        assert_eq!(
            cast(f32, DType::Float16, &2f32.powi(-24).to_le_bytes()).0,
            [1, 0]
        );
        assert_eq!(
            cast(f32, DType::Float16, &2f32.powi(-26).to_le_bytes()).0,
            [0, 0]
        );
        // bfloat16 keeps float32's exponent: 1 + 2^-8 is halfway, rounds to even.
        let halfway = (1.0f32 + 2f32.powi(-8)).to_le_bytes();
        assert_eq!(cast(f32, DType::BFloat16, &halfway).0, [0x80, 0x3f]);
        let up = (1.0f32 + 3.0 * 2f32.powi(-8)).to_le_bytes();
        assert_eq!(cast(f32, DType::BFloat16, &up).0, [0x82, 0x3f]);
    }

    #[test]
    fn overflow_is_reported_and_nan_is_canonical() {
        let big = 70000f32.to_le_bytes();
        assert_eq!(
            cast(DType::Float32, DType::Float16, &big),
            (vec![0x00, 0x7c], false)
        );
        let (bits, finite) = cast(DType::Float32, DType::Float16, &f32::NAN.to_le_bytes());
        assert_eq!((bits, finite), (vec![0x00, 0x7e], true));
        let (bits, _) = cast(DType::Float32, DType::BFloat16, &(-f32::NAN).to_le_bytes());
        assert_eq!(bits, [0xc0, 0x7f]);
        // Infinity stays infinity, and is not an overflow.
        let inf = f32::INFINITY.to_le_bytes();
        assert_eq!(
            cast(DType::Float32, DType::BFloat16, &inf),
            (vec![0x80, 0x7f], true)
        );
        assert!(!cast(DType::Float64, DType::Float32, &1e300f64.to_le_bytes()).1);
    }

    #[test]
    fn widening_is_exact() {
        let half = [0x55, 0x35]; // 0x3555 ≈ 0.333
        let (out, _) = cast(DType::Float16, DType::Float64, &half);
        let back = f64::from_le_bytes(out.try_into().unwrap());
        let (again, _) = cast(DType::Float64, DType::Float16, &back.to_le_bytes());
        assert_eq!(again, half);
        assert!(cast_into(DType::Int32, DType::Float16, &[0; 4], &mut Vec::new()).is_none());
    }
}
