//! The code a TorchScript archive carries, as a checkpoint records it (`load::torchscript`
//! reads it).

/// The code members of a TorchScript archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TorchScriptCode {
    /// Code members, relative to the archive's folder (`code/__torch__/….py`), sorted.
    pub members: Vec<String>,
    /// The code members that define a `__setstate__` method not recognised as torch's own,
    /// sorted: code from the file that runs while it loads.
    pub setstate: Vec<String>,
    /// The code members whose every `__setstate__` is torch's own quantized convolution one
    /// (`torch.ao.nn.quantized` and `torch.ao.nn.intrinsic.quantized` `_ConvNd`, as
    /// `torch.jit.save` prints it): it only sets attributes from the state and repacks the
    /// weight and bias with `ops.quantized.conv*_prepack`. Sorted.
    pub torch_setstate: Vec<String>,
    /// SHA-256 (hex) of every code member, name and bytes, in order: what `torch.jit.load`
    /// would compile.
    pub sha256: String,
}
