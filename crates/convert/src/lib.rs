//! `tensorplay convert`'s library: a checkpoint that `tensorplay-engine` read, written out as
//! safetensors under this crate's own policy (the allowlist of globals, non-finite values,
//! tied names, shards, casts), and verified by reading the output back before it is put in
//! place. The engine reads and models checkpoints; writing one lives here, one concept per
//! file: `convert.rs` the conversion ([`to_safetensors`]), `cast.rs` the floating-point casts
//! `--dtype` applies ([`cast`]), bit for bit as PyTorch performs them.
#![deny(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod cast;
mod convert;

pub use convert::{to_safetensors, ConvertError, ConvertOptions, Converted};
