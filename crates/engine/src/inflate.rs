//! Raw deflate, as miniz's `tinfl` inflates a zip member: exactly the declared size, from a
//! stream that ends there. A leaf: the zip reader inflates members with it, the deep scan
//! inflates deferred records in pieces.

use crate::HostBuffer;
use flate2::read::DeflateDecoder;
use std::io::Read;

/// Bytes of a deflated record inflated at a time: what streaming it costs in memory.
pub const INFLATE_CHUNK: usize = 1 << 20;

/// Compressed bytes worth releasing at once: a release is a system call.
const RELEASE_MIN: u64 = 256 << 10;

/// Releases the mapped pages of `from..to` once they are worth it, so the compressed record
/// read through is not kept resident; returns where the next release starts.
pub(crate) fn release_read(buffer: &HostBuffer, from: u64, to: u64) -> u64 {
    if to.saturating_sub(from) < RELEASE_MIN {
        return from;
    }
    buffer.release(from..to);
    to
}

/// The whole member, which must inflate to exactly `size` bytes. The caller has checked
/// `size` against the memory budget: the buffer is allocated once, at that size, and a
/// stream that would outgrow it stops one byte past.
pub(crate) fn all(compressed: &[u8], size: u64) -> Result<Vec<u8>, String> {
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

/// Inflates a member that must give exactly `size` bytes, handing them to `each` in order
/// (with the offset of the first, and how many compressed bytes have been consumed so far) in
/// pieces of `chunk` bytes, the last one shorter: memory is one piece, whatever the member's
/// size. A stream that runs past `size` stops at the first piece beyond it; one that ends
/// early or breaks is an error after the pieces it gave.
pub(crate) fn chunks(
    compressed: &[u8],
    size: u64,
    chunk: usize,
    mut each: impl FnMut(u64, &[u8], u64),
) -> Result<(), String> {
    let mut stream = DeflateDecoder::new(compressed).take(size.saturating_add(1));
    let mut piece = vec![0u8; chunk.max(1)];
    let mut at = 0u64;
    loop {
        // Filled whole before it is handed on, so pieces begin at multiples of `chunk`.
        let mut filled = 0;
        while let Some(rest) = piece.get_mut(filled..).filter(|r| !r.is_empty()) {
            match stream.read(rest) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("cannot inflate after {at} bytes: {e}")),
            }
        }
        let got = piece.get(..filled).unwrap_or_default();
        let end = at.saturating_add(filled as u64);
        if end > size {
            return Err(format!("inflates past its declared {size} bytes"));
        }
        if !got.is_empty() {
            each(at, got, stream.get_ref().total_in());
        }
        at = end;
        if filled < piece.len() {
            break;
        }
    }
    if at < size {
        return Err(format!("inflates to {at} bytes, not the declared {size}"));
    }
    Ok(())
}

/// Up to `n` leading bytes; fewer (possibly none) when the stream is shorter or broken.
pub(crate) fn prefix(compressed: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let _ = DeflateDecoder::new(compressed)
        .take(n as u64)
        .read_to_end(&mut out);
    out
}
