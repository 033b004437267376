//! Tensor: the named handle a user sees; everything else lives in its TensorImpl.

use crate::tensor_impl::TensorImpl;
use std::sync::Arc;

/// A named tensor of a checkpoint.
#[derive(Debug, Clone)]
pub struct Tensor {
    // Shared with the storage key where the format makes them one (safetensors).
    name: Arc<str>,
    imp: Arc<TensorImpl>,
    // Its storage's index, copied from the storage (which never changes): passes over a
    // million tensors that only group them by storage read it here, without fetching the
    // TensorImpl and the Storage from memory. `u32::MAX` when it does not fit.
    storage: u32,
    held_as: Option<HeldAs>,
}

/// What a TorchScript archive holds a tensor as, which decides whether the loaded module's
/// `state_dict()` lists it: only parameters and buffers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldAs {
    /// A module attribute its class declares in `__parameters__`.
    Parameter,
    /// A module attribute its class declares in `__buffers__`.
    Buffer,
    /// Any other attribute of a module or TorchScript object, or inside one (a list of
    /// tensors).
    Attribute,
    /// Part of the state an object's `__getstate__` returned, handed to its `__setstate__`
    /// on load (a quantized layer's packed weight and bias).
    SetState,
    /// A constant of the code (`constants.pkl`, the code's `CONSTANTS.c<n>`).
    Constant,
}

impl HeldAs {
    /// The name reports use.
    pub fn name(self) -> &'static str {
        match self {
            HeldAs::Parameter => "parameter",
            HeldAs::Buffer => "buffer",
            HeldAs::Attribute => "attribute",
            HeldAs::SetState => "setstate",
            HeldAs::Constant => "constant",
        }
    }

    /// Whether the loaded module's `state_dict()` lists the tensor.
    pub fn in_state_dict(self) -> bool {
        matches!(self, HeldAs::Parameter | HeldAs::Buffer)
    }
}

impl Tensor {
    /// A handle named `name` over `imp`.
    pub fn new(name: impl Into<Arc<str>>, imp: Arc<TensorImpl>) -> Self {
        let storage = u32::try_from(imp.storage().id().index()).unwrap_or(u32::MAX);
        Tensor {
            name: name.into(),
            imp,
            storage,
            held_as: None,
        }
    }

    /// The handle, held as `held_as` by the module it was saved in.
    pub fn with_held_as(mut self, held_as: Option<HeldAs>) -> Self {
        self.held_as = held_as;
        self
    }

    /// The name a user would iterate it by (`model.0.weight`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its storage's position in the checkpoint's storage list: its TensorImpl's storage's
    /// [`id`](crate::Storage::id), without reading either.
    pub fn storage_index(&self) -> usize {
        match self.storage {
            u32::MAX => self.imp.storage().id().index(),
            index => index as usize,
        }
    }

    /// The control block it forwards to.
    pub fn tensor_impl(&self) -> &Arc<TensorImpl> {
        &self.imp
    }

    /// What the TorchScript module it was saved in holds it as; `None` for every other format.
    pub fn held_as(&self) -> Option<HeldAs> {
        self.held_as
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_impl::tests::view;
    use crate::{DType, DataPtr};

    #[test]
    fn a_handle_knows_its_storage_s_index_past_what_it_keeps_too() {
        for index in [0, 7, u32::MAX as usize - 1, u32::MAX as usize, 1 << 40] {
            let storage = Arc::new(crate::testing::storage(
                index,
                "0",
                DType::UInt8,
                4,
                "cpu",
                DataPtr::heap("mem", vec![0; 4]),
            ));
            let tensor = Tensor::new("t", Arc::new(view(&storage, &[4], &[1], 0)));
            assert_eq!(tensor.storage_index(), index);
        }
    }
}
