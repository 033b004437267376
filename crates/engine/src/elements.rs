//! A tensor's elements in logical (row-major) order, read from its storage bytes: what two
//! tensors must agree on to hold the same values, whatever their strides.

use crate::{DType, Tensor};

/// The bytes of each element of a view, in logical order.
pub struct Elements<'a> {
    bytes: &'a [u8],
    size: usize,
    sizes: &'a [u64],
    strides: &'a [u64],
    offset: u64,
    index: Vec<u64>,
    done: bool,
}

impl<'a> Elements<'a> {
    /// `None` when the bytes are not in memory (meta, deferred) or the dtype packs several
    /// elements into a byte.
    pub fn of(tensor: &'a Tensor) -> Option<Elements<'a>> {
        let imp = tensor.tensor_impl();
        let size = usize::try_from(imp.dtype().element_size()?).ok()?;
        let bytes = imp.storage().data_ptr().bytes()?;
        let layout = imp.layout();
        Some(Elements {
            bytes,
            size,
            sizes: layout.sizes(),
            strides: layout.strides(),
            offset: layout.storage_offset(),
            index: vec![0; layout.sizes().len()],
            done: layout.numel() == 0,
        })
    }

    /// Steps the odometer, last dimension fastest; `false` past the last element.
    fn advance(&mut self) -> bool {
        for (i, &size) in self.index.iter_mut().zip(self.sizes).rev() {
            *i += 1;
            if *i < size {
                return true;
            }
            *i = 0;
        }
        false
    }
}

impl<'a> Iterator for Elements<'a> {
    /// An element's bytes, or `None` when the view reaches past its storage (TP107 reports
    /// that; here it ends the comparison).
    type Item = Option<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let element = self
            .index
            .iter()
            .zip(self.strides)
            .try_fold(self.offset, |acc, (&i, &s)| {
                acc.checked_add(i.checked_mul(s)?)
            });
        let bytes = element
            .and_then(|e| usize::try_from(e).ok()?.checked_mul(self.size))
            .and_then(|start| self.bytes.get(start..start.checked_add(self.size)?));
        self.done = !self.advance();
        Some(bytes)
    }
}

/// The largest `|a - b|` over two float tensors of one dtype and shape; `None` for other
/// dtypes or unreadable bytes. NaN against anything counts as infinitely far.
pub fn max_abs_difference(a: &Tensor, b: &Tensor) -> Option<f64> {
    let dtype = a.tensor_impl().dtype();
    let decode = decoder(dtype)?;
    let mut max = 0f64;
    for (x, y) in Elements::of(a)?.zip(Elements::of(b)?) {
        let (x, y) = (decode(x?), decode(y?));
        let d = (x - y).abs();
        if d.is_nan() {
            if x.to_bits() != y.to_bits() {
                return Some(f64::INFINITY);
            }
        } else if d > max {
            max = d;
        }
    }
    Some(max)
}

/// Decodes one element (its little-endian bytes) of a floating-point dtype to f64, exact for
/// all four of float16, bfloat16, float32 and float64; `None` for any other dtype. A slice of
/// the wrong length decodes to NaN. `tensorplay-convert` casts through it.
pub fn decoder(dtype: DType) -> Option<fn(&[u8]) -> f64> {
    Some(match dtype {
        DType::Float64 => |b| b.try_into().map_or(f64::NAN, f64::from_le_bytes),
        DType::Float32 => |b| {
            b.try_into()
                .map_or(f64::NAN, |b| f32::from_le_bytes(b).into())
        },
        DType::BFloat16 => |b| {
            b.try_into().map_or(f64::NAN, |b| {
                f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16).into()
            })
        },
        DType::Float16 => |b| {
            b.try_into()
                .map_or(f64::NAN, |b| f16(u16::from_le_bytes(b)))
        },
        _ => return None,
    })
}

/// IEEE binary16 to f64.
fn f16(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_impl::tests::storage_of;
    use crate::{Device, Layout, Tensor, TensorImpl};
    use std::sync::Arc;

    fn tensor(name: &str, storage: &Arc<crate::Storage>, sizes: &[u64], strides: &[u64]) -> Tensor {
        let layout = Layout::new(sizes, strides, 0).expect("layout");
        let imp = TensorImpl::new(
            layout,
            DType::Float32,
            Device::Cpu,
            false,
            false,
            Arc::clone(storage),
        );
        Tensor::new(name, Arc::new(imp))
    }

    fn bytes(t: &Tensor) -> Vec<u8> {
        Elements::of(t)
            .unwrap()
            .flat_map(|e| e.unwrap().to_vec())
            .collect()
    }

    #[test]
    fn half_precision_decodes() {
        assert_eq!(f16(0x3c00), 1.0);
        assert_eq!(f16(0xc000), -2.0);
        assert_eq!(f16(0x0001), 2f64.powi(-24));
        assert_eq!(f16(0x7c00), f64::INFINITY);
        assert!(f16(0x7e00).is_nan());
    }

    #[test]
    fn a_transpose_and_its_contiguous_copy_agree_only_in_logical_order() {
        // [[0, 1, 2], [3, 4, 5]] as float32, and its transpose stored contiguously.
        let values = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let base = storage_of(DType::Float32, values(&[0., 1., 2., 3., 4., 5.]));
        let copy = storage_of(DType::Float32, values(&[0., 3., 1., 4., 2., 5.]));
        let transposed = tensor("t", &base, &[3, 2], &[1, 3]);
        let contiguous = tensor("c", &copy, &[3, 2], &[2, 1]);
        let original = tensor("o", &base, &[3, 2], &[2, 1]);
        assert_eq!(bytes(&transposed), bytes(&contiguous));
        assert_ne!(bytes(&transposed), bytes(&original));
        assert_eq!(max_abs_difference(&transposed, &contiguous), Some(0.0));
        assert_eq!(max_abs_difference(&transposed, &original), Some(2.0));
    }
}
