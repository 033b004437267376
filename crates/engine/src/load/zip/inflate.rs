//! Raw deflate, as miniz's `tinfl` inflates a zip member: exactly the declared size, from a
//! stream that ends there.

use flate2::read::DeflateDecoder;
use std::io::Read;

/// The whole member, which must inflate to exactly `size` bytes. The caller has checked
/// `size` against the memory budget: the buffer is allocated once, at that size, and a
/// stream that would outgrow it stops one byte past.
pub(super) fn all(compressed: &[u8], size: u64) -> Result<Vec<u8>, String> {
    let capacity =
        usize::try_from(size).map_err(|_| format!("{size} bytes do not fit in memory"))?;
    let mut out = Vec::with_capacity(capacity);
    // The declared size bounds the output; a member inflating past it is refused.
    DeflateDecoder::new(compressed)
        .take(size.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot inflate: {e}"))?;
    let got = out.len() as u64;
    if got > size {
        return Err(format!("inflates past its declared {size} bytes"));
    }
    if got < size {
        return Err(format!("inflates to {got} bytes, not the declared {size}"));
    }
    Ok(out)
}

/// Up to `n` leading bytes; fewer (possibly none) when the stream is shorter or broken.
pub(super) fn prefix(compressed: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let _ = DeflateDecoder::new(compressed)
        .take(n as u64)
        .read_to_end(&mut out);
    out
}
