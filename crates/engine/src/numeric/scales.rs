//! The float16 scales inside GGUF's quantised blocks: a NaN or ±Inf scale makes every value
//! its block dequantises to NaN or ±Inf, while the block's bytes, a `uint8` tensor, are no
//! floats to scan. llama.cpp checks them only when asked (`--check-tensors`), so a file with
//! one loads and computes NaN.
//!
//! Where each scale lies in its block is ggml's `ggml-common.h` (`block_q4_0` … `block_q6_K`):
//!
//! | type | block bytes | scales (`ggml_half`, byte offset) |
//! |---|---|---|
//! | Q4_0 | 18 | `d` 0 |
//! | Q4_1 | 20 | `d` 0, `m` 2 |
//! | Q5_0 | 22 | `d` 0 |
//! | Q5_1 | 24 | `d` 0, `m` 2 |
//! | Q8_0 | 34 | `d` 0 |
//! | Q2_K | 84 | `d` 80, `dmin` 82 (after `scales[16]`, `qs[64]`) |
//! | Q3_K | 110 | `d` 108 (after `hmask[32]`, `qs[64]`, `scales[12]`) |
//! | Q4_K | 144 | `d` 0, `dmin` 2 |
//! | Q5_K | 176 | `d` 0, `dmin` 2 |
//! | Q6_K | 210 | `d` 208 (after `ql[128]`, `qh[64]`, `scales[16]`) |
//!
//! Q8_1 is not scanned: gguf-py 0.19.0 sizes its block 40 bytes (`GGML_QUANT_SIZES`: float32
//! `d` and `s`, ggml's layout before it went to half floats) while `ggml-common.h`'s
//! `block_q8_1` is 36 (float16 `d`, `s`), so no one layout reads a file's Q8_1 blocks as
//! both readers do; ggml makes Q8_1 only as an operand of its dot products, never for a file.
//! Blocks of a big-endian file are not scanned either: where gguf-py's converter swapped their
//! scales and where it left them is its own per-type choice (the reader marks their component
//! role `big-endian blocks`, see `load/gguf`).

use super::{classify_element, Class, NonFinite};
use crate::dtype::DType;
use crate::tensor_impl::TensorImpl;
use crate::{Checkpoint, Format};

/// Where the float16 scales of one GGML block type lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockScales {
    /// The GGML type (`Q8_0`).
    pub ggml: &'static str,
    /// Bytes of one block.
    pub block_bytes: usize,
    /// Each scale: its field name in ggml's block struct and its byte offset in the block.
    pub scales: &'static [(&'static str, usize)],
}

#[rustfmt::skip]
const BLOCK_SCALES: &[BlockScales] = &[
    BlockScales { ggml: "Q4_0", block_bytes: 18, scales: &[("d", 0)] },
    BlockScales { ggml: "Q4_1", block_bytes: 20, scales: &[("d", 0), ("m", 2)] },
    BlockScales { ggml: "Q5_0", block_bytes: 22, scales: &[("d", 0)] },
    BlockScales { ggml: "Q5_1", block_bytes: 24, scales: &[("d", 0), ("m", 2)] },
    BlockScales { ggml: "Q8_0", block_bytes: 34, scales: &[("d", 0)] },
    BlockScales { ggml: "Q2_K", block_bytes: 84, scales: &[("d", 80), ("dmin", 82)] },
    BlockScales { ggml: "Q3_K", block_bytes: 110, scales: &[("d", 108)] },
    BlockScales { ggml: "Q4_K", block_bytes: 144, scales: &[("d", 0), ("dmin", 2)] },
    BlockScales { ggml: "Q5_K", block_bytes: 176, scales: &[("d", 0), ("dmin", 2)] },
    BlockScales { ggml: "Q6_K", block_bytes: 210, scales: &[("d", 208)] },
];

/// The scales of a GGML block type, where they are scanned.
pub fn block_scales(ggml: &str) -> Option<BlockScales> {
    BLOCK_SCALES.iter().copied().find(|s| s.ggml == ggml)
}

/// The tensors of `ckpt` whose bytes are quantised blocks with scales to scan, by index in
/// `ckpt.tensors`: the `blocks` component of each GGUF composite of a type in the table
/// (little-endian: a big-endian file's blocks have another role).
pub fn scaled_blocks(ckpt: &Checkpoint) -> Vec<(usize, BlockScales)> {
    if ckpt.format != Format::Gguf {
        return Vec::new();
    }
    let mut found = Vec::new();
    for composite in &ckpt.composites {
        let Some(scales) = block_scales(composite.layout) else {
            continue;
        };
        for part in composite.components.iter().filter(|c| c.role == "blocks") {
            // GGUF tensor names are unique (the reader refuses a name given twice).
            if let Some(i) = ckpt.tensors.iter().position(|t| t.name() == part.tensor) {
                found.push((i, scales));
            }
        }
    }
    found
}

/// Scans the scales of a tensor of whole blocks, laid out contiguously. Each scale counts
/// once; `first` is the index of the first block with a non-finite scale. `None` when the
/// tensor's bytes are not whole blocks of the type or cannot be read (no host bytes, a view
/// inconsistent with its storage, not contiguous).
pub fn scan_block_scales(imp: &TensorImpl, scales: BlockScales) -> Option<NonFinite> {
    if !imp.is_data_ptr_consistent() || !imp.layout().is_contiguous() {
        return None;
    }
    scan_scale_bytes(imp.view_bytes()?, scales)
}

/// [`scan_block_scales`] over the blocks' bytes.
pub fn scan_scale_bytes(bytes: &[u8], scales: BlockScales) -> Option<NonFinite> {
    if scales.block_bytes == 0 || !bytes.len().is_multiple_of(scales.block_bytes) {
        return None;
    }
    let mut out = NonFinite::default();
    for (block, bytes) in bytes.chunks_exact(scales.block_bytes).enumerate() {
        for &(_, at) in scales.scales {
            // Each offset is inside the block (the table's test): a miss is no scale.
            let half = bytes.get(at..at.checked_add(2)?)?;
            let class = classify_element(DType::Float16, half);
            if class != Class::Finite {
                out.add(class, u64::try_from(block).ok()?);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::gguf_block_sizes;

    #[test]
    fn every_scale_lies_inside_a_block_of_the_size_the_reader_reads() {
        for s in BLOCK_SCALES {
            assert_eq!(
                gguf_block_sizes(s.ggml),
                Some(s.block_bytes as u64),
                "{}",
                s.ggml
            );
            for &(name, at) in s.scales {
                assert!(at + 2 <= s.block_bytes, "{} {name}", s.ggml);
            }
        }
        assert_eq!(block_scales("Q8_1"), None);
        assert_eq!(block_scales("IQ2_XXS"), None);
    }

    #[test]
    fn each_non_finite_scale_counts_and_the_first_names_its_block() {
        let q4_1 = block_scales("Q4_1").expect("Q4_1");
        let mut bytes = vec![0u8; 20 * 4];
        // Block 1: m = -Inf; block 3: d = NaN, m = +Inf; quants of 0xff elsewhere are no scale.
        bytes[20 + 2..20 + 4].copy_from_slice(&0xfc00u16.to_le_bytes());
        bytes[60..62].copy_from_slice(&0x7e01u16.to_le_bytes());
        bytes[62..64].copy_from_slice(&0x7c00u16.to_le_bytes());
        bytes[4..20].fill(0xff);
        let found = scan_scale_bytes(&bytes, q4_1).expect("whole blocks");
        assert_eq!(
            found,
            NonFinite {
                nan: 1,
                pos_inf: 1,
                neg_inf: 1,
                first: Some(1)
            }
        );
        // Q6_K's only scale is at its end.
        let q6_k = block_scales("Q6_K").expect("Q6_K");
        let mut bytes = vec![0xffu8; 210];
        bytes[208..].copy_from_slice(&0x3c00u16.to_le_bytes());
        assert!(scan_scale_bytes(&bytes, q6_k)
            .expect("one block")
            .is_clean());
        // Not whole blocks: not scanned.
        assert_eq!(scan_scale_bytes(&bytes[..209], q6_k), None);
    }
}
