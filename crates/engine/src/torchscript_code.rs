//! The code a TorchScript archive carries, as a checkpoint records it (`load::torchscript`
//! reads it).

/// The code members of a TorchScript archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TorchScriptCode {
    /// Code members, relative to the archive's folder (`code/__torch__/….py`), sorted.
    pub members: Vec<String>,
    /// The code members that define a `__setstate__` method, sorted.
    pub setstate: Vec<String>,
    /// SHA-256 (hex) of every code member, name and bytes, in order: what `torch.jit.load`
    /// would compile.
    pub sha256: String,
}
