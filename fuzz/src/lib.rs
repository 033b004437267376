//! What every tensorplay fuzz target shares: the memory budget and how an input becomes a
//! buffer.

use std::sync::Arc;
use tensorplay_engine::load::ReadLimits;
use tensorplay_engine::HostBuffer;

/// The budget every target reads within: small, so that a read holding much more than it
/// (libFuzzer's `-rss_limit_mb=1024`) is a budget escape, not a big file.
pub const MAX_MEMORY: u64 = 64 << 20;

/// The limits of a full read (storages materialised, as `load::open` reads).
pub fn limits() -> ReadLimits {
    ReadLimits {
        max_memory: MAX_MEMORY,
        ..ReadLimits::default()
    }
}

/// The input as an in-memory file.
pub fn buffer(data: &[u8]) -> Arc<HostBuffer> {
    HostBuffer::from_vec("fuzz-input", data.to_vec())
}

/// Asks every tensor what a rule would (sizes, byte ranges, its view of the bytes), so the
/// work a read defers is exercised too, and drops the error's message.
pub fn consume(result: tensorplay_engine::Result<tensorplay_engine::Checkpoint>) {
    match result {
        Ok(ckpt) => {
            for tensor in &ckpt.tensors {
                let imp = tensor.tensor_impl();
                std::hint::black_box((
                    tensor.name().len(),
                    imp.nbytes().ok(),
                    imp.byte_range().ok(),
                    imp.data_address().ok(),
                    imp.verify_data_ptr_consistency(tensor.name()).is_ok(),
                    imp.view_bytes().map(<[u8]>::len),
                ));
            }
            std::hint::black_box(ckpt.storage_bytes());
        }
        Err(e) => {
            std::hint::black_box(e.to_string());
        }
    }
}
